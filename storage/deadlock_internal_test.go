package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// TestMain lives in the external test package; both share the binary.

// TestWithTxRetriesDeadlocks builds a real deadlock between the transaction
// under test and a heavier one, so InnoDB picks ours as the victim (1213),
// and checks withTx runs the body again and succeeds, or, with retries
// disabled, reports a retryable ErrBusy.
func TestWithTxRetriesDeadlocks(t *testing.T) {
	mysqltest.SkipVitess(t, "the test creates its own table, which the sharded keyspace's vschema does not know (vtgate: table not found)")
	t.Parallel()
	for _, tt := range []struct {
		name     string
		retries  int
		wantRuns int
		wantErr  error
	}{
		{"retried", 0, 2, nil},
		{"retries disabled", -1, 1, mend.ErrBusy},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Only a hang reaches this: connecting alone took 86 s on a machine
			// running two CPU hogs.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			tdb := mysqltest.NewDB(t, migrations.Up)
			d, err := Open(ctx, tdb.DSN, Options{DeadlockRetries: tt.retries})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			raw := tdb.SQL(t)
			if _, err := raw.Exec("CREATE TABLE dl (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
				t.Fatal(err)
			}
			// Row 1 is ours first; rows 2..51 make the other transaction heavy.
			for i := 1; i <= 51; i++ {
				if _, err := raw.Exec("INSERT INTO dl VALUES (?, 0)", i); err != nil {
					t.Fatal(err)
				}
			}
			heavy, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer heavy.Rollback() //nolint:errcheck // cleanup only
			if _, err := heavy.ExecContext(ctx, "UPDATE dl SET v = v + 1 WHERE id >= 2"); err != nil {
				t.Fatal(err)
			}
			heavyDone := make(chan error, 1)
			runs := 0
			err = d.withTx(ctx, "test", "op", func(ctx context.Context, tx *sqlx.Tx) error {
				runs++
				if _, err := tx.ExecContext(ctx, "UPDATE dl SET v = v + 1 WHERE id = 1"); err != nil {
					return err
				}
				if runs > 1 {
					return nil
				}
				// Close the cycle: heavy asks for row 1, which we hold, while
				// we ask for row 2, which it holds. Whichever request reaches
				// the server second closes the cycle; either way InnoDB rolls
				// back the lighter transaction, ours (one row against 50), so
				// nothing needs to see our request waiting first (the
				// processlist this used to poll can fail with error 3854
				// under other tests' binary statements).
				go func() {
					_, err := heavy.ExecContext(ctx, "UPDATE dl SET v = v + 1 WHERE id = 1")
					if err == nil {
						err = heavy.Commit()
					}
					heavyDone <- err
				}()
				_, err := tx.ExecContext(ctx, "UPDATE dl SET v = v + 1 WHERE id = 2")
				return err
			})
			if herr := <-heavyDone; herr != nil {
				t.Fatalf("the heavy transaction failed: %v", herr)
			}
			if runs != tt.wantRuns {
				t.Fatalf("body ran %d times; want %d", runs, tt.wantRuns)
			}
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("withTx = %v; want %v", err, tt.wantErr)
			}
		})
	}
}

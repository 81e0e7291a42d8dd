package storage_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// TestTransactionsRunReadCommitted: the store no longer names an isolation
// level when it begins a transaction; every connection sets READ COMMITTED
// once, when it is made. Each DSN below tries to override that with some
// spelling of either server's variable. The test holds several store
// transactions open at once, so each is on its own pooled connection, and
// in each one reads the session's level and shows the behaviour: a row
// committed by another session after the transaction's first read is seen
// by its second read (REPEATABLE READ would still show the old value).
func TestTransactionsRunReadCommitted(t *testing.T) {
	mysqltest.SkipVitess(t, "the test creates its own table, which the sharded keyspace's vschema does not know (vtgate: table not found)")
	t.Parallel()
	b := setup(t)
	raw := b.db.SQL(t)
	if _, err := raw.Exec("CREATE TABLE iso_probe (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	name := isolationVariable(t, raw)
	const conns = 6
	for i := range conns {
		if _, err := raw.Exec("INSERT INTO iso_probe VALUES (?, 0)", i); err != nil {
			t.Fatal(err)
		}
	}
	for _, param := range []string{
		"", "transaction_isolation=%27SERIALIZABLE%27", "tx_isolation=%27REPEATABLE-READ%27",
		"@@SESSION.TX_ISOLATION=%27SERIALIZABLE%27", "Transaction_Isolation=%27REPEATABLE-READ%27",
	} {
		t.Run("dsn+"+param, func(t *testing.T) {
			if param != "" {
				// The level is mend's: a DSN choosing one is refused.
				_, err := storage.Open(t.Context(), b.db.DSN+"&"+param, storage.Options{})
				var pe *mysqlx.ParamError
				if !errors.As(err, &pe) {
					t.Fatalf("Open with %s = %v; want a ParamError", param, err)
				}
				return
			}
			store := openStore(t, b.db.DSN, storage.Options{})
			store.SQL().SetMaxIdleConns(0) // fresh sessions for every subtest
			var started, wrote sync.WaitGroup
			started.Add(conns)
			wrote.Add(1)
			errs := make([]error, conns)
			var all sync.WaitGroup
			for i := range conns {
				all.Go(func() {
					errs[i] = storage.InTx(store, t.Context(), func(ctx context.Context, tx *sqlx.Tx) error {
						var level string
						var before, after int
						err := tx.QueryRowContext(ctx, "SELECT @@SESSION."+name).Scan(&level)
						if err == nil {
							err = tx.QueryRowContext(ctx, "SELECT v FROM iso_probe WHERE id = ?", i).Scan(&before)
						}
						started.Done()
						if err != nil {
							return err
						}
						wrote.Wait()
						if err := tx.QueryRowContext(ctx, "SELECT v FROM iso_probe WHERE id = ?", i).Scan(&after); err != nil {
							return err
						}
						if level != "READ-COMMITTED" || after != before+1 {
							return fmt.Errorf("transaction %d: %s = %q, read %d then %d after another session's commit; want READ-COMMITTED and the new value", i, name, level, before, after)
						}
						return nil
					})
				})
			}
			started.Wait() // every transaction is open, each on its own connection
			if _, err := raw.Exec("UPDATE iso_probe SET v = v + 1"); err != nil {
				t.Fatal(err)
			}
			wrote.Done()
			all.Wait()
			for _, err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// isolationVariable is the server's name for the session isolation level.
func isolationVariable(t *testing.T, db *sql.DB) string {
	t.Helper()
	var v string
	if err := db.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"transaction_isolation", "tx_isolation"} {
		if err := db.QueryRow("SELECT @@SESSION." + name).Scan(&v); err == nil {
			return name
		}
	}
	t.Fatal("the server has no isolation variable")
	return ""
}

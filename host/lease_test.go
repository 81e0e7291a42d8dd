package host_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
)

// lockWaits counts the transactions waiting for a row lock in db's
// database (other tests share the server).
func lockWaits(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.innodb_trx t
		JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
		WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pollUntil calls f until it returns nil or the deadline passes.
func pollUntil(t *testing.T, deadline time.Time, what string, f func() error) {
	t.Helper()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestHostWriteBoundedByLease: the real queue holds its batch row locked
// (another session's open transaction did SELECT ... FOR UPDATE) while a
// planner's transition waits on it, and the planner's lease is lost
// (its context is cancelled). The transition reports mend.ErrAmbiguous, as
// host/doc.go promises, and the statement the server still holds gives up
// within the lease TTL of the loss: releasing the lock after that leaves
// the batch untouched. With default Options. The negative control keeps
// the server's lock wait (50 s): its write lands after the TTL.
func TestHostWriteBoundedByLease(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		opts      host.Options
		ttl       time.Duration
		wantLands bool
	}{
		{"default options", host.Options{}, host.LeaseTTLDefault, false},
		{"the server's lock wait lands late (negative control)", host.Options{LeaseTTL: 3 * time.Second, LockWait: -1}, 3 * time.Second, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			b.seed(t, "q", "q/batch/1", "speculating", "q/1")
			h := open(t, b.db.DSN, b.db.DSN, tt.opts)
			batch, err := h.BatchGet(ctx, "q", "q/batch/1")
			if err != nil {
				t.Fatal(err)
			}
			raw := b.db.SQL(t)
			lockHolder, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer lockHolder.Rollback()
			if _, err := lockHolder.ExecContext(ctx, "SELECT version FROM batch WHERE queue = 'q' AND id = 'q/batch/1' FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			leaseCtx, loseLease := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := h.BatchTransitionFrom(leaseCtx, batch, mend.BatchFailed)
				done <- err
			}()
			pollUntil(t, time.Now().Add(10*time.Second), "the transition waiting on the row lock", func() error {
				if n := lockWaits(t, raw); n != 1 {
					return fmt.Errorf("%d lock waits", n)
				}
				return nil
			})
			lostAt := time.Now()
			loseLease()
			if err := <-done; !errors.Is(err, mend.ErrAmbiguous) {
				t.Fatalf("transition cut off by the lease's end = %v; want ErrAmbiguous", err)
			}
			// The server still holds the statement; it must give up before
			// the TTL since the loss has passed.
			ended := false
			for time.Since(lostAt) < tt.ttl {
				if lockWaits(t, raw) == 0 {
					ended = true
					break
				}
				time.Sleep(50 * time.Millisecond) // polling interval
			}
			if err := lockHolder.Commit(); err != nil {
				t.Fatal(err)
			}
			var version int
			var state string
			read := func() {
				if err := raw.QueryRow("SELECT version, state FROM batch WHERE queue = 'q' AND id = 'q/batch/1'").Scan(&version, &state); err != nil {
					t.Fatal(err)
				}
			}
			if ended {
				// The statement gave up before the lock was released: nothing
				// can land any more.
				read()
			} else {
				// Granted the lock only now, the statement may take a moment
				// to apply: wait for it, bounded.
				deadline := time.Now().Add(10 * time.Second)
				for read(); version == 1 && time.Now().Before(deadline); read() {
					time.Sleep(20 * time.Millisecond) // polling interval
				}
			}
			landed := version != 1
			if landed != tt.wantLands || ended == tt.wantLands {
				t.Fatalf("after the TTL (%v) since the lease was lost: statement ended %v, batch %s at version %d; want landed %v", tt.ttl, ended, state, version, tt.wantLands)
			}
		})
	}
}

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
	"github.com/mendq/mend/internal/mysqltest"
)

// lockWaits counts the statements still running on the server that name
// batchID (unique to the subtest: other tests share the server), other
// than this query. The processlist, not innodb_trx, whose cached snapshot
// MariaDB was seen to serve stale for seconds.
func lockWaits(t *testing.T, db *sql.DB, batchID string) int {
	t.Helper()
	n, err := mysqltest.CountProcesslist(context.Background(), db, `SELECT COUNT(*) FROM information_schema.processlist
		WHERE db = DATABASE() AND command = 'Query' AND id <> CONNECTION_ID() AND LOCATE(?, info) > 0`, batchID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sessions describes the server sessions on db's database, for a failure.
func sessions(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT id, command, COALESCE(state, ''), COALESCE(info, '') FROM information_schema.processlist WHERE db = DATABASE()")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var id int64
		var cmd, state, info string
		_ = rows.Scan(&id, &cmd, &state, &info)
		out += fmt.Sprintf("[%d %s %q %.80q] ", id, cmd, state, info)
	}
	return out
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
		batchID   string
		opts      host.Options
		ttl       time.Duration
		wantLands bool
	}{
		{"default options", "q/batch/default", host.Options{}, host.LeaseTTLDefault, false},
		{"the server's lock wait lands late (negative control)", "q/batch/control", host.Options{LeaseTTL: 3 * time.Second, LockWait: -1}, 3 * time.Second, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			b.seed(t, "q", tt.batchID, "speculating", "q/1")
			h := open(t, b.db.DSN, b.db.DSN, tt.opts)
			batch, err := h.BatchGet(ctx, "q", tt.batchID)
			if err != nil {
				t.Fatal(err)
			}
			raw := b.db.SQL(t)
			lockHolder, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer lockHolder.Rollback()
			if _, err := lockHolder.ExecContext(ctx, "SELECT version FROM batch WHERE queue = 'q' AND id = ? FOR UPDATE", tt.batchID); err != nil {
				t.Fatal(err)
			}
			leaseCtx, loseLease := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := h.BatchTransitionFrom(leaseCtx, batch, mend.BatchFailed)
				done <- err
			}()
			pollUntil(t, time.Now().Add(30*time.Second), "the transition waiting on the row lock", func() error {
				select {
				case err := <-done:
					t.Fatalf("the transition returned %v before its wait was seen; sessions: %s", err, sessions(t, raw))
				default:
				}
				if n := lockWaits(t, raw, tt.batchID); n != 1 {
					return fmt.Errorf("%d lock waits; sessions: %s", n, sessions(t, raw))
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
				if lockWaits(t, raw, tt.batchID) == 0 {
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
				if err := raw.QueryRow("SELECT version, state FROM batch WHERE queue = 'q' AND id = ?", tt.batchID).Scan(&version, &state); err != nil {
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
			if !ended && !tt.wantLands {
				t.Logf("sessions at the TTL: %s", sessions(t, raw))
			}
			if landed != tt.wantLands || ended == tt.wantLands {
				t.Fatalf("after the TTL (%v) since the lease was lost: statement ended %v, batch %s at version %d; want landed %v", tt.ttl, ended, state, version, tt.wantLands)
			}
		})
	}
}

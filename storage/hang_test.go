package storage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// TestHungWriterAndTakeover: a fenced writer whose connection hangs (the
// network neither delivers nor closes, as with a half-open connection or a
// frozen client) right before COMMIT keeps its shared lock on the lease row,
// so no one can take the queue over until the server drops its session.
// Options.SessionIdleTimeout bounds that, and the zero Options (the
// README's wiring) bound it by default; with the server's default (8 h) the
// takeover stays blocked, which the negative control shows.
func TestHungWriterAndTakeover(t *testing.T) {
	mysqltest.SkipVitess(t, "a hung writer's row lock is freed by the server dropping its idle session (wait_timeout); through vtgate the MySQL session belongs to the tablet, which keeps the transaction open until its own transaction timeout")
	t.Parallel()
	for _, tt := range []struct {
		name         string
		opts         storage.Options
		attempts     time.Duration // how long B tries to take over
		wantTakeover bool
	}{
		// A's own IO timeout is far beyond B's attempts: only the server
		// dropping A's session can let B in.
		{"an idle timeout frees the lease row", storage.Options{SessionIdleTimeout: 2 * time.Second, IOTimeout: time.Minute}, 6 * time.Second, true},
		// The defaults: idle timeout = the default lease TTL (15 s), IO
		// timeout 60 s.
		{"zero-valued options free the lease row", storage.Options{}, 25 * time.Second, true},
		// Here A's IO timeout (10 s) just ends the test after B's attempts.
		{"the server default keeps it blocked (negative control)", storage.Options{SessionIdleTimeout: -1, IOTimeout: 10 * time.Second}, 6 * time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			rec := b.create(t, src("q", "m"))
			proxy := mysqltest.NewProxy(t, b.db.Server.Addr())
			// IOTimeout lets A's hung COMMIT return at all: database/sql
			// cannot cancel a COMMIT in flight.
			writerA := openStore(t, b.db.DSNVia(proxy.Addr()), tt.opts)
			hung := make(chan struct{})
			var once sync.Once
			storage.SetBeforeCommit(writerA, func(op string) {
				once.Do(func() {
					// Hold every byte from now on, in both directions.
					for _, stream := range []string{"upstream", "downstream"} {
						if err := proxy.AddToxic("hang-"+stream, "timeout", stream, 1, map[string]any{"timeout": 0}); err != nil {
							t.Error(err)
						}
					}
					close(hung)
				})
			})
			termA, err := b.store.LeaseAcquire(ctx, "q", "a", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			pa := appendParams(rec, mend.EventSettled, mend.StateSettled)
			pa.Fence = &termA
			aCtx, cancelA := context.WithCancel(ctx)
			aDone := make(chan error, 1)
			go func() {
				_, err := writerA.RecordAppend(aCtx, pa)
				aDone <- err
			}()
			<-hung
			poll(t, 10*time.Second, func() error {
				if st, err := b.store.LeaseGet(ctx, "q"); err != nil || st.Live() {
					return fmt.Errorf("term still live: %+v, %v", st, err)
				}
				return nil
			})

			// B waits at most 3 s per try on the lease row.
			impatient := openStore(t, b.db.DSN, storage.Options{LockWait: 3 * time.Second})
			deadline := time.Now().Add(tt.attempts)
			var termB mend.Term
			var busy int
			for time.Now().Before(deadline) {
				termB, err = impatient.LeaseAcquire(ctx, "q", "b", time.Minute)
				if err == nil {
					break
				}
				if !errors.Is(err, mend.ErrBusy) {
					t.Fatalf("takeover attempt = %v; want success or ErrBusy", err)
				}
				busy++
			}
			// A returns when its connection closes: the server dropped the
			// session (idle timeout), or A's own IO timeout fired.
			aErr := <-aDone
			cancelA()
			if !tt.wantTakeover {
				if err == nil || busy == 0 {
					t.Fatalf("takeover succeeded (%v) while the hung writer held the lease row; the control no longer reproduces the hang", termB)
				}
				return
			}
			if err != nil || termB.Epoch != termA.Epoch+1 {
				t.Fatalf("takeover = %v, %v after %d lock-wait timeouts; want epoch %d", termB, err, busy, termA.Epoch+1)
			}
			// The server dropped A's session and rolled its write back; A
			// itself only knows the outcome is unknown.
			if !errors.Is(aErr, mend.ErrAmbiguous) {
				t.Fatalf("hung append = %v; want ErrAmbiguous", aErr)
			}
			if _, err := b.store.OpLookup(ctx, "q", pa.OpID); !errors.Is(err, mend.ErrNotFound) {
				t.Fatalf("the hung write landed: %v", err)
			}
		})
	}
}

func TestSessionIdleTimeoutValidation(t *testing.T) {
	t.Parallel()
	for _, o := range []storage.Options{{SessionIdleTimeout: time.Millisecond}, {LeaseTTL: -time.Second}} {
		if _, err := storage.Open(context.Background(), "u:p@tcp(127.0.0.1:1)/db", o); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("Open with %+v = %v; want ErrInvalid", o, err)
		}
	}
}

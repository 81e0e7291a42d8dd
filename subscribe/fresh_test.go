package subscribe_test

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend/subscribe"
)

// freezeTrxCache starts n readers that each poll information_schema.innodb_trx
// every 10 ms on a session of their own, as more mend replicas, a
// monitoring agent or someone running `watch` would: InnoDB refreshes the
// table's cache only after 0.1 s without readers, so from now on every read
// sees the cache as it was filled last. It returns a func that stops them.
func freezeTrxCache(t *testing.T, dsn string, n int) (stop func()) {
	t.Helper()
	db, err := subscribe.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				// A read that fails (MySQL's 3854 beside a binary
				// statement) is ignored: the next one follows 10 ms later.
				var k int
				_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.innodb_trx").Scan(&k)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			_ = db.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestLossFrozenTrxCache: three readers poll innodb_trx every 10 ms from
// right after the subscription's own usable read, so the cache keeps that
// read's transaction (in the session the pool reuses for the next read)
// and never shows the MoveToDLQ that opens afterwards and stays open four
// settle windows. A read must prove its view newer than itself (its own
// statement's text in its own row) or read the live InnoDB monitor
// instead: the watermark then waits below the open row, and the row is
// recorded once it commits. Before, every such read was "usable", showed
// nothing open, and the watermark passed the row, which the host's GC then
// deleted unrecorded, with OpenLapsed false throughout.
func TestLossFrozenTrxCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// The pool hands the read the session it used last: one connection.
	readDB, err := subscribe.Open(ctx, b.qdsn)
	if err != nil {
		t.Fatal(err)
	}
	readDB.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = readDB.Close() })
	s := b.sub(t, subscribe.Config{})
	var mu sync.Mutex
	var lastErr error
	subscribe.SetOpenRead(s, func(ctx context.Context, _ *sql.DB) (time.Time, error) {
		at, err := subscribe.ReadOpen(ctx, readDB)
		mu.Lock()
		lastErr = err
		mu.Unlock()
		return at, err
	})
	readErr := func() error {
		mu.Lock()
		defer mu.Unlock()
		return lastErr
	}
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	b.deadLetter(t, "q", "q/batch/0")
	// A first usable read (other tests' readers can keep the cache stale
	// for a while): its transaction is in the cache the readers freeze.
	for hang := time.Now().Add(time.Minute); ; {
		<-tick.C
		if st := pass(t, s); st.OpenRead == subscribe.OpenUsable {
			break
		}
		if time.Now().After(hang) {
			t.Fatal("no usable read of the open transactions in a minute")
		}
	}
	stop := freezeTrxCache(t, b.qdsn, 3)
	tx, err := b.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rawDLQ(t, tx, "speculate_dlq", "q", "q/batch/held", `{"id":"q/batch/held","queue":"q"}`)
	var held uint64
	if err := tx.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&held); err != nil {
		t.Fatal(err)
	}
	after := b.deadLetter(t, "q", "q/batch/after")
	// The freshness proof itself, on the session the reads reuse: a view
	// that does not show the transaction just opened was filled before it,
	// and must not be called fresh (a view that shows it was refreshed
	// meanwhile, which the machine's load can cause: nothing to check).
	var heldSession int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&heldSession); err != nil {
		t.Fatal(err)
	}
	if fresh, sessions, err := subscribe.OpenTrxView(ctx, readDB); err == nil && fresh && !slices.Contains(sessions, heldSession) {
		t.Fatalf("a view without session %d's open transaction (sessions %v) was taken as fresh: the frozen cache's row of the reader's session passed the proof", heldSession, sessions)
	}
	ack := func() {
		t.Helper()
		if _, err := b.world.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
			t.Fatal(err)
		}
	}
	// Four windows by the test's clock, the transaction open throughout.
	// A step whose read failed outright does not move the clock (as in
	// TestLossTransactionHeldOpen).
	hangAt := time.Now().Add(5 * time.Minute)
	for steps := 0; steps < 20; {
		ack()
		<-tick.C
		st := pass(t, s)
		t.Logf("step %d: read %q err %v acked %d", steps, st.OpenRead, readErr(), b.acked(t, "mend", "speculate_dlq", "q"))
		if st.OpenLapsed {
			t.Fatalf("step %d: the view lapsed (last read: %v)", steps, readErr())
		}
		if readErr() == nil {
			b.clock.Add(2 * time.Second)
			steps++
		}
		if time.Now().After(hangAt) {
			t.Fatalf("after %d steps, reads failed for 5 minutes: %v", steps, readErr())
		}
	}
	if acked := b.acked(t, "mend", "speculate_dlq", "q"); acked >= held {
		t.Fatalf("the watermark moved to %d, past offset %d whose transaction is still open, behind a frozen innodb_trx cache", acked, held)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		<-tick.C
		b.clock.Add(settle + time.Second)
		pass(t, s)
		ack()
		if _, err := b.world.GC(ctx, "speculate_dlq"); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(b.ids(t), "q/batch/held") && b.acked(t, "mend", "speculate_dlq", "q") >= after {
			break
		}
	}
	stop()
	if !slices.Contains(b.ids(t), "q/batch/held") {
		t.Fatalf("records %v: the row held open was not recorded (watermark %d)", b.ids(t), b.acked(t, "mend", "speculate_dlq", "q"))
	}
}

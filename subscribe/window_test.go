package subscribe_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/subscribe"
)

// TestSettleFor: the window covers two lock waits and the semi-sync
// commit's wait, plus the margin, and never goes below the default.
func TestSettleFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		w    subscribe.Waits
		want time.Duration
	}{
		{subscribe.Waits{LockWait: 50 * time.Second}, 110 * time.Second}, // the servers' defaults: 50 s + 50 s + 10 s
		{subscribe.Waits{LockWait: 50 * time.Second, SemiSync: 10 * time.Second}, 120 * time.Second},
		{subscribe.Waits{LockWait: 5 * time.Second}, subscribe.SettleDefault},
		{subscribe.Waits{LockWait: 25 * time.Second}, subscribe.SettleDefault},
		{subscribe.Waits{LockWait: 30 * time.Second}, 70 * time.Second},
	} {
		if got := subscribe.SettleFor(c.w); got != c.want {
			t.Errorf("SettleFor(%+v) = %v, want %v", c.w, got, c.want)
		}
		if !c.w.Covers(c.want) || c.w.Covers(c.w.Bound()+subscribe.SettleMargin-time.Second) {
			t.Errorf("%+v: Covers does not draw the line at %v", c.w, c.w.Bound()+subscribe.SettleMargin)
		}
	}
}

// TestReadWaits: the server's innodb_lock_wait_timeout (the test servers
// keep the default), and no semi-sync wait where the plugin is not
// loaded.
func TestReadWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := subscribe.ReadWaits(context.Background(), b.queue)
	if err != nil {
		t.Fatal(err)
	}
	var secs int
	if err := b.queue.QueryRow("SELECT @@GLOBAL.innodb_lock_wait_timeout").Scan(&secs); err != nil {
		t.Fatal(err)
	}
	if w.LockWait != time.Duration(secs)*time.Second || w.SemiSync != 0 {
		t.Fatalf("ReadWaits = %+v; want lock wait %ds and no semi-sync", w, secs)
	}
	if got := subscribe.SettleFor(w); got < 2*w.LockWait+subscribe.SettleMargin {
		t.Fatalf("SettleFor(%+v) = %v, below two lock waits plus the margin", w, got)
	}
}

// TestLossTwoLockWaits: a MoveToDLQ exactly as the real one (SELECT, plain
// INSERT into the DLQ topic, DELETE of the original, COMMIT) whose INSERT
// waits on a lock of the DLQ row's unique key after allocating its offset,
// and whose DELETE then waits on the original row's lock, neither wait
// timing out, while a later dead letter commits first. Its sessions' lock
// wait timeout is lowered to 4 s so the test runs in seconds; the test's
// clock runs 30 times as fast as the real one, so each real 4 s is the
// 120 s the subscription's window is computed for (SettleFor). Without
// PROCESS (the window alone decides) the row must still be recorded: the
// window covers both waits. With the window covering one wait it was lost
// (issue 43: 91 s after allocation against 60 s).
func TestLossTwoLockWaits(t *testing.T) {
	ctx := context.Background()
	const (
		lockWait = 4 * time.Second // the MoveToDLQ session's, real
		speed    = 30              // the test's clock against the real one
		hold     = 3 * time.Second // each lock, from when the statement began waiting
	)
	b := setup(t)
	s := b.sub(t, subscribe.Config{Settle: subscribe.SettleFor(subscribe.Waits{LockWait: speed * lockWait})})
	subscribe.BlindToOpen(s)
	mover, err := sql.Open("mysql", b.qdsn+sep(b.qdsn)+"innodb_lock_wait_timeout=4")
	if err != nil {
		t.Fatal(err)
	}
	mover.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = mover.Close() })
	moverWorld := sqtest.World{App: mover, Queue: mover, NowMS: b.world.NowMS}

	b.deadLetter(t, "q", "q/batch/0") // the partition is joined and read
	pass(t, s)
	if err := b.world.Publish(ctx, "speculate", "q", "q/batch/x", []byte(`{"id":"q/batch/x","queue":"q"}`), nil); err != nil {
		t.Fatal(err)
	}
	// Blocker of the INSERT: another transaction's insert of the same DLQ
	// key (rolled back later). Blocker of the DELETE: a lock on the
	// original row.
	unique, err := b.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unique.Rollback() }()
	rawDLQ(t, unique, "speculate_dlq", "q", "q/batch/x", `{}`)
	original, err := b.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = original.Rollback() }()
	var origOffset uint64
	if err := original.QueryRowContext(ctx, "SELECT `offset` FROM queue_messages WHERE topic = 'speculate' AND partition_key = 'q' AND id = 'q/batch/x' FOR UPDATE").Scan(&origOffset); err != nil {
		t.Fatal(err)
	}
	moved := make(chan error, 1)
	go func() {
		moved <- moverWorld.MoveToDLQ(ctx, "speculate", "q", "q/batch/x", sqtest.Failure{Count: 3, LastError: "boom"})
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	waitFor := func(text string) error {
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
		for hang := time.Now().Add(time.Minute); ; <-poll.C {
			n, err := mysqltest.CountStatements(ctx, b.queue, text)
			if err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if time.Now().After(hang) {
				return fmt.Errorf("the MoveToDLQ never ran %q", text)
			}
		}
	}
	// The INSERT has allocated its offset and waits on the unique key: a
	// later dead letter commits above it, then the first lock goes just
	// before the wait would time out, and the second likewise.
	if err := waitFor("INSERT INTO queue_messages"); err != nil {
		t.Fatal(err)
	}
	first := time.After(hold)
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-first
		_ = unique.Rollback()
		if waitFor("DELETE FROM queue_messages") == nil {
			<-time.After(hold)
		}
		_ = original.Rollback()
	}()
	after := b.deadLetter(t, "q", "q/batch/y") // above x in the unique key: no gap lock between them
	host := func(gc bool) {
		t.Helper()
		if _, err := b.world.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
			t.Fatal(err)
		}
		if gc {
			if _, err := b.world.GC(ctx, "speculate_dlq"); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	last := start
	committed := false
	for hang := time.Now().Add(2 * time.Minute); !committed; {
		<-tick.C
		now := time.Now()
		b.clock.Add(speed * now.Sub(last))
		last = now
		st := pass(t, s)
		t.Logf("%v: watermark %d, advanced %d", now.Sub(start).Round(time.Millisecond), b.acked(t, "mend", "speculate_dlq", "q"), st.Advanced)
		host(false) // the GC's DELETE would wait on the MoveToDLQ's locks
		select {
		case err := <-moved:
			if err != nil {
				t.Fatalf("the MoveToDLQ failed (a lock wait timed out?): %v", err)
			}
			committed = true
		default:
		}
		if now.After(hang) {
			t.Fatal("the MoveToDLQ did not commit in 2 minutes")
		}
	}
	var off uint64
	if err := b.queue.QueryRow("SELECT `offset` FROM queue_messages WHERE topic = 'speculate_dlq' AND id = 'q/batch/x'").Scan(&off); err != nil {
		t.Fatal(err)
	}
	if off > after {
		t.Fatalf("the moved row's offset %d is above the later dead letter's %d: it did not allocate before waiting", off, after)
	}
	for i := 0; i < 40 && !(slices.Contains(b.ids(t), "q/batch/x") && b.acked(t, "mend", "speculate_dlq", "q") >= after); i++ {
		<-tick.C
		b.clock.Add(subscribe.SettleFor(subscribe.Waits{LockWait: speed * lockWait}) / 4)
		pass(t, s)
		host(true)
	}
	if !slices.Contains(b.ids(t), "q/batch/x") {
		t.Fatalf("records %v: the MoveToDLQ that waited on two locks (offset %d, original %d) was not recorded; watermark %d", b.ids(t), off, origOffset, b.acked(t, "mend", "speculate_dlq", "q"))
	}
}

// TestSettleZeroReadsTheWaits: a library user who leaves Config.Settle
// zero gets the window mend run uses, SettleFor the queue database's
// waits, from the first pass on (it was SettleDefault, 60 s, which a
// MoveToDLQ waiting on two 50 s locks outlasts). Before any pass the
// window is SettleDefault.
func TestSettleZeroReadsTheWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := subscribe.ReadWaits(context.Background(), b.queue)
	if err != nil {
		t.Fatal(err)
	}
	s, err := subscribe.New(subscribe.Config{DB: b.queue, Intake: b.intake, Parker: b.store})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Settle(); got != subscribe.SettleDefault {
		t.Fatalf("before a pass, Settle() = %v, want SettleDefault %v", got, subscribe.SettleDefault)
	}
	if _, err := s.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := subscribe.SettleFor(w)
	if got := s.Settle(); got != want || !w.Covers(got) {
		t.Fatalf("after a pass, Settle() = %v; want SettleFor(%s) = %v, covering the waits", got, w, want)
	}
	if got := s.DrainBound(); got <= want {
		t.Fatalf("DrainBound() = %v, not past the window %v", got, want)
	}
	// A window given is kept, even one that does not cover the waits (mend run warns of it).
	given, err := subscribe.New(subscribe.Config{DB: b.queue, Intake: b.intake, Parker: b.store, Settle: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := given.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := given.Settle(); got != 5*time.Second {
		t.Fatalf("a given window: Settle() = %v, want 5s", got)
	}
}

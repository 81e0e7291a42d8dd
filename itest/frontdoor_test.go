package itest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/reconcile"
)

// The inline-path scenarios again, with mend linked in through the front
// door only (client.Open with its checks on, the application and queue
// databases apart as in production): a worker built from it passes what the
// hand-wired one passes.

// frontDoor opens the front door on w, its host planner reading the wake
// topic as a running submit queue's does (the checks refuse a topic nobody
// reads).
func (w *world) frontDoor(t *testing.T, queue string) *client.Client {
	t.Helper()
	return w.frontDoorWith(t, queue, actorOpts{})
}

// frontDoorWith is frontDoor with an actor's grace period and backoff, as
// the front door's Config takes them.
func (w *world) frontDoorWith(t *testing.T, queue string, o actorOpts) *client.Client {
	t.Helper()
	ctx := context.Background()
	if err := w.sq.Join(ctx, "orchestrator", host.WakeTopicDefault, queue); err != nil {
		t.Fatal(err)
	}
	cfg := client.Config{DSN: w.mendDB.DSN, HostDSN: w.appDB.DSN, QueueDSN: w.queueDB.DSN, Grace: o.grace}
	if o.backoff > 0 {
		cfg.RetryBase, cfg.RetryMax = o.backoff, o.backoff
	}
	c, err := client.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("client.Open: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestFrontDoorConcurrentRedeliveries is TestConcurrentRedeliveries through
// the front door: one DLQ row recorded 50 times at once gives one record,
// one settle and one wake-up.
func TestFrontDoorConcurrentRedeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorldWith(t, worldOpts{splitQueue: true})
	const q = "q-storm"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
	w.seed(t, q, b2, mend.BatchCreated, q+"/2")
	c := w.frontDoor(t, q)
	d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
	const n = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	creators := 0
	var firstErr error
	for range n {
		wg.Go(func() {
			res, err := c.Record(ctx, d)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if res.Created {
				creators++
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("Record: %v", firstErr)
	}
	if creators != 1 {
		t.Fatalf("%d calls created the record; want 1", creators)
	}
	converge(t, c.Reconciler(), 20, func() bool { return w.record(t, d.Source).State == mend.StateDone })
	settles := 0
	for _, k := range w.kinds(t, w.record(t, d.Source)) {
		if k == mend.EventSettled {
			settles++
		}
	}
	if settles != 1 {
		t.Fatalf("%d settle events; want 1", settles)
	}
	if ups := w.wakeUps(t, q, true); len(ups) != 1 {
		t.Fatalf("%d wake-ups; want 1", len(ups))
	}
}

// TestFrontDoorLostWakeUpIsResent is TestLostWakeUpIsResent (the bug that
// started mend) through the front door. The fault is the host's own: a
// trigger on the queue database refuses the first wake-up's insert (its ID
// ends in /v2, the record's version when it was settled), as a failed
// publish would; the redelivery's inline repair must re-send it under a new
// ID and the record end done.
func TestFrontDoorLostWakeUpIsResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorldWith(t, worldOpts{splitQueue: true})
	const q = "q-lost"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1", q+"/2")
	w.seed(t, q, b2, mend.BatchCreated, q+"/3")
	if _, err := w.queueDB.SQL(t).ExecContext(ctx, `CREATE TRIGGER fd_refuse_first_wake BEFORE INSERT ON queue_messages FOR EACH ROW
		BEGIN
			IF NEW.topic = 'speculate' AND NEW.id LIKE 'mend/wake/%/v2' THEN
				SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'itest: the first wake-up publish is refused';
			END IF;
		END`); err != nil {
		t.Fatal(err)
	}
	c := w.frontDoor(t, q)
	d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})

	res, err := c.Record(ctx, d)
	if err != nil || !res.Created {
		t.Fatalf("first delivery: created %v, %v", res.Created, err)
	}
	src := res.Record.Source
	rec := w.record(t, src)
	if rec.State != mend.StateSettled || len(w.wakeUps(t, q, true)) != 0 {
		t.Fatalf("after the refused publish: record %s, %d wake-ups; want settled and none", rec.State, len(w.wakeUps(t, q, true)))
	}
	if got := w.batchState(t, q, b1); got != mend.BatchFailed {
		t.Fatalf("batch 1 is %s; want failed", got)
	}

	// The backoff passes and the DLQ message is redelivered: the front
	// door's inline repair re-sends the wake-up it owes.
	w.makeDue(t, src)
	if res, err := c.Record(ctx, d); err != nil || res.Created || res.RepairErr != nil {
		t.Fatalf("redelivery: created %v, repair %v, %v; want the existing record repaired", res.Created, res.RepairErr, err)
	}
	rec = w.record(t, src)
	if rec.State != mend.StateDone {
		t.Fatalf("after the redelivery the record is %s; want done", rec.State)
	}
	ups := w.wakeUps(t, q, true)
	if len(ups) != 1 || ups[0].Batch.ID != b2 || ups[0].ID != "mend/wake/"+rec.ID.String()+"/v3" {
		t.Fatalf("wake-ups = %+v; want exactly one, for batch 2, at record version 3", ups)
	}
	want := []mend.EventKind{mend.EventCreated, mend.EventSettled, mend.EventWakeFailed, mend.EventWoken}
	if got := w.kinds(t, rec); !slices.Equal(got, want) {
		t.Fatalf("events = %v; want %v", got, want)
	}
	w.requireFannedOut(t, q, b1, host.RequestError)
}

// worker is how a scenario reaches mend: the parts wired by hand (an
// actor's reconciler and an intake) or the front door. The scenarios that
// take one run through both.
type worker interface {
	Record(ctx context.Context, d dlq.Delivery) (dlq.Result, error)
	RunOnce(ctx context.Context) (reconcile.PassStats, error)
}

type handWired struct {
	*dlq.Intake
	rec *reconcile.Reconciler
}

func (h handWired) RunOnce(ctx context.Context) (reconcile.PassStats, error) {
	return h.rec.RunOnce(ctx)
}

type viaFrontDoor struct{ *client.Client }

func (f viaFrontDoor) RunOnce(ctx context.Context) (reconcile.PassStats, error) {
	return f.Reconciler().RunOnce(ctx)
}

// bothWays runs a scenario with mend wired by hand and through the front
// door, each on a world of its own.
func bothWays(t *testing.T, scenario func(t *testing.T, w *world, via func(queue string, o actorOpts) worker)) {
	t.Run("hand-wired", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		scenario(t, w, func(_ string, o actorOpts) worker {
			a := w.actor(t, o)
			return handWired{w.intake(t, a.rec), a.rec}
		})
	})
	t.Run("front door", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		scenario(t, w, func(queue string, o actorOpts) worker { return viaFrontDoor{w.frontDoorWith(t, queue, o)} })
	})
}

package itest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/planner"
)

// TestLostWakeUpIsResent is the bug that started mend, on the real tables
// with the application and queue databases apart: batch 1's speculate
// message is dead-lettered, batch 2 is live in a quiet queue, and the first
// wake-up publish is refused. The redelivery must still wake the queue, and
// the record ends done.
func TestLostWakeUpIsResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorldWith(t, worldOpts{splitQueue: true})
	const q = "monorepo/main"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1", q+"/2")
	w.seed(t, q, b2, mend.BatchCreated, q+"/3")
	w.waker.RefuseNext(1)
	// A long backoff: the re-send must come from the redelivery below.
	a := w.actor(t, actorOpts{backoff: time.Hour})
	in := w.intake(t, a.rec)
	// Dependency analysis published speculate for batch 1 under the batch's
	// ID; the speculate run kept failing and the store dead-lettered it.
	d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})

	res, err := in.Record(ctx, d)
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

	// The backoff passes, and the DLQ message is redelivered: the record
	// remembers that a wake-up is owed, and the inline repair re-sends it.
	w.makeDue(t, src)
	if res, err := in.Record(ctx, d); err != nil || res.Created || res.RepairErr != nil {
		t.Fatalf("redelivery: created %v, repair %v, %v; want the existing record repaired", res.Created, res.RepairErr, err)
	}
	if got := w.record(t, src).State; got != mend.StateDone {
		t.Fatalf("after the redelivery the record is %s; want done", got)
	}

	// Version 3: created, settled, wake_failed. The refused publish had
	// version 2's ID, so the re-send cannot be swallowed by its dedupe.
	ups := w.wakeUps(t, q, true)
	if len(ups) != 1 || ups[0].Batch.ID != b2 || ups[0].ID != "mend/wake/"+rec.ID.String()+"/v3" {
		t.Fatalf("wake-ups = %+v; want exactly one, for batch 2, at record version 3", ups)
	}
	if ups[0].Meta[host.MetaRecordID] != rec.ID.String() {
		t.Errorf("wake-up metadata %v; want the record ID %s", ups[0].Meta, rec.ID)
	}
	if e, err := strconv.ParseInt(ups[0].Meta[host.MetaEpoch], 10, 64); err != nil || e < 1 {
		t.Errorf("wake-up epoch %q; want a positive decimal string", ups[0].Meta[host.MetaEpoch])
	}
	calls, errs := w.waker.Calls()
	if len(calls) != 2 || !errors.Is(errs[0], sqtest.ErrInjected) || errs[1] != nil || calls[0].MessageID == calls[1].MessageID {
		t.Fatalf("publishes = %+v, %v; want a refused one, then a re-send under a new ID", calls, errs)
	}
	w.requireFannedOut(t, q, b1, host.RequestError)
	w.requireMembership(t, q, b1)
	want := []mend.EventKind{mend.EventCreated, mend.EventSettled, mend.EventWakeFailed, mend.EventWoken}
	if got := w.kinds(t, rec); !slices.Equal(got, want) {
		t.Fatalf("events = %v; want %v", got, want)
	}
	if b := w.batch(t, q, b2); b.State != string(mend.BatchCreated) || b.Version != 1 {
		t.Fatalf("batch 2 is %s at version %d; mend must only wake it", b.State, b.Version)
	}
}

// TestBuildDeadLetterFailsAndWakes: dead letters of other stages wake the
// queue too (F2). A build message is partitioned by its batch ID, not the
// queue, and has a unique ID; the record is still filed under the queue its
// payload names. Wired by hand and through the front door.
func TestBuildDeadLetterFailsAndWakes(t *testing.T) {
	t.Parallel()
	bothWays(t, func(t *testing.T, w *world, via func(string, actorOpts) worker) {
		ctx := context.Background()
		const q = "q-build"
		b10, b11 := q+"/batch/10", q+"/batch/11"
		w.seed(t, q, b10, mend.BatchSpeculating, q+"/1")
		w.seed(t, q, b11, mend.BatchCreated, q+"/2")
		m := via(q, actorOpts{})
		d := w.deadLetter(t, dead{topic: "build", partition: b10, id: b10 + "@1764482400000000000-1", payload: batchMsg(q, b10)})
		res, err := m.Record(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if res.Record.Source.Queue != q {
			t.Fatalf("record filed under queue %q; want %q", res.Record.Source.Queue, q)
		}
		if got := w.record(t, res.Record.Source).State; got != mend.StateDone {
			t.Fatalf("record is %s; want done by the inline repair", got)
		}
		if got := w.batchState(t, q, b10); got != mend.BatchFailed {
			t.Fatalf("batch 10 is %s; want failed", got)
		}
		w.requireFannedOut(t, q, b10, host.RequestError)
		if ups := w.wakeUps(t, q, true); len(ups) != 1 || ups[0].Batch.ID != b11 {
			t.Fatalf("wake-ups = %+v; want one for batch 11", ups)
		}
	})
}

// TestMergeOutcomeIsProtected covers F3: a reported success is honoured,
// and a merging batch is never failed blindly. Each case runs wired by hand
// and through the front door.
func TestMergeOutcomeIsProtected(t *testing.T) {
	t.Parallel()

	// The real merge-signal_dlq controller ignores the result's outcome and
	// runs failBatch, which transitions a merging batch to failed and fans
	// out error: the change is on trunk while its requests say it failed.
	// mend deliberately differs: it honours SUCCEEDED.
	t.Run("merge-signal SUCCEEDED makes a merging batch succeeded", func(t *testing.T) {
		t.Parallel()
		bothWays(t, func(t *testing.T, w *world, via func(string, actorOpts) worker) {
			ctx := context.Background()
			const q = "q-merge"
			b5 := q + "/batch/5"
			w.seed(t, q, b5, mend.BatchMerging, q+"/1", q+"/2")
			m := via(q, actorOpts{})
			d := w.deadLetter(t, dead{topic: "merge-signal", partition: q, id: b5, payload: mergeResult(q, b5, "SUCCEEDED")})
			res, err := m.Record(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if res.Record.Target.Desired != mend.OutcomeSucceeded {
				t.Fatalf("record target %+v; want the merge's success", res.Record.Target)
			}
			if b := w.batch(t, q, b5); b.State != string(mend.BatchSucceeded) || b.Version != 2 {
				t.Fatalf("batch is %s at version %d; want succeeded at 2", b.State, b.Version)
			}
			w.requireMembership(t, q, b5)
			w.requireFannedOut(t, q, b5, host.RequestLanded)
			if got := w.record(t, res.Record.Source).State; got != mend.StateDone {
				t.Fatalf("record is %s; want done (no live batch to wake)", got)
			}
			if ups := w.wakeUps(t, q, true); len(ups) != 0 {
				t.Fatalf("wake-ups %+v with no live batch", ups)
			}
		})
	})

	t.Run("speculate dead letter leaves a merging batch alone, then parks", func(t *testing.T) {
		t.Parallel()
		bothWays(t, func(t *testing.T, w *world, via func(string, actorOpts) worker) {
			waitThenPark(t, w, via, mend.BatchMerging, "speculate")
		})
	})
}

// TestCancellingBatchIsWaitedOnThenParked: a cancelling batch may still
// have a merge in flight, so a dead letter does not fail it (the real
// failBatch would); the record waits and is parked for an operator after
// the grace period, with the batch untouched.
func TestCancellingBatchIsWaitedOnThenParked(t *testing.T) {
	t.Parallel()
	bothWays(t, func(t *testing.T, w *world, via func(string, actorOpts) worker) {
		waitThenPark(t, w, via, mend.BatchCancelling, "submitqueue-merge")
	})
}

// waitThenPark dead-letters a message of topic for a batch in state and
// checks that the record waits, then parks after the grace period, without
// the batch, its requests or its membership row being touched, and without
// a wake-up.
func waitThenPark(t *testing.T, w *world, via func(string, actorOpts) worker, state mend.BatchState, topic string) {
	t.Helper()
	ctx := context.Background()
	q := "q-" + string(state)
	b7 := q + "/batch/7"
	w.seed(t, q, b7, state, q+"/1")
	member, err := w.sq.Membership(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	// Time is injected through the database clock (makeDue, ageState), so
	// the test never waits for the grace period to pass.
	m := via(q, actorOpts{grace: time.Hour, backoff: time.Hour})
	d := w.deadLetter(t, dead{topic: topic, partition: q, id: b7 + "/" + topic, payload: batchMsg(q, b7), blame: []string{b7}})
	res, err := m.Record(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	src := res.Record.Source
	if got := w.record(t, src).State; got != mend.StateWaiting {
		t.Fatalf("record is %s; want waiting", got)
	}
	// Checked again before the grace period ends: still waiting.
	w.makeDue(t, src)
	if _, err := m.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.record(t, src).State; got != mend.StateWaiting {
		t.Fatalf("record is %s before the grace period ended; want waiting", got)
	}
	// The grace period passes.
	w.ageState(t, src, 2*time.Hour)
	w.makeDue(t, src)
	if _, err := m.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	rec := w.record(t, src)
	if rec.State != mend.StateParked {
		t.Fatalf("record is %s after the grace period; want parked", rec.State)
	}
	if rec.LastError == "" || rec.NextAttemptAt != nil {
		t.Fatalf("parked record has reason %q, due %v; want a reason and not due", rec.LastError, rec.NextAttemptAt)
	}
	if b := w.batch(t, q, b7); b.State != string(state) || b.Version != 1 {
		t.Fatalf("batch is %s at version %d; a %s batch must never be failed", b.State, b.Version, state)
	}
	for id, s := range w.requestStates(t, q, b7) {
		if s != "batched" {
			t.Errorf("request %s is %s; want it left batched", id, s)
		}
	}
	if after, err := w.sq.Membership(ctx, q); err != nil || !slices.Equal(after, member) {
		t.Fatalf("membership %v (%v); want it untouched: %v", after, err, member)
	}
	if ups := w.wakeUps(t, q, true); len(ups) != 0 {
		t.Fatalf("a parked record sent wake-ups: %+v", ups)
	}
}

// TestConcludeFinishesFanOut covers F4: a conclude dead letter on a batch
// that already succeeded lands its requests and leaves the batch alone. The
// batch has lost its membership row (the host's transition stopped after
// its CAS); finishing re-creates it, as the real EnsureRecord does. Wired
// by hand and through the front door.
func TestConcludeFinishesFanOut(t *testing.T) {
	t.Parallel()
	bothWays(t, func(t *testing.T, w *world, via func(string, actorOpts) worker) {
		ctx := context.Background()
		const q = "q-conclude"
		b3, b4 := q+"/batch/3", q+"/batch/4"
		w.seed(t, q, b3, mend.BatchSucceeded, q+"/1", q+"/2")
		w.seed(t, q, b4, mend.BatchCreated, q+"/3")
		if err := w.sq.DropMembership(ctx, q, string(mend.BatchSucceeded), b3); err != nil {
			t.Fatal(err)
		}
		m := via(q, actorOpts{})
		d := w.deadLetter(t, dead{topic: "conclude", partition: q, id: b3 + "/conclude/merged", payload: batchMsg(q, b3)})
		res, err := m.Record(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if b := w.batch(t, q, b3); b.State != string(mend.BatchSucceeded) || b.Version != 1 {
			t.Fatalf("batch is %s at version %d; a succeeded batch must never be overwritten", b.State, b.Version)
		}
		w.requireMembership(t, q, b3)
		w.requireFannedOut(t, q, b3, host.RequestLanded)
		rec := w.record(t, res.Record.Source)
		if rec.State != mend.StateDone {
			t.Fatalf("record is %s; want done", rec.State)
		}
		evs, err := w.store.RecordHistory(ctx, q, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		var settled struct {
			Outcome   string `json:"outcome"`
			Divergent bool   `json:"divergent"`
		}
		if err := json.Unmarshal(evs[1].Data, &settled); err != nil || evs[1].Kind != mend.EventSettled {
			t.Fatalf("second event %s %s: %v", evs[1].Kind, evs[1].Data, err)
		}
		if settled.Outcome != "succeeded" || !settled.Divergent {
			t.Fatalf("settled event = %+v; want outcome succeeded, divergence recorded", settled)
		}
		if ups := w.wakeUps(t, q, true); len(ups) != 1 || ups[0].Batch.ID != b4 {
			t.Fatalf("wake-ups = %+v; want one for batch 4", ups)
		}
	})
}

// TestConcurrentRedeliveries: one DLQ row handed to the intake 50 times at
// once gives one record, one settle and one wake-up.
func TestConcurrentRedeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "q-storm"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
	w.seed(t, q, b2, mend.BatchCreated, q+"/2")
	a := w.actor(t, actorOpts{})
	in := w.intake(t, a.rec)
	d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	created := make(chan bool, n)
	for range n {
		wg.Go(func() {
			res, err := in.Record(ctx, d)
			errs <- err
			created <- res.Created
		})
	}
	wg.Wait()
	close(errs)
	close(created)
	creators := 0
	for err := range errs {
		if err != nil {
			t.Fatalf("intake: %v", err)
		}
	}
	for c := range created {
		if c {
			creators++
		}
	}
	if creators != 1 {
		t.Fatalf("%d intakes created the record; want 1", creators)
	}
	converge(t, a.rec, 20, func() bool { return w.record(t, d.Source).State == mend.StateDone })
	rec := w.record(t, d.Source)
	settles := 0
	for _, k := range w.kinds(t, rec) {
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

// TestRacingPlanners: two reconcilers and the inline path on the same
// queues (on both shards on the Vitess backend). Per queue and epoch one
// planner acts; no wake-up is published for a record twice; every record
// ends done.
func TestRacingPlanners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const queues, perQueue = 4, 5
	w.requireBothShards(t, "race-0", "race-1", "race-2", "race-3")
	a, b := w.actor(t, actorOpts{holder: "a"}), w.actor(t, actorOpts{holder: "b"})
	in := w.intake(t, a.rec)
	var srcs []mend.SourceID
	for qi := range queues {
		q := fmt.Sprintf("race-%d", qi)
		for i := range perQueue + 1 {
			w.seed(t, q, fmt.Sprintf("%s/batch/%02d", q, i), mend.BatchSpeculating, fmt.Sprintf("%s/%d", q, i))
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range []*actor{a, b} {
		wg.Go(func() {
			for runCtx.Err() == nil {
				_, _ = r.rec.RunOnce(runCtx)
			}
		})
	}
	stop := func() { cancel(); wg.Wait() }
	for qi := range queues {
		q := fmt.Sprintf("race-%d", qi)
		for i := range perQueue {
			batch := fmt.Sprintf("%s/batch/%02d", q, i)
			d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: batch, payload: batchMsg(q, batch), blame: []string{batch}})
			if _, err := in.Record(ctx, d); err != nil {
				stop()
				t.Fatal(err)
			}
			srcs = append(srcs, d.Source)
		}
	}
	err := pollUntil(ctx, 30*time.Second, 5*time.Millisecond, func() (bool, error) {
		for _, s := range srcs {
			rec, err := w.store.RecordGet(ctx, s)
			if err != nil || rec.State != mend.StateDone {
				return false, err
			}
		}
		return true, nil
	})
	stop()
	if err != nil {
		t.Fatalf("records not all done: %v", err)
	}

	// One actor per (queue, epoch) in the event log.
	rows, err := w.mendDB.SQL(t).Query(`SELECT queue, epoch, COUNT(DISTINCT actor) FROM mend_events WHERE epoch > 0 GROUP BY queue, epoch`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		var epoch int64
		var actors int
		if err := rows.Scan(&q, &epoch, &actors); err != nil {
			t.Fatal(err)
		}
		if actors != 1 {
			t.Errorf("queue %s epoch %d has %d actors; want 1", q, epoch, actors)
		}
	}
	for qi := range queues {
		q := fmt.Sprintf("race-%d", qi)
		perRecord := map[string]int{}
		// Not live: the batches woken early were failed by later records.
		for _, u := range w.wakeUps(t, q, false) {
			perRecord[u.Meta[host.MetaRecordID]]++
		}
		for id, n := range perRecord {
			if n != 1 {
				t.Errorf("record %s published %d wake-ups; want 1", id, n)
			}
		}
	}
}

// TestPlannerStoppedBetweenSettleAndWake: a planner cancelled after settling
// leaves the record settled; the reconciler finishes it within one pass.
func TestPlannerStoppedBetweenSettleAndWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "q-stop"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
	w.seed(t, q, b2, mend.BatchCreated, q+"/2")
	stopCtx, stop := context.WithCancel(ctx)
	crashing := w.actor(t, actorOpts{holder: "crashing", hooks: planner.Hooks{
		BeforeWake: func(context.Context, mend.Record) { stop() },
	}})
	d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
	if _, err := w.intake(t, nil).Record(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := crashing.rec.TryRepair(stopCtx, q); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled planner run = %v; want context.Canceled", err)
	}
	if got := w.record(t, d.Source).State; got != mend.StateSettled {
		t.Fatalf("record is %s; want settled", got)
	}
	if ups := w.wakeUps(t, q, true); len(ups) != 0 {
		t.Fatalf("wake-ups %+v before the reconciler ran", ups)
	}
	// The stopped planner released its lease on the way out, so the next
	// pass takes the queue at once.
	healthy := w.actor(t, actorOpts{holder: "healthy"})
	if passes := converge(t, healthy.rec, 1, func() bool { return w.record(t, d.Source).State == mend.StateDone }); passes != 1 {
		t.Fatalf("took %d passes", passes)
	}
	if ups := w.wakeUps(t, q, true); len(ups) != 1 || ups[0].Batch.ID != b2 {
		t.Fatalf("wake-ups = %+v; want one for batch 2", ups)
	}
}

// TestBrokenQueueDrains: when every speculate run of the host dead-letters
// again, each pass fails one more batch and the queue drains in a bounded
// number of passes instead of looping forever. The dead letters after the
// first are mend's own wake-ups, moved to speculate_dlq by the host's store
// exactly as published, so this also checks that the intake reads back what
// the planner writes.
func TestBrokenQueueDrains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q, batches = "q-broken", 6
	bid := func(i int) string { return fmt.Sprintf("%s/batch/b%d", q, i) }
	for i := range batches {
		w.seed(t, q, bid(i), mend.BatchCreated, fmt.Sprintf("%s/%d", q, i))
	}
	a := w.actor(t, actorOpts{})
	in := w.intake(t, nil)
	// The host's first speculate run dead-letters on batch b0.
	pending := []dlqRow{w.deadLetterRow(t, dead{topic: "speculate", partition: q, id: bid(0), payload: batchMsg(q, bid(0)), blame: []string{bid(0)}})}
	passes := 0
	for len(pending) > 0 {
		passes++
		if passes > batches+1 {
			t.Fatalf("still not drained after %d passes", passes-1)
		}
		for _, p := range pending {
			if _, err := in.Record(ctx, w.dlqDelivery(t, p.topic, p.partition, p.id)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		// Every new wake-up, read as the real consumer reads it, names a
		// live batch; the broken host run then dead-letters it, on the
		// batch it was woken for.
		pending = nil
		for _, u := range w.wakeUps(t, q, true) {
			if err := w.sq.MoveToDLQ(ctx, "speculate", q, u.ID, sqtest.Failure{Count: 5, LastError: "speculate run failed",
				Subjects: []sqtest.Subject{{Type: "batch", ID: u.Batch.ID}}}); err != nil {
				t.Fatal(err)
			}
			pending = append(pending, dlqRow{"speculate_dlq", q, u.ID})
		}
	}
	for i := range batches {
		if got := w.batchState(t, q, bid(i)); got != mend.BatchFailed {
			t.Errorf("batch b%d is %s; want failed", i, got)
		}
	}
	if passes != batches {
		t.Fatalf("drained in %d passes; want one per batch (%d)", passes, batches)
	}
	live, err := w.host.LiveBatches(ctx, q, 10)
	if err != nil || len(live) != 0 {
		t.Fatalf("live batches %v, %v; want none", live, err)
	}
}

// dlqRow names a row of a _dlq topic.
type dlqRow struct{ topic, partition, id string }

// deadLetterRow is deadLetter for a caller that reads the row later.
func (w *world) deadLetterRow(t *testing.T, d dead) dlqRow {
	t.Helper()
	w.deadLetter(t, d)
	return dlqRow{d.topic + "_dlq", d.partition, d.id}
}

// TestNaiveHandlerLosesWakeUp is the negative control for
// TestLostWakeUpIsResent: the DLQ handler as it was before mend (save the
// outcome, publish, and on redelivery see the batch already failed and do
// nothing: the real speculate_dlq's "no progress" ack) leaves batch 2
// stuck in the same scenario. It shows the scenario really reproduces the
// bug mend fixes.
func TestNaiveHandlerLosesWakeUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "monorepo/main"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
	w.seed(t, q, b2, mend.BatchCreated, q+"/2")
	w.waker.RefuseNext(1)
	naive := func() error {
		b, err := w.host.BatchGet(ctx, q, b1)
		if err != nil {
			return err
		}
		if b.State == mend.BatchFailed {
			return nil // "already failed: nothing to do" (the bug)
		}
		if _, err := w.host.BatchTransition(ctx, q, b1, b.Version, mend.BatchFailed); err != nil {
			return err
		}
		if err := w.host.BatchFinish(ctx, q, b1, mend.Snapshot{LastError: "speculate failed"}); err != nil {
			return err
		}
		return w.waker.Wake(ctx, mend.WakeUp{Queue: q, MessageID: b2 + "@retrigger", BatchID: b2, Epoch: 1})
	}
	if err := naive(); !errors.Is(err, sqtest.ErrInjected) {
		t.Fatalf("the first publish should have been refused; got %v", err)
	}
	if err := naive(); err != nil { // the redelivery
		t.Fatal(err)
	}
	if ups := w.wakeUps(t, q, true); len(ups) != 0 {
		t.Fatalf("the naive handler woke the queue (%+v); the scenario no longer reproduces the bug", ups)
	}
}

package itest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/planner"
)

// TestLostWakeUpIsResent is the bug that started mend: the outcome is saved,
// the wake-up publish fails, and the redelivery must still wake the queue.
func TestLostWakeUpIsResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "monorepo/main"
	w.seed(t, q, "1", mend.BatchSpeculating, "r1", "r2")
	w.seed(t, q, "2", mend.BatchCreated, "r3")
	if err := w.host.FailNextPublish(ctx, "speculate", q); err != nil {
		t.Fatal(err)
	}
	// A long backoff: the re-send must come from the redelivery below.
	a := w.actor(t, actorOpts{backoff: time.Hour})
	in := w.intake(t, a.rec)
	d := delivery(q, "speculate_dlq", "1/speculate/3", `{"batch_id":"1"}`)

	res, err := in.Record(ctx, d)
	if err != nil || !res.Created {
		t.Fatalf("first delivery: created %v, %v", res.Created, err)
	}
	rec := w.record(t, d.Source)
	if rec.State != mend.StateSettled || len(w.wakeUps(t, q)) != 0 {
		t.Fatalf("after the failed publish: record %s, %d wake-ups; want settled and none", rec.State, len(w.wakeUps(t, q)))
	}
	if got := w.batchState(t, q, "1"); got != mend.BatchFailed {
		t.Fatalf("batch 1 is %s; want failed", got)
	}

	// The backoff passes, and the DLQ message is redelivered: the record
	// remembers that a wake-up is owed, and the inline repair re-sends it.
	w.makeDue(t, d.Source)
	if res, err := in.Record(ctx, d); err != nil || res.Created || res.RepairErr != nil {
		t.Fatalf("redelivery: created %v, repair %v, %v; want the existing record repaired", res.Created, res.RepairErr, err)
	}
	if got := w.record(t, d.Source).State; got != mend.StateDone {
		t.Fatalf("after the redelivery the record is %s; want done", got)
	}

	ups := w.wakeUps(t, q)
	if len(ups) != 1 || ups[0].BatchID != "2" || ups[0].ID != planner.WakeMessageID(rec.ID, 2) || ups[0].Epoch < 1 {
		t.Fatalf("wake-ups = %+v; want exactly one, for batch 2, attempt 2, with an epoch", ups)
	}
	for id, s := range w.requestStates(t, q, "1") {
		if s != host.RequestError {
			t.Errorf("request %s is %s; want error", id, s)
		}
	}
	want := []mend.EventKind{mend.EventCreated, mend.EventSettled, mend.EventWakeFailed, mend.EventWoken}
	if got := w.kinds(t, rec); !slices.Equal(got, want) {
		t.Fatalf("events = %v; want %v", got, want)
	}
	if got := w.batchState(t, q, "2"); got != mend.BatchCreated {
		t.Fatalf("batch 2 is %s; mend must only wake it", got)
	}
}

// TestBuildDeadLetterFailsAndWakes: dead letters of other stages wake the
// queue too (F2).
func TestBuildDeadLetterFailsAndWakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "q-build"
	w.seed(t, q, "10", mend.BatchSpeculating, "r1")
	w.seed(t, q, "11", mend.BatchCreated, "r2")
	a := w.actor(t, actorOpts{})
	d := delivery(q, "build_dlq", "10/build/1", `{"batch_id":"10"}`)
	if _, err := w.intake(t, a.rec).Record(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := w.record(t, d.Source).State; got != mend.StateDone {
		t.Fatalf("record is %s; want done by the inline repair", got)
	}
	if got := w.batchState(t, q, "10"); got != mend.BatchFailed {
		t.Fatalf("batch 10 is %s; want failed", got)
	}
	if ups := w.wakeUps(t, q); len(ups) != 1 || ups[0].BatchID != "11" {
		t.Fatalf("wake-ups = %+v; want one for batch 11", ups)
	}
}

// TestMergeOutcomeIsProtected covers F3: a reported success is honoured,
// and a merging batch is never failed blindly.
func TestMergeOutcomeIsProtected(t *testing.T) {
	t.Parallel()

	t.Run("merge-signal SUCCEEDED makes a merging batch succeeded", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		const q = "q-merge"
		w.seed(t, q, "5", mend.BatchMerging, "r1", "r2")
		a := w.actor(t, actorOpts{})
		d := delivery(q, "merge-signal_dlq", "5/merge-signal/1", `{"batch_id":"5","outcome":"SUCCEEDED"}`)
		if _, err := w.intake(t, a.rec).Record(ctx, d); err != nil {
			t.Fatal(err)
		}
		if got := w.batchState(t, q, "5"); got != mend.BatchSucceeded {
			t.Fatalf("batch is %s; want succeeded", got)
		}
		for id, s := range w.requestStates(t, q, "5") {
			if s != host.RequestLanded {
				t.Errorf("request %s is %s; want landed", id, s)
			}
		}
		if got := w.record(t, d.Source).State; got != mend.StateDone {
			t.Fatalf("record is %s; want done (no live batch to wake)", got)
		}
		if ups := w.wakeUps(t, q); len(ups) != 0 {
			t.Fatalf("wake-ups %+v with no live batch", ups)
		}
	})

	t.Run("speculate dead letter leaves a merging batch alone, then parks", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		const q = "q-merging"
		w.seed(t, q, "7", mend.BatchMerging, "r1")
		// Time is injected through the database clock (makeDue, ageState),
		// so the test never waits for the grace period to pass.
		a := w.actor(t, actorOpts{grace: time.Hour, backoff: time.Hour})
		d := delivery(q, "speculate_dlq", "7/speculate/1", `{"batch_id":"7"}`)
		if _, err := w.intake(t, a.rec).Record(ctx, d); err != nil {
			t.Fatal(err)
		}
		if got := w.record(t, d.Source).State; got != mend.StateWaiting {
			t.Fatalf("record is %s; want waiting", got)
		}
		// Checked again before the grace period ends: still waiting.
		w.makeDue(t, d.Source)
		if _, err := a.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if got := w.record(t, d.Source).State; got != mend.StateWaiting {
			t.Fatalf("record is %s before the grace period ended; want waiting", got)
		}
		// The grace period passes.
		w.ageState(t, d.Source, 2*time.Hour)
		w.makeDue(t, d.Source)
		if _, err := a.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if got := w.record(t, d.Source).State; got != mend.StateParked {
			t.Fatalf("record is %s after the grace period; want parked", got)
		}
		rec := w.record(t, d.Source)
		if got := w.batchState(t, q, "7"); got != mend.BatchMerging {
			t.Fatalf("batch is %s; a merging batch must never be failed", got)
		}
		if rec.LastError == "" || rec.NextAttemptAt != nil {
			t.Fatalf("parked record has reason %q, due %v; want a reason and not due", rec.LastError, rec.NextAttemptAt)
		}
		if ups := w.wakeUps(t, q); len(ups) != 0 {
			t.Fatalf("a parked record sent wake-ups: %+v", ups)
		}
	})
}

// TestConcludeFinishesFanOut covers F4: a conclude dead letter on a batch
// that already succeeded lands its requests and leaves the batch alone.
func TestConcludeFinishesFanOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "q-conclude"
	w.seed(t, q, "3", mend.BatchSucceeded, "r1", "r2")
	w.seed(t, q, "4", mend.BatchCreated, "r3")
	a := w.actor(t, actorOpts{})
	d := delivery(q, "conclude_dlq", "3/conclude/1", `{"batch_id":"3"}`)
	if _, err := w.intake(t, a.rec).Record(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := w.batchState(t, q, "3"); got != mend.BatchSucceeded {
		t.Fatalf("batch is %s; a succeeded batch must never be overwritten", got)
	}
	for id, s := range w.requestStates(t, q, "3") {
		if s != host.RequestLanded {
			t.Errorf("request %s is %s; want landed", id, s)
		}
	}
	rec := w.record(t, d.Source)
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
	if ups := w.wakeUps(t, q); len(ups) != 1 || ups[0].BatchID != "4" {
		t.Fatalf("wake-ups = %+v; want one for batch 4", ups)
	}
}

// TestConcurrentRedeliveries: one delivery handed to the intake 50 times at
// once gives one record, one settle and one wake-up.
func TestConcurrentRedeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "q-storm"
	w.seed(t, q, "1", mend.BatchSpeculating, "r1")
	w.seed(t, q, "2", mend.BatchCreated, "r2")
	a := w.actor(t, actorOpts{})
	in := w.intake(t, a.rec)
	d := delivery(q, "speculate_dlq", "1/speculate/9", `{"batch_id":"1"}`)
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
	if ups := w.wakeUps(t, q); len(ups) != 1 {
		t.Fatalf("%d wake-ups; want 1", len(ups))
	}
}

// TestRacingPlanners: two reconcilers and the inline path on the same
// queues. Per queue and epoch one planner acts; no wake-up is published for
// a record twice; every record ends done.
func TestRacingPlanners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const queues, perQueue = 4, 5
	a, b := w.actor(t, actorOpts{holder: "a"}), w.actor(t, actorOpts{holder: "b"})
	in := w.intake(t, a.rec)
	var srcs []mend.SourceID
	for qi := range queues {
		q := fmt.Sprintf("race-%d", qi)
		for i := range perQueue + 1 {
			w.seed(t, q, fmt.Sprintf("%02d", i), mend.BatchSpeculating, fmt.Sprintf("r%d", i))
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
	for qi := range queues {
		q := fmt.Sprintf("race-%d", qi)
		for i := range perQueue {
			d := delivery(q, "speculate_dlq", fmt.Sprintf("%02d/speculate/1", i), fmt.Sprintf(`{"batch_id":"%02d"}`, i))
			if _, err := in.Record(ctx, d); err != nil {
				cancel()
				wg.Wait()
				t.Fatal(err)
			}
			srcs = append(srcs, d.Source)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		done := 0
		for _, s := range srcs {
			if w.record(t, s).State == mend.StateDone {
				done++
			}
		}
		if done == len(srcs) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("%d of %d records done after 30s", done, len(srcs))
		}
	}
	cancel()
	wg.Wait()

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
		perRecord := map[mend.RecordID]int{}
		for _, u := range w.wakeUps(t, q) {
			perRecord[u.RecordID]++
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
	w.seed(t, q, "1", mend.BatchSpeculating, "r1")
	w.seed(t, q, "2", mend.BatchCreated, "r2")
	stopCtx, stop := context.WithCancel(ctx)
	crashing := w.actor(t, actorOpts{holder: "crashing", hooks: planner.Hooks{
		BeforeWake: func(context.Context, mend.Record) { stop() },
	}})
	d := delivery(q, "speculate_dlq", "1/speculate/1", `{"batch_id":"1"}`)
	if _, err := w.intake(t, nil).Record(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := crashing.rec.TryRepair(stopCtx, q); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled planner run = %v; want context.Canceled", err)
	}
	if got := w.record(t, d.Source).State; got != mend.StateSettled {
		t.Fatalf("record is %s; want settled", got)
	}
	if ups := w.wakeUps(t, q); len(ups) != 0 {
		t.Fatalf("wake-ups %+v before the reconciler ran", ups)
	}
	// The stopped planner released its lease on the way out, so the next
	// pass takes the queue at once.
	healthy := w.actor(t, actorOpts{holder: "healthy"})
	if passes := converge(t, healthy.rec, 1, func() bool { return w.record(t, d.Source).State == mend.StateDone }); passes != 1 {
		t.Fatalf("took %d passes", passes)
	}
	if ups := w.wakeUps(t, q); len(ups) != 1 || ups[0].BatchID != "2" {
		t.Fatalf("wake-ups = %+v; want one for batch 2", ups)
	}
}

// TestBrokenQueueDrains: when every planner run of the host dead-letters
// again, each pass fails one more batch and the queue drains in a bounded
// number of passes instead of looping forever.
func TestBrokenQueueDrains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q, batches = "q-broken", 6
	for i := range batches {
		w.seed(t, q, fmt.Sprintf("b%d", i), mend.BatchCreated, fmt.Sprintf("r%d", i))
	}
	a := w.actor(t, actorOpts{})
	in := w.intake(t, nil)
	// The host's first planner run dead-letters on batch b0.
	pending := []dlq_delivery{{id: "start/speculate/1", batch: "b0"}}
	passes := 0
	for len(pending) > 0 {
		passes++
		if passes > batches+1 {
			t.Fatalf("still not drained after %d passes", passes-1)
		}
		for _, p := range pending {
			d := delivery(q, "speculate_dlq", p.id, fmt.Sprintf(`{"batch_id":%q}`, p.batch))
			if _, err := in.Record(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		seen := len(w.wakeUps(t, q))
		if _, err := a.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		// Every new wake-up makes the broken host planner run and
		// dead-letter again, on the batch it was woken for.
		pending = nil
		for _, u := range w.wakeUps(t, q)[seen:] {
			pending = append(pending, dlq_delivery{id: u.ID, batch: u.BatchID})
		}
	}
	for i := range batches {
		if got := w.batchState(t, q, fmt.Sprintf("b%d", i)); got != mend.BatchFailed {
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

type dlq_delivery struct{ id, batch string }

// TestNaiveHandlerLosesWakeUp is the negative control for
// TestLostWakeUpIsResent: the DLQ handler as it was before mend (save the
// outcome, publish, and on redelivery see the batch already failed and do
// nothing) leaves batch 2 stuck in the same scenario. It shows the scenario
// really reproduces the bug mend fixes.
func TestNaiveHandlerLosesWakeUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "monorepo/main"
	w.seed(t, q, "1", mend.BatchSpeculating, "r1")
	w.seed(t, q, "2", mend.BatchCreated, "r2")
	if err := w.host.FailNextPublish(ctx, "speculate", q); err != nil {
		t.Fatal(err)
	}
	naive := func() error {
		b, err := w.host.BatchGet(ctx, q, "1")
		if err != nil {
			return err
		}
		if b.State == mend.BatchFailed {
			return nil // "already failed: nothing to do" (the bug)
		}
		if _, err := w.host.BatchTransition(ctx, q, "1", b.Version, mend.BatchFailed); err != nil {
			return err
		}
		if err := w.host.BatchFinish(ctx, q, "1"); err != nil {
			return err
		}
		return w.host.Wake(ctx, mend.WakeUp{Queue: q, MessageID: "1/speculate_dlq/wake", BatchID: "2"})
	}
	if err := naive(); err == nil {
		t.Fatalf("the first publish should have failed")
	}
	if err := naive(); err != nil { // the redelivery
		t.Fatal(err)
	}
	if ups := w.wakeUps(t, q); len(ups) != 0 {
		t.Fatalf("the naive handler woke the queue (%+v); the scenario no longer reproduces the bug", ups)
	}
}

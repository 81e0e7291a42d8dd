package itest

// Scenarios that exist only because the real submit queue's schema is not
// the first round's model: advisory membership rows, case-insensitive
// identities, builds traced through a table, ambiguous publishes, and a
// consumer that reads what mend publishes by the real rules.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/storage"
)

// TestCaseVariantBatchIsParked: the application tables compare IDs without
// regard to case, so a dead letter naming "…/BATCH/1" finds the row
// "…/batch/1". mend's identities are byte-exact: the record is parked with a
// reason naming both spellings, and the host's row, its members, its
// membership and the queue's speculate partition are left as they were.
func TestCaseVariantBatchIsParked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, stored, named string }{
		{"dead letter in upper case", "q-case/batch/1", "q-case/BATCH/1"},
		{"host row in upper case", "q-case/BATCH/1", "q-case/batch/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newWorld(t)
			const q = "q-case"
			w.seed(t, q, tc.stored, mend.BatchSpeculating, q+"/1")
			w.seed(t, q, q+"/batch/2", mend.BatchCreated, q+"/2")
			member, err := w.sq.Membership(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			a := w.actor(t, actorOpts{})
			d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: tc.named, payload: batchMsg(q, tc.named), blame: []string{tc.named}})
			res, err := w.intake(t, a.rec).Record(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			rec := w.record(t, res.Record.Source)
			if rec.State != mend.StateParked || !strings.Contains(rec.LastError, `"`+tc.named+`"`) || !strings.Contains(rec.LastError, `"`+tc.stored+`"`) {
				t.Fatalf("record is %s with reason %q; want parked naming %q and %q", rec.State, rec.LastError, tc.named, tc.stored)
			}
			if b := w.batch(t, q, tc.stored); b.State != string(mend.BatchSpeculating) || b.Version != 1 {
				t.Fatalf("host row %s is %s at version %d; want it untouched", tc.stored, b.State, b.Version)
			}
			if r, err := w.sq.Request(ctx, q, q+"/1"); err != nil || r.State != "batched" || r.Version != 1 {
				t.Fatalf("member request = %+v, %v; want it untouched", r, err)
			}
			if logs, err := w.sq.ConsumeLog(ctx, q+"/1"); err != nil || len(logs) != 0 {
				t.Fatalf("log of the member = %+v, %v; want nothing published", logs, err)
			}
			if after, err := w.sq.Membership(ctx, q); err != nil || !slices.Equal(after, member) {
				t.Fatalf("membership %v (%v); want it untouched: %v", after, err, member)
			}
			if ups := w.wakeUps(t, q, true); len(ups) != 0 {
				t.Fatalf("a parked record sent wake-ups: %+v", ups)
			}
		})
	}
}

// TestMembershipRowsAreAdvisory: queue_batch_state is an index the host
// keeps loosely (its transition is three autocommit statements, creation
// writes no row, terminal rows are never pruned), so a batch has 0..n rows.
// mend reads a batch by its primary key, trusts only batch.state, leaves
// the batch's current state with its row, and wakes the smallest batch
// that is live by its own state.
func TestMembershipRowsAreAdvisory(t *testing.T) {
	t.Parallel()
	const q = "q-member"
	b0, b1, b2, b3 := q+"/batch/0", q+"/batch/1", q+"/batch/2", q+"/batch/3"
	// run dead-letters batch 1 from speculate and repairs it inline; it
	// returns the record.
	run := func(t *testing.T, w *world) mend.Record {
		t.Helper()
		a := w.actor(t, actorOpts{})
		d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
		res, err := w.intake(t, a.rec).Record(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		return w.record(t, res.Record.Source)
	}
	// settledAndWoke checks that batch 1 is failed with its row and its
	// requests errored, and that one wake-up went to want.
	settledAndWoke := func(t *testing.T, w *world, rec mend.Record, want string) {
		t.Helper()
		if rec.State != mend.StateDone {
			t.Fatalf("record is %s (%s); want done", rec.State, rec.LastError)
		}
		if got := w.batchState(t, q, b1); got != mend.BatchFailed {
			t.Fatalf("batch 1 is %s; want failed", got)
		}
		w.requireMembership(t, q, b1)
		w.requireFannedOut(t, q, b1, host.RequestError)
		if ups := w.wakeUps(t, q, true); len(ups) != 1 || ups[0].Batch.ID != want {
			t.Fatalf("wake-ups = %+v; want one for %s", ups, want)
		}
	}

	t.Run("the dead-lettered batch has no membership row", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
		w.seed(t, q, b2, mend.BatchCreated, q+"/2")
		if err := w.sq.DropMembership(ctx, q, string(mend.BatchSpeculating), b1); err != nil {
			t.Fatal(err)
		}
		settledAndWoke(t, w, run(t, w), b2)
	})

	t.Run("the dead-lettered batch has a stale row of an older state", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
		w.seed(t, q, b2, mend.BatchCreated, q+"/2")
		// The host's created -> speculating transition stopped before its
		// DELETE. If mend trusted that row, batch 1 (smaller than batch 2)
		// would still look live after being failed, and the wake-up would
		// name a failed batch.
		if err := w.sq.AddMembership(ctx, q, string(mend.BatchCreated), b1); err != nil {
			t.Fatal(err)
		}
		settledAndWoke(t, w, run(t, w), b2)
	})

	t.Run("a failed batch keeps a stale live row", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		w.seed(t, q, b0, mend.BatchSpeculating, q+"/0")
		if ok, err := w.sq.Transition(ctx, q, b0, 1, string(mend.BatchSpeculating), string(mend.BatchFailed)); err != nil || !ok {
			t.Fatalf("transition batch 0: %v, %v", ok, err)
		}
		if err := w.sq.AddMembership(ctx, q, string(mend.BatchSpeculating), b0); err != nil {
			t.Fatal(err)
		}
		w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
		w.seed(t, q, b2, mend.BatchCreated, q+"/2")
		settledAndWoke(t, w, run(t, w), b2)
	})

	// The host's own planner lists batches through these rows, so a live
	// batch without one is invisible to it too; mend wakes the queue through
	// a batch the host can see.
	t.Run("a live batch without a membership row is not the wake-up's target", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
		w.seed(t, q, b2, mend.BatchCreated, q+"/2")
		w.seed(t, q, b3, mend.BatchCreated, q+"/3")
		if err := w.sq.DropMembership(ctx, q, string(mend.BatchCreated), b2); err != nil {
			t.Fatal(err)
		}
		settledAndWoke(t, w, run(t, w), b3)
	})

	// A redelivery after the host's own failBatch stopped between its CAS
	// and its INSERT: the batch is failed, its failed row missing and its
	// speculating row left behind. Finishing the fan-out re-creates the
	// failed row (EnsureRecord) and deletes nothing.
	t.Run("an already failed batch missing its row gets it back", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
		w.seed(t, q, b2, mend.BatchCreated, q+"/2")
		if _, err := w.sq.App.ExecContext(ctx, "UPDATE batch SET state = 'failed', version = 2 WHERE queue = ? AND id = ?", q, b1); err != nil {
			t.Fatal(err)
		}
		rec := run(t, w)
		settledAndWoke(t, w, rec, b2)
		rows, err := w.sq.Membership(ctx, q)
		if err != nil || !slices.Contains(rows, "speculating/"+b1) {
			t.Fatalf("membership %v (%v); EnsureRecord must not delete the stale row", rows, err)
		}
		if b := w.batch(t, q, b1); b.Version != 2 {
			t.Fatalf("batch 1 at version %d; an already failed batch must not be transitioned again", b.Version)
		}
	})
}

// TestDanglingMembershipRowOfAnotherBatch: a membership row of the queue
// names a batch that does not exist. The real ListByStates fails the whole
// call on it; mend reports the row (host.Options.OnDangling) and still wakes
// the smallest live batch.
func TestDanglingMembershipRowOfAnotherBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "q-dangling"
	b0, b1, b2 := q+"/batch/0", q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
	w.seed(t, q, b2, mend.BatchCreated, q+"/2")
	// Smaller than every real batch, so it would be the wake-up's target
	// if it were taken at its word.
	if err := w.sq.AddMembership(ctx, q, string(mend.BatchCreated), b0); err != nil {
		t.Fatal(err)
	}
	a := w.actor(t, actorOpts{})
	d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
	res, err := w.intake(t, a.rec).Record(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if rec := w.record(t, res.Record.Source); rec.State != mend.StateDone {
		t.Fatalf("record is %s (%s); want done", rec.State, rec.LastError)
	}
	if ups := w.wakeUps(t, q, true); len(ups) != 1 || ups[0].Batch.ID != b2 {
		t.Fatalf("wake-ups = %+v; want one for %s", ups, b2)
	}
	if got := w.danglingReports(); !slices.Contains(got, q+"|created|"+b0) {
		t.Fatalf("dangling reports %v; want the row of %s", got, b0)
	}
}

// TestBuildSignalDeadLetterResolvedThroughBuild: a buildsignal message
// names only the runner's build ({"id": build, "queue"}), partitioned by the
// build ID. The intake traces it to its batch through the host's build
// table, and the batch is failed and the queue woken like any other.
func TestBuildSignalDeadLetterResolvedThroughBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q, build = "q-buildsignal", "runner-build-77"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
	w.seed(t, q, b2, mend.BatchCreated, q+"/2")
	if err := w.sq.SeedBuild(ctx, q, build, b1); err != nil {
		t.Fatal(err)
	}
	a := w.actor(t, actorOpts{})
	in := w.intake(t, a.rec)
	d := w.deadLetter(t, dead{topic: "buildsignal", partition: build, id: build, payload: buildMsg(q, build)})
	res, err := in.Record(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	rec := w.record(t, res.Record.Source)
	if rec.Source.Queue != q || rec.Target.BatchID != b1 || rec.State != mend.StateDone {
		t.Fatalf("record in %q targets %q, %s (%s); want queue %q, batch %q, done", rec.Source.Queue, rec.Target.BatchID, rec.State, rec.LastError, q, b1)
	}
	if got := w.batchState(t, q, b1); got != mend.BatchFailed {
		t.Fatalf("batch 1 is %s; want failed", got)
	}
	w.requireFannedOut(t, q, b1, host.RequestError)
	if ups := w.wakeUps(t, q, true); len(ups) != 1 || ups[0].Batch.ID != b2 {
		t.Fatalf("wake-ups = %+v; want one for %s", ups, b2)
	}

	// A build the table does not hold: the host acks it as a no-op; mend
	// keeps it visible, parked, and touches nothing.
	d = w.deadLetter(t, dead{topic: "buildsignal", partition: "runner-build-404", id: "runner-build-404", payload: buildMsg(q, "runner-build-404")})
	res, err = in.Record(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if rec := w.record(t, res.Record.Source); rec.State != mend.StateParked || !strings.Contains(rec.LastError, "runner-build-404") {
		t.Fatalf("unknown build: record %s (%q); want parked naming the build", rec.State, rec.LastError)
	}
}

// TestRetryAfterAmbiguousWakeUp: the wake-up publish lands but its answer is
// lost, so the planner counts a failure and (with one attempt allowed)
// parks the record. An operator retries it. The next wake-up must still
// reach the queue: the host's dedupe keeps the first ID for as long as the
// row exists, so a re-send reusing it would be silently swallowed. The
// negative control shows exactly that swallowing.
func TestRetryAfterAmbiguousWakeUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	const q = "q-ambiguous"
	b1, b2 := q+"/batch/1", q+"/batch/2"
	w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
	w.seed(t, q, b2, mend.BatchCreated, q+"/2")
	w.waker.LoseNextAnswer(1)
	a := w.actor(t, actorOpts{maxAttempts: 1, backoff: time.Hour})
	d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
	res, err := w.intake(t, a.rec).Record(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	src := res.Record.Source
	rec := w.record(t, src)
	if rec.State != mend.StateParked {
		t.Fatalf("record is %s; want parked after the ambiguous publish", rec.State)
	}
	first := w.wakeUps(t, q, true)
	_, errs := w.waker.Calls()
	if len(first) != 1 || len(errs) != 1 || !errors.Is(errs[0], mend.ErrAmbiguous) {
		t.Fatalf("wake-ups %+v, publish results %v; want one landed publish reported ambiguous", first, errs)
	}

	// The operator retries, as `mend retry` does.
	if _, err := w.store.RecordRetry(ctx, storage.RetryParams{ID: rec.ID, Actor: "operator/test", OpID: mend.NewOpID(), Reason: "queue looked stuck"}); err != nil {
		t.Fatal(err)
	}
	converge(t, a.rec, 3, func() bool { return w.record(t, src).State == mend.StateDone })
	rec = w.record(t, src)
	ups := w.wakeUps(t, q, true)
	if len(ups) != 2 || ups[1].ID == first[0].ID || ups[1].Batch.ID != b2 {
		t.Fatalf("wake-ups = %+v; want a second one for %s under a new ID", ups, b2)
	}
	evs, err := w.store.RecordHistory(ctx, q, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Kind != mend.EventWoken || !strings.Contains(string(last.Data), ups[1].ID) ||
		ups[1].ID != fmt.Sprintf("mend/wake/%s/v%d", rec.ID, last.Seq-1) {
		t.Fatalf("last event %s %s; want woken by %s", last.Kind, last.Data, ups[1].ID)
	}

	// Negative control: a re-send under the first ID is a silent success
	// that publishes nothing.
	if err := w.host.Wake(ctx, mend.WakeUp{Queue: q, MessageID: first[0].ID, BatchID: b2, Epoch: 99, RecordID: rec.ID}); err != nil {
		t.Fatal(err)
	}
	if again := w.wakeUps(t, q, true); len(again) != 2 || again[0].Meta[host.MetaEpoch] == "99" {
		t.Fatalf("after re-sending the first ID: %+v; want the dedupe to keep the first row and add none", again)
	}
}

// TestWakeUpReadByStrictConsumer: the wake-up mend publishes is what the
// real speculate consumer reads: a flat string-map metadata (a number would
// make the real store fail every fetch of the partition), a {"id","queue"}
// payload naming a live batch of that queue spelled exactly so, and the
// DLQ columns at a normal publish's values. The negative controls show the
// consumer-side decoder refusing what the first round's adapter sent.
func TestWakeUpReadByStrictConsumer(t *testing.T) {
	t.Parallel()

	t.Run("mend's wake-up", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newWorld(t)
		const q = "q-strict"
		b1, b2 := q+"/batch/1", q+"/batch/2"
		w.seed(t, q, b1, mend.BatchSpeculating, q+"/1")
		w.seed(t, q, b2, mend.BatchCreated, q+"/2")
		a := w.actor(t, actorOpts{})
		d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
		res, err := w.intake(t, a.rec).Record(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		ups := w.wakeUps(t, q, true)
		if len(ups) != 1 {
			t.Fatalf("%d wake-ups; want 1", len(ups))
		}
		u := ups[0]
		want := map[string]string{host.MetaRecordID: res.Record.ID.String(), host.MetaEpoch: "1"}
		if u.Batch != (sqtest.BatchID{ID: b2, Queue: q}) || !maps.Equal(u.Meta, want) {
			t.Fatalf("wake-up payload %+v metadata %v; want batch %s of %s and metadata %v", u.Batch, u.Meta, b2, q, want)
		}
		if u.Topic != "speculate" || u.PartitionKey != q || u.FailedAt != 0 || u.FailureCount != 0 || u.LastError != "" ||
			u.OriginalTopic != "" || u.FailureDetail != nil || u.CreatedAt == 0 || u.PublishedAt == 0 {
			t.Fatalf("wake-up row %+v; want a normal publish's columns", u.Message)
		}
	})

	// rejects publishes one hand-written message on a queue with a live
	// batch and checks that the consumer-side decoder refuses it.
	rejects := func(t *testing.T, metadata string, payload string, wedged bool) {
		t.Helper()
		ctx := context.Background()
		w := newWorld(t)
		const q = "q-old"
		w.seed(t, q, q+"/batch/1", mend.BatchCreated, q+"/1")
		var meta any
		if metadata != "" {
			meta = metadata
		}
		if _, err := w.sq.Queue.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
			"VALUES ('speculate', 'mend/wake/old/1', ?, ?, ?, 1, 1, 0, 0, '', '', NULL)", payload, meta, q); err != nil {
			t.Fatal(err)
		}
		_, err := w.sq.ConsumeSpeculate(ctx, q, true)
		if err == nil || errors.Is(err, sqtest.ErrWedged) != wedged {
			t.Fatalf("strict consumer on metadata %s payload %s = %v; want it refused (wedged: %v)", metadata, payload, err, wedged)
		}
	}
	t.Run("negative control: the old batch_id payload", func(t *testing.T) {
		t.Parallel()
		rejects(t, `{"mend.epoch":"1"}`, `{"batch_id":"q-old/batch/1"}`, false)
	})
	t.Run("negative control: numeric metadata", func(t *testing.T) {
		t.Parallel()
		rejects(t, `{"epoch":1}`, `{"id":"q-old/batch/1","queue":"q-old"}`, true)
	})
	t.Run("negative control: another spelling of the live batch", func(t *testing.T) {
		t.Parallel()
		rejects(t, "", `{"id":"Q-OLD/BATCH/1","queue":"q-old"}`, false)
	})
}

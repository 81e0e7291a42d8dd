package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

// repairWorld is the planner running against the adapter on real-shaped
// tables, with mend's own store in a database of its own.
type repairWorld struct {
	*bundle
	store *storage.DB
	waker *sqtest.FaultyWaker
	p     *planner.Planner
	fence *fence.Fence
}

func setupRepair(t *testing.T) *repairWorld {
	t.Helper()
	b := setup(t)
	mdb := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(context.Background(), mdb.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	f, err := fence.New(store, fence.Config{Holder: "test", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waker := &sqtest.FaultyWaker{Next: b.h}
	p, err := planner.New(planner.Config{Store: store, Batches: b.h, Waker: waker, BackoffFunc: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	return &repairWorld{bundle: b, store: store, waker: waker, p: p, fence: f}
}

func (r *repairWorld) record(t *testing.T, batchID string) mend.Record {
	t.Helper()
	rec, _, err := r.store.RecordCreate(context.Background(), mend.CreateParams{
		Source:   mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: batchID},
		Snapshot: deadLetter,
		Target:   mend.Target{BatchID: batchID, Desired: mend.OutcomeFailed},
		OpID:     mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (r *repairWorld) run(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	le, err := r.fence.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = le.Release(ctx) }()
	if _, err := r.p.Run(ctx, le); err != nil {
		t.Fatal(err)
	}
}

// The bug mend exists for, on the real tables: batch 1 dead-lettered from
// speculate, batch 2 live in a quiet queue, the first wake-up publish lost.
func TestPlannerRepairsTheLostRetrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := setupRepair(t)
	r.seed(t, "q", "q/batch/1", "speculating", "q/1", "q/2")
	r.seed(t, "q", "q/batch/2", "created", "q/3")
	rec := r.record(t, "q/batch/1")
	r.waker.RefuseNext(1)
	r.run(t)

	got, err := r.store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil || got.State != mend.StateDone {
		t.Fatalf("record = %+v, %v; want done", got.State, err)
	}
	if row, _ := r.w.Batch(ctx, "q", "q/batch/1"); row.State != "failed" || row.Version != 2 {
		t.Fatalf("batch 1 = %+v; want failed at version 2", row)
	}
	for _, id := range []string{"q/1", "q/2"} {
		if req := r.request(t, id); req.State != "error" {
			t.Errorf("request %s = %s; want error", id, req.State)
		}
		if l := r.logs(t, id); len(l) != 1 || l[0].Status != "error" || l[0].LastError != deadLetter.LastError {
			t.Errorf("log of %s = %+v; want one error entry with the dead letter's error", id, l)
		}
	}
	wakes, err := r.w.ConsumeSpeculate(ctx, "q", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/2" || wakes[0].Meta["mend.record_id"] != rec.ID.String() {
		t.Fatalf("speculate messages = %+v; want one wake-up naming q/batch/2", wakes)
	}
	calls, errs := r.waker.Calls()
	if len(calls) != 2 || errs[0] == nil || errs[1] != nil || calls[0].MessageID == calls[1].MessageID {
		t.Fatalf("publishes = %+v, %v; want a refused one, then a re-send under a new ID", calls, errs)
	}
}

// A dead letter naming a batch the host stores under another spelling is
// parked with both spellings; nothing on the host changes.
func TestPlannerParksACaseVariantBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := setupRepair(t)
	r.seed(t, "q", "q/batch/1", "speculating", "q/1")
	r.seed(t, "q", "q/batch/2", "created")
	rec := r.record(t, "Q/BATCH/1")
	r.run(t)
	got, err := r.store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil || got.State != mend.StateParked || !containsAll(got.LastError, `"Q/BATCH/1"`, `"q/batch/1"`) {
		t.Fatalf("record = %s %q, %v; want parked naming both spellings", got.State, got.LastError, err)
	}
	if row, _ := r.w.Batch(ctx, "q", "q/batch/1"); row.State != "speculating" || row.Version != 1 {
		t.Fatalf("batch = %+v; want untouched", row)
	}
	if msgs, _ := r.w.Messages(ctx, "speculate", "q"); len(msgs) != 0 {
		t.Fatalf("wake-ups = %+v; want none for a parked record", msgs)
	}
}

package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
)

// TestTransitionErrorNamesTheBatch: every error of BatchTransitionFrom
// names the batch it was about. Before, the batch variable was replaced by
// the (empty) result before the message was built: `transition batch ""`.
func TestTransitionErrorNamesTheBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.seed(t, "q", "q/batch/1", "speculating", "q/1")
	batch, err := b.h.BatchGet(ctx, "q", "q/batch/1")
	if err != nil {
		t.Fatal(err)
	}
	// Someone else moves it first: the compare-and-set conflicts.
	b.exec(t, "UPDATE batch SET version = 2 WHERE queue = 'q' AND id = 'q/batch/1'")
	_, err = b.h.BatchTransitionFrom(ctx, batch, mend.BatchFailed)
	if !errors.Is(err, mend.ErrConflict) || !strings.Contains(err.Error(), `batch "q/batch/1"`) {
		t.Fatalf("BatchTransitionFrom on a moved batch = %v; want ErrConflict naming batch \"q/batch/1\"", err)
	}
}

// TestLongRequestIDRefusedBeforeWriting: a member request of 250
// characters would get the RequestLog message ID "<request>/error", 256
// characters, which the host's message table cannot hold. The transition
// and the fan-out refuse it before their first write, so the batch is not
// failed with a fan-out that can never finish; the planner parks the
// record at once with the length as the reason (see the planner test
// below). Before, the batch and the request were moved and the log publish
// failed on every attempt.
func TestLongRequestIDRefusedBeforeWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := "q/" + strings.Repeat("r", 248)
	b := setup(t)
	b.seed(t, "q", "q/batch/1", "speculating", "q/1", long)
	long2 := "q/" + strings.Repeat("s", 248)
	b.seed(t, "q", "q/batch/2", "failed", long2)
	batch, err := b.h.BatchGet(ctx, "q", "q/batch/1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.h.BatchTransitionFrom(ctx, batch, mend.BatchFailed); !errors.Is(err, mend.ErrInvalid) || !strings.Contains(err.Error(), "256 characters") {
		t.Fatalf("BatchTransitionFrom = %v; want ErrInvalid giving the length", err)
	}
	if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchFailed); !errors.Is(err, mend.ErrInvalid) {
		t.Fatalf("BatchTransition = %v; want ErrInvalid", err)
	}
	if err := b.h.BatchFinish(ctx, "q", "q/batch/2", deadLetter); !errors.Is(err, mend.ErrInvalid) {
		t.Fatalf("BatchFinish = %v; want ErrInvalid", err)
	}
	if row, _ := b.w.Batch(ctx, "q", "q/batch/1"); row.State != "speculating" || row.Version != 1 {
		t.Fatalf("batch 1 = %+v; want untouched", row)
	}
	for _, id := range []string{"q/1", long} {
		if req := b.request(t, id); req.State == "error" {
			t.Errorf("request %s moved to error", id)
		}
	}
}

// The planner parks such a record on its first attempt, with the reason,
// and writes nothing to the host.
func TestPlannerParksALongRequestIDAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := "q/" + strings.Repeat("r", 248)
	r := setupRepair(t)
	r.seed(t, "q", "q/batch/1", "speculating", "q/1", long)
	r.seed(t, "q", "q/batch/2", "created", "q/3")
	rec := r.record(t, "q/batch/1")
	r.run(t)
	got, err := r.store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil || got.State != mend.StateParked || got.Attempts > 0 || !strings.Contains(got.LastError, "at most 255 characters") {
		t.Fatalf("record = %s after %d attempts %q, %v; want parked at once giving the length", got.State, got.Attempts, got.LastError, err)
	}
	if row, _ := r.w.Batch(ctx, "q", "q/batch/1"); row.State != "speculating" || row.Version != 1 {
		t.Fatalf("batch = %+v; want untouched for the operator", row)
	}
	if req := r.request(t, "q/1"); req.State == "error" {
		t.Fatalf("request q/1 moved although the fan-out could not finish")
	}
}

// TestFanOutRequestMovedUnderTheCAS: the host moves a member request
// between the fan-out's read of the members and its compare-and-set (here
// the request is cancelled, at version 2). The compare-and-set then moves
// only the other member; the fan-out must notice that not every named row
// moved, read the moved one again and leave it alone: no terminal
// RequestLog at a version the request never reached. Accepting "some rows
// moved" would publish "error" at version 2 for a cancelled request.
func TestFanOutRequestMovedUnderTheCAS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.seed(t, "q", "q/batch/1", "failed", "q/1", "q/2")
	moved := false
	host.SetAfterMembersRead(b.h, func() {
		if !moved {
			moved = true
			b.exec(t, "UPDATE request SET state = 'cancelled', version = version + 1 WHERE queue = 'q' AND id = 'q/2'")
		}
	})
	if err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter); err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Fatal("the hook never ran")
	}
	if r := b.request(t, "q/1"); r.State != "error" || r.Version != 2 {
		t.Errorf("request q/1 = %s v%d; want error v2", r.State, r.Version)
	}
	if r := b.request(t, "q/2"); r.State != "cancelled" || r.Version != 2 {
		t.Errorf("request q/2 = %s v%d; want left cancelled v2", r.State, r.Version)
	}
	if l := b.logs(t, "q/2"); len(l) != 0 {
		t.Errorf("logs of q/2 = %+v; want none (the request was cancelled, never error)", l)
	}
	if l := b.logs(t, "q/1"); len(l) != 1 || l[0].Status != "error" || l[0].RequestVersion != 2 {
		t.Errorf("logs of q/1 = %+v; want one error entry at version 2", l)
	}
}

// TestBuildLookupOnAClosedPool: a lookup racing a shutdown gets a
// retryable mend.ErrUnavailable, not database/sql's raw "database is
// closed", which mend's classifier would take for permanent.
func TestBuildLookupOnAClosedPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h, err := host.Open(context.Background(), b.db.DSN, "", host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Close()
	_, err = h.BuildBatch(context.Background(), "q", "build-1")
	if !errors.Is(err, mend.ErrUnavailable) || !mend.IsRetryable(err) {
		t.Fatalf("BuildBatch on a closed pool = %v (class %v); want retryable ErrUnavailable", err, mend.Classify(err))
	}
}

// TestPlannerParksSuccessForACancellingBatch: a merge-signal saying the
// merge succeeded, for a batch that is cancelling, is parked for an
// operator; the batch stays cancelling, as the real primary controller
// keeps it ("a racing terminal merge result must not override the
// cancel"). Before, mend moved it to succeeded.
func TestPlannerParksSuccessForACancellingBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := setupRepair(t)
	r.seed(t, "q", "q/batch/1", "cancelling", "q/1")
	rec, _, err := r.store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: "q", Topic: "merge-signal_dlq", Partition: "q", MessageID: "q/batch/1"},
		Snapshot: deadLetter,
		Target:   mend.Target{BatchID: "q/batch/1", Desired: mend.OutcomeSucceeded},
		OpID:     mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	r.run(t)
	got, err := r.store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil || got.State != mend.StateParked || !strings.Contains(got.LastError, "cancelling") {
		t.Fatalf("record = %s %q, %v; want parked naming the cancel", got.State, got.LastError, err)
	}
	if row, _ := r.w.Batch(ctx, "q", "q/batch/1"); row.State != "cancelling" || row.Version != 1 {
		t.Fatalf("batch = %+v; want left cancelling", row)
	}
}

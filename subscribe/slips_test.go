package subscribe_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/subscribe"
)

// outageRecorder records through the real intake except while down (the
// store fails every batch) or, for rows of partition bad, with a
// retryable error of the row alone.
type outageRecorder struct {
	in   subscribe.Recorder
	mu   sync.Mutex
	down bool
	bad  string
}

var errStoreDown = errors.New("mend's store is down")

func (r *outageRecorder) set(down bool, bad string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down, r.bad = down, bad
}

func (r *outageRecorder) RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	r.mu.Lock()
	down, bad := r.down, r.bad
	r.mu.Unlock()
	if down {
		return nil, errStoreDown
	}
	out := make([]dlq.ManyResult, len(ds))
	for i, d := range ds {
		if d.Source.Partition == bad {
			out[i] = dlq.ManyResult{Err: errAppDown}
			continue
		}
		res, err := r.in.RecordMany(ctx, []dlq.Delivery{d})
		if err != nil {
			return nil, err
		}
		out[i] = res[0]
	}
	return out, nil
}

// TestOutageParksNothing: a store outage longer than the park bound
// counts against no row: once the store is back, a row that fails once
// (for a reason of its own) is retried, not parked at once.
func TestOutageParksNothing(t *testing.T) {
	t.Parallel()
	if p := outageProblems(t); len(p) > 0 {
		t.Fatal(p)
	}
}

func outageProblems(t *testing.T) (problems []string) {
	t.Helper()
	b := setup(t)
	rec := &outageRecorder{in: b.intake}
	b.deadLetter(t, "q", "q/batch/1")
	s := b.sub(t, subscribe.Config{Intake: rec, ParkAfter: 3})
	rec.set(true, "")
	for range 5 {
		st := pass(t, s)
		if st.Failed != 1 {
			problems = append(problems, fmt.Sprintf("store down: %d partitions failed, want 1", st.Failed))
		}
		b.clock.Add(2 * time.Minute) // past the backoff
	}
	rec.set(false, "q")
	st := pass(t, s)
	if st.Unrecordable != 0 || len(st.FailingRows) != 1 || st.FailingRows[0].Attempts != 1 {
		problems = append(problems, fmt.Sprintf("after the outage, a row failing once: unrecordable %d, failing %+v; want it retried, 1 attempt", st.Unrecordable, st.FailingRows))
	}
	return problems
}

// TestOutageParksNothingCatchesSlip: counting the outage against the
// partition's first row fails the test above.
func TestOutageParksNothingCatchesSlip(t *testing.T) {
	defer subscribe.Plant("outageCountsRow")()
	if len(outageProblems(t)) == 0 {
		t.Fatal("the planted slip passed the test meant to catch it")
	}
}

// failingParker fails every stand-in with a store error that may pass.
type failingParker struct{}

func (failingParker) RecordCreate(context.Context, mend.CreateParams) (mend.Record, bool, error) {
	return mend.Record{}, false, errStoreDown
}

// TestParkKeepsStoreError: a row the intake refuses for good, whose
// stand-in the store fails to record, is not passed: its partition stops
// before it (failing), its watermark stays below it, and no stand-in
// exists; once the store records the stand-in, it is passed.
func TestParkKeepsStoreError(t *testing.T) {
	t.Parallel()
	if p := parkProblems(t); len(p) > 0 {
		t.Fatal(p)
	}
}

func parkProblems(t *testing.T) (problems []string) {
	t.Helper()
	b := setup(t)
	// An empty message ID: the intake refuses it (mend.ErrInvalid).
	off := b.deadLetterOn(t, "speculate", "q", "", `{"id":"","queue":"q"}`)
	s := b.sub(t, subscribe.Config{Parker: failingParker{}})
	st := pass(t, s)
	if st.Unrecordable != 0 || st.Failed != 1 {
		problems = append(problems, fmt.Sprintf("the stand-in failed: unrecordable %d, failed %d; want the row not passed", st.Unrecordable, st.Failed))
	}
	settleAndPassBounded(t, b, s)
	if acked := b.acked(t, "mend", "speculate_dlq", "q"); acked >= off {
		problems = append(problems, fmt.Sprintf("the watermark moved to %d, past offset %d whose stand-in was never recorded", acked, off))
	}
	if slices.Contains(b.ids(t), fmt.Sprintf("mend-subscribe/unrecordable/offset/%d", off)) {
		problems = append(problems, "a stand-in exists though the store failed it")
	}
	return problems
}

// settleAndPassBounded moves the clock past the settle window twice, a
// pass each time.
func settleAndPassBounded(t *testing.T, b *bundle, s *subscribe.Subscriber) {
	t.Helper()
	for range 2 {
		b.clock.Add(settle + time.Minute)
		if _, err := s.Pass(context.Background()); err != nil {
			t.Fatalf("pass: %v", err)
		}
	}
}

// TestParkKeepsStoreErrorCatchesSlip: park swallowing the Parker's store
// error fails the test above.
func TestParkKeepsStoreErrorCatchesSlip(t *testing.T) {
	defer subscribe.Plant("parkSwallows")()
	if len(parkProblems(t)) == 0 {
		t.Fatal("the planted slip passed the test meant to catch it")
	}
}

package planner_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

// manyHost is the fake host with the batched methods, each standing for
// its one-batch method item by item, and counting its calls.
type manyHost struct {
	*fakeHost
	gets, moves, finishes atomic.Int64
}

var _ planner.BatchesMany = (*manyHost)(nil)

func (h *manyHost) BatchGetMany(ctx context.Context, queue string, ids []string) ([]mend.Batch, []error) {
	h.gets.Add(1)
	out, errs := make([]mend.Batch, len(ids)), make([]error, len(ids))
	for i, id := range ids {
		out[i], errs[i] = h.BatchGet(ctx, queue, id)
	}
	return out, errs
}

func (h *manyHost) BatchTransitionMany(ctx context.Context, bs []mend.Batch, to []mend.BatchState) ([]mend.Batch, []error) {
	h.moves.Add(1)
	out, errs := make([]mend.Batch, len(bs)), make([]error, len(bs))
	for i, b := range bs {
		out[i], errs[i] = h.BatchTransition(ctx, b.Queue, b.ID, b.Version, to[i])
	}
	return out, errs
}

func (h *manyHost) BatchFinishMany(ctx context.Context, fs []mend.FinishParams) []error {
	h.finishes.Add(1)
	errs := make([]error, len(fs))
	for i, f := range fs {
		errs[i] = h.BatchFinish(ctx, f.Batch.Queue, f.Batch.ID, f.Cause)
	}
	return errs
}

// TestRunSettlesTogether: with BatchesMany, a run's host calls are one per
// kind for all its records, and each record's outcome is its own: a read
// error is that record's failed attempt, a spelling parks that record, a
// missing batch settles as not found, and the rest are failed, finished
// and woken by one wake-up. A Batches without BatchesMany (the fallback,
// each record alone) ends in the very same state.
func TestRunSettlesTogether(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{true, false} {
		t.Run(map[bool]string{true: "batched", false: "per record"}[batched], func(t *testing.T) {
			t.Parallel()
			runSettlesTogether(t, batched)
		})
	}
}

func runSettlesTogether(t *testing.T, batched bool) {
	ctx := context.Background()
	b := setup(t)
	h := &manyHost{fakeHost: newFakeHost(
		mend.Batch{ID: "b1", State: mend.BatchSpeculating, Version: 1, Requests: []string{"r1"}},
		mend.Batch{ID: "b2", State: mend.BatchCreated, Version: 3},
		mend.Batch{ID: "b3", State: mend.BatchFailed, Version: 2},
		mend.Batch{ID: "live", State: mend.BatchCreated, Version: 1},
	)}
	h.BatchGetFunc = func(queue, id string) (mend.Batch, error) {
		switch id {
		case "bad":
			return mend.Batch{}, errors.New("host unreachable")
		case "spelt":
			return mend.Batch{}, &mend.SpellingError{Field: "batch_id", Asked: "spelt", Stored: "Spelt"}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if b, ok := h.batches[id]; ok {
			return b, nil
		}
		return mend.Batch{}, mend.ErrNotFound
	}
	for _, batch := range []string{"b1", "b2", "b3", "bad", "spelt", "gone"} {
		b.record(t, "q", batch, batch)
	}
	spy := &appendSpy{DB: b.store}
	p := newPlanner(t, b, h.fakeHost, func(c *planner.Config) {
		c.Store = spy
		if batched {
			c.Batches = h
		}
		c.BackoffFunc = func(int) time.Duration { return time.Hour } // one pass: bad is not due again
	})
	st, err := p.Run(ctx, b.lease(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Settled != 4 || st.Woken != 4 || st.Parked != 1 || st.Failed != 1 {
		t.Fatalf("stats = %+v; want 4 settled and woken (b1, b2, b3, gone), spelt parked, bad failed", st)
	}
	want := int64(0)
	if batched {
		want = 1
	}
	if h.gets.Load() != want || h.moves.Load() != want || h.finishes.Load() != want {
		t.Fatalf("batched calls: %d reads, %d transitions, %d finishes; want %d of each", h.gets.Load(), h.moves.Load(), h.finishes.Load(), want)
	}
	for id, want := range map[string]mend.BatchState{"b1": mend.BatchFailed, "b2": mend.BatchFailed, "b3": mend.BatchFailed, "live": mend.BatchCreated} {
		if got := h.batches[id].State; got != want {
			t.Fatalf("batch %s = %s; want %s", id, got, want)
		}
	}
	if len(h.woken) != 1 {
		t.Fatalf("wake-ups = %+v; want one", h.woken)
	}
	// The events: b1, b2 and b3 settled in one fenced packet when batched
	// (one each otherwise); gone's settled event, spelt's park, bad's
	// failed attempt and the wake intent one each; the four woken events
	// in one packet either way.
	appends, manys := spy.appends.Load(), spy.manys.Load()
	if batched && (appends != 4 || manys != 2) || !batched && (appends != 7 || manys != 1) {
		t.Fatalf("event writes: %d RecordAppend, %d RecordAppendMany; want %v", appends, manys,
			map[bool]string{true: "4 and 2", false: "7 and 1"}[batched])
	}
}

// appendSpy is the real store, counting the planner's event writes.
type appendSpy struct {
	*storage.DB
	appends, manys atomic.Int64
}

func (s *appendSpy) RecordAppend(ctx context.Context, p mend.AppendParams) (int64, error) {
	s.appends.Add(1)
	return s.DB.RecordAppend(ctx, p)
}

func (s *appendSpy) RecordAppendMany(ctx context.Context, ps []mend.AppendParams) ([]error, error) {
	s.manys.Add(1)
	return s.DB.RecordAppendMany(ctx, ps)
}

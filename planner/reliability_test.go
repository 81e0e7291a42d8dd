package planner_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

// TestStaleTermIsFenced: a planner whose term was replaced, and which
// does not know it, reaches the host before its first fenced write. Its
// host write must be exactly what a current planner would do with the
// batch at that version, so the outcome is the same as without it: the
// invariant planner/doc.go states.
func TestStaleTermIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run := func(t *testing.T, withZombie bool) (mend.Batch, mend.Record, *fakeHost) {
		b := setup(t)
		h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchSpeculating, Version: 1}, mend.Batch{ID: "2", State: mend.BatchCreated, Version: 1})
		rec := b.record(t, "q", "m", "1")
		if withZombie {
			old := b.lease(t, "q")
			if err := old.Release(ctx); err != nil {
				t.Fatal(err)
			}
			zombie := fakeLease{term: old.Term(), done: make(chan struct{})}
			fenced := 0
			p := newPlanner(t, b, h, func(c *planner.Config) { c.Hooks.OnFenced = func(string) { fenced++ } })
			if _, err := p.Run(ctx, zombie); !errors.Is(err, mend.ErrFenced) || fenced != 1 {
				t.Fatalf("Run under a stale term = %v (OnFenced %d); want ErrFenced once", err, fenced)
			}
			got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
			if got.Version != 1 {
				t.Fatalf("record moved to version %d under a stale term", got.Version)
			}
			// The host side: the zombie's only host write is the CAS a
			// current planner makes from the version it read.
			if bt, _ := h.batches2("1"); bt.State != mend.BatchFailed || bt.Version != 2 || len(h.woken) != 0 {
				t.Fatalf("after the stale run: batch %+v, %d wake-ups; want failed at version 2 by one CAS, no wake-up", bt, len(h.woken))
			}
		}
		if _, err := newPlanner(t, b, h, nil).Run(ctx, b.lease(t, "q")); err != nil {
			t.Fatal(err)
		}
		bt, _ := h.batches2("1")
		got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
		return bt, got, h
	}
	wantBatch, wantRec, wantHost := run(t, false)
	gotBatch, gotRec, gotHost := run(t, true)
	if gotBatch.State != wantBatch.State || gotBatch.Version != wantBatch.Version {
		t.Fatalf("batch with a stale planner first = %+v; without = %+v", gotBatch, wantBatch)
	}
	if gotRec.State != wantRec.State || len(gotHost.woken) != len(wantHost.woken) || gotHost.woken[0].BatchID != wantHost.woken[0].BatchID {
		t.Fatalf("record %s, wake-ups %+v with a stale planner first; want %s, %+v", gotRec.State, gotHost.woken, wantRec.State, wantHost.woken)
	}
}

// TestDecisionDependsOnlyOnOutcomeStateAndVersion: the host action Decide
// picks (which transition, or none) depends on the desired outcome and the
// batch's state alone, never on how long the record waited or who asks;
// and every transition is a CAS from the version read. So a stale planner's
// host write repeats a current planner's, or is refused by the CAS.
func TestDecisionDependsOnlyOnOutcomeStateAndVersion(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	for _, s := range allBatchStates {
		for _, d := range []mend.Outcome{mend.OutcomeFailed, mend.OutcomeSucceeded, mend.OutcomeNone} {
			var first *planner.Decision
			for _, waited := range []time.Duration{0, grace - 1, grace, 2 * grace} {
				got := planner.Decide(planner.Input{Desired: d, Batch: &mend.Batch{ID: "b", State: s, Version: 7}, Waited: waited, Grace: grace})
				hostWrite := got.Action == planner.ActTransition || got.Action == planner.ActFinish
				if first == nil {
					first = &got
					continue
				}
				firstWrites := first.Action == planner.ActTransition || first.Action == planner.ActFinish
				if hostWrite != firstWrites || (hostWrite && (got.Action != first.Action || got.To != first.To || got.Outcome != first.Outcome)) {
					t.Errorf("Decide(%s, %q) host action changes with the wait: %+v vs %+v", s, d, first, got)
				}
			}
		}
	}
}

// TestDecideExhaustive checks the safety invariants on every input class:
// each batch state (and missing) × each desired outcome × a wait below, at
// and above the grace period. The fuzz test's seeds never reached
// (succeeded, desired failed); this reaches everything.
func TestDecideExhaustive(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	states := append([]mend.BatchState{""}, allBatchStates...)
	states = append(states, "unknown")
	for _, s := range states {
		for _, d := range []mend.Outcome{mend.OutcomeFailed, mend.OutcomeSucceeded, mend.OutcomeNone, "other"} {
			for _, waited := range []time.Duration{0, grace - 1, grace, 2 * grace} {
				in := planner.Input{Desired: d, Waited: waited, Grace: grace}
				if s != "" {
					in.Batch = &mend.Batch{ID: "b", State: s, Version: 3}
				}
				got := planner.Decide(in)
				where := func() string { return string(s) + "/" + string(d) + "/" + waited.String() }
				if got.Reason == "" {
					t.Errorf("%s: no reason", where())
				}
				switch got.Action {
				case planner.ActTransition:
					switch {
					case in.Batch == nil:
						t.Errorf("%s: transition of a missing batch", where())
					case in.Batch.State.Terminal():
						t.Errorf("%s: overwrote a settled batch: %+v", where(), got)
					case (s == mend.BatchMerging || s == mend.BatchCancelling) && got.To == mend.BatchFailed:
						t.Errorf("%s: failed a batch whose merge may be in flight", where())
					case d == mend.OutcomeSucceeded && got.To != mend.BatchSucceeded:
						t.Errorf("%s: told succeeded, moved to %s", where(), got.To)
					case !got.To.Terminal() || got.Outcome != got.To:
						t.Errorf("%s: transition to %q with outcome %q", where(), got.To, got.Outcome)
					}
				case planner.ActFinish:
					if in.Batch == nil || !in.Batch.State.Terminal() || got.Outcome != in.Batch.State {
						t.Errorf("%s: finish must use the batch's real terminal outcome: %+v", where(), got)
					}
					asked := mend.BatchState(d)
					if got.Divergent != (got.Outcome != asked) {
						t.Errorf("%s: divergent = %v for outcome %s asked %s", where(), got.Divergent, got.Outcome, asked)
					}
				case planner.ActWait:
					if waited >= grace {
						t.Errorf("%s: waits past the grace period", where())
					}
				case planner.ActSettle:
					if in.Batch != nil {
						t.Errorf("%s: settled without touching an existing batch", where())
					}
				case planner.ActPark:
				default:
					t.Errorf("%s: unknown action %v", where(), got.Action)
				}
			}
		}
	}
}

// TestLeaseCheckedBeforePublish: a lease lost after the outcome is settled
// and before the wake-up goes out stops the run without publishing.
func TestLeaseCheckedBeforePublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchSpeculating, Version: 1}, mend.Batch{ID: "2", State: mend.BatchCreated, Version: 1})
	b.record(t, "q", "m", "1")
	le := b.lease(t, "q")
	lease := fakeLease{term: le.Term(), done: make(chan struct{})}
	published := 0
	h.WakeFunc = func(mend.WakeUp) error { published++; return nil }
	p := newPlanner(t, b, h, func(c *planner.Config) {
		c.Hooks.BeforeWake = func(context.Context, mend.Record) { close(lease.done) }
	})
	if _, err := p.Run(ctx, lease); !errors.Is(err, mend.ErrLeaseLost) {
		t.Fatalf("Run with the lease lost before the publish = %v; want ErrLeaseLost", err)
	}
	if published != 0 {
		t.Fatalf("%d wake-ups published after the lease was lost; want none", published)
	}
}

// TestWaitingRecordWithFailingReadsIsBoundedByGrace: a record waiting on a
// merge whose batch read keeps failing is parked once the grace period is
// over, like any other wait, instead of retrying forever.
func TestWaitingRecordWithFailingReadsIsBoundedByGrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchMerging, Version: 1})
	rec := b.record(t, "q", "m", "1")
	le := b.lease(t, "q")
	const grace = 50 * time.Millisecond
	mk := func() *planner.Planner {
		return newPlanner(t, b, h, func(c *planner.Config) {
			c.Grace, c.MaxAttempts, c.MaxHostErrors = grace, 1000, 1000
			c.BackoffFunc = func(int) time.Duration { return time.Hour } // only the grace period brings it back
		})
	}
	// The first read finds the batch merging (the record waits); every
	// later one fails. Switching by count, not after the first Run
	// returns: a loaded machine can take the whole 50 ms grace inside one
	// Run, which then looks at the record again with the batch still
	// readable, and parks it for the merge instead.
	var reads atomic.Int32
	h.BatchGetFunc = func(string, string) (mend.Batch, error) {
		if reads.Add(1) == 1 {
			return mend.Batch{ID: "1", State: mend.BatchMerging, Version: 1}, nil
		}
		return mend.Batch{}, errors.New("host unreachable")
	}
	deadline := time.Now().Add(hang)
	for {
		if _, err := mk().Run(ctx, le); err != nil {
			t.Fatal(err)
		}
		got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
		if got.State == mend.StateParked {
			if !strings.Contains(got.LastError, "host unreachable") || reads.Load() < 2 {
				t.Fatalf("parked with %q after %d reads; want the failing read named", got.LastError, reads.Load())
			}
			return
		}
		if got.State != mend.StateWaiting || time.Now().After(deadline) {
			t.Fatalf("record %s after %d reads; want waiting, then parked after the %s grace", got.State, reads.Load(), grace)
		}
		waitFor(t, got.NextAttemptAt, b.store)
	}
}

// hang bounds waits that only a hang should reach.
const hang = 2 * time.Minute

// waitFor waits until the database clock passes at (a retry is due).
func waitFor(t *testing.T, at *time.Time, store *storage.DB) {
	t.Helper()
	if at == nil {
		return
	}
	deadline := time.Now().Add(hang)
	for {
		var due bool
		if err := store.SQL().QueryRow("SELECT NOW(6) >= ?", *at).Scan(&due); err != nil {
			t.Fatal(err)
		}
		if due {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry at %v never became due", at)
		}
		tm := time.NewTimer(5 * time.Millisecond)
		<-tm.C
	}
}

// TestRunStopsAfterConsecutiveHostErrors: with the host failing every call,
// a run over many due records stops after MaxHostErrors, leaving the rest
// for the next pass.
func TestRunStopsAfterConsecutiveHostErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	calls := 0
	h := newFakeHost()
	h.BatchGetFunc = func(string, string) (mend.Batch, error) { calls++; return mend.Batch{}, errors.New("host hung up") }
	for _, m := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		b.record(t, "q", m, "1")
	}
	p := newPlanner(t, b, h, func(c *planner.Config) {
		c.MaxHostErrors = 3
		c.MaxAttempts = 100
		c.BackoffFunc = func(int) time.Duration { return time.Hour }
	})
	st, err := p.Run(ctx, b.lease(t, "q"))
	if !errors.Is(err, planner.ErrHostFailing) || !errors.Is(err, mend.ErrUnavailable) || calls != 3 || st.Failed != 3 {
		t.Fatalf("Run = %+v, %v after %d host calls; want ErrHostFailing after 3", st, err, calls)
	}
}

// TestRetryDefaultsBoundTheWait: with --interval 500ms, four failed
// publishes in a row used to leave a queue about 14 s without a wake-up (1 s
// base, doubling, 5 min cap). The defaults for a reconciler's interval cap
// every delay at a few intervals.
func TestRetryDefaultsBoundTheWait(t *testing.T) {
	t.Parallel()
	const interval = 500 * time.Millisecond
	base, limit := planner.RetryDefaults(interval)
	if base != interval || limit != planner.RetryMaxIntervals*interval {
		t.Fatalf("RetryDefaults(%s) = %s, %s; want %s, %s", interval, base, limit, interval, planner.RetryMaxIntervals*interval)
	}
	for n := range 20 {
		if d := planner.Backoff(n, base, limit); d > limit {
			t.Fatalf("Backoff(%d) = %s; want at most %s", n, d, limit)
		}
	}
	if b, l := planner.RetryDefaults(time.Minute); b != planner.BackoffBaseDefault || l != 4*time.Minute {
		t.Fatalf("RetryDefaults(1m) = %s, %s; want the 1s base and a 4m cap", b, l)
	}
}

// TestDefaultParkTimeline pins the sum docs/operations.md ("When repairs
// keep failing") and MendRepairsFailing's threshold rest on: with mend
// run's defaults (--interval 10s, so RetryDefaults gives a 1 s base and a
// 40 s cap; --max-attempts 10) the nine failures before the park back off
// 1, 2, 4, 8, 16, 32, 40, 40, 40 s, each jittered to between half and all
// of that, so the park comes 91.5 s after the first failure at the
// earliest. If this changes, redo the sum and the rule's threshold (over
// 30 s: it must stay above it for a scrape interval before the park).
func TestDefaultParkTimeline(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second // reconcile.IntervalDefault
	base, limit := planner.RetryDefaults(interval)
	ceilings := []time.Duration{1, 2, 4, 8, 16, 32, 40, 40, 40}
	if len(ceilings) != planner.MaxAttemptsDefault-1 {
		t.Fatalf("MaxAttemptsDefault = %d; the timeline has %d backoffs before the park", planner.MaxAttemptsDefault, len(ceilings))
	}
	var earliest time.Duration
	for n, c := range ceilings {
		c *= time.Second
		lo, hi := c, time.Duration(0)
		for range 200 {
			d := planner.Backoff(n, base, limit)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < c/2 || hi >= c {
			t.Fatalf("Backoff(%d) ranged over [%s, %s]; the timeline says [%s, %s)", n, lo, hi, c/2, c)
		}
		earliest += c / 2
	}
	if want := 91500 * time.Millisecond; earliest != want {
		t.Fatalf("earliest park %s after the first failure; docs/operations.md says %s", earliest, want)
	}
}

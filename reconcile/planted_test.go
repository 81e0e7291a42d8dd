package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// countRunner is a planner stand-in that counts its runs and ends at once.
type countRunner struct{ runs atomic.Int64 }

func (c *countRunner) Run(context.Context, planner.Lease) (planner.Stats, error) {
	c.runs.Add(1)
	return planner.Stats{Settled: 1}, nil
}

// prober answers every due probe with its answer, or fails it.
type prober struct {
	*storage.DB
	due bool
	err error
}

func (p prober) QueueHasDue(context.Context, string) (bool, error) { return p.due, p.err }

// TestFailedDueProbeIsNoAnswer: a due probe that fails says nothing about
// the queue, so the pass runs it (the run finds out itself); a probe that
// answers "nothing due" skips it (the control that shows the probe is
// asked). Reading a failed probe as "nothing due" skipped the queue for
// the pass, unnoticed.
func TestFailedDueProbeIsNoAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		p            func(*storage.DB) prober
		ran, drained int
	}{
		{"failed probe", func(s *storage.DB) prober { return prober{DB: s, err: errors.New("probe: connection reset")} }, 3, 0},
		{"nothing due (control)", func(s *storage.DB) prober { return prober{DB: s} }, 0, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for i := range 3 {
				b.record(t, fmt.Sprintf("q%d", i), "m")
			}
			run := &countRunner{}
			r, err := reconcile.New(reconcile.Config{Store: c.p(b.store), Fence: b.fence, Planner: run,
				Concurrency: 1, ProbeAfter: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
			ps, err := r.RunOnce(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if ps.Ran != c.ran || ps.Drained != c.drained || int(run.runs.Load()) != c.ran {
				t.Fatalf("pass %+v, %d runs; want %d run and %d skipped as drained", ps, run.runs.Load(), c.ran, c.drained)
			}
		})
	}
}

// TestReplicaWithoutASlotCountsItself: with every replica slot held by
// other replicas, a replica that finds none free still works, so it counts
// itself among the working replicas: its share of ClusterConcurrency is
// computed over ReplicaSlots+1 replicas. Leaving itself out made its share
// (and the pass's split) larger than the budget allows, unnoticed.
func TestReplicaWithoutASlotCountsItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i := range 4 {
		b.record(t, fmt.Sprintf("q%d", i), "m")
	}
	other := otherFence(t, b)
	for j := range reconcile.ReplicaSlots {
		le, err := other.TryAcquire(ctx, reconcile.ReplicaSlotName(j))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = le.Release(context.Background()) })
	}
	const cluster = 2 * (reconcile.ReplicaSlots + 1) // a share of 2 over 17 replicas; 3 over 16
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: &countRunner{},
		Concurrency: 8, ClusterConcurrency: cluster})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Replicas != reconcile.ReplicaSlots+1 || ps.Concurrency != 2 || ps.Ran != 4 {
		t.Fatalf("pass %+v; want 4 run at 2 at once among %d working replicas", ps, reconcile.ReplicaSlots+1)
	}
}

package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
)

// funcRunner is a hand-written fake planner whose Run is RunFunc.
type funcRunner struct {
	RunFunc func(ctx context.Context, lease planner.Lease) (planner.Stats, error)
}

func (f *funcRunner) Run(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
	return f.RunFunc(ctx, lease)
}

// TestFailingQueueDoesNotCancelThePass: one queue's run fails while the
// others are running; they must finish normally.
func TestFailingQueueDoesNotCancelThePass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	queues := []string{"bad", "g1", "g2", "g3", "g4"}
	for _, q := range queues {
		b.record(t, q, "m")
	}
	badDone := make(chan struct{})
	var cancelled atomic.Int32
	runner := &funcRunner{RunFunc: func(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
		if lease.Term().Queue == "bad" {
			defer close(badDone)
			return planner.Stats{}, fmt.Errorf("%w: host down", mend.ErrUnavailable)
		}
		select { // the good runs outlive the bad one
		case <-badDone:
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		if ctx.Err() != nil {
			cancelled.Add(1)
			return planner.Stats{}, ctx.Err()
		}
		return planner.Stats{Settled: 1}, nil
	}}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: len(queues)})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(ctx)
	if err != nil || ps.Ran != 5 || ps.Failed != 1 || ps.Records.Settled != 4 || cancelled.Load() != 0 {
		t.Fatalf("pass = %+v, %v, %d runs cancelled; want 5 ran, only bad failed", ps, err, cancelled.Load())
	}
}

// TestLostLeaseCancelsTheRun: when the lease is lost mid-run the planner's
// context is cancelled, so host calls in flight stop.
func TestLostLeaseCancelsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.record(t, "q", "m")
	// A minute: the trust window cannot run out before the refused renew
	// ends the lease, however slow the machine.
	f, err := fence.New(b.store, fence.Config{Holder: "r", TTL: time.Minute, RenewEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var sawCancel atomic.Bool
	runner := &funcRunner{RunFunc: func(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
		// An operator ends the term; the next renew is refused.
		if err := b.store.LeaseRelease(ctx, lease.Term()); err != nil {
			return planner.Stats{}, err
		}
		select {
		case <-ctx.Done():
			sawCancel.Store(true)
			return planner.Stats{}, ctx.Err()
		case <-time.After(hang):
			return planner.Stats{}, fmt.Errorf("run context not cancelled %s after the lease was lost", hang)
		}
	}}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: f, Planner: runner})
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := r.RunOnce(ctx); err != nil || !sawCancel.Load() || ps.Failed != 1 {
		t.Fatalf("pass = %+v, %v, cancelled %v; want the run cancelled by the lost lease", ps, err, sawCancel.Load())
	}
}

// TestQueueRunHasADeadline: a run that would hang is cut off by
// QueueTimeout and the pass ends.
func TestQueueRunHasADeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.record(t, "q", "m")
	runner := &funcRunner{RunFunc: func(ctx context.Context, _ planner.Lease) (planner.Stats, error) {
		select {
		case <-ctx.Done():
			return planner.Stats{}, ctx.Err()
		case <-time.After(time.Minute):
			return planner.Stats{}, errors.New("no deadline")
		}
	}}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, QueueTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(context.Background())
	if err != nil || ps.Failed != 1 {
		t.Fatalf("pass = %+v, %v; want the run cut off and counted failed", ps, err)
	}
}

// hang bounds waits that only a hang should reach.
const hang = 2 * time.Minute

// TestFairReplicas: two replicas passing at the same moment over 40 due
// queues. Each queue's work goes to whichever takes it first; each replica
// must get at least a third. The two replicas go in step: a replica's k-th
// run ends only once the other has begun its k-th run (or ended its pass),
// so the count measures the order each replica takes queues in, not the
// scheduler. With runs that cost nothing a replica whose goroutine the
// machine scheduled a few tens of milliseconds late found most queues taken
// (12 of 40 in a loaded CI run); a 25 ms run made that rarer, not
// impossible.
func TestFairReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40
	for i := range n {
		b.record(t, fmt.Sprintf("q%02d", i), "m")
	}
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	repaired := map[string]bool{}
	var started [2]int   // runs each replica has begun
	var finished [2]bool // each replica's pass has ended
	count := make([]atomic.Int32, 2)
	var rs []*reconcile.Reconciler
	for i := range 2 {
		f, err := fence.New(b.store, fence.Config{Holder: fmt.Sprintf("r%d", i), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		runner := &funcRunner{RunFunc: func(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
			mu.Lock()
			defer mu.Unlock()
			if !repaired[lease.Term().Queue] {
				count[i].Add(1)
			}
			repaired[lease.Term().Queue] = true
			started[i]++
			cond.Broadcast()
			for started[1-i] < started[i] && !finished[1-i] {
				cond.Wait() // the other replica's next run, or its pass ending, wakes us
			}
			return planner.Stats{}, nil
		}}
		r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: f, Planner: runner, Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			defer func() {
				mu.Lock()
				finished[i] = true
				cond.Broadcast()
				mu.Unlock()
			}()
			if _, err := r.RunOnce(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(hang):
		t.Fatalf("the passes did not end within %s", hang)
	}
	a, c := count[0].Load(), count[1].Load()
	if a+c != n || a < n/3 || c < n/3 {
		t.Fatalf("replicas repaired %d and %d of %d queues; want each at least a third", a, c, n)
	}
}

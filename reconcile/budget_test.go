package reconcile_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

var _ reconcile.LeaseCounter = (*storage.DB)(nil)

// gateRunner is a planner stand-in whose runs each say they started and
// then wait for the gate to open.
type gateRunner struct {
	started chan struct{}
	gate    chan struct{}
}

func newGateRunner() *gateRunner {
	return &gateRunner{started: make(chan struct{}, 64), gate: make(chan struct{})}
}

func (g *gateRunner) Run(ctx context.Context, _ planner.Lease) (planner.Stats, error) {
	g.started <- struct{}{}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return planner.Stats{}, ctx.Err()
	}
	return planner.Stats{Settled: 1}, nil
}

// TestReplicasShareTheClusterBudget: with another replica working (its
// slot lease live), a pass over six queues with Concurrency 4 and
// ClusterConcurrency 4 runs two at a time, its half of the budget; alone
// it runs four. The negative control turns the cluster bound off: the pass
// runs four beside the other replica, the load doubling with the replicas.
// The pass gives its slot back when it ends.
func TestReplicasShareTheClusterBudget(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		other         bool // another replica holds a slot
		cluster       int
		want, workers int
	}{
		{name: "beside another replica", other: true, cluster: 4, want: 2, workers: 2},
		{name: "alone", cluster: 4, want: 4, workers: 1},
		{name: "budget rounds up", other: true, cluster: 5, want: 3, workers: 2},
		{name: "no cluster bound (negative control)", other: true, cluster: -1, want: 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			for i := range 6 {
				b.record(t, fmt.Sprintf("q%d", i), "m")
			}
			if c.other {
				otherReplica(t, b)
			}
			g := newGateRunner()
			saturated := make(chan [2]int, 64)
			r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: g,
				Concurrency: 4, ClusterConcurrency: c.cluster,
				Hooks: reconcile.Hooks{OnSaturated: func(inflight, limit int) { saturated <- [2]int{inflight, limit} }}})
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				ps  reconcile.PassStats
				err error
			}
			done := make(chan result, 1)
			go func() {
				ps, err := r.RunOnce(ctx)
				done <- result{ps, err}
			}()
			// The pass waits with every run it may have in flight still
			// open: none can end before the gate opens.
			if got := <-saturated; got != [2]int{c.want, c.want} {
				t.Fatalf("the pass waited with %d runs in flight (limit %d); want %d", got[0], got[1], c.want)
			}
			close(g.gate)
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.ps.Ran != 6 || res.ps.Concurrency != c.want || res.ps.Replicas != c.workers {
				t.Fatalf("pass %+v; want 6 run at %d at once among %d working replicas", res.ps, c.want, c.workers)
			}
			if n := len(g.started); n != 6 {
				t.Fatalf("%d runs started; want 6", n)
			}
			live, err := b.store.LeasesLive(ctx, slotNames())
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[c.other]; len(live) != want {
				t.Fatalf("replica slots live after the pass: %v; want %d (the pass gives its own back)", live, want)
			}
		})
	}
}

// TestOneQueueTakesNoSlot: a pass with a single queue to run has nothing
// to share and sends nothing for the budget.
func TestOneQueueTakesNoSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.record(t, "q", "m")
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: &fakeRunner{}})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Ran != 1 || ps.Replicas != 0 || ps.Concurrency != reconcile.ConcurrencyDefault {
		t.Fatalf("pass %+v; want one run, no replicas counted, the default concurrency", ps)
	}
	sts, err := b.store.LeaseGetMany(ctx, slotNames())
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 0 {
		t.Fatalf("replica slots %+v; want none ever taken", sts)
	}
}

// TestLoopGivesItsSlotBack: the loop keeps its slot from one pass with
// work to the next and gives it back when it stops.
func TestLoopGivesItsSlotBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i := range 3 {
		b.record(t, fmt.Sprintf("q%d", i), "m")
	}
	g := newGateRunner()
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: g, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-g.started // a pass with three queues is running: it holds a slot
	live, err := b.store.LeasesLive(ctx, slotNames())
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 {
		t.Fatalf("replica slots live during the pass: %v; want 1", live)
	}
	r.Stop()
	if live, err = b.store.LeasesLive(ctx, slotNames()); err != nil || len(live) != 0 {
		t.Fatalf("replica slots live after Stop: %v (%v); want none", live, err)
	}
}

// orderRunner records the order the queues were run in.
type orderRunner struct {
	mu    sync.Mutex
	order []string
}

func (o *orderRunner) Run(_ context.Context, lease planner.Lease) (planner.Stats, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.order = append(o.order, lease.Term().Queue)
	return planner.Stats{Settled: 1}, nil
}

// TestPassRunsItsOwnQueuesFirst: with two replicas working, a pass runs
// first the queues whose name hashes to its place among the live slots,
// then the others', so the replicas start on different queues (a random
// order alone puts its own 8 of 16 first once in 12,870 passes).
func TestPassRunsItsOwnQueuesFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i := range 16 {
		b.record(t, fmt.Sprintf("q%02d", i), "m")
	}
	otherReplica(t, b)
	o := &orderRunner{}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: o, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Replicas != 2 || len(o.order) != 16 {
		t.Fatalf("pass %+v ran %v; want all 16 among 2 working replicas", ps, o.order)
	}
	if rank := rankBesideOther(); !ownFirst(o.order, rank) {
		t.Fatalf("order %v (rank %d of 2): some of its own queues came after another replica's", o.order, rank)
	}
}

// TestHelperRunsAreFollowUps: beside another working replica, a pass runs
// its own part's queues with plain runs and reaches the other's part only
// after them, when their owner has run them first: those are follow-up
// runs. Alone, every first run is plain.
func TestHelperRunsAreFollowUps(t *testing.T) {
	t.Parallel()
	for _, other := range []bool{true, false} {
		t.Run(fmt.Sprintf("other replica %v", other), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			for i := range 8 {
				b.record(t, fmt.Sprintf("q%02d", i), "m")
			}
			if other {
				otherReplica(t, b)
			}
			runner := &followRunner{drainRunner: drainRunner{store: b.store, limit: 2}, followLimit: 4}
			r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			rank := rankBesideOther()
			if len(runner.kinds) != 8 {
				t.Fatalf("runs %v; want one per queue", runner.kinds)
			}
			for _, k := range runner.kinds {
				q, kind, _ := strings.Cut(k, ":")
				want := "run"
				if other && int(fnv32(q)%2) != rank {
					want = "follow"
				}
				if kind != want {
					t.Fatalf("runs %v (rank %d of 2): %s was a %s; want a %s", runner.kinds, rank, q, kind, want)
				}
			}
			if follows := strings.Count(strings.Join(runner.kinds, " "), ":follow"); other && (follows == 0 || follows == 8) {
				t.Fatalf("runs %v: the queues fell in one part; the test needs both", runner.kinds)
			}
		})
	}
}

// otherReplicaSlot is the slot otherReplica holds.
const otherReplicaSlot = 7

// otherReplica makes another replica working: a holder "other" takes
// replica slot 07 until the test ends.
func otherReplica(t *testing.T, b *bundle) {
	t.Helper()
	le, err := otherFence(t, b).TryAcquire(context.Background(), reconcile.ReplicaSlotName(otherReplicaSlot))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = le.Release(context.Background()) })
}

// otherFence is the other replica's fence, holder "other".
func otherFence(t *testing.T, b *bundle) *fence.Fence {
	t.Helper()
	f, err := fence.New(b.store, fence.Config{Holder: "other", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// rankBesideOther is the rank of this test's replica ("test", which tries
// slots from the one its name hashes to, skipping the other's) beside
// otherReplica's slot, in slot order.
func rankBesideOther() int {
	slot := int(fnv32("test") % reconcile.ReplicaSlots)
	if slot == otherReplicaSlot {
		slot++
	}
	if slot > otherReplicaSlot {
		return 1
	}
	return 0
}

// ownFirst reports whether order has every queue of rank's part (of two)
// before any of the other's.
func ownFirst(order []string, rank int) bool {
	seenOther := false
	for _, q := range order {
		if int(fnv32(q)%2) != rank {
			seenOther = true
		} else if seenOther {
			return false
		}
	}
	return true
}

func slotNames() []string {
	var names []string
	for j := range reconcile.ReplicaSlots {
		names = append(names, reconcile.ReplicaSlotName(j))
	}
	return names
}

// joinRunner is orderRunner that, during its first run, has another
// replica take a slot: a replica starting in the middle of this pass.
type joinRunner struct {
	orderRunner
	join func()
}

func (j *joinRunner) Run(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
	if j.join != nil {
		j.join()
		j.join = nil
	}
	return j.orderRunner.Run(ctx, lease)
}

// TestPassSplitsAgainWhenAReplicaJoins: a pass that started alone (no
// split) learns of a second replica at its next count and takes its own
// part of the queues it has left first. The negative control keeps the
// order the pass started with: the pass goes on with the other's queues
// mixed in (a random order would put its own first once in 3,432 passes
// at 7 of 14).
func TestPassSplitsAgainWhenAReplicaJoins(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		resort bool
	}{{"the rest ordered again", true}, {"negative control: the order kept", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			for i := range 15 {
				b.record(t, fmt.Sprintf("q%02d", i), "m")
			}
			other := otherFence(t, b)
			j := &joinRunner{join: func() {
				// On the run's goroutine: no t.Fatal here.
				le, err := other.TryAcquire(ctx, reconcile.ReplicaSlotName(otherReplicaSlot))
				if err != nil {
					t.Error(err)
					return
				}
				t.Cleanup(func() { _ = le.Release(context.Background()) })
			}}
			r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: j, Concurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			if c.resort {
				reconcile.SetRecountEvery(r, 0)
			}
			ps, err := r.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(j.order) != 15 {
				t.Fatalf("pass %+v ran %v; want all 15", ps, j.order)
			}
			// The first queue was taken alone; the rest after the join.
			rank := rankBesideOther()
			if split := ownFirst(j.order[1:], rank); split != c.resort {
				t.Fatalf("order %v (rank %d of 2 after the first): own part first = %v; want %v", j.order, rank, split, c.resort)
			}
		})
	}
}

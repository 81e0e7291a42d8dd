package reconcile

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
)

// ReplicaSlots is how many replicas can count themselves toward
// Config.ClusterConcurrency by holding a slot lease; a replica that finds
// none free counts itself without one.
const ReplicaSlots = 16

// ReplicaSlotName is the lease that stands for slot j of the reconcilers
// sharing mend's lease table (mend lease list shows who holds it).
func ReplicaSlotName(j int) string { return fmt.Sprintf("mend-reconcile/replica/%02d", j) }

// LeaseCounter is an optional Store method; *storage.DB implements it.
// With it, and Config.ClusterConcurrency on, replicas share one budget of
// planner runs in flight (see the package doc, "Replicas").
type LeaseCounter interface {
	// LeasesLive returns how many of the named leases have a current term
	// by the database clock, in one statement.
	LeasesLive(ctx context.Context, names []string) (int, error)
}

// shareRecount is how often a pass counts the working replicas again while
// it hands out queues, so replicas that start or stop during a long pass
// change its share within it.
const shareRecount = time.Second

// share is a pass's part of Config.ClusterConcurrency: how many planner
// runs it may have in flight at once.
type share struct {
	r        *Reconciler
	counter  LeaseCounter // nil: Concurrency alone
	n        int
	replicas int // working replicas at the last count, this one included; 0 when not counted
	counted  time.Time
}

// newShare returns the share of a pass that lists queues. Replicas count
// toward the budget only while they have more than one queue to run (a
// single queue needs no share), so an idle pass, or one with a lone dead
// letter, sends nothing for it.
func (r *Reconciler) newShare(ctx context.Context, queues int) *share {
	sh := &share{r: r, n: r.cfg.Concurrency}
	counter, ok := r.cfg.Store.(LeaseCounter)
	if !ok || r.cfg.ClusterConcurrency < 0 || queues < 2 {
		return sh
	}
	sh.counter = counter
	sh.recount(ctx)
	return sh
}

// limit returns how many runs the pass may have in flight now, counting
// the replicas again once the last count is shareRecount old.
func (sh *share) limit(ctx context.Context) int {
	if sh.counter != nil && time.Since(sh.counted) >= shareRecount {
		sh.recount(ctx)
	}
	return sh.n
}

// recount takes this replica's slot if it holds none, counts the live
// slots and sets the share: ClusterConcurrency divided by the working
// replicas, rounded up, at least 1 and at most Concurrency. A failure keeps
// the last share (Concurrency before the first count): the budget spreads
// load, it never decides what is safe.
func (sh *share) recount(ctx context.Context) {
	r := sh.r
	sh.counted = time.Now()
	held, err := r.holdSlot(ctx)
	if err != nil {
		r.log.WarnContext(ctx, "could not take a replica slot; running at the last share", "err", err, "share", sh.n)
		return
	}
	live, err := sh.counter.LeasesLive(ctx, r.slotNames)
	if err != nil {
		r.log.WarnContext(ctx, "could not count the working replicas; running at the last share", "err", err, "share", sh.n)
		return
	}
	if !held {
		live++ // no slot free: this replica counts itself
	}
	live = max(live, 1)
	sh.replicas = live
	sh.n = min(max((r.cfg.ClusterConcurrency+live-1)/live, 1), r.cfg.Concurrency)
}

// holdSlot makes sure this replica holds a live slot lease, taking one
// when it holds none (or its term was lost); it reports false when every
// slot is held by others. It starts at a slot chosen by the holder's name,
// so replicas seldom try the same slots.
func (r *Reconciler) holdSlot(ctx context.Context) (bool, error) {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	if r.slot != nil {
		select {
		case <-r.slot.Done():
			r.slot = nil
		default:
			return true, nil
		}
	}
	h := fnv.New32a()
	h.Write([]byte(r.holder))
	start := int(h.Sum32() % ReplicaSlots)
	for i := range ReplicaSlots {
		le, err := r.cfg.Fence.TryAcquire(ctx, r.slotNames[(start+i)%ReplicaSlots])
		if errors.Is(err, mend.ErrLeaseHeld) {
			continue
		}
		if err != nil {
			return false, err
		}
		r.slot = le
		return true, nil
	}
	return false, nil
}

// dropSlot gives this replica's slot back, if it holds one, so the other
// replicas' shares grow on their next count.
func (r *Reconciler) dropSlot(ctx context.Context) {
	r.slotMu.Lock()
	le := r.slot
	r.slot = nil
	r.slotMu.Unlock()
	if le == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := le.Release(rctx); err != nil && !errors.Is(err, mend.ErrLeaseLost) {
		r.log.WarnContext(ctx, "release replica slot", "slot", le.Term().Queue, "err", err)
	}
}

// holderOf names the fence's holder when the Leaser can say it (a
// *fence.Fence can), for the slot a replica starts its search at.
func holderOf(l Leaser) string {
	if f, ok := l.(interface{ Holder() string }); ok {
		return f.Holder()
	}
	return ""
}

var _ interface{ Holder() string } = (*fence.Fence)(nil)

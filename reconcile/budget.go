package reconcile

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
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
	// LeasesLive returns the names among names whose lease has a current
	// term by the database clock, in any order, in one statement.
	LeasesLive(ctx context.Context, names []string) ([]string, error)
}

// shareRecount is how often a pass counts the working replicas again while
// it hands out queues, so replicas that start or stop during a long pass
// change its share within it.
const shareRecount = time.Second

// share is a pass's part of Config.ClusterConcurrency: how many planner
// runs it may have in flight at once.
type share struct {
	r       *Reconciler
	counter LeaseCounter // nil: Concurrency alone
	n       int
	// replicas is how many replicas were working at the last count, this
	// one included (0 when not counted), and rank this one's place among
	// them, in slot order.
	replicas, rank int
	counted        time.Time
	orderedFor     [2]int // replicas and rank when order last ordered the list
}

// newShare returns the share of a pass that lists queues, and orders them
// for it. Replicas count toward the budget only while they have more than
// one queue to run (a single queue needs no share), so an idle pass, or
// one with a lone dead letter, sends nothing for it.
//
// The order: the queues shuffled, so that replicas passing at the same
// moment do not race down the same list; then, with w replicas working and
// this one the r-th, the queues whose name hashes to r modulo w first
// (order, again whenever the count changes during the pass). The
// replicas thus start on different queues and every queue gets its first
// run of the pass after about one run per queue in all, whatever w; each
// then helps with the others' queues. Without the split each replica
// walked the whole list in its own random order and ran again, with
// records still due, queues another had just run, while others had not had
// one (the last of 1,000 queues got its first run after about 1,900 runs
// with two replicas and 3,300 with four). The split decides only the
// order: the queue leases decide who runs a queue.
func (r *Reconciler) newShare(ctx context.Context, queues []string) *share {
	sh := &share{r: r, n: r.cfg.Concurrency}
	rand.Shuffle(len(queues), func(i, j int) { queues[i], queues[j] = queues[j], queues[i] })
	counter, ok := r.cfg.Store.(LeaseCounter)
	if !ok || r.cfg.ClusterConcurrency < 0 || len(queues) < 2 {
		return sh
	}
	sh.counter = counter
	sh.recount(ctx)
	sh.order(queues)
	return sh
}

// order puts this replica's part of queues first, keeping the order within
// each part, when the working replicas have changed since the last call:
// with w replicas and this one the r-th, the queues whose name hashes to r
// modulo w. A pass calls it on the queues it has not yet taken before it
// takes each, so a replica that starts or stops during a long pass (the
// replicas start theirs at random points of the interval) changes every
// pass's split within about a second.
func (sh *share) order(queues []string) {
	if sh.replicas == sh.orderedFor[0] && sh.rank == sh.orderedFor[1] {
		return
	}
	sh.orderedFor = [2]int{sh.replicas, sh.rank}
	if sh.replicas < 2 {
		return
	}
	w, rank := uint32(sh.replicas), uint32(sh.rank)
	slices.SortStableFunc(queues, func(a, b string) int {
		ma, mb := hashName(a)%w == rank, hashName(b)%w == rank
		switch {
		case ma == mb:
			return 0
		case ma:
			return -1
		}
		return 1
	})
}

// helping reports whether queue is in another working replica's part:
// this replica reaches it only after its own part (order), by when the
// queue's owner has run it in its own pass, so the run is a follow-up.
func (sh *share) helping(queue string) bool {
	return sh.replicas >= 2 && hashName(queue)%uint32(sh.replicas) != uint32(sh.rank)
}

func hashName(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// limit returns how many runs the pass may have in flight now, counting
// the replicas again once the last count is shareRecount old.
func (sh *share) limit(ctx context.Context) int {
	if sh.counter != nil && time.Since(sh.counted) >= sh.r.recountEvery {
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
	mine, err := r.holdSlot(ctx)
	if err != nil {
		r.log.WarnContext(ctx, "could not take a replica slot; running at the last share", "err", err, "share", sh.n)
		return
	}
	live, err := sh.counter.LeasesLive(ctx, r.slotNames)
	if err != nil {
		r.log.WarnContext(ctx, "could not count the working replicas; running at the last share", "err", err, "share", sh.n)
		return
	}
	slices.Sort(live)
	rank := slices.Index(live, mine)
	if rank < 0 {
		// No slot free (or this one's expired under it): this replica
		// counts itself, last.
		rank = len(live)
		live = append(live, "")
	}
	sh.replicas, sh.rank = len(live), rank
	sh.n = min(max((r.cfg.ClusterConcurrency+sh.replicas-1)/sh.replicas, 1), r.cfg.Concurrency)
}

// holdSlot makes sure this replica holds a live slot lease, taking one
// when it holds none (or its term was lost), and returns its name; "" when
// every slot is held by others. It starts at a slot chosen by the holder's
// name, so replicas seldom try the same slots.
func (r *Reconciler) holdSlot(ctx context.Context) (string, error) {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	if r.slot != nil {
		select {
		case <-r.slot.Done():
			r.slot = nil
		default:
			return r.slot.Term().Queue, nil
		}
	}
	start := int(hashName(r.holder) % ReplicaSlots)
	for i := range ReplicaSlots {
		le, err := r.cfg.Fence.TryAcquire(ctx, r.slotNames[(start+i)%ReplicaSlots])
		if errors.Is(err, mend.ErrLeaseHeld) {
			continue
		}
		if err != nil {
			return "", err
		}
		r.slot = le
		return le.Term().Queue, nil
	}
	return "", nil
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

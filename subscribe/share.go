package subscribe

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/storage"
)

// Leases is the lease table the replicas of a group divide the work
// through: mend's own, the one that fences queues. *storage.DB implements
// it.
type Leases interface {
	fence.Store
	// LeaseGetMany reads several leases, as the database sees them now, in
	// one statement; a lease never contended is absent.
	LeaseGetMany(ctx context.Context, names []string) ([]storage.LeaseStatus, error)
}

// SlotsDefault is how many replicas of one group can divide the work; a
// replica beyond them finds no free slot and reads every partition, which
// is safe (see the package doc, "Replicas").
const SlotsDefault = 16

// SlotName is the lease that stands for slot j of group's replicas in
// mend's lease table (mend lease list shows who holds it).
func SlotName(group string, j int) string {
	return fmt.Sprintf("mend-subscribe/%s/replica/%02d", group, j)
}

// share is how this replica divides the group's partitions with the
// others: it holds one slot lease, and of the n slots live when it last
// looked it is the rank-th; a partition is its own when the partition's
// hash modulo n is its rank. n == 0 means every partition is its own (no
// sharing configured, no slot free, or the lease table unreadable).
type share struct {
	leases Leases
	f      *fence.Fence
	names  []string
	lease  *fence.Lease // touched by the pass's dispatcher alone

	// The workers ask mine while the dispatcher refreshes.
	mu      sync.Mutex
	rank, n int
}

func (sh *share) set(rank, n int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.rank, sh.n = rank, n
}

// live is how many live replicas the last refresh saw, 0 when this one
// reads every partition.
func (sh *share) live() int {
	if sh == nil {
		return 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.n
}

func newShare(cfg Config) (*share, error) {
	if cfg.Leases == nil {
		return nil, nil
	}
	f, err := fence.New(cfg.Leases, fence.Config{Holder: cfg.Holder, TTL: cfg.SlotTTL, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("subscribe: slot leases: %w", err)
	}
	sh := &share{leases: cfg.Leases, f: f}
	for j := range cfg.Slots {
		sh.names = append(sh.names, SlotName(cfg.Group, j))
	}
	return sh, nil
}

// refresh takes a slot if this replica holds none (the first free one),
// then reads which slots are live and sets this replica's rank among them.
// A slot found ended (by its keepalive, or by the read: expired while this
// process was paused, or ended by an operator) is given up and another
// taken at once, so the outcome does not depend on which noticed first.
// Any failure leaves it reading every partition for the pass: overlap is
// safe, a partition nobody reads is not (its dead letters wait).
func (sh *share) refresh(ctx context.Context) error {
	sh.set(0, 0)
	if sh.lease != nil {
		select {
		case <-sh.lease.Done():
			sh.drop(ctx)
		default:
		}
	}
	for range 2 {
		if sh.lease == nil {
			if err := sh.take(ctx); err != nil || sh.lease == nil {
				return err // with no slot free, read everything
			}
		}
		rank, live, err := sh.read(ctx)
		if err != nil {
			return err
		}
		if rank >= 0 {
			sh.set(rank, live)
			return nil
		}
		sh.drop(ctx) // ended under us: take a slot again
	}
	return nil
}

// take acquires the first free slot, if any.
func (sh *share) take(ctx context.Context) error {
	for _, name := range sh.names {
		le, err := sh.f.TryAcquire(ctx, name)
		if errors.Is(err, mend.ErrLeaseHeld) {
			continue
		}
		if err != nil {
			return err
		}
		sh.lease = le
		return nil
	}
	return nil
}

// read returns this replica's rank among the live slots, in slot order
// (-1 if its own term is no longer live), and how many are live: one
// statement for every slot.
func (sh *share) read(ctx context.Context) (rank, live int, err error) {
	sts, err := sh.leases.LeaseGetMany(ctx, sh.names)
	if err != nil {
		return -1, 0, fmt.Errorf("subscribe: read the slot leases: %w", err)
	}
	byName := make(map[string]storage.LeaseStatus, len(sts))
	for _, st := range sts {
		byName[st.Term.Queue] = st
	}
	mine := sh.lease.Term()
	rank = -1
	for _, name := range sh.names {
		st, ok := byName[name]
		if !ok || !st.Live() {
			continue
		}
		if st.Term == mine {
			rank = live
		}
		live++
	}
	return rank, live, nil
}

// mine reports whether this replica reads partition k this pass.
func (sh *share) mine(k partKey) bool {
	if sh == nil {
		return true
	}
	sh.mu.Lock()
	rank, n := sh.rank, sh.n
	sh.mu.Unlock()
	if n <= 1 {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(k.topic))
	h.Write([]byte{0})
	h.Write([]byte(k.partition))
	return int(h.Sum64()%uint64(n)) == rank
}

// drop releases this replica's slot (harmless when it is already lost).
func (sh *share) drop(ctx context.Context) {
	if sh == nil || sh.lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = sh.lease.Release(ctx)
	sh.lease = nil
	sh.set(0, 0)
}

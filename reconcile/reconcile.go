package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/planner"
)

// Defaults for Config.
const (
	IntervalDefault    = 10 * time.Second
	ConcurrencyDefault = 4
	// ClusterConcurrencyDefault: the planner runs in flight at once across
	// every working replica (see Config.ClusterConcurrency).
	ClusterConcurrencyDefault = 8
	QueueLimitDefault         = 1000
	RetentionDefault          = 14 * 24 * time.Hour
	PruneEveryDefault         = time.Hour
	PruneLimitDefault         = 1000
	// QueueTimeoutDefault bounds one queue's planner run.
	QueueTimeoutDefault = time.Minute
	ProbeAfterDefault   = time.Second
	releaseTimeout      = 5 * time.Second
	maxConcurrency      = 256
	minInterval         = 10 * time.Millisecond
	maxPruneRoundsAPass = 100
)

// Store is the record store as the reconciler needs it.
type Store interface {
	// QueuesDue returns up to limit queues with records due by the
	// database clock, longest overdue first.
	QueuesDue(ctx context.Context, limit int) ([]string, error)
	// PruneDone deletes up to limit records done for longer than retention,
	// with their events, and returns how many it deleted.
	PruneDone(ctx context.Context, retention time.Duration, limit int) (int, error)
}

// DueProber is an optional Store method: *storage.DB implements it. With
// it, a pass asks again, before taking a queue's lease, whether a queue it
// listed at least Config.ProbeAfter ago still has a record due: with several
// replicas, the queues at the end of a long pass's list have often been
// drained by the others meanwhile, and an empty run costs a lease's take
// and release (in a 100,000 dead-letter storm, 900 of 5,900 runs with two
// replicas and 2,000 of 7,000 with four).
type DueProber interface {
	// QueueHasDue reports whether queue has a record due now by the
	// database clock.
	QueueHasDue(ctx context.Context, queue string) (bool, error)
}

// Leaser hands out queue leases without waiting. *fence.Fence implements it.
type Leaser interface {
	// TryAcquire takes the queue's lease if it is free. Returns an error
	// matching mend.ErrLeaseHeld if another holder's term is current.
	TryAcquire(ctx context.Context, queue string) (*fence.Lease, error)
}

// Runner repairs one queue under a lease. *planner.Planner implements it.
type Runner interface {
	Run(ctx context.Context, lease planner.Lease) (planner.Stats, error)
}

// FollowRunner is a Runner with a larger run for a queue whose previous
// run stopped at its limit (Stats.More): that run woke the queue, so the
// rest of its records can go in fewer runs. *planner.Planner implements it;
// a Runner without it is run with Run every time.
type FollowRunner interface {
	RunFollow(ctx context.Context, lease planner.Lease) (planner.Stats, error)
}

// Hooks observe the reconciler; every field is optional.
type Hooks struct {
	// OnQueue runs after each queue's planner run, with its duration.
	OnQueue func(queue string, st planner.Stats, d time.Duration, err error)
	// OnPass runs after each pass.
	OnPass func(ps PassStats, d time.Duration)
	// OnSaturated runs when a pass has as many planner runs in flight as
	// it may (limit: its share of ClusterConcurrency, or Concurrency) and
	// waits for one to end before it takes the next queue.
	OnSaturated func(inflight, limit int)
}

// Config configures a Reconciler. Store, Fence and Planner are required.
type Config struct {
	Store   Store
	Fence   Leaser
	Planner Runner
	// Interval between passes. Zero means IntervalDefault (10 s).
	Interval time.Duration
	// Concurrency bounds how many queues this replica repairs at once. Zero
	// means ConcurrencyDefault (4).
	Concurrency int
	// ClusterConcurrency bounds the planner runs in flight at once across
	// every replica sharing mend's lease table, so that adding replicas
	// (for availability) does not multiply the load a storm puts on the
	// database. A pass with more than one queue to run holds a slot lease
	// (ReplicaSlotName) and counts the live ones (one statement, again
	// every second of the pass); with w working replicas it runs at most
	// ceil(ClusterConcurrency / w) queues at once, at least 1 and at most
	// Concurrency. It needs the Store to be a LeaseCounter; without one, or
	// when negative, each replica runs Concurrency at once. Zero means
	// ClusterConcurrencyDefault (8): one or two replicas run 4 each, as
	// before, four replicas 2 each.
	ClusterConcurrency int
	// QueueLimit bounds how many due queues one pass looks at. Zero means
	// QueueLimitDefault.
	QueueLimit int
	// Retention is how long done records are kept. Zero means
	// RetentionDefault (14 days); negative disables pruning.
	Retention time.Duration
	// PruneEvery is how often pruning runs. Zero means PruneEveryDefault.
	PruneEvery time.Duration
	// PruneLimit is how many records one prune statement batch deletes.
	PruneLimit int
	// QueueTimeout is the deadline of one queue's planner run: a pass waits
	// for its slowest queue, and a hung host must not hold it for a whole
	// queue's worth of calls. A run cut off is due again next pass. Zero
	// means QueueTimeoutDefault (1 min).
	QueueTimeout time.Duration
	// ProbeAfter is how long into a pass the reconciler starts asking,
	// before it takes a listed queue's lease, whether the queue still has a
	// record due (when the Store is a DueProber); a pass shorter than this
	// asks nothing. Zero means ProbeAfterDefault (1 s).
	ProbeAfter time.Duration
	Hooks      Hooks
	Logger     *slog.Logger
}

func (c Config) validate() error {
	bad := func(reason string) error { return &mend.ValidationError{Field: "reconcile config", Reason: reason} }
	switch {
	case c.Store == nil || c.Fence == nil || c.Planner == nil:
		return bad("Store, Fence and Planner are required")
	case c.Interval < 0 || (c.Interval > 0 && c.Interval < minInterval):
		return bad(fmt.Sprintf("interval must be at least %s", minInterval))
	case c.Concurrency < 0 || c.Concurrency > maxConcurrency:
		return bad(fmt.Sprintf("concurrency must be between 1 and %d", maxConcurrency))
	case c.ClusterConcurrency > maxConcurrency*ReplicaSlots:
		return bad(fmt.Sprintf("cluster concurrency must be at most %d (negative: no cluster bound)", maxConcurrency*ReplicaSlots))
	case c.QueueLimit < 0 || c.PruneLimit < 0 || c.PruneEvery < 0 || c.QueueTimeout < 0 || c.ProbeAfter < 0:
		return bad("queue limit, prune limit, prune interval, queue timeout and probe delay must not be negative")
	}
	return nil
}

// PassStats counts what one pass did.
type PassStats struct {
	Queues int // queues with due records
	Ran    int // queues whose lease this pass took
	Held   int // queues skipped because another holder had the lease
	// Drained counts queues skipped because, when their turn came at least
	// Config.ProbeAfter into the pass, nothing was due any more: another replica
	// (or the intake's inline repair) had served them since the listing.
	Drained int
	Failed  int // queue runs that ended with an error
	Records planner.Stats
	Pruned  int
	// More counts queues whose run stopped at the planner's RunLimit with
	// records possibly still due; while it is non-zero the next pass
	// starts at once instead of after Interval.
	More int
	// Concurrency is how many runs the pass could have in flight when it
	// took its last queue: its share of Config.ClusterConcurrency, or
	// Config.Concurrency. Replicas is how many working replicas (this one
	// included) the share was computed for; 0 when the pass did not count
	// them (nothing to share: at most one queue, or no cluster bound).
	Concurrency, Replicas int
}

// Reconciler finds queues with due records, takes each queue's lease and
// runs its planner. It also serves inline repairs (TryRepair).
type Reconciler struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	stop      context.CancelFunc
	done      chan struct{}
	lastPrune time.Time // monotonic

	// The replica slot this reconciler holds while its passes have work
	// to share (budget.go).
	holder    string
	slotNames []string
	slotMu    sync.Mutex
	slot      *fence.Lease
	// recountEvery is shareRecount; tests set it to 0 (a count before
	// every queue a pass takes).
	recountEvery time.Duration

	// follow holds the queues whose last run here stopped at the planner's
	// limit (Stats.More): their next run in a pass is a follow-up run
	// (FollowRunner). Only the queues a pass lists are kept.
	followMu sync.Mutex
	follow   map[string]bool
}

// New returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.QueueLimit = cmp.Or(cfg.QueueLimit, QueueLimitDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	cfg.PruneEvery = cmp.Or(cfg.PruneEvery, PruneEveryDefault)
	cfg.PruneLimit = cmp.Or(cfg.PruneLimit, PruneLimitDefault)
	cfg.QueueTimeout = cmp.Or(cfg.QueueTimeout, QueueTimeoutDefault)
	cfg.ProbeAfter = cmp.Or(cfg.ProbeAfter, ProbeAfterDefault)
	cfg.ClusterConcurrency = cmp.Or(cfg.ClusterConcurrency, ClusterConcurrencyDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reconciler{cfg: cfg, log: log.With("component", "reconcile"), holder: holderOf(cfg.Fence), recountEvery: shareRecount}
	for j := range ReplicaSlots {
		r.slotNames = append(r.slotNames, ReplicaSlotName(j))
	}
	return r, nil
}

// TryRepair repairs one queue if its lease is free: it takes the lease
// without waiting, runs the planner once (at most its RunLimit records;
// the reconciler's passes take the rest), and releases.
// It implements dlq.Repairer, for the intake's inline attempt.
//
// Returns an error matching mend.ErrLeaseHeld if another holder has the
// queue; that holder or a later pass finishes the work.
func (r *Reconciler) TryRepair(ctx context.Context, queue string) error {
	_, err := r.repair(ctx, queue, false)
	return err
}

// repair runs queue once under its lease: a follow-up run (FollowRunner)
// when follow is set and the Runner has one.
func (r *Reconciler) repair(ctx context.Context, queue string, follow bool) (planner.Stats, error) {
	lease, err := r.cfg.Fence.TryAcquire(ctx, queue)
	if err != nil {
		return planner.Stats{}, fmt.Errorf("reconcile: queue %q: %w", queue, err)
	}
	defer func() {
		// Release even when ctx is cancelled, so the next holder need not
		// wait for the term to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if err := lease.Release(rctx); err != nil && !errors.Is(err, mend.ErrLeaseLost) {
			r.log.WarnContext(ctx, "release lease", "queue", queue, "err", err)
		}
	}()
	// Stop host calls in flight as soon as the lease is lost, and bound
	// the run.
	runCtx, cancel := context.WithTimeout(ctx, r.cfg.QueueTimeout)
	defer cancel()
	go func() {
		select {
		case <-lease.Done():
			cancel()
		case <-runCtx.Done():
		}
	}()
	start := time.Now()
	run := r.cfg.Planner.Run
	if fr, ok := r.cfg.Planner.(FollowRunner); ok && follow {
		run = fr.RunFollow
	}
	st, err := run(runCtx, lease)
	if r.cfg.Hooks.OnQueue != nil {
		r.cfg.Hooks.OnQueue(queue, st, time.Since(start), err)
	}
	if err != nil {
		return st, fmt.Errorf("reconcile: queue %q: %w", queue, err)
	}
	return st, nil
}

// RunOnce runs one pass: every queue with due records (at most QueueLimit,
// longest overdue first) gets one planner run if its lease is free, at
// most Concurrency at a time (or this replica's share of
// ClusterConcurrency), in a random order, each run bounded by the
// planner's RunLimit records and by QueueTimeout; then, at most once per
// PruneEvery, done records older than Retention are pruned. The pass takes
// each queue once and ends: a queue whose run stopped at RunLimit is
// counted in PassStats.More and served again by the next pass, which lists
// the due queues afresh, so re-sends that fell due meanwhile and queues
// beyond QueueLimit get their turn too. For cron, call it once and exit
// (or again at once while More is non-zero).
//
// A queue whose run fails is logged and counted, not returned: it is due
// again on the next pass. Returns an error only when the pass itself could
// not run (listing due queues failed) or ctx ended.
func (r *Reconciler) RunOnce(ctx context.Context) (PassStats, error) {
	defer r.dropSlot(ctx)
	return r.pass(ctx)
}

// pass is RunOnce without giving the replica slot back at its end: the
// loop keeps it from one pass with work to the next, and gives it back
// after a pass with none to share, or when it stops.
func (r *Reconciler) pass(ctx context.Context) (PassStats, error) {
	start := time.Now()
	var ps PassStats
	queues, err := r.cfg.Store.QueuesDue(ctx, r.cfg.QueueLimit)
	if err != nil {
		return ps, fmt.Errorf("reconcile: list due queues: %w", err)
	}
	ps.Queues = len(queues)
	// Each replica takes due queues in its own order, its part of them
	// first (see newShare).
	sh := r.newShare(ctx, queues)
	r.keepFollowing(queues)
	if sh.counter == nil {
		r.dropSlot(ctx)
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		inflight int
		// Each run ends with one send; at most Concurrency are in flight,
		// so a send never blocks.
		ended = make(chan struct{}, r.cfg.Concurrency)
	)
	for i := range queues {
		for ctx.Err() == nil {
		drain:
			for {
				select {
				case <-ended:
					inflight--
				default:
					break drain
				}
			}
			limit := sh.limit(ctx)
			if inflight < limit {
				break
			}
			if r.cfg.Hooks.OnSaturated != nil {
				r.cfg.Hooks.OnSaturated(inflight, limit)
			}
			select {
			case <-ended:
				inflight--
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		// The working replicas changed since the list was ordered (one
		// started or stopped during the pass): the rest of it is ordered
		// again, this replica's new part first.
		sh.order(queues[i:])
		q := queues[i]
		// A follow-up run (FollowRunner) for a queue whose last run here
		// stopped at the limit, or one of another replica's part, reached
		// only after this replica's own part: its owner has run it first.
		follow := r.following(q) || sh.helping(q)
		inflight++
		wg.Go(func() {
			defer func() { ended <- struct{}{} }()
			if prober, ok := r.cfg.Store.(DueProber); ok && time.Since(start) >= r.cfg.ProbeAfter {
				// A failed probe is no answer: the run finds out itself.
				if due, err := prober.QueueHasDue(ctx, q); err == nil && !due {
					mu.Lock()
					ps.Drained++
					mu.Unlock()
					return
				}
			}
			st, err := r.repair(ctx, q, follow)
			r.setFollowing(q, err == nil && st.More)
			mu.Lock()
			defer mu.Unlock()
			ps.Records = add(ps.Records, st)
			switch {
			case errors.Is(err, mend.ErrLeaseHeld):
				ps.Held++
			case err != nil:
				ps.Ran++
				ps.Failed++
				if ctx.Err() == nil {
					r.log.WarnContext(ctx, "queue repair failed; due again next pass", "queue", q, "err", err)
				}
			default:
				ps.Ran++
				if st.More {
					ps.More++
				}
			}
		})
	}
	wg.Wait()
	ps.Concurrency, ps.Replicas = sh.n, sh.replicas
	if ctx.Err() != nil {
		return ps, ctx.Err()
	}
	ps.Pruned = r.maybePrune(ctx)
	if r.cfg.Hooks.OnPass != nil {
		r.cfg.Hooks.OnPass(ps, time.Since(start))
	}
	return ps, nil
}

// maxDrainPasses bounds Drain: a pass with More made progress (its runs
// each took RunLimit records), so this many passes finish any realistic
// backlog; whatever is left is due for the next Drain or pass.
const maxDrainPasses = 10_000

// Drain runs passes until one ends with nothing more due in the queues it
// ran (PassStats.More is zero), and returns their stats summed (Queues is
// the first pass's). It is what `mend run --once` does for cron: the queues
// due when it starts are repaired as far as they can be now. Errors are
// RunOnce's.
func (r *Reconciler) Drain(ctx context.Context) (PassStats, error) {
	var total PassStats
	for i := range maxDrainPasses {
		ps, err := r.RunOnce(ctx)
		if i == 0 {
			total.Queues = ps.Queues
		}
		total.Ran += ps.Ran
		total.Held += ps.Held
		total.Failed += ps.Failed
		total.Pruned += ps.Pruned
		total.Records = add(total.Records, ps.Records)
		total.More = ps.More
		if err != nil || ps.More == 0 {
			return total, err
		}
	}
	return total, nil
}

func (r *Reconciler) maybePrune(ctx context.Context) int {
	if r.cfg.Retention < 0 {
		return 0
	}
	r.mu.Lock()
	due := r.lastPrune.IsZero() || time.Since(r.lastPrune) >= r.cfg.PruneEvery
	if due {
		r.lastPrune = time.Now()
	}
	r.mu.Unlock()
	if !due {
		return 0
	}
	total := 0
	for range maxPruneRoundsAPass {
		n, err := r.cfg.Store.PruneDone(ctx, r.cfg.Retention, r.cfg.PruneLimit)
		total += n
		if err != nil {
			r.log.WarnContext(ctx, "prune done records", "err", err)
			break
		}
		if n < r.cfg.PruneLimit {
			break
		}
	}
	if total > 0 {
		r.log.InfoContext(ctx, "pruned done records", "count", total, "retention", r.cfg.Retention.String())
	}
	return total
}

func add(a, b planner.Stats) planner.Stats {
	a.Settled += b.Settled
	a.Woken += b.Woken
	a.WakeFailed += b.WakeFailed
	a.Done += b.Done
	a.Waiting += b.Waiting
	a.Parked += b.Parked
	a.Failed += b.Failed
	a.Conflicts += b.Conflicts
	return a
}

// Start runs passes every Interval in the background until Stop or ctx
// ends; the first pass starts at a random point within the first Interval. It returns an error if the reconciler is already running.
func (r *Reconciler) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return errors.New("reconcile: already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	r.stop, r.done = cancel, make(chan struct{})
	go r.loop(ctx, r.done)
	return nil
}

func (r *Reconciler) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer r.dropSlot(ctx)
	r.log.InfoContext(ctx, "reconciler started", "interval", r.cfg.Interval.String(), "concurrency", r.cfg.Concurrency)
	// The first pass starts at a random point of the first interval, so
	// replicas started together do not pass in step (one of them would
	// take nearly all the work).
	t := time.NewTimer(rand.N(r.cfg.Interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.log.Info("reconciler stopped")
			return
		case <-t.C:
		}
		// Passes start at a fixed rate (a pass that overruns is followed at
		// once), so work that becomes due waits at most one interval for
		// the next pass to start, however long passes take.
		// A pass that left queues with more due (runs stopped at RunLimit)
		// is followed at once: the next pass re-lists, so it also reaches
		// whatever fell due meanwhile, and a storm drains at full speed.
		start := time.Now()
		ps, err := r.pass(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "pass failed", "err", err)
		}
		t.Reset(nextPass(r.cfg.Interval, time.Since(start), ps, err))
	}
}

// nextPass is how long the loop waits after a pass that took took: the
// rest of the interval (passes start at a fixed rate), or nothing when the
// pass left queues with more due.
func nextPass(interval, took time.Duration, ps PassStats, err error) time.Duration {
	if err == nil && ps.More > 0 {
		return 0
	}
	return max(interval-took, 0)
}

// Stop stops taking queues, cancels planner runs in flight (each record's
// writes are atomic, so abandoning is clean), waits until their leases are
// released, and returns. It is idempotent and safe before Start.
func (r *Reconciler) Stop() {
	r.mu.Lock()
	stop, done := r.stop, r.done
	r.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// following reports whether queue's last run here stopped at its limit.
func (r *Reconciler) following(queue string) bool {
	r.followMu.Lock()
	defer r.followMu.Unlock()
	return r.follow[queue]
}

// setFollowing records whether queue's run here stopped at its limit.
func (r *Reconciler) setFollowing(queue string, more bool) {
	r.followMu.Lock()
	defer r.followMu.Unlock()
	if !more {
		delete(r.follow, queue)
		return
	}
	if r.follow == nil {
		r.follow = map[string]bool{}
	}
	r.follow[queue] = true
}

// keepFollowing forgets the queues a pass did not list (drained, or left
// to another replica), so the set stays as small as the due queues.
func (r *Reconciler) keepFollowing(listed []string) {
	r.followMu.Lock()
	defer r.followMu.Unlock()
	if len(r.follow) == 0 {
		return
	}
	keep := make(map[string]bool, len(listed))
	for _, q := range listed {
		if r.follow[q] {
			keep[q] = true
		}
	}
	r.follow = keep
}

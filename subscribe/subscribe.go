package subscribe

// The Subscriber and its passes: how membership (membership.go), the
// reader (reader.go) and the settle ledger with its release (ledger.go,
// release.go) are put together and run.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// PassStats is what one pass did.
type PassStats struct {
	Partitions int // DLQ partitions holding rows, as discovery found them
	// Share is how many of them this replica read: all of them unless the
	// replicas divide the work (Config.Leases), and then Replicas is how
	// many live replicas it divided them with.
	Share, Replicas int
	Joined          int // partitions the group joined in this pass's membership step (ahead or on first sight)
	Read            int // dead letters read
	Recorded        int // new records
	Already         int // rows recorded before (by a replica, an earlier pass or a linked-in consumer)
	Unrecordable    int // rows recorded as a parked stand-in instead (see Hooks.OnUnrecordable)
	Dropped         int // rows the server matched only through its collation, passed
	Advanced        int // partitions whose watermark moved
	Late            int // partitions re-read because a row committed after a later one was read
	// Held is how many horizon samples older than the settle window wait
	// for a transaction open when they were taken: the window alone would
	// have let watermarks pass offsets it may still commit (see
	// Subscriber.SeesOpen).
	Held int
	// OpenRead is how this pass's read of the open transactions went
	// (OpenUsable, OpenStale, OpenHidden, OpenFailed), "" when none was
	// tried (refused less than a minute ago). OpenLapsed reports that the
	// reads could not be used for longer than the settle window (stale,
	// with other readers of innodb_trx keeping its cache from refreshing,
	// or failing): until one is usable the watermarks wait for the window
	// alone, as without PROCESS.
	OpenRead   string
	OpenLapsed bool
	// Failed is how many partitions stopped in this pass because
	// recording failed (see Hooks.OnFailed); Waiting how many were not
	// read because they wait out such a failure's backoff; Failing how
	// many partitions are failing after the pass (in their backoff).
	Failed, Waiting, Failing int
	// FailingRows names the partitions failing after the pass, one each:
	// the row that keeps failing, how often, why, and when it is parked.
	FailingRows []Failing
	// More reports that some partition had rows left when its page budget
	// ran out; Run starts the next pass at once.
	More bool
	// Lag is the group's lag per topic: read after this pass when it
	// advanced a watermark (or is this Subscriber's first), otherwise as
	// last read, at most lagEvery ago.
	Lag      []TopicLag
	Duration time.Duration
	// Unreleased is set by Drain when it ends at its bound (DrainBound)
	// with rows recorded but not yet released: those partitions' watermarks
	// stay where they are (the host's GC keeps their rows) until a later
	// run releases them. HeldBy is the open transaction that holds them,
	// when one does (Session 0: none seen, the window alone holds them).
	Unreleased []Unreleased
	HeldBy     OpenTrx
}

// Unreleased is a partition Drain left with rows recorded past its
// watermark but not released.
type Unreleased struct {
	Topic, Partition string
	Watermark        uint64 // the group's watermark, which stays
	Recorded         uint64 // every row up to here is recorded
}

// OpenTrx is an open transaction on the queue database, as the open
// view saw it: its session (SHOW PROCESSLIST's Id) and when it began by
// the server's clock.
type OpenTrx struct {
	Session int64
	Began   time.Time
}

func (st *PassStats) add(o PassStats) {
	st.Partitions = max(st.Partitions, o.Partitions)
	st.Joined += o.Joined
	st.Read += o.Read
	st.Recorded += o.Recorded
	st.Already += o.Already
	st.Unrecordable += o.Unrecordable
	st.Dropped += o.Dropped
	st.Advanced += o.Advanced
	st.Late += o.Late
	st.Held, st.OpenRead, st.OpenLapsed = o.Held, o.OpenRead, o.OpenLapsed
	st.Failed += o.Failed
	st.Waiting, st.Failing, st.FailingRows = o.Waiting, o.Failing, o.FailingRows
	st.Duration += o.Duration
	st.Lag = o.Lag
}

// Subscriber is mend as a consumer group of the host's *_dlq topics.
type Subscriber struct {
	cfg Config
	log *slog.Logger
	// settle is the window in force: Config.Settle, or with that zero
	// SettleFor the queue database's waits once the first pass read them
	// (settleRead). Only the pass goroutine sets it.
	settle     time.Duration
	settleRead bool

	members *membership
	// The recording passes' state: one pass at a time (passes never
	// overlap); within a pass each partition is handed to one worker.
	parts    map[partKey]*ledger
	horizons horizons
	lag      []TopicLag // as read at lagAt
	lagAt    time.Time
	share    *share    // nil unless Config.Leases is set
	heldSaid time.Time // when a release held by an open transaction last said so
	// failing is the last pass's FailingRows, for Failing.
	failingMu sync.Mutex
	failing   []Failing
	open      openReader
	lapsed    bool // the last pass's PassStats.OpenLapsed

	life struct {
		sync.Mutex
		cancel context.CancelFunc
		done   chan struct{}
		err    error
	}
}

// New returns a Subscriber; it touches no database until a pass runs.
func New(cfg Config) (*Subscriber, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	shares, err := newShare(cfg)
	if err != nil {
		return nil, err
	}
	return &Subscriber{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "subscribe", "group", cfg.Group),
		members:    newMembership(),
		parts:      map[partKey]*ledger{},
		horizons:   horizons{settle: cmp.Or(cfg.Settle, SettleDefault)},
		share:      shares,
		settle:     cmp.Or(cfg.Settle, SettleDefault),
		settleRead: cfg.Settle != 0,
	}, nil
}

// resolveSettle sets the window from the queue database's waits when
// Config.Settle was left zero, once: the pass that cannot read them fails
// like any pass that cannot read the queue database.
func (s *Subscriber) resolveSettle(ctx context.Context) error {
	if s.settleRead {
		return nil
	}
	w, err := ReadWaits(ctx, s.cfg.DB)
	if err != nil {
		return fmt.Errorf("subscribe: the settle window (Config.Settle is zero): %w", err)
	}
	s.settle = SettleFor(w)
	s.horizons.settle = s.settle
	s.settleRead = true
	s.log.InfoContext(ctx, "settle window from the queue database's waits", "settle", s.settle.String(), "waits", w.String())
	return nil
}

// Settle is the settle window in force. With Config.Settle zero it is
// SettleDefault until the first pass has read the queue database's waits,
// and SettleFor them after.
func (s *Subscriber) Settle() time.Duration { return s.settle }

// Group is the consumer group's name.
func (s *Subscriber) Group() string { return s.cfg.Group }

// Start runs passes in the background until Stop or ctx's end.
func (s *Subscriber) Start(ctx context.Context) error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.done != nil {
		return errors.New("subscribe: already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	s.life.cancel, s.life.done = cancel, make(chan struct{})
	go func() {
		defer close(s.life.done)
		err := s.Run(ctx)
		s.life.Lock()
		s.life.err = err
		s.life.Unlock()
	}()
	return nil
}

// Stop ends the passes started by Start and waits for them, then
// releases this replica's slot lease (Config.Leases), so the others take
// its partitions at once. It is idempotent and safe before Start; call it
// also after running passes without Start.
func (s *Subscriber) Stop() {
	s.life.Lock()
	cancel, done := s.life.cancel, s.life.done
	s.life.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	s.share.drop(context.Background()) // for passes run without Start
}

// Run runs membership steps every PollInterval on one goroutine and
// recording passes on another until ctx ends; it returns nil when ctx
// ends. A recording pass runs every PollInterval, at once after a pass
// that left rows behind or when membership finds a new partition; a
// failed pass (the queue database) is logged and retried with a backoff
// that doubles up to a minute. Neither loop ever waits for the other:
// joins go on while recording fails or a long pass runs. Pass, Drain and
// Run must not run at once on one Subscriber.
func (s *Subscriber) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !planted.membershipBehind {
		wg.Go(func() { s.runMembership(ctx) })
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	defer s.share.drop(ctx) // the others take its partitions on their next pass
	failures := 0
	for {
		found := s.members.found
		if failures > 0 {
			found = nil // a failing pass keeps its backoff
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-found:
			timer.Stop()
		}
		var st PassStats
		var err error
		if planted.membershipBehind {
			st, err = s.pass(ctx, true, true)
		} else {
			st, err = s.pass(ctx, true, false)
		}
		wait := s.cfg.PollInterval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			// Failing passes back off (doubling, up to a minute), so a
			// missing grant is one line a minute, not one a second.
			failures++
			wait = min(s.cfg.PollInterval<<min(failures-1, 16), max(time.Minute, s.cfg.PollInterval))
			s.log.WarnContext(ctx, "pass failed; retrying", "err", err, "failures", failures, "retry_in", wait.String())
		case st.More:
			failures, wait = 0, 0
		default:
			failures = 0
		}
		timer.Reset(wait)
	}
}

// Pass runs one membership step (register ahead every AheadInterval,
// discover the DLQ partitions holding rows, join those the group has no
// row for) and one recording pass: sample the table's highest offset,
// read the group's watermarks, read each of this replica's share from
// where this process left it and record what it reads, then release
// (advance the watermark of) every partition whose reads have settled,
// and read the lag. With Config.Leases, the share is the partitions
// hashing to this replica's rank among the live slot leases (taking a
// slot first if it holds none); otherwise every partition. A recording
// failure stops only its partition (PassStats.Failed); the error is the
// queue database's.
func (s *Subscriber) Pass(ctx context.Context) (PassStats, error) { return s.pass(ctx, true, true) }

func (s *Subscriber) pass(ctx context.Context, divide, members bool) (PassStats, error) {
	var st PassStats
	if members {
		n, err := s.membershipStep(ctx)
		st.Joined = n
		if err != nil {
			return st, err
		}
	}
	if err := s.resolveSettle(ctx); err != nil {
		return st, err
	}
	start, wall := s.cfg.NowFunc(), time.Now()
	sm, err := takeSample(func() (uint64, time.Time, error) { return s.horizon(ctx) }, s.cfg.NowFunc)
	if err != nil {
		return st, err
	}
	sm.open = s.readOpen(ctx) // after the horizon returned: see the package doc, "Open transactions"
	s.horizons.add(sm)
	st.OpenRead = s.open.lastRead()
	st.OpenLapsed = s.horizons.lapsed(sm.at)
	if st.OpenLapsed != s.lapsed {
		s.lapsed = st.OpenLapsed
		if st.OpenLapsed {
			s.log.WarnContext(ctx, "no read of the queue database's open transactions was usable for longer than the settle window; until one is, a MoveToDLQ held open longer than the window can be lost, as without PROCESS",
				"settle", s.settle.String(), "last_read", st.OpenRead)
		} else {
			s.log.InfoContext(ctx, "the subscription's view of the open transactions is usable again")
		}
	}
	if err := s.loadOwn(ctx); err != nil {
		return st, err
	}
	parts := s.ledgers()
	st.Partitions = len(parts)
	phase := time.Now() // phases are timed by the wall clock, for the debug line only
	sampled := phase.Sub(wall)
	if err := s.readAll(ctx, parts, divide, &st); err != nil {
		return st, err
	}
	read := time.Since(phase)
	phase = time.Now()
	if err := s.release(ctx, divide, &st); err != nil {
		return st, err
	}
	released := time.Since(phase)
	phase = time.Now()
	if s.lagAt.IsZero() || st.Advanced > 0 || start.Sub(s.lagAt) >= lagEvery {
		if s.lag, err = Lag(ctx, s.cfg.DB, s.cfg.Group); err != nil {
			return st, err
		}
		s.lagAt = start
	}
	st.Lag = s.lag
	now := s.cfg.NowFunc()
	for _, l := range s.parts {
		if l.waiting(now) {
			st.Failing++
			st.FailingRows = append(st.FailingRows, s.failingOf(l))
		}
	}
	slices.SortFunc(st.FailingRows, func(a, b Failing) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	s.log.DebugContext(ctx, "pass phases", "sample", sampled.String(), "read", read.String(), "release", released.String(),
		"lag", time.Since(phase).String())
	s.failingMu.Lock()
	s.failing = st.FailingRows
	s.failingMu.Unlock()
	st.Duration = now.Sub(start)
	if st.Read > 0 || st.Joined > 0 || st.Advanced > 0 || st.Late > 0 || st.Failed > 0 {
		s.log.InfoContext(ctx, "pass", "partitions", st.Partitions, "joined", st.Joined, "read", st.Read, "recorded", st.Recorded,
			"already", st.Already, "unrecordable", st.Unrecordable, "dropped", st.Dropped, "advanced", st.Advanced, "late", st.Late,
			"failed", st.Failed, "failing", st.Failing, "held", st.Held, "more", st.More)
	}
	if s.cfg.Hooks.OnPass != nil {
		s.cfg.Hooks.OnPass(st)
	}
	return st, nil
}

// Failing is a partition whose recording keeps failing: it holds its
// watermark, and with it the host's GC of that partition, until the row
// records or is parked.
type Failing struct {
	Topic, Partition string
	// Offset is the row that failed; 0 when mend's store failed the whole
	// batch (no row's fault: that never parks a row).
	Offset uint64
	// Attempts is how many times in a row recording failed there.
	Attempts int
	// LastError is the last failure, as mend's logs show it. It may quote
	// the payload: escape it wherever it is shown.
	LastError string
	// ParkAfter is the bound: after this many attempts the row is parked
	// as a stand-in (Config.ParkAfter); 0 for a store failure.
	ParkAfter int
	// RetryAt is when the partition is read again.
	RetryAt time.Time
}

// Failing lists the partitions whose recording is failing now (the
// last pass's view; Run's passes update it).
func (s *Subscriber) Failing() []Failing {
	s.failingMu.Lock()
	defer s.failingMu.Unlock()
	return slices.Clone(s.failing)
}

func (s *Subscriber) failingOf(l *ledger) Failing {
	f := Failing{Topic: l.topic, Partition: l.partition, Offset: l.failingAt, Attempts: l.failures, RetryAt: l.retryAt}
	if l.lastErr != nil {
		f.LastError = l.lastErr.Error()
	}
	if f.Offset != 0 {
		f.ParkAfter = s.cfg.ParkAfter
	}
	return f
}

// lagEvery bounds the age of the lag a pass reports. The lag changes when
// a watermark moves, so a pass that advanced one reads it again; otherwise
// only rows arriving (and other replicas' advances) change it, and reading
// it costs a scan of every index entry above the watermarks: once per pass
// while a replica polls beside another still recording a backlog (or while
// a backlog waits for the settle window) added up to a third of the
// server's work in the backlog benchmark.
const lagEvery = 5 * time.Second

// loadOwn reads the group's rows: which partitions it has joined, and each
// watermark. A watermark another replica moved (or one that went away:
// mend subscribe --remove) restarts that partition's reads from it, since
// this process's reads no longer describe the range.
func (s *Subscriber) loadOwn(ctx context.Context) error {
	rows, err := s.own(ctx)
	if err != nil {
		return err
	}
	joined := make(map[partKey]uint64, len(rows))
	for _, r := range rows {
		joined[r.key] = r.acked
		if l := s.parts[r.key]; l != nil && r.acked != l.acked {
			l.reset(r.acked)
		}
	}
	for k := range s.parts {
		if _, ok := joined[k]; !ok {
			delete(s.parts, k) // joined again, from 0, when discovery sees it
		}
	}
	s.members.setJoined(joined)
	return nil
}

// ledgers returns the ledger of each partition holding rows, as
// membership last discovered them, creating those first seen. A partition
// no longer holding rows, with nothing left to release, is forgotten
// (a failure with it: the row that failed is gone): memory stays bounded
// by the partitions holding rows.
func (s *Subscriber) ledgers() []*ledger {
	active := s.members.snapshot()
	out := make([]*ledger, 0, len(active))
	live := make(map[partKey]bool, len(active))
	for _, a := range active {
		l := s.parts[a.key]
		if l == nil {
			l = newLedger(a.key.topic, a.partition, a.acked)
			s.parts[a.key] = l
		}
		live[a.key] = true
		out = append(out, l)
	}
	for k, l := range s.parts {
		if !live[k] && len(l.cps) == 0 {
			delete(s.parts, k)
		}
	}
	return out
}

// Pending reports whether some partition holds rows that were read and
// recorded but not yet released (the watermark waits for the settle
// window), or is failing.
func (s *Subscriber) Pending() bool {
	for _, l := range s.parts {
		if len(l.cps) > 0 || l.failures > 0 {
			return true
		}
	}
	return false
}

// drainPolls is how many poll intervals past the settle window Drain
// waits for its last release (DrainBound).
const drainPolls = 5

// DrainBound is how long Drain runs at most after its last pass that had
// rows left to read: the settle window plus drainPolls poll intervals.
// A transaction held open on the queue database (with PROCESS, the
// watermarks wait for it however long) does not keep it running past
// that: it ends with what it has recorded, and names what stays held.
//
// With Config.Settle zero, call it after a pass (or Drain's first) for
// the window read from the server; before, it assumes SettleDefault.
func (s *Subscriber) DrainBound() time.Duration {
	return s.settle + drainPolls*s.cfg.PollInterval
}

// Drain runs passes, PollInterval apart, until one leaves nothing unread
// and nothing unreleased: every dead letter visible when it started is
// recorded and the group's watermarks are past it. It takes at least the
// settle window when anything was read, and at most DrainBound after the
// last pass that had rows left: then it returns with nil error,
// PassStats.Unreleased naming the partitions whose watermarks stay
// (their rows are recorded; a later run releases them) and HeldBy the
// open transaction holding them. It is mend run --once's subscription,
// and returns the sum of the passes' counts (Lag from the last). Stop it
// with ctx.
func (s *Subscriber) Drain(ctx context.Context) (PassStats, error) {
	var sum PassStats
	timer := time.NewTimer(0)
	defer timer.Stop()
	from := s.cfg.NowFunc()
	for {
		select {
		case <-ctx.Done():
			return sum, ctx.Err()
		case <-timer.C:
		}
		st, err := s.pass(ctx, false, true)
		if err != nil {
			return sum, err
		}
		sum.add(st)
		if st.Failed > 0 {
			// --once promises every dead letter: a partition that failed
			// ends the drain with its error rather than waiting out the
			// backoff, as a failed pass always did.
			return sum, s.failure()
		}
		if !st.More && !s.Pending() {
			return sum, nil
		}
		now := s.cfg.NowFunc()
		if st.More {
			from = now
		} else if now.Sub(from) >= s.DrainBound() && !planted.drainUnbounded {
			sum.Unreleased = s.unreleased()
			if v := s.horizons.view; v.state == openRead && !v.oldest.IsZero() {
				sum.HeldBy = OpenTrx{Session: v.session, Began: v.oldest}
			}
			return sum, nil
		}
		if st.More {
			timer.Reset(0)
		} else {
			timer.Reset(s.cfg.PollInterval)
		}
	}
}

// unreleased lists the partitions with rows recorded past their
// watermark, in topic and partition order.
func (s *Subscriber) unreleased() []Unreleased {
	var out []Unreleased
	for _, l := range s.parts {
		if len(l.cps) > 0 {
			out = append(out, Unreleased{Topic: l.topic, Partition: l.partition, Watermark: l.acked, Recorded: l.cps[len(l.cps)-1].offset})
		}
	}
	slices.SortFunc(out, func(a, b Unreleased) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// failure returns the recording errors of the partitions failing now.
func (s *Subscriber) failure() error {
	var errs []error
	for _, l := range s.parts {
		if l.failures > 0 && l.lastErr != nil {
			errs = append(errs, l.lastErr)
		}
	}
	return errors.Join(errs...)
}

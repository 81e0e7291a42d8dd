package subscribe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
)

// PassStats is what one pass did.
type PassStats struct {
	Partitions int // DLQ partitions holding rows, as discovery found them
	// Share is how many of them this replica read: all of them unless the
	// replicas divide the work (Config.Leases), and then Replicas is how
	// many live replicas it divided them with.
	Share, Replicas int
	Joined          int // partitions the group joined in this pass (ahead or on first sight)
	Read            int // dead letters read
	Recorded        int // new records
	Already         int // rows recorded before (by a replica, an earlier pass or a linked-in consumer)
	Unrecordable    int // rows recorded as a parked stand-in instead (see Hooks.OnUnrecordable)
	Dropped         int // rows the server matched only through its collation, passed
	Advanced        int // partitions whose watermark moved
	Late            int // partitions re-read because a row committed after a later one was read
	// More reports that some partition had rows left when its page budget
	// ran out; Run starts the next pass at once.
	More bool
	// Lag is the group's lag per topic: read after this pass when it
	// advanced a watermark (or is this Subscriber's first), otherwise as
	// last read, at most lagEvery ago.
	Lag      []TopicLag
	Duration time.Duration
}

// part is the in-memory state of one partition. Its size is fixed: the
// checkpoints are at most one per pass within the settle window.
type part struct {
	topic, partition string
	acked            uint64 // the group's watermark as this process last knew it
	seen             uint64 // every row up to here has been read (and recorded or passed)
	// cps are the ends of reads not yet released, oldest first: rows is
	// how many rows the server returned in (acked, offset].
	cps []checkpoint
	// passRows counts the server's rows read in the current pass.
	passRows int
}

type checkpoint struct {
	offset uint64
	rows   int
}

func (p *part) reset(acked uint64) {
	p.acked, p.seen, p.cps, p.passRows = acked, acked, nil, 0
}

// sample is the table's highest committed offset at a time.
type sample struct {
	offset uint64
	at     time.Time
}

// Subscriber is mend as a consumer group of the host's *_dlq topics.
type Subscriber struct {
	cfg Config
	log *slog.Logger

	// parts is touched by one pass at a time (passes never overlap); within
	// a pass each partition is handed to one worker.
	parts     map[partKey]*part
	joined    map[partKey]uint64 // partitions the group has a row for, with their watermarks, as last read or written
	samples   []sample
	lastAhead time.Time
	lag       []TopicLag // as read at lagAt
	lagAt     time.Time
	share     *share // nil unless Config.Leases is set

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
	sh, err := newShare(cfg)
	if err != nil {
		return nil, err
	}
	return &Subscriber{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "subscribe", "group", cfg.Group),
		parts:  map[partKey]*part{},
		joined: map[partKey]uint64{},
		share:  sh,
	}, nil
}

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

// Run runs a pass every PollInterval (at once after a pass that left rows
// behind) until ctx ends; a failed pass is logged and retried with a
// backoff that doubles up to a minute. It returns nil when ctx ends.
// Pass, Drain and Run must not run at once on one Subscriber.
func (s *Subscriber) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	defer s.share.drop(ctx) // the others take its partitions on their next pass
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		st, err := s.Pass(ctx)
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

// Pass runs one pass: sample the table's highest offset, register ahead
// (every AheadInterval), discover the DLQ partitions holding rows, join
// those the group has no row for, read each of this replica's share from
// where this process left it and record what it reads, then release
// (advance the watermark of) every partition whose reads have settled, and
// read the lag. With Config.Leases, the share is the partitions hashing to
// this replica's rank among the live slot leases (taking a slot first if
// it holds none); otherwise every partition.
func (s *Subscriber) Pass(ctx context.Context) (PassStats, error) { return s.pass(ctx, true) }

func (s *Subscriber) pass(ctx context.Context, divide bool) (PassStats, error) {
	start, wall := s.cfg.NowFunc(), time.Now()
	var st PassStats
	h, err := s.horizon(ctx)
	if err != nil {
		return st, err
	}
	s.samples = append(s.samples, sample{h, start})
	if err := s.loadOwn(ctx); err != nil {
		return st, err
	}
	if s.lastAhead.IsZero() || start.Sub(s.lastAhead) >= s.cfg.AheadInterval {
		n, err := s.registerAhead(ctx)
		st.Joined += n
		if err != nil {
			return st, err
		}
		s.lastAhead = start
	}
	active, joined, err := s.discover(ctx)
	st.Joined += joined
	if err != nil {
		return st, err
	}
	st.Partitions = len(active)
	phase := time.Now() // phases are timed by the wall clock, for the debug line only
	discovered := phase.Sub(wall)
	if err := s.readAll(ctx, active, divide, &st); err != nil {
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
	s.log.DebugContext(ctx, "pass phases", "discover", discovered.String(), "read", read.String(), "release", released.String(),
		"lag", time.Since(phase).String())
	st.Duration = s.cfg.NowFunc().Sub(start)
	if st.Read > 0 || st.Joined > 0 || st.Advanced > 0 || st.Late > 0 {
		s.log.InfoContext(ctx, "pass", "partitions", st.Partitions, "joined", st.Joined, "read", st.Read, "recorded", st.Recorded,
			"already", st.Already, "unrecordable", st.Unrecordable, "dropped", st.Dropped, "advanced", st.Advanced, "late", st.Late, "more", st.More)
	}
	if s.cfg.Hooks.OnPass != nil {
		s.cfg.Hooks.OnPass(st)
	}
	return st, nil
}

// loadOwn reads the group's rows: which partitions it has joined, and each
// watermark. A watermark another replica moved (or one that went away:
// mend subscribe --remove) restarts that partition's reads from it, since
// this process's counts no longer describe the range.
func (s *Subscriber) loadOwn(ctx context.Context) error {
	rows, err := s.own(ctx)
	if err != nil {
		return err
	}
	joined := make(map[partKey]uint64, len(rows))
	for _, r := range rows {
		joined[r.key] = r.acked
		if p := s.parts[r.key]; p != nil && r.acked != p.acked {
			p.reset(r.acked)
		}
	}
	for k := range s.parts {
		if _, ok := joined[k]; !ok {
			delete(s.parts, k) // joined again, from 0, when discovery sees it
		}
	}
	s.joined = joined
	return nil
}

// registerAhead joins, at offset 0, every partition a dead letter could
// later appear on: T_dlq for each partition of an AheadTopics topic T that
// one of the host's groups has joined (the host's subscriber joins a
// partition before it reads it, so before it can dead-letter anything from
// it), each *_dlq partition another group has joined, and the
// queue-partitioned *_dlq partitions of each queue Config.Queues names.
func (s *Subscriber) registerAhead(ctx context.Context) (int, error) {
	others, err := s.others(ctx)
	if err != nil {
		return 0, err
	}
	var want []partKey
	var spell []string
	add := func(topic, partition string) {
		if mend.ValidateIdentity("topic", topic, true) != nil {
			return
		}
		k := keyOf(topic, partition)
		if _, ok := s.joined[k]; !ok {
			s.joined[k] = 0 // as the join leaves it; loadOwn reads it back next pass
			want = append(want, k)
			spell = append(spell, partition)
		}
	}
	for _, o := range others {
		if t, ok := dlqTopic(o.topic); ok {
			add(t, o.partition)
		} else if slices.Contains(s.cfg.AheadTopics, o.topic) {
			add(o.topic+dlq.DLQSuffix, o.partition)
		}
	}
	if s.cfg.Queues != nil {
		queues, err := s.cfg.Queues(ctx)
		if err != nil {
			return 0, fmt.Errorf("subscribe: list known queues: %w", err)
		}
		for _, q := range queues {
			if mend.ValidateIdentity("queue", q, true) != nil {
				continue
			}
			for _, t := range s.cfg.AheadTopics {
				if dlq.PartitionIsQueue(t) {
					add(t+dlq.DLQSuffix, q)
				}
			}
		}
	}
	if err := s.joinMany(ctx, want, spell); err != nil {
		for _, k := range want {
			delete(s.joined, k) // joined again next time; INSERT IGNORE keeps a row that made it
		}
		return 0, err
	}
	return len(want), nil
}

// discover lists the DLQ partitions that hold rows and joins those the
// group has no row for yet: first sight. Such a partition is joined within
// one pass of its first dead letter becoming visible.
func (s *Subscriber) discover(ctx context.Context) ([]partKey, int, error) {
	names, err := queryStrings(ctx, s.cfg.DB, "list topics", sqlTopics)
	if err != nil {
		return nil, 0, err
	}
	var topics []string
	for _, n := range names {
		if t, ok := dlqTopic(n); ok && !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	var active, fresh []partKey
	var spell []string
	for _, t := range topics {
		parts, err := queryStrings(ctx, s.cfg.DB, "list partitions of "+t, sqlPartitions, t)
		if err != nil {
			return nil, 0, err
		}
		for _, p := range parts {
			k := keyOf(t, p)
			acked, ok := s.joined[k]
			if !ok {
				fresh, spell = append(fresh, k), append(spell, p)
			}
			if s.parts[k] == nil {
				s.parts[k] = &part{topic: t, partition: p, acked: acked, seen: acked}
			}
			active = append(active, k)
		}
	}
	if err := s.joinMany(ctx, fresh, spell); err != nil {
		return nil, 0, err
	}
	for _, k := range fresh {
		s.joined[k] = 0
	}
	joined := len(fresh)
	slices.SortFunc(active, func(a, b partKey) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	// Memory stays bounded by the partitions holding rows: a drained
	// partition with nothing left to release is forgotten.
	live := make(map[partKey]bool, len(active))
	for _, k := range active {
		live[k] = true
	}
	for k, p := range s.parts {
		if !live[k] && len(p.cps) == 0 {
			delete(s.parts, k)
		}
	}
	return active, joined, nil
}

// lagEvery bounds the age of the lag a pass reports. The lag changes when
// a watermark moves, so a pass that advanced one reads it again; otherwise
// only rows arriving (and other replicas' advances) change it, and reading
// it costs a scan of every index entry above the watermarks: once per pass
// while a replica polls beside another still recording a backlog (or while
// a backlog waits for the settle window) added up to a third of the
// server's work in the backlog benchmark.
const lagEvery = 5 * time.Second

// shareRecheck is how often a pass that divides the partitions reads the
// slot leases again (one statement) while it reads: a replica that starts
// or stops during a long pass over a backlog changes the share within it. Until the others see a new replica's slot they read its
// partitions too: in the backlog benchmark, where both replicas start at
// once, a second of that was 6% of the reads, a fifth of a second 3%.
const shareRecheck = 200 * time.Millisecond

// readAll reads the active partitions (this replica's share of them when
// divide is set and the replicas divide the work), Concurrency workers at
// a time, and then leaves a checkpoint on each partition read.
func (s *Subscriber) readAll(ctx context.Context, active []partKey, divide bool, st *PassStats) error {
	// A worker reads up to group partitions per statement: few enough that
	// every worker gets some (a handful of deep partitions are read in
	// parallel), at most readGroup.
	sh := s.share
	if !divide {
		sh = nil
	}
	group := min(max(len(active)/(max(sh.live(), 1)*s.cfg.Concurrency), 1), readGroup)
	work := make(chan *part)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range min(s.cfg.Concurrency, max(len(active), 1)) {
		wg.Go(func() {
			var ps PassStats
			err := s.worker(ctx, work, group, sh, &ps)
			mu.Lock()
			defer mu.Unlock()
			st.Read += ps.Read
			st.Recorded += ps.Recorded
			st.Already += ps.Already
			st.Unrecordable += ps.Unrecordable
			st.Dropped += ps.Dropped
			st.More = st.More || ps.More
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	// Each pass starts at a random partition, so replicas of the group
	// overlapping on a backlog mostly work on different partitions first.
	start := 0
	if len(active) > 0 {
		start = rand.IntN(len(active))
	}
	// The slot leases are read again every shareRecheck for as long as the
	// workers read, also while every worker is busy (a few deep partitions
	// keep them for seconds) and after the last partition was handed out.
	var tick <-chan time.Time
	recheck := func() {
		if sh == nil {
			return
		}
		if err := sh.refresh(ctx); err != nil {
			s.log.WarnContext(ctx, "could not read the replicas' slot leases; reading every partition meanwhile", "err", err)
		}
		st.Replicas = max(st.Replicas, sh.live(), 1)
	}
	recheck()
	if sh != nil {
		t := time.NewTicker(shareRecheck)
		defer t.Stop()
		tick = t.C
	}
dispatch:
	for i := range active {
		k := active[(start+i)%len(active)]
		for sh.mine(k) {
			select {
			case work <- s.parts[k]:
				st.Share++
				continue dispatch
			case <-tick:
				recheck()
			case <-ctx.Done():
				break dispatch
			}
		}
	}
	close(work)
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick:
			recheck()
		}
	}
	for _, k := range active {
		if p := s.parts[k]; p.passRows > 0 {
			p.cps = append(p.cps, checkpoint{offset: p.seen, rows: p.passRows + p.pending()})
			p.passRows = 0
		}
	}
	return errors.Join(errs...)
}

// pending is the rows counted by p's checkpoints so far.
func (p *part) pending() int {
	if len(p.cps) == 0 {
		return 0
	}
	return p.cps[len(p.cps)-1].rows
}

// batch is the pages a worker has read and not yet recorded, from one or
// more partitions: recording them in one RecordMany (one transaction)
// costs the same round trips as a single partition's page.
type batch struct {
	pages []batchPage
	rows  int
}

type batchPage struct {
	p    *part
	from uint64 // the offset the page was read after
	pg   page
}

// readGroup bounds the partitions one read covers: the read's page is
// shared between them, so the rows of one read stay within PageSize.
const readGroup = 16

// reading is a partition a worker is reading in this pass.
type reading struct {
	p      *part
	after  uint64 // read up to here
	budget int    // rows this pass may still read from it
}

// worker reads the partitions it is handed, up to group at a time in
// one statement that shares PageSize rows between them, each from where
// this process left it, until the server returns a short page for it (not
// until a page holds few rows mend keeps: rows matched only through the
// collation are dropped), its budget (PagesPerPass pages) runs out or it
// stops being this replica's (sh, when the replicas divide the work). It
// records its pages in batches of at least PageSize rows; a partition
// counts as read only as far as its rows are recorded.
func (s *Subscriber) worker(ctx context.Context, work <-chan *part, group int, sh *share, st *PassStats) error {
	var b batch
	var pending []*reading
	open := true
	for {
		for open && len(pending) < group {
			p, ok := <-work
			if !ok {
				open = false
				break
			}
			pending = append(pending, &reading{p: p, after: p.seen, budget: s.cfg.PagesPerPass * s.cfg.PageSize})
		}
		if len(pending) == 0 {
			break
		}
		limit := max(s.cfg.PageSize/len(pending), 1)
		spans := make([]span, len(pending))
		for i, r := range pending {
			spans[i] = span{topic: r.p.topic, partition: r.p.partition, after: r.after, limit: min(limit, r.budget)}
		}
		pages, err := s.fetchMany(ctx, spans)
		if err != nil {
			drain(work)
			return err
		}
		keep := pending[:0]
		for i, r := range pending {
			pg := pages[i]
			st.Dropped += pg.dropped
			if pg.n > 0 {
				b.pages = append(b.pages, batchPage{r.p, r.after, pg})
				b.rows += len(pg.rows)
				r.after = pg.last
			}
			r.budget -= pg.n
			switch {
			case pg.n < spans[i].limit: // a short page: nothing more for now
			case r.budget <= 0:
				st.More = true
			case !sh.mine(keyOf(r.p.topic, r.p.partition)):
				// Another replica took it over since it was handed out
				// (one started): it reads on from the watermark.
			default:
				keep = append(keep, r)
			}
		}
		pending = keep
		if b.rows >= s.cfg.PageSize {
			if err := s.flush(ctx, &b, st); err != nil {
				drain(work)
				return err
			}
		}
	}
	return s.flush(ctx, &b, st)
}

// drain empties a work channel its worker gives up on.
func drain[T any](ch <-chan T) {
	for range ch {
	}
}

// flush records a batch's rows with one RecordMany and moves each
// partition's read mark past what is now recorded (or parked). A row that
// failed for a reason that may pass stops its partition just before it,
// so the next pass reads it again.
func (s *Subscriber) flush(ctx context.Context, b *batch, st *PassStats) error {
	defer func() { b.pages, b.rows = b.pages[:0], 0 }()
	var ds []dlq.Delivery
	for _, bp := range b.pages {
		for _, r := range bp.pg.rows {
			ds = append(ds, r.Delivery())
		}
	}
	var results []dlq.ManyResult
	if len(ds) > 0 {
		var err error
		if results, err = s.cfg.Intake.RecordMany(ctx, ds); err != nil {
			return fmt.Errorf("subscribe: record %d dead letters: %w", len(ds), err)
		}
	}
	var errs []error
	i := 0
	for _, bp := range b.pages {
		p, pg := bp.p, bp.pg
		res := results[i : i+len(pg.rows)]
		i += len(pg.rows)
		if p.seen != bp.from {
			continue // the partition stopped at an earlier row: read again next pass
		}
		stopped := false
		for j, r := range res {
			row := pg.rows[j]
			switch {
			case r.Err == nil && r.Created:
				st.Recorded++
			case r.Err == nil:
				st.Already++
			case errors.Is(r.Err, mend.ErrInvalid) || errors.Is(r.Err, mend.ErrIdentityMismatch):
				if err := s.park(ctx, row, r.Err); err != nil {
					r.Err = err
					break
				}
				st.Unrecordable++
			}
			if r.Err != nil && !errors.Is(r.Err, mend.ErrInvalid) && !errors.Is(r.Err, mend.ErrIdentityMismatch) || errors.Is(r.Err, errPark) {
				// Count as read only the server's rows below this one, and
				// only when none of them was dropped (then they are the
				// kept rows before it); otherwise the whole page is read
				// again next pass, which recording makes harmless.
				if j > 0 && pg.dropped == 0 {
					p.seen, p.passRows = pg.rows[j-1].Offset, p.passRows+j
				}
				stopped = true
				errs = append(errs, fmt.Errorf("subscribe: record offset %d of %s/%q: %w", row.Offset, p.topic, p.partition, r.Err))
				break
			}
			st.Read++
		}
		if !stopped {
			p.seen, p.passRows = pg.last, p.passRows+pg.n
		}
	}
	return errors.Join(errs...)
}

// errPark marks a stand-in that could not be recorded now.
var errPark = errors.New("subscribe: park the stand-in")

// park records a parked stand-in for a row the intake refused, under an
// identity naming the row's offset, so an operator sees it and the
// watermark can pass the row. Only an error that may pass (the store) is
// returned; a stand-in the store refuses too is logged and passed.
func (s *Subscriber) park(ctx context.Context, r dlq.Row, cause error) error {
	if s.cfg.Hooks.OnUnrecordable != nil {
		s.cfg.Hooks.OnUnrecordable(r.Topic, r.PartitionKey, r.Offset, cause)
	}
	src := mend.SourceID{Queue: dlq.QueueUnresolved, Topic: r.Topic, Partition: r.PartitionKey,
		MessageID: fmt.Sprintf("mend-subscribe/unrecordable/offset/%d", r.Offset)}
	d := r.Delivery()
	if q := d.Source.Queue; mend.ValidateIdentity("queue", q, true) == nil {
		src.Queue = q
	}
	if mend.ValidateIdentity("partition", src.Partition, false) != nil {
		src.Partition = ""
	}
	if mend.ValidateIdentity("topic", src.Topic, true) != nil {
		src.Topic = "(unrecordable)" + dlq.DLQSuffix
	}
	reason := fmt.Sprintf("subscribe: the dead letter at offset %d of the host's queue_messages (topic %q, partition %q, id %q, %d payload bytes) could not be recorded as itself: %v. "+
		"This parked stand-in keeps it visible so the %q group's watermark could pass it; the row itself stays in queue_messages only until the host's GC removes it: copy what you need from it now.",
		r.Offset, clip(r.Topic, 300), clip(r.PartitionKey, 300), clip(r.ID, 300), len(r.Payload), cause, s.cfg.Group)
	snap := mend.Snapshot{OriginalTopic: d.OriginalTopic, FailureCount: d.FailureCount, LastError: clip(d.LastError, 4096), FailedAt: d.FailedAt, Subjects: d.Subjects}
	if snap.OriginalTopic == "" || mend.ValidateIdentity("original_topic", snap.OriginalTopic, false) != nil {
		snap.OriginalTopic = dlq.BaseTopic(src.Topic)
	}
	_, _, err := s.cfg.Parker.RecordCreate(ctx, mend.CreateParams{Source: src, Snapshot: snap, State: mend.StateParked, Reason: reason,
		OpID: mend.NewOpID(), Actor: s.cfg.Actor})
	if err != nil && !errors.Is(err, mend.ErrInvalid) && !errors.Is(err, mend.ErrIdentityMismatch) {
		return fmt.Errorf("%w for offset %d of %s/%q: %w", errPark, r.Offset, r.Topic, r.PartitionKey, err)
	}
	if err != nil {
		s.log.ErrorContext(ctx, "a dead letter could not be recorded, nor its stand-in; passing it so the watermark does not stall",
			"topic", r.Topic, "partition", r.PartitionKey, "offset", r.Offset, "cause", cause, "err", err)
		return nil
	}
	s.log.WarnContext(ctx, "a dead letter could not be recorded as itself; recorded a parked stand-in naming its offset",
		"topic", r.Topic, "partition", r.PartitionKey, "offset", r.Offset, "message_id", src.MessageID, "cause", cause)
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// settled returns the highest offset every row at or below which is final:
// the table's highest committed offset as sampled at least Settle ago. Any
// offset at or below it was allocated before that sample, so the
// transaction inserting it began more than Settle ago. Older samples are
// dropped; ok is false while no sample is old enough.
func (s *Subscriber) settled() (uint64, bool) {
	cut := s.cfg.NowFunc().Add(-s.cfg.Settle)
	i := -1
	for j, sm := range s.samples {
		if !sm.at.After(cut) {
			i = j
		}
	}
	if i < 0 {
		return 0, false
	}
	s.samples = s.samples[i:]
	return s.samples[0].offset, true
}

// release advances the watermark of each partition to its newest settled
// checkpoint, after checking that the range holds exactly the rows this
// process read from it: a difference means a row committed after a later
// one was read (or rows were removed); then the partition is read again
// from its watermark, and released on a later pass. Partitions are counted
// and advanced manyChunk at a time, one statement each: an advance is a
// commit.
//
// When the replicas divide the work (divide, with slot leases), only this
// replica's share is released; what it read of another's partitions (while
// it had not yet seen that replica's slot) is forgotten. Releasing it would
// move the watermark under the owner, which then reads again from there
// everything it had read beyond it: 40% of the reads when two replicas
// started together on a few deep partitions.
func (s *Subscriber) release(ctx context.Context, divide bool, st *PassStats) error {
	f, ok := s.settled()
	if !ok {
		return nil
	}
	type due struct {
		p *part
		i int // the newest checkpoint at or below f
	}
	var todo []due
	for k, p := range s.parts {
		if divide && len(p.cps) > 0 && !s.share.mine(k) {
			p.reset(p.acked) // read again from the watermark if it becomes ours
			continue
		}
		i := -1
		for j, c := range p.cps {
			if c.offset <= f {
				i = j
			}
		}
		if i >= 0 {
			todo = append(todo, due{p, i})
		}
	}
	for from := 0; from < len(todo); from += manyChunk {
		chunk := todo[from:min(from+manyChunk, len(todo))]
		spans := make([]span, len(chunk))
		for j, d := range chunk {
			spans[j] = span{topic: d.p.topic, partition: d.p.partition, after: d.p.acked, upTo: d.p.cps[d.i].offset}
		}
		counts, err := s.countMany(ctx, spans)
		if err != nil {
			return err
		}
		var ok []due
		var move []span
		for j, d := range chunk {
			p, c := d.p, d.p.cps[d.i]
			if counts[j] != c.rows {
				s.log.InfoContext(ctx, "rows appeared (or went) below what was read; reading the partition again from its watermark",
					"topic", p.topic, "partition", p.partition, "watermark", p.acked, "up_to", c.offset, "read", c.rows, "now", counts[j])
				p.reset(p.acked)
				st.Late++
				continue
			}
			ok, move = append(ok, d), append(move, spans[j])
		}
		if len(move) == 0 {
			continue
		}
		if err := s.advanceMany(ctx, move); err != nil {
			return err
		}
		for _, d := range ok {
			p, c := d.p, d.p.cps[d.i]
			rest := p.cps[d.i+1:]
			for j := range rest {
				rest[j].rows -= c.rows
			}
			p.acked, p.cps = c.offset, slices.Clone(rest)
			st.Advanced++
		}
	}
	return nil
}

// Pending reports whether some partition holds rows that were read and
// recorded but not yet released (the watermark waits for the settle
// window).
func (s *Subscriber) Pending() bool {
	for _, p := range s.parts {
		if len(p.cps) > 0 {
			return true
		}
	}
	return false
}

// Drain runs passes, PollInterval apart, until one leaves nothing unread
// and nothing unreleased: every dead letter visible when it started is
// recorded and the group's watermarks are past it. It takes at least the
// settle window when anything was read. It is mend run --once's
// subscription, and returns the sum of the passes' counts (Lag from the
// last). Stop it with ctx.
func (s *Subscriber) Drain(ctx context.Context) (PassStats, error) {
	var sum PassStats
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return sum, ctx.Err()
		case <-timer.C:
		}
		st, err := s.pass(ctx, false)
		if err != nil {
			return sum, err
		}
		sum.Partitions = max(sum.Partitions, st.Partitions)
		sum.Joined += st.Joined
		sum.Read += st.Read
		sum.Recorded += st.Recorded
		sum.Already += st.Already
		sum.Unrecordable += st.Unrecordable
		sum.Dropped += st.Dropped
		sum.Advanced += st.Advanced
		sum.Late += st.Late
		sum.Duration += st.Duration
		sum.Lag = st.Lag
		if !st.More && !s.Pending() {
			return sum, nil
		}
		if st.More {
			timer.Reset(0)
		} else {
			timer.Reset(s.cfg.PollInterval)
		}
	}
}

package subscribe

// The reader: a pass's reads of this replica's partitions, page by page,
// several partitions per statement, and the recording of what it read.
// Every outcome is per partition: a row that fails stops its own
// partition (which then backs off), never the others.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
)

// shareRecheck is how often a pass that divides the partitions reads the
// slot leases again (one statement) while it reads: a replica that starts
// mid-pass is seen within it, so the two overlap on at most this much
// work.
const shareRecheck = 200 * time.Millisecond

// readGroup bounds the partitions one read covers: the read's page is
// shared between them, so the rows of one read stay within PageSize.
const readGroup = 16

// readAll reads this replica's share of the partitions in parts (in
// order; those in their failure backoff wait), Concurrency at a time, and
// closes each partition's reads of this pass into a checkpoint. An error
// is the queue database's: a recording failure is its partition's alone
// (ledger.failed) and is counted in stats.Failed.
func (s *Subscriber) readAll(ctx context.Context, parts []*ledger, divide bool, stats *PassStats) error {
	shares := s.share
	if !divide {
		shares = nil
	}
	now := s.cfg.NowFunc()
	var ready []*ledger
	for _, l := range parts {
		if l.waiting(now) {
			stats.Waiting++
			continue
		}
		ready = append(ready, l)
	}
	// A worker reads up to group partitions per statement: few enough that
	// every worker gets some (a handful of deep partitions are read in
	// parallel), at most readGroup.
	group := min(max(len(ready)/(max(shares.live(), 1)*s.cfg.Concurrency), 1), readGroup)
	work := make(chan *ledger)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range min(s.cfg.Concurrency, max(len(ready), 1)) {
		wg.Go(func() {
			var own PassStats
			err := s.worker(ctx, work, group, shares, &own)
			mu.Lock()
			defer mu.Unlock()
			stats.Read += own.Read
			stats.Recorded += own.Recorded
			stats.Already += own.Already
			stats.Unrecordable += own.Unrecordable
			stats.Dropped += own.Dropped
			stats.Failed += own.Failed
			stats.More = stats.More || own.More
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	// Each pass starts at a random partition, so replicas of the group
	// overlapping on a backlog mostly work on different partitions first.
	first := 0
	if len(ready) > 0 {
		first = rand.IntN(len(ready))
	}
	// The slot leases are read again every shareRecheck for as long as the
	// workers read, also while every worker is busy (a few deep partitions
	// keep them for seconds) and after the last partition was handed out.
	var tick <-chan time.Time
	recheck := func() {
		if shares == nil {
			return
		}
		if err := shares.refresh(ctx); err != nil {
			s.log.WarnContext(ctx, "could not read the replicas' slot leases; reading every partition meanwhile", "err", err)
		}
		stats.Replicas = max(stats.Replicas, shares.live(), 1)
	}
	recheck()
	if shares != nil {
		t := time.NewTicker(shareRecheck)
		defer t.Stop()
		tick = t.C
	}
dispatch:
	for i := range ready {
		l := ready[(first+i)%len(ready)]
		for shares.mine(keyOf(l.topic, l.partition)) {
			select {
			case work <- l:
				stats.Share++
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
	for _, l := range ready {
		l.endPass()
	}
	return errors.Join(errs...)
}

// batch is the pages a worker has read and not yet recorded, from one or
// more partitions: recording them in one RecordMany (one transaction)
// costs the same round trips as a single partition's page.
type batch struct {
	pages []batchPage
	rows  int
}

type batchPage struct {
	l    *ledger
	from uint64 // the offset the page was read after
	page page
}

// reading is a partition a worker is reading in this pass.
type reading struct {
	l      *ledger
	after  uint64 // read up to here
	budget int    // rows this pass may still read from it
}

// worker reads the partitions it is handed, up to group at a time in
// one statement that shares PageSize rows between them, each from where
// this process left it, until the server returns a short page for it (not
// until a page holds few rows mend keeps: rows matched only through the
// collation are dropped), its budget (PagesPerPass pages) runs out, it
// stops being this replica's (shares, when the replicas divide the work)
// or its recording fails. It records its pages in batches of at least
// PageSize rows; a partition counts as read only as far as its rows are
// recorded. Its error is the queue database's.
func (s *Subscriber) worker(ctx context.Context, work <-chan *ledger, group int, shares *share, stats *PassStats) error {
	var b batch
	var pending []*reading
	open := true
	for {
		for open && len(pending) < group {
			l, ok := <-work
			if !ok {
				open = false
				break
			}
			pending = append(pending, &reading{l: l, after: l.read, budget: s.cfg.PagesPerPass * s.cfg.PageSize})
		}
		if len(pending) == 0 {
			break
		}
		limit := max(s.cfg.PageSize/len(pending), 1)
		spans := make([]span, len(pending))
		for i, r := range pending {
			spans[i] = span{topic: r.l.topic, partition: r.l.partition, after: r.after, limit: min(limit, r.budget)}
		}
		pages, err := s.fetchMany(ctx, spans)
		if err != nil {
			drain(work)
			return err
		}
		keep := pending[:0]
		for i, r := range pending {
			pg := pages[i]
			stats.Dropped += pg.dropped
			if pg.n > 0 {
				b.pages = append(b.pages, batchPage{r.l, r.after, pg})
				b.rows += len(pg.rows)
				r.after = pg.last
			}
			r.budget -= pg.n
			switch {
			case pg.n < spans[i].limit: // a short page: nothing more for now
			case r.budget <= 0:
				stats.More = true
			case !shares.mine(keyOf(r.l.topic, r.l.partition)):
				// Another replica took it over since it was handed out
				// (one started): it reads on from the watermark.
			default:
				keep = append(keep, r)
			}
		}
		pending = keep
		if b.rows >= s.cfg.PageSize {
			s.flush(ctx, &b, stats)
			pending = slicesDeleteStopped(pending, s.cfg.NowFunc())
		}
	}
	s.flush(ctx, &b, stats)
	return nil
}

// slicesDeleteStopped drops the readings whose partition failed in this
// pass: they wait for their backoff.
func slicesDeleteStopped(rs []*reading, now time.Time) []*reading {
	keep := rs[:0]
	for _, r := range rs {
		if !r.l.waiting(now) {
			keep = append(keep, r)
		}
	}
	return keep
}

// drain empties a work channel its worker gives up on.
func drain[T any](ch <-chan T) {
	for range ch {
	}
}

// flush records a batch's rows with one RecordMany and moves each
// partition's read mark past what is now recorded (or parked). A row that
// failed for a reason that may pass stops its partition just before it;
// the partition backs off (ledger.failed) and is read again from there.
// A failure of the whole call (mend's store) stops every partition in the
// batch the same way.
func (s *Subscriber) flush(ctx context.Context, b *batch, stats *PassStats) {
	defer func() { b.pages, b.rows = b.pages[:0], 0 }()
	var ds []dlq.Delivery
	for _, bp := range b.pages {
		for _, r := range bp.page.rows {
			ds = append(ds, r.Delivery())
		}
	}
	var results []dlq.ManyResult
	if len(ds) > 0 {
		var err error
		if results, err = s.cfg.Intake.RecordMany(ctx, ds); err != nil {
			if ctx.Err() != nil {
				// The subscription is stopping (Stop, or mend run's
				// SIGTERM) in the middle of recording: no partition's
				// fault, and nothing was released; whoever reads these
				// partitions next reads the rows again.
				return
			}
			err = fmt.Errorf("subscribe: record %d dead letters: %w", len(ds), err)
			for _, bp := range b.pages {
				if bp.l.read == bp.from {
					at := uint64(0) // the store's failure, no row's: it never parks a row
					if planted.outageCountsRow && len(bp.page.rows) > 0 {
						at = bp.page.rows[0].Offset
					}
					s.failed(ctx, bp.l, at, err, stats)
				}
			}
			return
		}
	}
	i := 0
	for _, bp := range b.pages {
		l, pg := bp.l, bp.page
		res := results[i : i+len(pg.rows)]
		i += len(pg.rows)
		if l.read != bp.from {
			l.apply(pg.read(bp.from), nil) // an earlier page stopped at a failed row: read again from there
			continue
		}
		outcomes := make([]outcome, 0, len(res))
		var failure error
		var failedAt uint64
		for j, r := range res {
			row := pg.rows[j]
			overdue := r.Err != nil && l.failingAt == row.Offset && l.failures >= s.cfg.ParkAfter
			o := rowOutcome(r.Err, overdue, func() error { return s.park(ctx, row, r.Err) })
			outcomes = append(outcomes, o)
			switch {
			case o == retry:
				failure, failedAt = r.Err, row.Offset
			case o == parked:
				stats.Unrecordable++
			case r.Created:
				stats.Recorded++
			default:
				stats.Already++
			}
			if o == retry {
				break
			}
			stats.Read++
		}
		if l.apply(pg.read(bp.from), outcomes) {
			if failure != nil && ctx.Err() == nil { // stopping: as above
				s.failed(ctx, l, failedAt, fmt.Errorf("subscribe: record offset %d of %s/%q: %w", failedAt, l.topic, l.partition, failure), stats)
			}
			continue
		}
		if l.failures > 0 && l.read >= l.failingAt {
			l.succeeded()
		}
	}
}

// failed puts a partition whose recording stopped at offset into its
// backoff, and says so.
func (s *Subscriber) failed(ctx context.Context, l *ledger, offset uint64, err error, stats *PassStats) {
	l.failed(offset, err, s.cfg.NowFunc(), s.cfg.PollInterval)
	stats.Failed++
	s.log.WarnContext(ctx, "recording a partition failed; it alone waits and retries", "topic", l.topic, "partition", l.partition,
		"offset", offset, "failures", l.failures, "park_after", s.cfg.ParkAfter, "retry_at", l.retryAt, "err", err)
	if s.cfg.Hooks.OnFailed != nil {
		s.cfg.Hooks.OnFailed(l.topic, l.partition, offset, l.failures, err)
	}
}

// park records a parked stand-in for a row the intake refused (or that
// failed ParkAfter times in a row), under an identity naming the row's
// offset, so an operator sees it and the watermark can pass the row. Only
// an error that may pass (the store) is returned; a stand-in the store
// refuses too is logged and passed.
func (s *Subscriber) park(ctx context.Context, r dlq.Row, cause error) error {
	if s.cfg.Hooks.OnUnrecordable != nil {
		s.cfg.Hooks.OnUnrecordable(r.Topic, r.PartitionKey, r.Offset, cause)
	}
	p := StandIn(r, cause, fmt.Sprintf("This parked stand-in keeps it visible so the %q group's watermark could pass it", s.cfg.Group), s.cfg.Actor)
	src := p.Source
	_, _, err := s.cfg.Parker.RecordCreate(ctx, p)
	if err != nil && !errors.Is(err, mend.ErrInvalid) && !errors.Is(err, mend.ErrIdentityMismatch) && !planted.parkSwallows {
		return fmt.Errorf("subscribe: park the stand-in for offset %d of %s/%q: %w", r.Offset, r.Topic, r.PartitionKey, err)
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

// StandIn is the parked record that stands in for a dead-letter row mend
// could not record as itself (cause): a record under the row's queue where
// that is a valid name (else dlq.QueueUnresolved) whose message ID names
// the row's offset, with why (what the stand-in lets the reader do) in its
// reason. The binary-log reader (package binlog) parks with it too.
func StandIn(r dlq.Row, cause error, why, actor string) mend.CreateParams {
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
	reason := fmt.Sprintf("the dead letter at offset %d of the host's queue_messages (topic %q, partition %q, id %q, %d payload bytes) could not be recorded as itself: %v. "+
		"%s; the row itself stays in queue_messages only until the host's GC removes it: copy what you need from it now.",
		r.Offset, clip(r.Topic, 300), clip(r.PartitionKey, 300), clip(r.ID, 300), len(r.Payload), cause, why)
	snap := mend.Snapshot{OriginalTopic: d.OriginalTopic, FailureCount: d.FailureCount, LastError: clip(d.LastError, 4096), FailedAt: d.FailedAt, Subjects: d.Subjects}
	if snap.OriginalTopic == "" || mend.ValidateIdentity("original_topic", snap.OriginalTopic, false) != nil {
		snap.OriginalTopic = dlq.BaseTopic(src.Topic)
	}
	return mend.CreateParams{Source: src, Snapshot: snap, State: mend.StateParked, Reason: reason, OpID: mend.NewOpID(), Actor: actor}
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

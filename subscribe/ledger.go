package subscribe

// The settle ledger: what this process knows about each partition between
// its watermark and how far it has read, and the decisions that move the
// read mark and the watermark. Nothing here touches a database; the
// reader (reader.go) and the release (release.go) feed it what the
// statements returned and carry out what it decides. The simulation test
// drives this same code against a model of the queue's table and GC.

import (
	"errors"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/mendq/mend"
)

// rowSet is an order-independent digest of a set of offsets: how many,
// their sum and the sum of their CRC32s (of the decimal text, as the
// server's CRC32(`offset`) computes it). Two ranges with the same count
// but a row gone and another come differ in the sums, whichever rows
// they are, except by a collision of both 64-bit sums at once.
type rowSet struct {
	rows     int
	sum, crc uint64
}

func (r *rowSet) add(offset uint64) {
	var b [20]byte
	r.rows++
	r.sum += offset
	r.crc += uint64(crc32.ChecksumIEEE(strconv.AppendUint(b[:0], offset, 10)))
}

func (r rowSet) plus(o rowSet) rowSet {
	return rowSet{rows: r.rows + o.rows, sum: r.sum + o.sum, crc: r.crc + o.crc}
}

func (r rowSet) minus(o rowSet) rowSet {
	return rowSet{rows: r.rows - o.rows, sum: r.sum - o.sum, crc: r.crc - o.crc}
}

// setOf is the rowSet of offsets.
func setOf(offsets ...uint64) rowSet {
	var r rowSet
	for _, o := range offsets {
		r.add(o)
	}
	return r
}

// sample is the table's highest committed offset, stamped with a time
// after the query that read it returned: every offset at or below it was
// allocated, so its transaction began, before that time. dbAt is the
// queue database's clock (UTC) as the same query read it, zero when
// unknown: the open transactions' start times (openView) compare with it.
type sample struct {
	offset uint64
	at     time.Time
	dbAt   time.Time
	open   openView
}

// openState says what a sample knows of the open transactions.
type openState int

const (
	// openUnknown: reading them failed for a reason that may pass; the
	// last view read stands (holding a sample longer is safe).
	openUnknown openState = iota
	// openNone: mend's user may not read them (or the server cannot
	// show them): the settle window alone decides.
	openNone
	// openRead: oldest is when the oldest open transaction that may
	// insert into queue_messages began (zero: none is open), by the
	// queue database's clock (UTC).
	openRead
)

// openView is the server's open transactions as one read, just after a
// horizon sample, saw them (see sqlOpenTrx). Plain data: the ledger needs
// no database to decide with it.
type openView struct {
	state  openState
	oldest time.Time
	// session is the oldest transaction's session, 0 when unknown: for
	// the operator (run --once names it), never for a decision.
	session int64
}

// openSlack widens "began before the sample" by the precision of the
// server's transaction start times (whole seconds) and the time between
// the horizon query's clock reading and its reading of the offsets.
const openSlack = time.Second

// takeSample runs query (the horizon read, which returns the database's
// clock too) and stamps its answer with now() read after it returned.
// Stamping it before would shrink the settle window by however long the
// query took to reach the server.
func takeSample(query func() (uint64, time.Time, error), now func() time.Time) (sample, error) {
	if planted.stampBeforeQuery {
		at := now()
		h, dbAt, err := query()
		return sample{offset: h, at: at, dbAt: dbAt}, err
	}
	h, dbAt, err := query()
	return sample{offset: h, at: now(), dbAt: dbAt}, err
}

// horizons are the samples of the settle window, oldest first, and the
// newest view of the server's open transactions.
type horizons struct {
	settle  time.Duration
	samples []sample
	// view is the open transactions as last read, at viewAt (mend's
	// clock). Until a first read is usable (viewAt zero) every sample is
	// held: what it waits for is unknown. After a read that says they
	// cannot be read (openNone, hidden) only the window counts. A view
	// older than the window that staleReads reads in a row since could not
	// refresh (innodb_trx read by others more often than every 0.1 s
	// throughout) holds nothing either: it must not hold the watermarks,
	// and with them the host's GC, for good. A view merely old (this
	// process paused mid-pass) still holds.
	view     openView
	viewAt   time.Time
	viewDB   time.Time // the database's clock at the sample the view was read after
	hidden   bool
	since    time.Time // the first sample's time, while no read was usable
	failedIn int       // reads in a row since the view that could not be used
}

// staleReads is how many reads in a row must fail to refresh a view older
// than the window before it stops holding samples.
const staleReads = 3

func (h *horizons) add(s sample) {
	h.samples = append(h.samples, s)
	switch s.open.state {
	case openRead:
		h.view, h.viewAt, h.viewDB, h.hidden, h.failedIn = s.open, s.at, s.dbAt, false, 0
	case openNone:
		h.view, h.viewAt, h.hidden, h.failedIn = openView{}, s.at, true, 0
	default:
		h.failedIn++
		if h.viewAt.IsZero() && h.since.IsZero() {
			h.since = s.at
		}
	}
}

// held reports whether a transaction that began before s was taken is
// open still: it may hold an offset at or below s's, uncommitted, however
// long ago s was taken.
func (h *horizons) held(s sample, now time.Time) bool {
	if h.hidden || s.dbAt.IsZero() || planted.ignoreOpen || h.lapsed(now) {
		return false
	}
	if h.viewAt.IsZero() || s.dbAt.After(h.viewDB) {
		return true // taken after the last usable read: what it waits for is unknown
	}
	return !h.view.oldest.IsZero() && !h.view.oldest.After(s.dbAt.Add(openSlack))
}

// lapsed reports that the view of the open transactions could not be
// refreshed for longer than the window (staleReads reads in a row or more
// since the last usable one, or since the first sample if none was): it
// holds no sample, and the window alone protects a late commit, as without
// the grant, until a read is usable again.
func (h *horizons) lapsed(now time.Time) bool {
	if h.hidden {
		return false
	}
	last := h.viewAt
	if last.IsZero() {
		last = h.since
	}
	return h.failedIn >= staleReads && now.Sub(last) > h.settle
}

// settled returns the highest offset every row at or below which is final:
// the highest of the samples taken at least settle before now, up to the
// first a transaction still open began before. (A later sample can be
// lower: the host's GC or ctl deleted the table's highest row.) Older
// samples are dropped, the newest kept with that offset; ok is false while
// no sample is old enough and free.
func (h *horizons) settled(now time.Time) (uint64, bool) {
	if planted.ignoreSettle && len(h.samples) > 0 {
		return h.samples[len(h.samples)-1].offset, true
	}
	cut := now.Add(-h.settle)
	i := -1
	var top uint64
	for j, s := range h.samples {
		if s.at.After(cut) || h.held(s, now) {
			break
		}
		i, top = j, max(top, s.offset)
	}
	if i < 0 {
		return 0, false
	}
	h.samples = h.samples[i:]
	h.samples[0].offset = top
	return top, true
}

// heldBy returns how many samples old enough to settle wait for an open
// transaction: non-zero means the window alone would have let the
// watermark pass an offset a transaction may still commit.
func (h *horizons) heldBy(now time.Time) int {
	cut := now.Add(-h.settle)
	n := 0
	for _, s := range h.samples {
		if s.at.After(cut) {
			break
		}
		if h.held(s, now) {
			n++
		}
	}
	return n
}

// checkpoint is the end of a read not yet released: the rows the server
// returned in (watermark, offset].
type checkpoint struct {
	offset uint64
	read   rowSet
}

// ledger is one partition as this process knows it.
//
//	 acked (queue_offsets)          read (this process)
//	     │                              │
//	─────┼──────────────────────────────┼────────────▶ offset
//	     │ recorded, waiting to settle  │ not read yet
//	     └─ checkpoints c1 < c2 < ... ──┘
type ledger struct {
	topic, partition string
	acked            uint64 // the group's watermark as this process last knew it
	read             uint64 // every row up to here has been read and recorded (or parked)
	cps              []checkpoint
	pass             rowSet // the server's rows read in the current pass

	// A partition whose recording failed waits until retryAt; failures
	// counts the passes in a row that failed at the same offset.
	failures  int
	failingAt uint64
	lastErr   error
	retryAt   time.Time
}

func newLedger(topic, partition string, acked uint64) *ledger {
	return &ledger{topic: topic, partition: partition, acked: acked, read: acked}
}

// reset forgets what was read: the partition is read again from acked.
func (l *ledger) reset(acked uint64) {
	l.acked, l.read, l.cps, l.pass = acked, acked, nil, rowSet{}
}

// pending is the rows read between the watermark and the newest
// checkpoint.
func (l *ledger) pending() rowSet {
	if len(l.cps) == 0 {
		return rowSet{}
	}
	return l.cps[len(l.cps)-1].read
}

// endPass closes the pass's reads into a checkpoint.
func (l *ledger) endPass() {
	if l.pass.rows > 0 {
		l.cps = append(l.cps, checkpoint{offset: l.read, read: l.pending().plus(l.pass)})
		l.pass = rowSet{}
	}
}

// outcome is what recording did with one row.
type outcome int

const (
	recorded outcome = iota // recorded now or before
	parked                  // recorded as a parked stand-in (or refused even that: passed)
	retry                   // not recorded; may pass: read it again
)

// page is one FetchByOffset page of a partition, as the reader holds it.
type pageRead struct {
	from    uint64   // the offset it was read after
	kept    []uint64 // offsets of the rows kept, in order
	dropped int      // rows the server matched only through its collation
	all     rowSet   // every row the server returned
	last    uint64   // offset of the last row the server returned
}

// apply moves the read mark past what a page's recording made durable:
// outcomes[i] is kept[i]'s. A row to retry stops the partition just
// before it. It reports whether the partition stopped (then it is read
// again from its read mark next time).
func (l *ledger) apply(pg pageRead, outcomes []outcome) (stopped bool) {
	if l.read != pg.from && !planted.noEarlierStopGuard {
		return true // an earlier page stopped at a failed row: read again from there
	}
	for j, o := range outcomes {
		if o != retry {
			continue
		}
		if planted.readPastRetry {
			break
		}
		// Count as read only the server's rows below this one, and only
		// when none of them was dropped (then they are the kept rows
		// before it); otherwise the whole page is read again.
		if j > 0 && pg.dropped == 0 {
			l.read = pg.kept[j-1]
			l.pass = l.pass.plus(setOf(pg.kept[:j]...))
		}
		return true
	}
	l.read = pg.last
	l.pass = l.pass.plus(pg.all)
	return false
}

// rowOutcome decides what becomes of a row from its recording error. A
// row the intake refused for good (mend.ErrInvalid or
// mend.ErrIdentityMismatch), or one that failed at the same offset
// overdue times in a row, is parked: park records its stand-in, and
// whether that failed. Anything else that failed is retried.
func rowOutcome(err error, overdue bool, park func() error) outcome {
	if err == nil {
		return recorded
	}
	mismatch := errors.Is(err, mend.ErrIdentityMismatch)
	if !mismatch && !errors.Is(err, mend.ErrInvalid) && !overdue {
		return retry
	}
	if mismatch && planted.passMismatch {
		return parked
	}
	if park() != nil && !planted.passUnparked {
		return retry
	}
	return parked
}

// release is the decision for one partition: which checkpoint to release
// (the newest at or below the settled offset), or none.
func (l *ledger) due(settled uint64) (int, bool) {
	i := -1
	for j, c := range l.cps {
		if c.offset <= settled {
			i = j
		}
	}
	return i, i >= 0
}

// advance is a watermark move: from the watermark the range was counted
// from to a checkpoint, only if the watermark is still from.
type advance struct {
	topic, partition string
	from, to         uint64
	// cas: the move happens only when the watermark is still from; the
	// planted variant only requires it below to.
	cas bool
}

// allowed is the advance's guard as its UPDATE states it (advanceGuard):
// whether it moves a watermark that is now current.
func (a advance) allowed(current uint64) bool {
	switch {
	case planted.noForwardGuard:
		return true
	case !a.cas:
		return current < a.to
	default:
		return current == a.from && current < a.to
	}
}

// settle compares checkpoint i with what the range (acked, offset] holds
// now. If they are the same set the watermark may move to it; otherwise a
// row committed late (or rows went) and the partition is read again from
// its watermark.
func (l *ledger) settle(i int, now rowSet) (advance, bool) {
	c := l.cps[i]
	same := now == c.read
	if planted.countOnly {
		same = now.rows == c.read.rows
	}
	if planted.countAndSum {
		same = now.rows == c.read.rows && now.sum == c.read.sum
	}
	if !same {
		l.reset(l.acked)
		return advance{}, false
	}
	return advance{topic: l.topic, partition: l.partition, from: l.acked, to: c.offset, cas: !planted.noCAS}, true
}

// released records that checkpoint i's advance took effect.
func (l *ledger) released(i int) {
	c := l.cps[i]
	rest := l.cps[i+1:]
	for j := range rest {
		rest[j].read = rest[j].read.minus(c.read)
	}
	l.acked = c.offset
	l.cps = append([]checkpoint(nil), rest...)
}

// failed records that recording stopped the partition at offset at: it
// is retried after a backoff that doubles per failure in a row (from
// base, up to a minute), and after parkAfter failures at the same offset
// the caller parks the row as a stand-in (see reader.go).
func (l *ledger) failed(at uint64, err error, now time.Time, base time.Duration) {
	if at == l.failingAt && l.failures > 0 {
		l.failures++
	} else {
		l.failingAt, l.failures = at, 1
	}
	l.lastErr = err
	l.retryAt = now.Add(min(base<<min(l.failures-1, 16), max(time.Minute, base)))
}

// succeeded clears the failure state once the partition reads past it.
func (l *ledger) succeeded() {
	l.failures, l.failingAt, l.lastErr, l.retryAt = 0, 0, nil, time.Time{}
}

// waiting reports whether the partition is in its failure backoff.
func (l *ledger) waiting(now time.Time) bool { return now.Before(l.retryAt) }

// planted holds deliberately broken variants of the decisions above, set
// only by tests (the negative controls of the simulation): each one is a
// way to lose a dead letter or move a watermark back that some test must
// catch.
var planted struct {
	ignoreSettle       bool // release at the newest sample, not one Settle old
	stampBeforeQuery   bool // stamp the horizon sample before its query ran
	countOnly          bool // compare how many rows, not which
	noCAS              bool // advance whatever the watermark is now (forward only)
	noForwardGuard     bool // advance without any guard
	readPastRetry      bool // mark a partition read past a row to retry
	noEarlierStopGuard bool // let a later page move the read mark past an earlier failed row
	passUnparked       bool // pass a refused row whose stand-in could not be recorded
	passMismatch       bool // count an identity-mismatch row as read without a record or stand-in
	membershipBehind   bool // run membership only after a recording that succeeded
	ignoreOpen         bool // settle past a sample a transaction open still began before
	selfRowFresh       bool // take a view showing a row of the reader's session as fresh (issue 43)
	trustStaleView     bool // use a stale innodb_trx view instead of reading the monitor
	oneLockWait        bool // bound a MoveToDLQ's waits by one lock wait, not two
	noMargin           bool // SettleFor without SettleMargin
	drainUnbounded     bool // Drain waits for every release, however long
	markerAnywhere     bool // the monitor's heading and truncation marker found anywhere in its text
	trustAnyAge        bool // a monitor transaction older than the server counted
	trustSessionAge    bool // a transaction older than its session (as the process lists bound it) counted
	newestOpen         bool // the oldest open transaction's start replaced by the newest's
	statusLate         bool // the monitor's start time up to a second late (no slack for its rounding)
	countAndSum        bool // the settle check compares count and sum, not the digest
	casAtLeast         bool // the advance's compare-and-set written offset_acked >= from
	outageCountsRow    bool // a store outage counted as failures of the partition's first row
	parkSwallows       bool // park passes a row whose stand-in the store failed to record
	joinedEarly        bool // discovery marks a partition joined before its join statement succeeds
	keepFailedJoins    bool // registering ahead keeps a failed join in the joined map
	settleNotRaised    bool // SettleFor keeps the default window, not raised above the waits
}

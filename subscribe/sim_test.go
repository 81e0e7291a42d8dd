package subscribe

// A deterministic, seeded simulation of the subscription beside the host's
// queue: a model of queue_messages and queue_offsets with one offset
// counter over every topic, inserts held open (up to a bound below the
// settle window) that commit out of order or roll back, the host's DLQ
// group acking at once, the real GC deleting each partition's rows at or
// below the lowest watermark of its groups once the queue is idle, the
// ctl deleting rows, new partitions, inserts held open past the settle
// window where mend sees the open transactions (an "open lock seen" flag
// per schedule), MoveToDLQs that wait on two locks after allocating their
// offset (past a window covering one lock wait, within the real one, in
// every schedule: without PROCESS the window alone covers them), two mend
// replicas paused mid-pass
// and resumed, mend's store and the queue database failing, and rows that
// fail or can never be recorded. The replicas run the ledger's own code
// (takeSample, horizons, ledger.apply/settle/released, rowOutcome,
// advance.allowed): only the statements are modelled. After every step
// it checks that no committed *_dlq row is deleted by the GC before mend
// recorded it, that mend's watermarks never move back, and that mend
// writes no other group's row.
//
// MEND_SIM_SEEDS sets how many seeds run (make proof runs more);
// MEND_SIM_SEED=n replays one seed with its trace.

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
)

const (
	// simLockWait is innodb_lock_wait_timeout at the simulation's scale,
	// and simMargin SettleMargin: the replicas' window is settleFor's
	// arithmetic over them (two lock waits plus the margin, simSettle),
	// so a planted window covering one lock wait is as short as the real
	// code's would be.
	simLockWait = 4 * time.Second
	simMargin   = 2 * time.Second
	simSettle   = 2*simLockWait + simMargin
	// simMaxOpen bounds an ordinary insert's transaction: it waits on one
	// lock at most, and commits or rolls back within a window that covers
	// one lock wait.
	simMaxOpen = simLockWait + simMargin/2
	// simLongOpen bounds the inserts held open past the settle window (a
	// MoveToDLQ frozen mid-transaction), which only a schedule whose mend
	// sees the open transactions (simWorld.seesOpen: PROCESS) has: without
	// it they are the documented loss.
	simLongOpen = 40 * time.Second
	simPoll     = time.Second
	simGCIdle   = 10 * time.Second
	simPage     = 2
	simPages    = 3
	simParkAfer = 3
	simSteps    = 400
	simGroup    = "mend"
	simHost     = "orchestrator-dlq"
)

type simKind int

const (
	simNormal   simKind = iota
	simRefused          // the intake refuses it for good (ErrInvalid)
	simMismatch         // an identity mismatch
	simFlaky            // fails while the application database is down
	simPoison           // always fails with an error that may pass
)

type simRow struct {
	offset     uint64
	topic, key string
	kind       simKind
	committed  bool
	gone       bool      // deleted (GC, ctl) or rolled back
	endAt      time.Time // when its transaction ends
	began      time.Time // when its transaction began
	rollback   bool
	commitAt   time.Time
	twoWaits   bool // a MoveToDLQ that waited on two locks after allocating its offset
}

type simGKey struct{ group, topic, key string }

type simWorld struct {
	t        testing.TB
	rng      *rand.Rand
	now      time.Time
	next     uint64
	parts    map[[2]string][]*simRow // each partition's rows not gone, in offset order
	open     []*simRow               // rows whose transaction has not ended
	seen     [][2]string             // DLQ partitions that ever held a committed row, in order
	top      uint64                  // the highest committed offset
	offsets  map[simGKey]uint64
	recorded map[uint64]bool // offsets mend recorded (or parked a stand-in for)

	storeDown, appDown bool
	seesOpen           bool // mend may read the open transactions (PROCESS)
	// frozenUntil: other readers poll innodb_trx more often than every
	// 0.1 s until then, so its cache stays as filled at the freeze
	// (frozenView), with a row of the reader's own session in it; the
	// monitor (SHOW ENGINE INNODB STATUS) stays live (issue 43).
	frozenUntil    time.Time
	frozenView     openView
	queueDownUntil time.Time
	parkFlaky      bool
	lastGC         time.Time
	builds         int
	// twoWaits counts the MoveToDLQs that committed after two lock waits
	// in schedules where mend sees no open transaction (the window alone
	// covers them): the proof that the element ran.
	twoWaits int

	reps      []*simReplica
	highWater map[simGKey]uint64
	trace     []simLine
	verbose   bool
	failure   string
}

// simLine is a trace line, formatted only when shown.
type simLine struct {
	at     time.Duration
	format string
	args   []any
}

func (l simLine) String() string {
	return fmt.Sprintf("%8.3fs ", l.at.Seconds()) + fmt.Sprintf(l.format, l.args...)
}

func (w *simWorld) logf(format string, args ...any) {
	line := simLine{w.now.Sub(time.Unix(0, 0)), format, args}
	if w.verbose {
		w.t.Log(line.String())
	}
	w.trace = append(w.trace, line)
	if len(w.trace) > 120 {
		w.trace = append(w.trace[:0], w.trace[60:]...)
	}
}

func (w *simWorld) fail(format string, args ...any) {
	if w.failure == "" {
		w.failure = fmt.Sprintf(format, args...)
		w.logf("VIOLATION: %s", w.failure)
	}
}

func (w *simWorld) queueDown() bool { return w.now.Before(w.queueDownUntil) }

// insert allocates the next offset for a row and holds its transaction
// open for up to simMaxOpen.
func (w *simWorld) insert() {
	w.next++
	r := &simRow{offset: w.next}
	switch x := w.rng.IntN(10); {
	case x < 2:
		r.topic, r.key = "merge", fmt.Sprintf("q%d", w.rng.IntN(3)) // not a DLQ topic: a gap in the DLQ's offsets
	case x < 7:
		r.topic, r.key = "speculate_dlq", fmt.Sprintf("q%d", w.rng.IntN(3))
	default:
		if w.builds == 0 || w.rng.IntN(3) == 0 {
			w.builds++ // a new partition, keyed by build: never registered ahead
		}
		r.topic, r.key = "build_dlq", fmt.Sprintf("b%d", w.builds-w.rng.IntN(min(w.builds, 2)))
	}
	switch x := w.rng.IntN(40); {
	case x == 0:
		r.kind = simRefused
	case x == 1:
		r.kind = simMismatch
	case x == 2:
		r.kind = simPoison
	case x < 6:
		r.kind = simFlaky
	}
	r.began = w.now
	switch x := w.rng.IntN(30); {
	case x == 0 && w.seesOpen:
		r.endAt = w.now.Add(simSettle + time.Duration(w.rng.Int64N(int64(simLongOpen-simSettle))))
	case x == 1:
		// A MoveToDLQ whose INSERT and DELETE each waited on a lock after
		// the offset was allocated: it commits after more than one lock
		// wait plus the margin (past a window that covers one) and within
		// two lock waits plus half the margin (the statements' own time).
		r.twoWaits = true
		r.endAt = w.now.Add(simLockWait + simMargin + 1 + time.Duration(w.rng.Int64N(int64(simLockWait-simMargin/2))))
	case x < 10:
		r.endAt = w.now.Add(time.Duration(w.rng.Int64N(int64(simMaxOpen))))
	default:
		r.endAt = w.now
	}
	r.rollback = w.rng.IntN(12) == 0
	pk := [2]string{r.topic, r.key}
	w.parts[pk] = append(w.parts[pk], r)
	w.open = append(w.open, r)
	w.logf("insert %d %s/%s kind %d open until +%s rollback %v", r.offset, r.topic, r.key, r.kind, r.endAt.Sub(w.now), r.rollback)
	w.settleTxns()
}

// settleTxns ends the transactions whose time has come.
func (w *simWorld) settleTxns() {
	keep := w.open[:0]
	for _, r := range w.open {
		if r.endAt.After(w.now) {
			keep = append(keep, r)
			continue
		}
		if r.rollback {
			r.gone = true
			w.logf("rollback %d", r.offset)
			continue
		}
		r.committed, r.commitAt = true, w.now
		w.top = max(w.top, r.offset)
		w.logf("commit %d %s/%s", r.offset, r.topic, r.key)
		if r.twoWaits && !w.seesOpen {
			w.twoWaits++
		}
		if strings.HasSuffix(r.topic, "_dlq") {
			// The host's DLQ consumer joins the partition on sight and
			// acknowledges what it sees at once (skipping rows that
			// commit late, as its watermark is already past them).
			hk := simGKey{simHost, r.topic, r.key}
			if _, ok := w.offsets[hk]; !ok {
				w.seen = append(w.seen, [2]string{r.topic, r.key})
			}
			w.offsets[hk] = max(w.offsets[hk], r.offset)
		}
	}
	w.open = keep
}

// gc is the host's GC: each partition's rows at or below the lowest
// watermark of its groups go. The real one runs after 100 idle polls of
// the host's consumer (about 10 s), so a row is at least that old when it
// can go: the model deletes rows committed simGCIdle ago, every second.
func (w *simWorld) gc() {
	if w.now.Sub(w.lastGC) < time.Second {
		return
	}
	w.lastGC = w.now
	low := map[[2]string]uint64{}
	for k, v := range w.offsets {
		pk := [2]string{k.topic, k.key}
		if cur, ok := low[pk]; !ok || v < cur {
			low[pk] = v
		}
	}
	for pk, l := range low {
		if l == 0 {
			continue
		}
		rows := w.parts[pk]
		keep := rows[:0]
		for _, r := range rows {
			if !r.committed || r.gone || r.offset > l || w.now.Sub(r.commitAt) < simGCIdle {
				if !r.gone {
					keep = append(keep, r)
				}
				continue
			}
			r.gone = true
			w.logf("gc deletes %d %s/%s (low %d)", r.offset, r.topic, r.key, l)
			if strings.HasSuffix(r.topic, "_dlq") && !w.recorded[r.offset] {
				w.fail("the GC deleted dead letter %d (%s/%s) before mend recorded it", r.offset, r.topic, r.key)
			}
		}
		w.parts[pk] = keep
	}
}

// ctl deletes (or requeues: the same for the DLQ) a committed DLQ row.
func (w *simWorld) ctl() {
	var live []*simRow
	for pk, rows := range w.parts {
		if !strings.HasSuffix(pk[0], "_dlq") {
			continue
		}
		for _, r := range rows {
			if r.committed && !r.gone {
				live = append(live, r)
			}
		}
	}
	if len(live) == 0 {
		return
	}
	slices.SortFunc(live, func(a, b *simRow) int { return int(a.offset) - int(b.offset) }) // map order is random: keep the seed's schedule
	r := live[w.rng.IntN(len(live))]
	r.gone = true
	w.recorded[r.offset] = true // the operator handled it: not mend's to lose
	w.logf("ctl deletes %d %s/%s", r.offset, r.topic, r.key)
}

func (w *simWorld) horizon() uint64 { return w.top }

// openView is the open-transactions read after a sample: when the oldest
// open insert began, if mend may read it. One read in four finds
// innodb_trx's cache older than itself (another reader kept it from
// refreshing) and is not used, at most twice in a row: readers that keep
// the cache from refreshing for a whole settle window (which makes the
// ledger fall back to the window alone, staleReads) are the documented
// limit, not modelled.
func (w *simWorld) openView(p *simReplica) openView {
	if !w.seesOpen {
		return openView{state: openNone}
	}
	if w.now.Before(w.frozenUntil) && (planted.selfRowFresh || planted.trustStaleView) {
		// The read takes the frozen cache for a fresh view; the real one
		// proves it stale (its nonce) and reads the live monitor below.
		p.stale = 0
		return w.frozenView
	}
	if p.stale < staleReads-1 && w.rng.IntN(4) == 0 {
		p.stale++
		return openView{state: openUnknown}
	}
	p.stale = 0
	return w.liveView()
}

// liveView is the open transactions as they are now.
func (w *simWorld) liveView() openView {
	v := openView{state: openRead}
	for _, r := range w.open {
		if v.oldest.IsZero() || r.began.Before(v.oldest) {
			v.oldest = r.began
		}
	}
	return v
}

// record is the intake: RecordMany over offsets.
func (w *simWorld) record(rows []*simRow) ([]error, error) {
	if w.storeDown {
		return nil, errors.New("sim: mend's store is down")
	}
	errs := make([]error, len(rows))
	for i, r := range rows {
		switch {
		case r.kind == simRefused:
			errs[i] = fmt.Errorf("sim: payload too large: %w", mend.ErrInvalid)
		case r.kind == simMismatch:
			errs[i] = fmt.Errorf("sim: %w", mend.ErrIdentityMismatch)
		case r.kind == simPoison || r.kind == simFlaky && w.appDown:
			errs[i] = errors.New("sim: the application database is down")
		default:
			w.recorded[r.offset] = true
		}
	}
	return errs, nil
}

func (w *simWorld) park(r *simRow) error {
	if w.storeDown || w.parkFlaky && w.rng.IntN(2) == 0 {
		return errors.New("sim: mend's store failed the stand-in")
	}
	w.recorded[r.offset] = true
	return nil
}

// simReplica is one mend run process: its ledgers and the phase of its
// pass it is in.
type simReplica struct {
	id       int
	w        *simWorld
	horizons horizons
	parts    map[partKey]*ledger
	paused   bool
	nextPass time.Time
	nextJoin time.Time
	phase    int
	pending  []simDue // counted, not yet advanced
	stale    int      // open-transaction reads in a row that were not usable
}

type simDue struct {
	l   *ledger
	i   int
	adv advance
}

func (p *simReplica) fail(what string) bool {
	if p.w.queueDown() {
		p.w.logf("replica %d: %s fails: queue database down", p.id, what)
		return true
	}
	return false
}

// membership joins every DLQ partition holding committed rows (first
// sight) on its own schedule: whatever recording does.
func (p *simReplica) membership() {
	if p.fail("membership") {
		return
	}
	w := p.w
	// Register ahead: the host's orchestrator joined speculate/q0..q2
	// before anything of theirs was dead-lettered, so their *_dlq
	// partitions (partitioned by queue) are joined ahead.
	for q := range 3 {
		k := simGKey{simGroup, "speculate_dlq", fmt.Sprintf("q%d", q)}
		if _, ok := w.offsets[k]; !ok {
			w.write(k, 0)
		}
	}
	for _, pk := range w.seen {
		k := simGKey{simGroup, pk[0], pk[1]}
		if _, ok := w.offsets[k]; !ok {
			w.write(k, 0)
			w.logf("replica %d joins %s/%s", p.id, pk[0], pk[1])
		}
	}
}

// step runs the replica's next phase: sample, load and read, count,
// advance. Pausing between phases is a replica paused mid-pass.
func (p *simReplica) step() {
	w := p.w
	switch p.phase {
	case 0: // sample the horizon; the query may stall while the queue goes on
		if p.fail("sample") {
			return
		}
		sm, _ := takeSample(func() (uint64, time.Time, error) {
			if w.rng.IntN(4) == 0 {
				stall := time.Duration(w.rng.Int64N(int64(6 * time.Second)))
				w.logf("replica %d: horizon query stalls %s", p.id, stall)
				w.advance(stall)
			}
			return w.horizon(), w.now, nil
		}, func() time.Time { return w.now })
		sm.open = w.openView(p)
		p.horizons.add(sm)
		w.logf("replica %d: sample %d at %.3fs; open transactions %v", p.id, sm.offset, sm.at.Sub(time.Unix(0, 0)).Seconds(), simOpenText(sm.open))
		p.phase = 1
	case 1: // load the watermarks, read and record
		if p.fail("read") {
			p.phase = 0
			return
		}
		p.loadOwn()
		p.readAll()
		p.phase = 2
	case 2: // count the settled ranges
		if p.fail("count") {
			p.phase = 0
			return
		}
		p.pending = p.pending[:0]
		settled, ok := p.horizons.settled(w.now)
		if ok {
			for _, l := range p.sorted() {
				i, due := l.due(settled)
				if !due {
					continue
				}
				adv, same := l.settle(i, w.set(l.topic, l.partition, l.acked, l.cps[i].offset))
				if !same {
					w.logf("replica %d: %s/%s late: re-read from %d", p.id, l.topic, l.partition, l.acked)
					continue
				}
				p.pending = append(p.pending, simDue{l, i, adv})
			}
		}
		p.phase = 3
	case 3: // advance
		if p.fail("advance") {
			p.phase = 0
			return
		}
		for _, d := range p.pending {
			k := simGKey{simGroup, d.adv.topic, d.adv.partition}
			cur, ok := w.offsets[k]
			if ok && d.adv.allowed(cur) {
				w.write(k, d.adv.to)
				w.logf("replica %d: advance %s/%s %d -> %d", p.id, d.adv.topic, d.adv.partition, cur, d.adv.to)
			}
			d.l.released(d.i)
		}
		p.pending = nil
		p.phase = 0
		p.nextPass = w.now.Add(simPoll)
	}
}

func (p *simReplica) sorted() []*ledger {
	var out []*ledger
	for _, l := range p.parts {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *ledger) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), strings.Compare(a.partition, b.partition))
	})
	return out
}

func (p *simReplica) loadOwn() {
	w := p.w
	for k, l := range p.parts {
		acked, ok := w.offsets[simGKey{simGroup, k.topic, k.partition}]
		if !ok {
			delete(p.parts, k)
			continue
		}
		if acked != l.acked {
			l.reset(acked)
		}
	}
	for k, acked := range w.offsets {
		pk := partKey{k.topic, k.key}
		rows := len(w.parts[[2]string{k.topic, k.key}]) > 0
		if l := p.parts[pk]; l != nil && !rows && len(l.cps) == 0 {
			delete(p.parts, pk) // as discovery forgets a partition holding no rows
		} else if k.group == simGroup && l == nil && rows {
			p.parts[pk] = newLedger(k.topic, k.key, acked)
		}
	}
}

// readAll reads each partition not in its backoff, up to simPages pages
// of simPage rows, records them in one batch and applies the outcomes in
// page order, as worker and flush do.
func (p *simReplica) readAll() {
	w := p.w
	for _, l := range p.sorted() {
		if l.waiting(w.now) {
			continue
		}
		type pg struct {
			rows []*simRow
			read pageRead
		}
		var pages []pg
		after := l.read
		for range simPages {
			var rows []*simRow
			for _, r := range w.parts[[2]string{l.topic, l.partition}] {
				if r.committed && !r.gone && r.offset > after && len(rows) < simPage {
					rows = append(rows, r)
				}
			}
			if len(rows) == 0 {
				break
			}
			rd := pageRead{from: after, last: rows[len(rows)-1].offset}
			for _, r := range rows {
				rd.kept = append(rd.kept, r.offset)
				rd.all.add(r.offset)
			}
			pages = append(pages, pg{rows, rd})
			after = rd.last
			if len(rows) < simPage {
				break
			}
		}
		if len(pages) == 0 {
			continue
		}
		var all []*simRow
		for _, pg := range pages {
			all = append(all, pg.rows...)
		}
		errs, err := w.record(all)
		if err != nil {
			l.failed(0, err, w.now, simPoll)
			w.logf("replica %d: %s/%s store failed", p.id, l.topic, l.partition)
			continue
		}
		i := 0
		for _, pg := range pages {
			var outcomes []outcome
			var failedAt uint64
			var failure error
			for _, r := range pg.rows {
				e := errs[i]
				i++
				overdue := e != nil && l.failingAt == r.offset && l.failures >= simParkAfer
				o := rowOutcome(e, overdue, func() error { return w.park(r) })
				outcomes = append(outcomes, o)
				if o == retry {
					failedAt, failure = r.offset, e
					break
				}
			}
			if l.apply(pg.read, outcomes) {
				if failure != nil {
					l.failed(failedAt, failure, w.now, simPoll)
					w.logf("replica %d: %s/%s stopped at %d (failures %d)", p.id, l.topic, l.partition, failedAt, l.failures)
				}
				continue
			}
			if l.failures > 0 && l.read >= l.failingAt {
				l.succeeded()
			}
		}
		w.logf("replica %d: %s/%s read to %d", p.id, l.topic, l.partition, l.read)
	}
	for _, l := range p.parts {
		l.endPass()
	}
}

func simOpenText(v openView) string {
	switch {
	case v.state == openNone:
		return "hidden"
	case v.state == openUnknown:
		return "unusable (stale)"
	case v.oldest.IsZero():
		return "none"
	}
	return fmt.Sprintf("since %.3fs", v.oldest.Sub(time.Unix(0, 0)).Seconds())
}

// set is the settle check's statement: the rows of (after, upTo] now.
func (w *simWorld) set(topic, key string, after, upTo uint64) rowSet {
	var s rowSet
	for _, r := range w.parts[[2]string{topic, key}] {
		if r.committed && !r.gone && r.offset > after && r.offset <= upTo {
			s.add(r.offset)
		}
	}
	return s
}

// advance moves the clock, ending transactions and letting the host act.
func (w *simWorld) advance(d time.Duration) {
	end := w.now.Add(d)
	for w.now.Before(end) {
		w.now = w.now.Add(100 * time.Millisecond)
		if w.now.After(end) {
			w.now = end
		}
		if w.rng.IntN(3) == 0 {
			w.insert()
		}
		w.settleTxns()
		// Membership runs on its own ticker in every running replica.
		for _, p := range w.reps {
			if !p.paused && !w.now.Before(p.nextJoin) {
				p.membership()
				p.nextJoin = w.now.Add(simPoll)
			}
		}
		w.gc()
	}
}

// write is every write mend makes to queue_offsets (join, advance).
func (w *simWorld) write(k simGKey, v uint64) {
	if k.group != simGroup {
		w.fail("mend wrote group %q's row of %s/%s", k.group, k.topic, k.key)
	}
	if v < w.highWater[k] {
		w.fail("mend's watermark of %s/%s moved back from %d to %d", k.topic, k.key, w.highWater[k], v)
	}
	w.highWater[k] = max(w.highWater[k], v)
	w.offsets[k] = v
}

// simulate runs one seed and returns its violation ("" if none), the
// trace that led to it, and how many two-lock-wait MoveToDLQs committed
// under the window alone (simWorld.twoWaits).
func simulate(t testing.TB, seed uint64, verbose bool) (string, []string, int) {
	w := &simWorld{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: time.Unix(0, 0), offsets: map[simGKey]uint64{}, parts: map[[2]string][]*simRow{},
		recorded: map[uint64]bool{}, highWater: map[simGKey]uint64{}, verbose: verbose}
	w.seesOpen = w.rng.IntN(2) == 0
	w.logf("mend sees open transactions: %v", w.seesOpen)
	for i := range 2 {
		w.reps = append(w.reps, &simReplica{id: i, w: w, horizons: horizons{settle: settleFor(Waits{LockWait: simLockWait}, 0, simMargin)}, parts: map[partKey]*ledger{}})
	}
	for range simSteps {
		if w.failure != "" {
			break
		}
		switch x := w.rng.IntN(100); {
		case x < 30:
			w.insert()
		case x < 33:
			w.ctl()
		case x < 36:
			w.storeDown = !w.storeDown
			w.logf("store down: %v", w.storeDown)
		case x < 39:
			w.appDown = !w.appDown
			w.logf("application database down: %v", w.appDown)
		case x < 41:
			w.parkFlaky = !w.parkFlaky
		case x < 43 && !w.queueDown():
			w.queueDownUntil = w.now.Add(time.Duration(w.rng.Int64N(int64(2 * time.Second))))
			w.logf("queue database down until +%s", w.queueDownUntil.Sub(w.now))
		case x < 45 && w.seesOpen && !w.now.Before(w.frozenUntil) && w.rng.IntN(3) == 0:
			// Other readers freeze innodb_trx's cache for 15 to 45 s.
			w.frozenUntil = w.now.Add(15*time.Second + time.Duration(w.rng.Int64N(int64(30*time.Second))))
			w.frozenView = w.liveView()
			w.logf("innodb_trx's cache frozen until +%s", w.frozenUntil.Sub(w.now))
		case x < 47:
			// Pause or resume a replica; one of them always runs, as one
			// must for the first-sight joins the GC idle period allows.
			p := w.reps[w.rng.IntN(2)]
			other := w.reps[1-p.id]
			if p.paused || !other.paused {
				p.paused = !p.paused
				w.logf("replica %d paused: %v (phase %d)", p.id, p.paused, p.phase)
			}
		case x < 70:
			w.advance(time.Duration(w.rng.Int64N(int64(700 * time.Millisecond))))
		default:
			p := w.reps[w.rng.IntN(2)]
			if p.paused {
				continue
			}
			if !w.now.Before(p.nextPass) || p.phase != 0 {
				p.step()
			}
		}
	}
	// Let every transaction end and the replicas run on, so late rows
	// commit and the GC runs over what they leave.
	for range 150 {
		if w.failure != "" {
			break
		}
		w.storeDown, w.appDown, w.queueDownUntil = false, false, time.Time{}
		w.advance(300 * time.Millisecond)
		for _, p := range w.reps {
			p.paused = false
			if !w.now.Before(p.nextPass) || p.phase != 0 {
				p.step()
			}
		}
	}
	trace := make([]string, len(w.trace))
	for i, l := range w.trace {
		trace[i] = l.String()
	}
	return w.failure, trace, w.twoWaits
}

func simSeeds(t *testing.T) (first, n uint64) {
	if s := os.Getenv("MEND_SIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MEND_SIM_SEED=%q: %v", s, err)
		}
		return v, 1
	}
	n = 1000
	if s := os.Getenv("MEND_SIM_SEEDS"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MEND_SIM_SEEDS=%q: %v", s, err)
		}
		n = v
	}
	return 1, n
}

// TestSimulation runs the seeded schedules against the subscription's own
// ledger and decisions. It runs in parallel with the other parallel tests
// (they all start after the tests that plant bugs, which are not
// parallel, have ended).
func TestSimulation(t *testing.T) {
	t.Parallel()
	first, n := simSeeds(t)
	replay := os.Getenv("MEND_SIM_SEED") != ""
	twoWaits := 0
	for seed := first; seed < first+n; seed++ {
		v, trace, tw := simulate(t, seed, replay)
		if v != "" {
			t.Fatalf("seed %d: %s\nreplay with MEND_SIM_SEED=%d; the last steps:\n%s", seed, v, seed, strings.Join(trace, "\n"))
		}
		twoWaits += tw
	}
	if twoWaits == 0 && !replay {
		t.Fatal("no MoveToDLQ committed after two lock waits under the window alone: the simulation no longer runs that element")
	}
	t.Logf("PROOF subscribe simulation: %d seeds of %d steps each, no dead letter lost (%d MoveToDLQs committed after two lock waits under the window alone), no watermark moved back, no other group's row written", n, simSteps, twoWaits)
}

// TestSimulationFindsPlantedBugs re-plants each bug issue 27 names and
// requires the default run to find it. It is not parallel: it plants the
// bugs in package state while no other test runs. Two are found by other tests: the
// exact settle check masks a later page moving the read mark past an
// earlier failed row (the range then holds a row the read set lacks, so
// it is read again), which TestLedgerApply catches; membership waiting for
// recording is a matter of Run's goroutines, which the DB test
// TestLossMembershipApartFromRecording and its negative control catch.
func TestSimulationFindsPlantedBugs(t *testing.T) {
	if os.Getenv("MEND_SIM_SEED") != "" {
		t.Skip("replaying one seed")
	}
	_, n := simSeeds(t)
	for _, c := range []struct {
		name string
		bug  *bool
	}{
		{"the release ignores the settle window", &planted.ignoreSettle},
		{"the release ignores a transaction open since before its sample", &planted.ignoreOpen},
		{"the horizon sample is stamped before its query", &planted.stampBeforeQuery},
		{"the settle check compares a count", &planted.countOnly},
		{"the advance has no guard", &planted.noForwardGuard},
		{"a partition is marked read past a row to retry", &planted.readPastRetry},
		{"a refused row passes when its stand-in fails", &planted.passUnparked},
		{"an identity-mismatch row passes without record or stand-in", &planted.passMismatch},
		{"a frozen innodb_trx view taken as fresh (issue 43)", &planted.selfRowFresh},
		{"a stale innodb_trx view used instead of the monitor (issue 43)", &planted.trustStaleView},
		{"the window covers one lock wait, not a MoveToDLQ's two (issue 43)", &planted.oneLockWait},
	} {
		t.Run(c.name, func(t *testing.T) {
			*c.bug = true
			defer func() { *c.bug = false }()
			for seed := uint64(1); seed <= n; seed++ {
				if v, _, _ := simulate(t, seed, false); v != "" {
					t.Logf("found at seed %d: %s", seed, v)
					return
				}
			}
			t.Fatalf("the planted bug survived %d seeds", n)
		})
	}
}

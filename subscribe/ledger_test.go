package subscribe

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
)

var t0 = time.Unix(1_760_000_000, 0)

func TestRowSet(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b []uint64
		same bool
	}{
		{"order does not matter", []uint64{3, 7, 9}, []uint64{9, 3, 7}, true},
		{"a row gone and another come: same count, not the same set", []uint64{3, 7, 9}, []uint64{3, 5, 9}, false},
		{"two swapped for two with the same sum", []uint64{10, 20}, []uint64{11, 19}, false},
		{"empty", nil, nil, true},
		{"one more", []uint64{1}, []uint64{1, 2}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := setOf(c.a...) == setOf(c.b...); got != c.same {
				t.Fatalf("setOf(%v) == setOf(%v) is %v, want %v", c.a, c.b, got, c.same)
			}
		})
	}
	if got := setOf(1, 2, 3).minus(setOf(1)); got != setOf(2, 3) {
		t.Fatalf("minus: %+v", got)
	}
}

func TestTakeSample(t *testing.T) { report(t, takeSampleProblems()) }

func takeSampleProblems() (problems []string) {
	now := t0
	clock := func() time.Time { return now }
	sm, err := takeSample(func() (uint64, time.Time, error) {
		now = now.Add(1500 * time.Millisecond) // the query waits 1.5 s to reach the server
		return 42, t0, nil
	}, clock)
	if want := t0.Add(1500 * time.Millisecond); err != nil || sm.offset != 42 || !sm.at.Equal(want) {
		problems = append(problems, fmt.Sprintf("sample %+v, %v; want offset 42 stamped when the query returned, %s", sm, err, want))
	}
	if _, err := takeSample(func() (uint64, time.Time, error) { return 0, time.Time{}, errors.New("down") }, clock); err == nil {
		problems = append(problems, "a failed query gave no error")
	}
	return problems
}

// report fails t with each problem.
func report(t *testing.T, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Error(p)
	}
}

func TestHorizonsSettled(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []sample
		now     time.Time
		want    uint64
		ok      bool
		left    int
	}{
		{"none", nil, t0, 0, false, 0},
		{"none old enough", []sample{{offset: 5, at: t0}}, t0.Add(9 * time.Second), 0, false, 1},
		{"exactly the window", []sample{{offset: 5, at: t0}}, t0.Add(10 * time.Second), 5, true, 1},
		{"the newest old enough wins; older ones go", []sample{{offset: 5, at: t0}, {offset: 8, at: t0.Add(time.Second)}, {offset: 12, at: t0.Add(5 * time.Second)}},
			t0.Add(11 * time.Second), 8, true, 2},
		{"the highest old enough wins: the table's top row was deleted since", []sample{{offset: 8, at: t0}, {offset: 5, at: t0.Add(time.Second)}, {offset: 12, at: t0.Add(5 * time.Second)}},
			t0.Add(11 * time.Second), 8, true, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := horizons{settle: 10 * time.Second, samples: c.samples}
			got, ok := h.settled(c.now)
			if got != c.want || ok != c.ok || len(h.samples) != c.left {
				t.Fatalf("settled = %d, %v with %d samples left; want %d, %v, %d", got, ok, len(h.samples), c.want, c.ok, c.left)
			}
		})
	}
}

// TestHorizonsOpenTransactions: with the open transactions read, a sample
// waits past the window for as long as a transaction that began before it
// (by the database's clock, within openSlack) stays open; without them
// (or when they cannot be read), the window alone decides.
func TestHorizonsOpenTransactions(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	db := func(s int) time.Time { return t0.Add(time.Hour + time.Duration(s)*time.Second) } // the server's clock runs apart from mend's
	since := func(s int) openView { return openView{state: openRead, oldest: db(s)} }
	none := openView{state: openRead}
	for _, c := range []struct {
		name    string
		samples []sample
		now     time.Time
		want    uint64
		ok      bool
		held    int
	}{
		{"a transaction that began before the sample and is open still holds it past the window",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: since(-3)}, {offset: 9, at: at(40), dbAt: db(40), open: since(-3)}}, at(45), 0, false, 1},
		{"once it ended the sample settles",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: since(-3)}, {offset: 9, at: at(40), dbAt: db(40), open: none}}, at(45), 5, true, 0},
		{"a sample after a held one waits with it",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: since(-3)}, {offset: 7, at: at(2), dbAt: db(2), open: since(-3)}, {offset: 9, at: at(40), dbAt: db(40), open: since(-3)}}, at(45), 0, false, 2},
		{"the samples before the transaction began settle",
			[]sample{{offset: 3, at: at(0), dbAt: db(0), open: none}, {offset: 5, at: at(5), dbAt: db(5), open: since(4)}, {offset: 9, at: at(40), dbAt: db(40), open: since(4)}}, at(45), 3, true, 1},
		{"a transaction that began well after the sample does not hold it",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: none}, {offset: 9, at: at(40), dbAt: db(40), open: since(30)}}, at(45), 5, true, 0},
		{"one that began within the start times' precision after it does",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: none}, {offset: 9, at: at(40), dbAt: db(40), open: since(1)}}, at(45), 0, false, 1},
		{"a failed read keeps the last view: still held",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: since(-3)}, {offset: 9, at: at(40), dbAt: db(40)}}, at(45), 0, false, 1},
		{"a sample whose read failed waits for a usable one: a transaction begun since the last is unknown",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: none}, {offset: 7, at: at(2), dbAt: db(2)}, {offset: 9, at: at(40), dbAt: db(40)}}, at(45), 5, true, 1},
		{"and is judged once one comes",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: none}, {offset: 7, at: at(2), dbAt: db(2)}, {offset: 9, at: at(40), dbAt: db(40), open: none}}, at(45), 7, true, 0},
		{"a view older than the window that reads since could not refresh (innodb_trx never idle) holds nothing",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: since(-3)}, {offset: 6, at: at(20), dbAt: db(20)}, {offset: 7, at: at(30), dbAt: db(30)}, {offset: 9, at: at(40), dbAt: db(40)}},
			at(51), 9, true, 0},
		{"until a first read is usable every sample waits",
			[]sample{{offset: 5, at: at(0), dbAt: db(0)}, {offset: 9, at: at(40), dbAt: db(40)}}, at(45), 0, false, 1},
		{"unless reads kept failing for a whole window",
			[]sample{{offset: 5, at: at(0), dbAt: db(0)}, {offset: 6, at: at(20), dbAt: db(20)}, {offset: 9, at: at(40), dbAt: db(40)}}, at(45), 6, true, 0},
		{"a view merely old (the process paused) still holds",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: since(-3)}}, at(51), 0, false, 1},
		{"without the grant the window alone decides",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: since(-3)}, {offset: 9, at: at(40), dbAt: db(40), open: openView{state: openNone}}}, at(45), 5, true, 0},
		{"the window still applies with nothing open",
			[]sample{{offset: 5, at: at(0), dbAt: db(0), open: none}}, at(9), 0, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := horizons{settle: 10 * time.Second}
			for _, s := range c.samples {
				h.add(s)
			}
			if got := h.heldBy(c.now); got != c.held {
				t.Errorf("heldBy = %d, want %d", got, c.held)
			}
			got, ok := h.settled(c.now)
			if got != c.want || ok != c.ok {
				t.Fatalf("settled = %d, %v; want %d, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestLedgerApply(t *testing.T) { report(t, ledgerApplyProblems()) }

func ledgerApplyProblems() (problems []string) {
	page := func(from uint64, offsets ...uint64) pageRead {
		p := pageRead{from: from, kept: offsets, all: setOf(offsets...), last: offsets[len(offsets)-1]}
		return p
	}
	for _, c := range []struct {
		name     string
		pages    []pageRead
		outcomes [][]outcome
		read     uint64
		pass     rowSet
		stopped  []bool
	}{
		{"every row recorded: read to the page's end", []pageRead{page(0, 3, 5, 9)}, [][]outcome{{recorded, parked, recorded}},
			9, setOf(3, 5, 9), []bool{false}},
		{"a row to retry stops its partition just before it", []pageRead{page(0, 3, 5, 9)}, [][]outcome{{recorded, retry, recorded}},
			3, setOf(3), []bool{true}},
		{"the first row to retry: nothing read", []pageRead{page(0, 3, 5)}, [][]outcome{{retry, recorded}},
			0, rowSet{}, []bool{true}},
		{"a later page does not move the read mark past an earlier failed row", []pageRead{page(0, 3, 5), page(5, 7, 9)},
			[][]outcome{{recorded, retry}, {recorded, recorded}}, 3, setOf(3), []bool{true, true}},
		{"with dropped rows before a failed one the page is read again whole", []pageRead{{from: 0, kept: []uint64{3, 9}, dropped: 1, all: setOf(3, 5, 9), last: 9}},
			[][]outcome{{recorded, retry}}, 0, rowSet{}, []bool{true}},
	} {
		l := newLedger("speculate_dlq", "q", 0)
		for i, pg := range c.pages {
			if got := l.apply(pg, c.outcomes[i]); got != c.stopped[i] {
				problems = append(problems, fmt.Sprintf("%s: page %d: stopped %v, want %v", c.name, i, got, c.stopped[i]))
			}
		}
		if l.read != c.read || l.pass != c.pass {
			problems = append(problems, fmt.Sprintf("%s: read to %d with %+v; want %d with %+v", c.name, l.read, l.pass, c.read, c.pass))
		}
	}
	return problems
}

func TestRowOutcome(t *testing.T) { report(t, rowOutcomeProblems()) }

func rowOutcomeProblems() (problems []string) {
	down := errors.New("the application database is down")
	for _, c := range []struct {
		name    string
		err     error
		overdue bool
		parkErr error
		want    outcome
		parks   bool
	}{
		{"recorded", nil, false, nil, recorded, false},
		{"an error that may pass: retry", down, false, nil, retry, false},
		{"refused: parked", fmt.Errorf("x: %w", mend.ErrInvalid), false, nil, parked, true},
		{"identity mismatch: parked", fmt.Errorf("x: %w", mend.ErrIdentityMismatch), false, nil, parked, true},
		{"refused, and the stand-in failed: retry", fmt.Errorf("x: %w", mend.ErrInvalid), false, down, retry, true},
		{"identity mismatch, and the stand-in failed: retry", fmt.Errorf("x: %w", mend.ErrIdentityMismatch), false, down, retry, true},
		{"failing past the bound: parked", down, true, nil, parked, true},
		{"failing past the bound, and the stand-in failed: retry", down, true, down, retry, true},
	} {
		parks := false
		got := rowOutcome(c.err, c.overdue, func() error { parks = true; return c.parkErr })
		if got != c.want || parks != c.parks {
			problems = append(problems, fmt.Sprintf("%s: outcome %d (parked: %v), want %d (parked: %v)", c.name, got, parks, c.want, c.parks))
		}
	}
	return problems
}

func TestLedgerSettle(t *testing.T) { report(t, ledgerSettleProblems()) }

func ledgerSettleProblems() (problems []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	// The same set releases with a compare-and-set from the watermark.
	l := newLedger("speculate_dlq", "q", 2)
	l.apply(pageRead{from: 2, kept: []uint64{3, 5}, all: setOf(3, 5), last: 5}, []outcome{recorded, recorded})
	l.endPass()
	l.apply(pageRead{from: 5, kept: []uint64{8}, all: setOf(8), last: 8}, []outcome{recorded})
	l.endPass()
	if i, ok := l.due(6); !ok || i != 0 {
		bad("due(6) = %d, %v; want checkpoint 0", i, ok)
	} else {
		adv, ok := l.settle(i, setOf(5, 3))
		if !ok || adv != (advance{topic: "speculate_dlq", partition: "q", from: 2, to: 5, cas: true}) {
			bad("settle = %+v, %v", adv, ok)
		}
		l.released(i)
		if l.acked != 5 || len(l.cps) != 1 || l.cps[0].read != setOf(8) {
			bad("after release: acked %d, checkpoints %+v", l.acked, l.cps)
		}
	}
	// A row gone and another come: the same count is not the same set.
	l = newLedger("speculate_dlq", "q", 0)
	l.apply(pageRead{from: 0, kept: []uint64{3, 5}, all: setOf(3, 5), last: 5}, []outcome{recorded, recorded})
	l.endPass()
	if _, ok := l.settle(0, setOf(2, 3)); ok {
		bad("released although offset 5 went and 2 came")
	}
	if l.read != 0 || len(l.cps) != 0 {
		bad("not read again from the watermark: read %d, checkpoints %+v", l.read, l.cps)
	}
	// {1,4} and {2,3}: the same count and the same sum, not the same set.
	l = newLedger("speculate_dlq", "q", 0)
	l.apply(pageRead{from: 0, kept: []uint64{1, 4}, all: setOf(1, 4), last: 4}, []outcome{recorded, recorded})
	l.endPass()
	if _, ok := l.settle(0, setOf(2, 3)); ok {
		bad("released {1,4} against {2,3}: same count and sum, another set")
	}
	// The advance from watermark 2 to checkpoint 5 moves only a watermark
	// still at 2: a replica paused past its slot lease counted from there.
	l = newLedger("speculate_dlq", "q", 2)
	l.apply(pageRead{from: 2, kept: []uint64{3, 5}, all: setOf(3, 5), last: 5}, []outcome{recorded, recorded})
	l.endPass()
	adv, _ := l.settle(0, setOf(3, 5))
	for _, c := range []struct {
		name    string
		current uint64
		want    bool
	}{
		{"the watermark it was counted from", 2, true},
		{"another replica moved it forward, still below", 3, false},
		{"another replica moved it past", 7, false},
	} {
		if got := adv.allowed(c.current); got != c.want {
			bad("advance, %s: allowed(%d) = %v, want %v", c.name, c.current, got, c.want)
		}
		guard, args := advanceGuard(adv)
		if guard != sqlAdvanceCAS || strings.Count(guard, "?") != len(args) {
			bad("advance, %s: the statement's guard %q %v is not the compare-and-set", c.name, guard, args)
		}
	}
	return problems
}

func TestLedgerFailed(t *testing.T) {
	l := newLedger("build_dlq", "b", 0)
	base := time.Second
	l.failed(7, errors.New("x"), t0, base)
	l.failed(7, errors.New("x"), t0, base)
	l.failed(7, errors.New("x"), t0, base)
	if l.failures != 3 || !l.retryAt.Equal(t0.Add(4*time.Second)) || !l.waiting(t0.Add(3*time.Second)) || l.waiting(t0.Add(4*time.Second)) {
		t.Fatalf("after 3 failures at one offset: %d, retry at %s", l.failures, l.retryAt)
	}
	l.failed(9, errors.New("y"), t0, base)
	if l.failures != 1 || l.failingAt != 9 {
		t.Fatalf("a failure at another offset counts from 1: %d at %d", l.failures, l.failingAt)
	}
	for range 30 {
		l.failed(9, errors.New("y"), t0, base)
	}
	if !l.retryAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("backoff %s, want a minute at most", l.retryAt.Sub(t0))
	}
}

// TestPlantedBugsFoundByTheseTests shows the table tests above catch the
// planted variants the simulation cannot tell apart (see
// TestSimulationFindsPlantedBugs): each run with its bug must fail.
func TestPlantedBugsFoundByTheseTests(t *testing.T) {
	for _, c := range []struct {
		name     string
		bug      *bool
		problems func() []string
	}{
		{"a later page moves the read mark past an earlier failed row", &planted.noEarlierStopGuard, ledgerApplyProblems},
		{"the advance is forward-only, not a compare-and-set", &planted.noCAS, ledgerSettleProblems},
		{"the horizon sample is stamped before its query", &planted.stampBeforeQuery, takeSampleProblems},
		{"the settle check compares a count", &planted.countOnly, ledgerSettleProblems},
		{"a refused row passes when its stand-in fails", &planted.passUnparked, rowOutcomeProblems},
		{"the monitor's heading and truncation marker found anywhere (issue 43)", &planted.markerAnywhere, craftedDeadlockProblems},
		{"a monitor transaction older than the server counted (issue 43)", &planted.trustAnyAge, craftedDeadlockProblems},
		{"SettleFor without its margin (issue 43)", &planted.noMargin, settleForProblems},
		{"the settle check compares count and sum (issue 43)", &planted.countAndSum, ledgerSettleProblems},
		{"the oldest open transaction replaced by the newest (issue 43)", &planted.newestOpen, oldestOpenProblems},
		{"the monitor's start time up to a second late (issue 43)", &planted.statusLate, oldestOpenProblems},
		{"the window bound by one lock wait (issue 43)", &planted.oneLockWait, settleForProblems},
		{"the default window not raised above the waits (issue 43)", &planted.settleNotRaised, settleForProblems},
		{"a monitor transaction older than its session counted (issue 43)", &planted.trustSessionAge, sessionAgesProblems},
	} {
		t.Run(c.name, func(t *testing.T) {
			*c.bug = true
			defer func() { *c.bug = false }()
			if len(c.problems()) == 0 {
				t.Fatal("the planted bug passed the test meant to catch it")
			}
		})
	}
}

// settleForProblems checks SettleFor against the servers' defaults: two
// lock waits of 50 s plus the margin, and a semi-sync commit's wait on top.
func settleForProblems() (problems []string) {
	for _, c := range []struct {
		w    Waits
		want time.Duration
	}{
		{Waits{LockWait: 50 * time.Second}, 110 * time.Second},
		{Waits{LockWait: 50 * time.Second, SemiSync: 10 * time.Second}, 120 * time.Second},
		{Waits{LockWait: 20 * time.Second}, SettleDefault},
	} {
		if got := SettleFor(c.w); got != c.want {
			problems = append(problems, fmt.Sprintf("SettleFor(%v) = %v, want %v", c.w, got, c.want))
		}
	}
	return problems
}

func TestSettleForDefaults(t *testing.T) { report(t, settleForProblems()) }

// TestSemiSyncWait: the semi-sync commit's wait counts only where it is
// enabled, under either spelling.
func TestSemiSyncWait(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want time.Duration
	}{
		{map[string]string{}, 0},
		{map[string]string{"rpl_semi_sync_master_enabled": "OFF", "rpl_semi_sync_master_timeout": "10000"}, 0},
		{map[string]string{"rpl_semi_sync_master_enabled": "ON", "rpl_semi_sync_master_timeout": "10000"}, 10 * time.Second},
		{map[string]string{"rpl_semi_sync_source_enabled": "ON", "rpl_semi_sync_source_timeout": "2500"}, 2500 * time.Millisecond},
	} {
		if got := semiSyncWait(c.vars); got != c.want {
			t.Errorf("semiSyncWait(%v) = %v, want %v", c.vars, got, c.want)
		}
	}
}

// oldestOpenProblems checks which open transaction a sample waits for:
// the oldest of the queue database's (innodb_trx's view), and from the
// monitor a start no later than the earliest the rounded age allows.
func oldestOpenProblems() (problems []string) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: t0.Add(d), Valid: true} }
	others := []openTrx{{session: 5, started: at(10 * time.Second)}, {session: 6, started: at(0)}, {session: 7, started: at(20 * time.Second)}, {session: 8, started: at(-time.Hour)}}
	dbs := map[int64]string{5: "q", 6: "q", 7: "q", 8: "other"}
	if got := oldestOpen(others, dbs, sql.NullString{String: "q", Valid: true}); got.session != 6 || !got.started.Time.Equal(t0) {
		problems = append(problems, fmt.Sprintf("oldestOpen = %+v; want session 6 from %v (session 8 is another database's)", got, t0))
	}
	// Active 14 s, read at now: it began in (now-15s, now-14s].
	now := t0.Add(time.Minute + 500*time.Millisecond)
	got := statusStarts([]statusTrx{{session: 11, active: 14 * time.Second}, {session: 3, active: time.Hour}}, 3, now)
	if len(got) != 1 || got[0].session != 11 || got[0].started.Time.After(now.Add(-15*time.Second)) {
		problems = append(problems, fmt.Sprintf("statusStarts = %+v; want session 11 alone, from no later than %v", got, now.Add(-15*time.Second)))
	}
	return problems
}

func TestOldestOpen(t *testing.T) { report(t, oldestOpenProblems()) }

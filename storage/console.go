package storage

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mendq/mend"
)

// This file holds the read queries only mend console runs. Every one is
// bounded by a constant: by a LIMIT in the statement or in a derived table
// under an aggregate, or by a page of queue names; each reads an index
// range, and the ones over many rows are index-only through the covering
// indexes of migration 0014 (mend_records_recent, mend_records_queue_state).
// None reads mend_events beyond one record's primary-key range.
// TestConsoleQueryPlans checks the plans on each engine.

// consoleCountLimit bounds the rows an aggregate of the console reads: one
// page of queues' open and parked records, their done records, a total.
// A count that reaches it is reported as reached (Partial, Capped), not
// as exact.
var consoleCountLimit = 100_000

// consoleRepairsLimit bounds the repairs the console's latency figures and
// chart read: the newest of the window's.
var consoleRepairsLimit = 100_000

// consoleSLOExactAbove: the console's chart reads the repair SLO's exact
// latency (retries, resolves) for the repairs slower than this from their
// failed_at (see sqlConsoleRecentDone).
const consoleSLOExactAbove = time.Minute

// The DISTINCT reads the (queue, source_key) index's first column only (a
// loose index scan), from the page's first name on. Every queue with
// records is a queue, whatever its name, as for mend status.
const sqlConsoleRecordQueues = `-- name: ConsoleRecordQueues
SELECT DISTINCT queue FROM mend_records WHERE queue > ?
ORDER BY queue LIMIT ?`

const sqlConsoleLeaseQueues = `-- name: ConsoleLeaseQueues
SELECT queue FROM mend_leases WHERE queue > ?
ORDER BY queue LIMIT ?`

// ConsoleQueueNames reads consoleSlotSlack lease rows more than a page, for
// the slot leases among them, and up to consoleLeaseRounds such reads past
// a longer run of slot leases (two per replica: far fewer in practice).
const (
	consoleSlotSlack   = 256
	consoleLeaseRounds = 4
)

// ConsoleQueueNames returns up to limit queue names after after (bytewise),
// in order: queues with records or a lease row, without mend's own slot
// leases (SlotLease) that have no records, the queues mend status lists.
// more says whether names follow the last one returned.
//
// Returns ErrInvalid for a limit below 1.
func (d *DB) ConsoleQueueNames(ctx context.Context, after string, limit int) (names []string, more bool, err error) {
	if limit < 1 {
		return nil, false, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var fromRecords [][]byte
	if err := d.db.SelectContext(ctx, &fromRecords, sqlConsoleRecordQueues, after, limit+1); err != nil {
		return nil, false, fmt.Errorf("storage: console queue names: %w", translate(err))
	}
	seen := map[string]bool{}
	for _, q := range fromRecords {
		seen[string(q)] = true
		names = append(names, string(q))
	}
	// Lease rows, without slot leases: a run of them longer than the page
	// is read past in up to consoleLeaseRounds reads; if that is not
	// enough, the page ends where the reads stopped.
	from, kept, complete := after, 0, false
	for range consoleLeaseRounds {
		var fromLeases [][]byte
		if err := d.db.SelectContext(ctx, &fromLeases, sqlConsoleLeaseQueues, from, limit+1+consoleSlotSlack); err != nil {
			return nil, false, fmt.Errorf("storage: console queue names: %w", translate(err))
		}
		for _, q := range fromLeases {
			from = string(q)
			if SlotLease(from) && !seen[from] {
				continue
			}
			kept++
			if !seen[from] {
				seen[from] = true
				names = append(names, from)
			}
		}
		if len(fromLeases) <= limit+consoleSlotSlack || kept > limit {
			complete = true
			break
		}
	}
	if !complete {
		names = slices.DeleteFunc(names, func(n string) bool { return n > from })
		sort.Strings(names)
		return names[:min(len(names), limit)], true, nil
	}
	sort.Strings(names)
	if len(names) > limit {
		return names[:limit], true, nil
	}
	return names, false, nil
}

// The per-state numbers of StatusCounts (mend status, the metrics'
// mend_records, mend_oldest_due_seconds) with OldestOpen's
// (mend_oldest_open_seconds) beside them, for the named queues only: an
// index-only range of mend_records_queue_state per queue and state. The
// open and parked records are one statement, the done records (the bulk)
// another, each read at most consoleCountLimit rows deep.
const sqlConsoleQueueCounts = `-- name: ConsoleQueueCounts
SELECT queue, state, COUNT(*) AS n,
	COALESCE(SUM(next_attempt_at <= NOW(6)), 0) AS due,
	COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, next_attempt_at, NOW(6))), 0) AS oldest_due_us,
	COALESCE(MAX(CASE WHEN next_attempt_at IS NOT NULL THEN TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)) END), -1) AS oldest_open_us
FROM (SELECT queue, state, next_attempt_at, created_at FROM mend_records
	WHERE queue IN (%s) AND state IN ('pending', 'waiting', 'settled', 'parked') LIMIT ?) r
GROUP BY queue, state`

// consoleQueueCounts is the statement ConsoleQueueStatus runs; a test
// swaps in a broken variant for its negative control.
var consoleQueueCounts = sqlConsoleQueueCounts

const sqlConsoleQueueDone = `-- name: ConsoleQueueDone
SELECT queue, COUNT(*) AS n
FROM (SELECT queue FROM mend_records WHERE queue IN (%s) AND state = 'done' LIMIT ?) r
GROUP BY queue`

// The parked records of the named queues whose topic is recorded for the
// audit or handled by its host, by queue and kind: the (queue, state)
// index's parked ranges and those rows' topics (parked rows are few),
// at most the limit's. ConsoleQueueStatus moves them out of the parked
// count, as Status does.
var sqlConsoleQueueRecorded = `-- name: ConsoleQueueRecorded
SELECT queue, CASE WHEN ` + statusAudit + ` THEN 'audit' ELSE 'host' END AS kind, COUNT(*) AS n
FROM (SELECT queue, topic, original_topic FROM mend_records
	WHERE queue IN (%s) AND state = 'parked' AND ` + recorded + ` LIMIT ?) r
GROUP BY queue, kind`

// ConsoleQueueStatus is Status and OldestOpen for the named queues alone
// (one page of the console's overview), in the order given: the same
// numbers by the same definitions. A queue with neither records nor a
// lease row comes back with empty counts. partial says a count reached
// consoleCountLimit: the page's counts are then lower bounds.
//
// Returns ErrInvalid for a bad queue name.
func (d *DB) ConsoleQueueStatus(ctx context.Context, queues []string) (out []QueueStatus, partial bool, err error) {
	if len(queues) == 0 {
		return nil, false, nil
	}
	args := make([]any, len(queues), len(queues)+1)
	byQueue := make(map[string]*QueueStatus, len(queues))
	out = make([]QueueStatus, len(queues))
	for i, q := range queues {
		if err := mend.ValidateIdentity("queue", q, true); err != nil {
			return nil, false, err
		}
		args[i] = q
		out[i] = QueueStatus{Queue: q, Counts: map[mend.State]int64{}}
	}
	for i := range out {
		byQueue[out[i].Queue] = &out[i]
	}
	args = append(args, consoleCountLimit)
	var rows []struct {
		Queue        []byte `db:"queue"`
		State        string `db:"state"`
		N            int64  `db:"n"`
		Due          int64  `db:"due"`
		OldestDueUS  int64  `db:"oldest_due_us"`
		OldestOpenUS int64  `db:"oldest_open_us"`
	}
	if err := d.db.SelectContext(ctx, &rows, fmt.Sprintf(consoleQueueCounts, placeholders(len(queues))), args...); err != nil {
		return nil, false, fmt.Errorf("storage: console queue status: %w", translate(err))
	}
	var read int64
	for _, r := range rows {
		read += r.N
		s := byQueue[string(r.Queue)]
		if s == nil {
			continue
		}
		s.Counts[mend.State(r.State)] += r.N
		s.Due += r.Due
		if r.Due > 0 {
			s.OldestDue = max(s.OldestDue, time.Duration(r.OldestDueUS)*time.Microsecond)
		}
		if r.OldestOpenUS >= 0 {
			s.OldestOpen = max(s.OldestOpen, time.Duration(r.OldestOpenUS)*time.Microsecond)
		}
	}
	partial = read >= int64(consoleCountLimit)
	var done []struct {
		Queue []byte `db:"queue"`
		N     int64  `db:"n"`
	}
	if err := d.db.SelectContext(ctx, &done, fmt.Sprintf(sqlConsoleQueueDone, placeholders(len(queues))), args...); err != nil {
		return nil, false, fmt.Errorf("storage: console queue status: %w", translate(err))
	}
	read = 0
	for _, r := range done {
		read += r.N
		if s := byQueue[string(r.Queue)]; s != nil {
			s.Counts[mend.StateDone] += r.N
		}
	}
	partial = partial || read >= int64(consoleCountLimit)
	var rec []struct {
		Queue []byte `db:"queue"`
		Kind  string `db:"kind"`
		N     int64  `db:"n"`
	}
	recArgs := append(append(append(append([]any{}, statusAuditArgs...), args[:len(queues)]...), recordedArgs...), consoleCountLimit)
	if err := d.db.SelectContext(ctx, &rec, fmt.Sprintf(sqlConsoleQueueRecorded, placeholders(len(queues))), recArgs...); err != nil {
		return nil, false, fmt.Errorf("storage: console queue status: %w", translate(err))
	}
	for _, r := range rec {
		if s := byQueue[string(r.Queue)]; s != nil {
			if s.Recorded == nil {
				s.Recorded = map[mend.TopicKind]int64{}
			}
			s.Recorded[mend.TopicKind(r.Kind)] += r.N
			if s.Counts[mend.StateParked] -= r.N; s.Counts[mend.StateParked] <= 0 {
				delete(s.Counts, mend.StateParked)
			}
		}
	}
	leases, err := d.LeaseGetMany(ctx, queues)
	if err != nil {
		return nil, false, err
	}
	for _, l := range leases {
		if s := byQueue[l.Term.Queue]; s != nil {
			ls := l
			s.Lease = &ls
		}
	}
	return out, partial, nil
}

// ConsoleTotals are counts across every queue, each read at most
// consoleCountLimit rows deep from one index range.
type ConsoleTotals struct {
	Open   int64 // unfinished records (pending, waiting, settled), due or not
	Due    int64 // of them, due now
	Parked int64 // parked records of topics mend repairs or does not know
	// Recorded is the records of topics recorded for the audit or handled
	// by their host (mend.TopicKind.Recorded): stored parked, shown apart,
	// never counted in Parked.
	Recorded int64
	// Capped names the counts that reached consoleCountLimit: read them as
	// "at least".
	Capped []string
}

// next_attempt_at is set exactly while a record is unfinished, so the
// (next_attempt_at, queue) index's ranges hold the open and the due ones.
const (
	sqlConsoleTotalOpen = `-- name: ConsoleTotalOpen
SELECT COUNT(*) FROM (SELECT 1 AS one FROM mend_records WHERE next_attempt_at IS NOT NULL LIMIT ?) r`
	sqlConsoleTotalDue = `-- name: ConsoleTotalDue
SELECT COUNT(*) FROM (SELECT 1 AS one FROM mend_records WHERE next_attempt_at <= NOW(6) LIMIT ?) r`
)

// The parked total reads the (state, updated_at) index's parked range and
// each row's topic (the kind is derived at read time): parked records are
// few, and the read is bounded like the others.
var (
	sqlConsoleTotalParked = `-- name: ConsoleTotalParked
SELECT COUNT(*) FROM (SELECT 1 AS one FROM mend_records WHERE state = 'parked' AND ` + notRecorded + ` LIMIT ?) r`
	sqlConsoleTotalRecorded = `-- name: ConsoleTotalRecorded
SELECT COUNT(*) FROM (SELECT 1 AS one FROM mend_records WHERE state = 'parked' AND ` + recorded + ` LIMIT ?) r`
)

// ConsoleTotals reads the overview's totals.
func (d *DB) ConsoleTotals(ctx context.Context) (ConsoleTotals, error) {
	var t ConsoleTotals
	for _, c := range []struct {
		name, query string
		n           *int64
		args        []any
	}{
		{"open", sqlConsoleTotalOpen, &t.Open, nil},
		{"due", sqlConsoleTotalDue, &t.Due, nil},
		{"parked", sqlConsoleTotalParked, &t.Parked, recordedArgs},
		{"recorded", sqlConsoleTotalRecorded, &t.Recorded, recordedArgs},
	} {
		if err := d.db.GetContext(ctx, c.n, c.query, append(append([]any{}, c.args...), consoleCountLimit)...); err != nil {
			return t, fmt.Errorf("storage: console totals: %w", translate(err))
		}
		if *c.n >= int64(consoleCountLimit) {
			t.Capped = append(t.Capped, c.name)
		}
	}
	return t, nil
}

// The queues with records due now, each with how many of the read rows
// are due and how long its oldest has been due: the (next_attempt_at,
// queue) index's due range, oldest first, at most the limit's rows. The
// first row of a queue read is its oldest due, so a queue listed has its
// exact oldest due even when the read stopped at the limit.
const sqlConsoleDueQueues = `-- name: ConsoleDueQueues
SELECT queue, COUNT(*) AS n, MAX(TIMESTAMPDIFF(MICROSECOND, next_attempt_at, NOW(6))) AS us
FROM (SELECT queue, next_attempt_at FROM mend_records WHERE next_attempt_at <= NOW(6) ORDER BY next_attempt_at LIMIT ?) d
GROUP BY queue`

// ConsoleDueQueues returns the queues with a record due now, the longest
// overdue first (Age: the oldest due; Count: due records among those
// read), from at most limit due records; truncated says the limit was
// reached (queues whose due records all come later are missing).
//
// Returns ErrInvalid for a limit below 1.
func (d *DB) ConsoleDueQueues(ctx context.Context, limit int) (out []QueueAge, truncated bool, err error) {
	if limit < 1 {
		return nil, false, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var rows []struct {
		Queue []byte `db:"queue"`
		N     int64  `db:"n"`
		US    int64  `db:"us"`
	}
	if err := d.db.SelectContext(ctx, &rows, sqlConsoleDueQueues, limit); err != nil {
		return nil, false, fmt.Errorf("storage: console due queues: %w", translate(err))
	}
	var read int64
	for _, r := range rows {
		read += r.N
		out = append(out, QueueAge{Queue: string(r.Queue), Count: r.N, Age: time.Duration(max(r.US, 0)) * time.Microsecond})
	}
	sortAges(out)
	return out, read >= int64(limit), nil
}

// sortAges orders queues by age, oldest first, then by name.
func sortAges(qs []QueueAge) {
	sort.Slice(qs, func(i, j int) bool {
		if qs[i].Age != qs[j].Age {
			return qs[i].Age > qs[j].Age
		}
		return qs[i].Queue < qs[j].Queue
	})
}

// The records finished within the window, newest first, at most the
// limit's: one index-only pass over the mend_records_recent range that
// gives the chart's finished and recorded counts and the repair latencies
// (us is -1 for a record whose dead letter carried no failure time).
//
// The latency is the repair SLO's (storage/status.go: SLOLatencyUS where
// SLOCounted holds, else -1), as mend status and the histogram compute it,
// for every repair that took over consoleSLOExactAbove from its failed_at:
// those are the ones a page is about, and few. Below it the latency from
// failed_at is kept as it is read from the index (an operator's resolve or
// retry within that time still counts there), so the chart's read of up to
// consoleRepairsLimit rows stays index-only rather than paying two reads of
// mend_events per row.
const sqlConsoleRecentDone = `-- name: ConsoleRecentDone
SELECT TIMESTAMPDIFF(SECOND, r.updated_at, NOW(6)) AS fin_s, TIMESTAMPDIFF(SECOND, r.created_at, NOW(6)) AS rec_s,
	CASE WHEN r.failed_at IS NULL THEN -1
		WHEN TIMESTAMPDIFF(MICROSECOND, r.failed_at, r.updated_at) <= ? THEN GREATEST(TIMESTAMPDIFF(MICROSECOND, r.failed_at, r.updated_at), 0)
		WHEN ` + SLOCounted + ` THEN ` + SLOLatencyUS + ` ELSE -1 END AS us
FROM mend_records r
WHERE r.state = 'done' AND r.updated_at >= NOW(6) - INTERVAL ? SECOND
ORDER BY r.updated_at DESC LIMIT ?`

// Records recorded within the window that are not finished were last
// updated within it too (updated_at >= created_at): the open and parked
// states' mend_records_recent ranges, index-only.
const sqlConsoleRecordedOpen = `-- name: ConsoleRecordedOpen
SELECT FLOOR(TIMESTAMPDIFF(SECOND, created_at, NOW(6)) / 60) AS ago, COUNT(*) AS n
FROM (SELECT created_at FROM mend_records
	WHERE state IN ('pending', 'waiting', 'settled', 'parked')
		AND updated_at >= NOW(6) - INTERVAL ? SECOND AND created_at >= NOW(6) - INTERVAL ? SECOND
	LIMIT ?) r
GROUP BY ago`

// The named queues' repairs within the window: for each queue, the
// mend_records_queue_state range (queue, 'done', updated_at), index-only.
// Their latencies are the repair SLO's, as in ConsoleRecentDone.
const sqlConsoleQueueLatency = `-- name: ConsoleQueueLatency
SELECT r.queue, ` + SLOLatencyUS + ` AS us
FROM mend_records r
WHERE r.state = 'done' AND r.updated_at >= NOW(6) - INTERVAL ? SECOND AND r.failed_at IS NOT NULL AND r.queue IN (%s)
	AND ` + SLOCounted + `
ORDER BY r.updated_at DESC
LIMIT ?`

// QueueLatencySummary is one queue's repair latency over a window.
type QueueLatencySummary struct {
	Count    int64
	P50, P99 time.Duration
}

// ConsoleLatency is the overview's repair latency: RepairLatency's figures
// (the same repairs, latency and nearest rank) over the window's newest
// consoleRepairsLimit repairs, and each named queue's.
type ConsoleLatency struct {
	RepairLatency
	Queues map[string]QueueLatencySummary
	// Truncated says the window held more than was read: the figures are
	// those of the newest repairs.
	Truncated bool
}

// Minute is one minute of the console's chart; Ago 0 is the current minute.
type Minute struct {
	Ago      int
	Recorded int64 // records recorded (created) in the minute
	Done     int64 // records finished in the minute (repaired, or resolved by hand)
	// LatencyAvg and LatencyMax are the repair latencies of the minute's
	// finished records that carried a failure time.
	LatencyAvg, LatencyMax time.Duration
}

// ConsoleActivity is the overview's last minutes: the repair latency over
// them and the chart's counts per minute.
type ConsoleActivity struct {
	Latency ConsoleLatency
	// Minutes, oldest first, one per minute of the window.
	Minutes []Minute
	// Truncated says a read reached its bound: the latency figures are the
	// newest repairs', the chart's oldest minutes partial.
	Truncated bool
}

// ConsoleActivity reads the last minutes minutes by the database clock:
// the repair latency over them, overall and for queues (which may be
// empty; queues without repairs are absent from Latency.Queues), and the
// records recorded and finished per minute.
//
// Returns ErrInvalid for minutes outside 1..1440 or a bad queue name.
func (d *DB) ConsoleActivity(ctx context.Context, minutes int, queues []string) (ConsoleActivity, error) {
	var out ConsoleActivity
	if minutes < 1 || minutes > 1440 {
		return out, &mend.ValidationError{Field: "minutes", Reason: "must be 1 to 1440"}
	}
	for _, q := range queues {
		if err := mend.ValidateIdentity("queue", q, true); err != nil {
			return out, err
		}
	}
	secs, lim := minutes*60, consoleRepairsLimit
	window := time.Duration(secs) * time.Second
	out.Latency = ConsoleLatency{RepairLatency: RepairLatency{Window: window}, Queues: map[string]QueueLatencySummary{}}
	out.Minutes = make([]Minute, minutes)
	for i := range out.Minutes {
		out.Minutes[i].Ago = minutes - 1 - i
	}
	at := func(secsAgo int64) *Minute {
		ago := secsAgo / 60
		if secsAgo < 0 || ago >= int64(minutes) {
			return nil
		}
		return &out.Minutes[minutes-1-int(ago)]
	}
	var done []struct {
		FinS int64 `db:"fin_s"`
		RecS int64 `db:"rec_s"`
		US   int64 `db:"us"`
	}
	if err := d.db.SelectContext(ctx, &done, sqlConsoleRecentDone, consoleSLOExactAbove.Microseconds(), secs, lim); err != nil {
		return out, fmt.Errorf("storage: console activity: %w", translate(err))
	}
	out.Truncated = len(done) >= lim
	lat := make([]int64, 0, len(done))
	sums, with := make([]int64, minutes), make([]int64, minutes) // per minute: latency total, repairs with a failure time
	for _, r := range done {
		if m := at(r.RecS); m != nil {
			m.Recorded++
		}
		m := at(r.FinS)
		if m == nil {
			continue
		}
		m.Done++
		if r.US < 0 {
			continue
		}
		lat = append(lat, r.US)
		m.LatencyMax = max(m.LatencyMax, time.Duration(r.US)*time.Microsecond)
		sums[minutes-1-m.Ago] += r.US
		with[minutes-1-m.Ago]++
	}
	for i := range out.Minutes {
		if with[i] > 0 {
			out.Minutes[i].LatencyAvg = time.Duration(sums[i]/with[i]) * time.Microsecond
		}
	}
	slices.Sort(lat)
	l := &out.Latency
	l.Count, l.Truncated = int64(len(lat)), out.Truncated
	if len(lat) > 0 {
		l.P50, l.P99, l.Max = nearestRank(lat, 0.5), nearestRank(lat, 0.99), time.Duration(lat[len(lat)-1])*time.Microsecond
	}
	var rec []struct {
		Ago int64 `db:"ago"`
		N   int64 `db:"n"`
	}
	if err := d.db.SelectContext(ctx, &rec, sqlConsoleRecordedOpen, secs, secs, lim); err != nil {
		return out, fmt.Errorf("storage: console recorded per minute: %w", translate(err))
	}
	var read int64
	for _, r := range rec {
		read += r.N
		if m := at(r.Ago * 60); m != nil {
			m.Recorded += r.N
		}
	}
	out.Truncated = out.Truncated || read >= int64(lim)
	if len(queues) == 0 {
		return out, nil
	}
	args := []any{secs}
	for _, q := range queues {
		args = append(args, q)
	}
	args = append(args, lim)
	var rows []struct {
		Queue []byte `db:"queue"`
		US    int64  `db:"us"`
	}
	if err := d.db.SelectContext(ctx, &rows, fmt.Sprintf(sqlConsoleQueueLatency, placeholders(len(queues))), args...); err != nil {
		return out, fmt.Errorf("storage: console queue latency: %w", translate(err))
	}
	if len(rows) >= lim {
		out.Truncated, l.Truncated = true, true
	}
	by := map[string][]int64{}
	for _, r := range rows {
		by[string(r.Queue)] = append(by[string(r.Queue)], r.US)
	}
	for q, us := range by {
		slices.Sort(us)
		l.Queues[q] = QueueLatencySummary{Count: int64(len(us)), P50: nearestRank(us, 0.5), P99: nearestRank(us, 0.99)}
	}
	return out, nil
}

// nearestRank is the p-th percentile of sorted latencies (µs) by the
// nearest-rank method RepairLatency uses: the value at rank ceil(p*n).
func nearestRank(us []int64, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(us)))) - 1
	return time.Duration(us[max(i, 0)]) * time.Microsecond
}

// The longest-overdue records through the (next_attempt_at, queue) index:
// an index-only read of the rows that are due and overdue past the bound.
const sqlConsoleOverdue = `-- name: ConsoleOverdue
SELECT queue, TIMESTAMPDIFF(MICROSECOND, next_attempt_at, NOW(6)) AS us
FROM mend_records
WHERE next_attempt_at <= NOW(6) - INTERVAL ? MICROSECOND
ORDER BY next_attempt_at
LIMIT ?`

// Parked rows through mend_records_recent, at most the limit's worth of
// the longest-parked, leaving out those recorded for the audit or handled
// by their host (each row's topic is read for that).
var sqlConsoleParkedByQueue = `-- name: ConsoleParkedByQueue
SELECT queue, COUNT(*) AS n, MAX(TIMESTAMPDIFF(MICROSECOND, state_since, NOW(6))) AS us
FROM (SELECT queue, state_since FROM mend_records WHERE state = 'parked' AND ` + notRecorded + ` ORDER BY updated_at LIMIT ?) p
GROUP BY queue`

// Repairs finished within the window that took longer than the bound, the
// window's newest at most the limit's (mend_records_recent, index-only).
// Slow by the repair SLO (SLOLatencyUS where SLOCounted holds, as mend
// status and MendRepairSLO judge): a repair never counts from before its
// dead letter's failed_at, so only rows slower than the bound from failed_at
// (the index's own columns) are looked at further.
const sqlConsoleSlowRepairs = `-- name: ConsoleSlowRepairs
SELECT queue, COUNT(*) AS n, MAX(us) AS us
FROM (SELECT r.queue, ` + SLOLatencyUS + ` AS us FROM mend_records r
	WHERE r.state = 'done' AND r.updated_at >= NOW(6) - INTERVAL ? MICROSECOND AND r.failed_at IS NOT NULL
		AND TIMESTAMPDIFF(MICROSECOND, r.failed_at, r.updated_at) > ? AND ` + SLOCounted + `
	ORDER BY r.updated_at DESC LIMIT ?) s
WHERE us > ?
GROUP BY queue`

// QueueAge is a queue with a count and the largest age of its rows that
// matched; used for the console's paging conditions.
type QueueAge struct {
	Queue string
	Count int64
	Age   time.Duration
}

// ConsoleAlertParams bounds the console's paging reads. The defaults are
// the suggested alert rules of docs/operations.md.
type ConsoleAlertParams struct {
	OverdueAfter time.Duration // MendRepairStuck: due for longer than this
	SLOWindow    time.Duration // MendRepairSLO: finished within this window ...
	SLOBound     time.Duration // ... and slower than this
	Limit        int           // rows read per condition
}

// ConsoleAlerts is what would page now, per condition, worst first.
type ConsoleAlerts struct {
	Overdue     []QueueAge // records due for longer than OverdueAfter
	Parked      []QueueAge // parked records, Age the longest parked
	SlowRepairs []QueueAge // repairs in the SLO window slower than SLOBound
	// Truncated says a condition read Limit rows: there may be more queues.
	Truncated bool
}

// ConsoleAlerts reads the paging conditions the console shows at the top
// of every page, each bounded by p.Limit rows.
//
// Returns ErrInvalid for non-positive bounds.
func (d *DB) ConsoleAlerts(ctx context.Context, p ConsoleAlertParams) (ConsoleAlerts, error) {
	var out ConsoleAlerts
	if p.OverdueAfter <= 0 || p.SLOWindow <= 0 || p.SLOBound <= 0 || p.Limit < 1 {
		return out, &mend.ValidationError{Field: "alert params", Reason: "bounds and limit must be positive"}
	}
	var overdue []struct {
		Queue []byte `db:"queue"`
		US    int64  `db:"us"`
	}
	if err := d.db.SelectContext(ctx, &overdue, sqlConsoleOverdue, p.OverdueAfter.Microseconds(), p.Limit); err != nil {
		return out, fmt.Errorf("storage: console overdue: %w", translate(err))
	}
	out.Truncated = len(overdue) == p.Limit
	idx := map[string]int{}
	for _, r := range overdue {
		q := string(r.Queue)
		i, ok := idx[q]
		if !ok {
			i = len(out.Overdue)
			idx[q] = i
			out.Overdue = append(out.Overdue, QueueAge{Queue: q})
		}
		out.Overdue[i].Count++
		out.Overdue[i].Age = max(out.Overdue[i].Age, time.Duration(r.US)*time.Microsecond)
	}
	grouped := func(name, query string, args ...any) ([]QueueAge, error) {
		var rows []struct {
			Queue []byte `db:"queue"`
			N     int64  `db:"n"`
			US    int64  `db:"us"`
		}
		if err := d.db.SelectContext(ctx, &rows, query, args...); err != nil {
			return nil, fmt.Errorf("storage: console %s: %w", name, translate(err))
		}
		res := make([]QueueAge, len(rows))
		var total int64
		for i, r := range rows {
			res[i] = QueueAge{Queue: string(r.Queue), Count: r.N, Age: time.Duration(r.US) * time.Microsecond}
			total += r.N
		}
		if total >= int64(p.Limit) {
			out.Truncated = true
		}
		sortAges(res)
		return res, nil
	}
	var err error
	if out.Parked, err = grouped("parked", sqlConsoleParkedByQueue, append(append([]any{}, recordedArgs...), p.Limit)...); err != nil {
		return out, err
	}
	if out.SlowRepairs, err = grouped("slow repairs", sqlConsoleSlowRepairs, p.SLOWindow.Microseconds(), p.SLOBound.Microseconds(), p.Limit, p.SLOBound.Microseconds()); err != nil {
		return out, err
	}
	return out, nil
}

// Newest first from a cursor (the last row's created_at and record_id), so
// a page never repeats or skips a record that arrived meanwhile.
const sqlConsoleQueueRecords = `-- name: ConsoleQueueRecords
SELECT ` + recordColumns + ` FROM mend_records
WHERE queue = ? AND (? = '' OR state = ?)
	AND (created_at < ? OR (created_at = ? AND record_id > ?))
ORDER BY created_at DESC, record_id
LIMIT ?`

// The first page's cursors: the ends of DATETIME's range (a zero time.Time
// would be 0000-00-00, which strict SQL modes refuse).
var (
	cursorFirst = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	cursorLast  = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// RecordCursor is where a page of ConsoleQueueRecords starts: after the
// record with this creation time and ID. The zero cursor is the first page.
type RecordCursor struct {
	CreatedAt time.Time
	ID        mend.RecordID
}

// ConsoleQueueRecords returns up to limit of queue's records newest first,
// only those in state unless it is empty, starting after cursor.
//
// Returns ErrInvalid for a bad queue, an unknown state or a limit outside
// 1..1000.
func (d *DB) ConsoleQueueRecords(ctx context.Context, queue string, state mend.State, after RecordCursor, limit int) ([]mend.Record, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	if state != "" && !state.Valid() {
		return nil, &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a record state (pending, waiting, settled, parked, done)", state)}
	}
	if limit < 1 || limit > 1000 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be 1 to 1000"}
	}
	from := after.CreatedAt.UTC()
	if after.CreatedAt.IsZero() {
		from = cursorLast // before every stored time: the first page
	}
	var rows []recordRow
	err := d.db.SelectContext(ctx, &rows, sqlConsoleQueueRecords, queue, string(state), string(state),
		from, from, after.ID[:], limit)
	if err != nil {
		return nil, fmt.Errorf("storage: console queue records: %w", translate(err))
	}
	return recordsOf(rows)
}

// One record's events by its primary key range, bounded.
const sqlConsoleRecordEvents = `-- name: ConsoleRecordEvents
SELECT ` + eventColumns + ` FROM mend_events WHERE record_id = ? AND queue = ? ORDER BY seq LIMIT ?`

// ConsoleRecordEvents is RecordHistory bounded to the first limit events;
// an empty result is not an error (the record may have been pruned since).
func (d *DB) ConsoleRecordEvents(ctx context.Context, queue string, id mend.RecordID, limit int) ([]mend.Event, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var rows []eventRow
	if err := d.db.SelectContext(ctx, &rows, sqlConsoleRecordEvents, id[:], queue, limit); err != nil {
		return nil, fmt.Errorf("storage: console record events: %w", translate(err))
	}
	evs := make([]mend.Event, len(rows))
	for i := range rows {
		evs[i] = rows[i].event()
	}
	return evs, nil
}

// The parked records across queues, least recently changed first, from a
// cursor: the (state, updated_at) index's range. %s is notRecorded, or
// recorded for ParkedFilter.Recorded.
const sqlConsoleParked = `-- name: ConsoleParked
SELECT ` + recordColumns + ` FROM mend_records
WHERE state = 'parked' AND %s AND (? = '' OR queue = ?) AND (? = '' OR LOCATE(?, last_error) > 0)
	AND (updated_at > ? OR (updated_at = ? AND record_id > ?))
ORDER BY updated_at, record_id
LIMIT ?`

// kindCond is the condition ParkedFilter.Recorded selects.
func (f ParkedFilter) kindCond() string {
	if f.Recorded {
		return recorded
	}
	return notRecorded
}

// ParkedFilter is the selection retry and resolve take, for the console's
// parked page.
type ParkedFilter struct {
	Queue          string // only this queue, when set
	ReasonContains string // only records whose park reason contains it, byte for byte
	// Recorded selects the records of topics recorded for the audit or
	// handled by their host (mend.TopicKind.Recorded) instead of the
	// parked ones; they are never both in one page.
	Recorded bool
	After    RecordCursor
	Limit    int // 1..1000
}

// ConsoleParked returns parked records across queues, longest parked first
// (by their last change), after f.After; After.CreatedAt holds the last
// row's updated_at.
//
// Returns ErrInvalid for a bad queue or limit.
func (d *DB) ConsoleParked(ctx context.Context, f ParkedFilter) ([]mend.Record, error) {
	if f.Queue != "" {
		if err := mend.ValidateIdentity("queue", f.Queue, true); err != nil {
			return nil, err
		}
	}
	if f.Limit < 1 || f.Limit > 1000 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be 1 to 1000"}
	}
	from := f.After.CreatedAt.UTC()
	if f.After.CreatedAt.IsZero() {
		from = cursorFirst // after no stored time: the first page
	}
	var rows []recordRow
	args := append(append([]any{}, recordedArgs...), f.Queue, f.Queue, f.ReasonContains, []byte(f.ReasonContains),
		from, from, f.After.ID[:], f.Limit)
	err := d.db.SelectContext(ctx, &rows, fmt.Sprintf(sqlConsoleParked, f.kindCond()), args...)
	if err != nil {
		return nil, fmt.Errorf("storage: console parked: %w", translate(err))
	}
	return recordsOf(rows)
}

// The repairs failing now: the records FailingCondition names, the most
// attempts first (then the most recently failed), at most the limit: a
// backward, index-only range of mend_records_failing (migration 0017),
// which holds the failing records' failing_attempts (the generated
// column's CASE is FailingCondition; TestFailingAttemptsColumn holds them
// together), so its cost follows the failing records read, not the table.
// The limit is the read's bound plus one, which tells whether more are
// failing. Their age is FailingAgeUS, mend status's "failing for".
const sqlConsoleFailing = `-- name: ConsoleFailing
SELECT queue, record_id, failing_attempts AS attempts,
	TIMESTAMPDIFF(MICROSECOND, NOW(6), next_attempt_at) AS next_us,
	TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6)) AS last_us,
	` + FailingAgeUS + ` AS failing_us
FROM mend_records WHERE failing_attempts > 0
ORDER BY failing_attempts DESC, updated_at DESC LIMIT ?`

// The last error of the shown queues' worst record, by primary key.
const sqlConsoleFailingErrors = `-- name: ConsoleFailingErrors
SELECT record_id, last_error FROM mend_records WHERE record_id IN (%s)`

// FailingQueue is a queue whose repairs are failing now.
type FailingQueue struct {
	Queue   string
	Records int64 // its failing records among those read
	// Attempts is the most failed attempts in a row of one of them,
	// Record that record (the most recently failed among equals) and
	// LastError its last error.
	Attempts  int
	Record    mend.RecordID
	LastError string
	// NextAttempt is the time until the soonest next attempt among them
	// (negative: due now, by so much); LastFailed the time since the newest
	// failure; FailingFor how long the longest-failing of them has been
	// failing, by mend status's definition (QueueStatus.OldestFailing:
	// since it entered its step, state_since).
	NextAttempt, LastFailed, FailingFor time.Duration
}

// FailingQueues is the console's "failing now": the queues with failing
// repairs, the most attempts first (then the most records, then by name).
type FailingQueues struct {
	Queues []FailingQueue
	// Records is how many failing records were read; Truncated says more
	// are failing than were read (those with the fewest attempts are left
	// out: a queue whose records all have fewer may be missing, and counts
	// are lower bounds).
	Records   int64
	Truncated bool
}

// ConsoleFailingQueues reads at most read failing records (pending or
// settled), the most attempts first, and returns their queues, with the
// last error of the worst record of the first show queues (the others'
// LastError is empty).
//
// Returns ErrInvalid for a read below 1 or a negative show.
func (d *DB) ConsoleFailingQueues(ctx context.Context, read, show int) (FailingQueues, error) {
	var out FailingQueues
	if read < 1 || show < 0 {
		return out, &mend.ValidationError{Field: "limit", Reason: "read must be at least 1, show at least 0"}
	}
	var rows []struct {
		Queue     []byte `db:"queue"`
		RecordID  []byte `db:"record_id"`
		Attempts  int    `db:"attempts"`
		NextUS    int64  `db:"next_us"`
		LastUS    int64  `db:"last_us"`
		FailingUS int64  `db:"failing_us"`
	}
	if err := d.db.SelectContext(ctx, &rows, sqlConsoleFailing, read+1); err != nil {
		return out, fmt.Errorf("storage: console failing: %w", translate(err))
	}
	// The row past read says more are failing; it is not shown.
	if len(rows) > read {
		rows, out.Truncated = rows[:read], true
	}
	out.Records = int64(len(rows))
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	by := map[string]int{}
	for _, r := range rows {
		q := string(r.Queue)
		i, ok := by[q]
		if !ok {
			i = len(out.Queues)
			by[q] = i
			out.Queues = append(out.Queues, FailingQueue{Queue: q, NextAttempt: us(r.NextUS), LastFailed: us(r.LastUS), Attempts: -1})
		}
		f := &out.Queues[i]
		f.Records++
		f.NextAttempt = min(f.NextAttempt, us(r.NextUS))
		f.FailingFor = max(f.FailingFor, us(r.FailingUS))
		if r.Attempts > f.Attempts || (r.Attempts == f.Attempts && us(r.LastUS) < f.LastFailed) {
			f.Attempts = r.Attempts
			copy(f.Record[:], r.RecordID)
		}
		f.LastFailed = min(f.LastFailed, us(r.LastUS))
	}
	sort.Slice(out.Queues, func(i, j int) bool {
		a, b := out.Queues[i], out.Queues[j]
		switch {
		case a.Attempts != b.Attempts:
			return a.Attempts > b.Attempts
		case a.Records != b.Records:
			return a.Records > b.Records
		}
		return a.Queue < b.Queue
	})
	n := min(show, len(out.Queues))
	if n == 0 {
		return out, nil
	}
	args := make([]any, n)
	idx := make(map[mend.RecordID]int, n)
	for i := range n {
		args[i] = out.Queues[i].Record[:]
		idx[out.Queues[i].Record] = i
	}
	var errs []struct {
		RecordID  []byte `db:"record_id"`
		LastError string `db:"last_error"`
	}
	if err := d.db.SelectContext(ctx, &errs, fmt.Sprintf(sqlConsoleFailingErrors, placeholders(n)), args...); err != nil {
		return out, fmt.Errorf("storage: console failing errors: %w", translate(err))
	}
	for _, e := range errs {
		var id mend.RecordID
		copy(id[:], e.RecordID)
		if i, ok := idx[id]; ok {
			out.Queues[i].LastError = e.LastError
		}
	}
	return out, nil
}

// The parked records a reason filter searches, at most the scan's: their
// IDs, last change and whether the reason matches, in the page's order.
// LOCATE reads each one's last error (no index holds it), so the scan,
// not the matches, is what is bounded.
const sqlConsoleParkedScan = `-- name: ConsoleParkedScan
SELECT record_id, updated_at, LOCATE(?, last_error) > 0 AS hit FROM mend_records
WHERE state = 'parked' AND %s AND (? = '' OR queue = ?)
	AND (updated_at > ? OR (updated_at = ? AND record_id > ?))
ORDER BY updated_at, record_id
LIMIT ?`

const sqlConsoleParkedRows = `-- name: ConsoleParkedRows
SELECT ` + recordColumns + ` FROM mend_records WHERE record_id IN (%s) ORDER BY updated_at, record_id`

// ConsoleParkedScanDefault is how many parked records one page of a
// reason filter searches.
const ConsoleParkedScanDefault = 5000

// ParkedMatches is one page of a reason filter over the parked records.
type ParkedMatches struct {
	Records []mend.Record
	// Scanned is how many parked records were searched; Capped says the
	// search stopped at its bound before the page filled, and Resume is
	// where the next search starts (past every record searched).
	Scanned int
	Capped  bool
	Resume  RecordCursor
}

// ConsoleParkedMatching is ConsoleParked for a filter with a reason: it
// searches at most scan parked records (ConsoleParkedScanDefault when 0)
// from f.After and returns up to f.Limit whose reason contains
// f.ReasonContains. When the search reaches scan first, Capped is set and
// Resume continues it.
//
// Returns ErrInvalid for a bad queue or limit, or an empty reason.
func (d *DB) ConsoleParkedMatching(ctx context.Context, f ParkedFilter, scan int) (ParkedMatches, error) {
	var out ParkedMatches
	if f.ReasonContains == "" {
		return out, &mend.ValidationError{Field: "reason", Reason: "must not be empty (ConsoleParked lists without one)"}
	}
	if f.Queue != "" {
		if err := mend.ValidateIdentity("queue", f.Queue, true); err != nil {
			return out, err
		}
	}
	if f.Limit < 1 || f.Limit > 1000 {
		return out, &mend.ValidationError{Field: "limit", Reason: "must be 1 to 1000"}
	}
	if scan <= 0 {
		scan = ConsoleParkedScanDefault
	}
	from := f.After.CreatedAt.UTC()
	if f.After.CreatedAt.IsZero() {
		from = cursorFirst
	}
	var rows []struct {
		RecordID  []byte    `db:"record_id"`
		UpdatedAt time.Time `db:"updated_at"`
		Hit       bool      `db:"hit"`
	}
	if err := d.db.SelectContext(ctx, &rows, fmt.Sprintf(sqlConsoleParkedScan, f.kindCond()),
		append(append([]any{[]byte(f.ReasonContains)}, recordedArgs...), f.Queue, f.Queue, from, from, f.After.ID[:], scan)...); err != nil {
		return out, fmt.Errorf("storage: console parked scan: %w", translate(err))
	}
	var ids []any
	for _, r := range rows {
		out.Scanned++
		copy(out.Resume.ID[:], r.RecordID)
		out.Resume.CreatedAt = r.UpdatedAt.UTC()
		if r.Hit {
			ids = append(ids, r.RecordID)
			if len(ids) == f.Limit {
				break
			}
		}
	}
	out.Capped = len(ids) < f.Limit && len(rows) == scan
	if len(ids) == 0 {
		return out, nil
	}
	var recs []recordRow
	if err := d.db.SelectContext(ctx, &recs, fmt.Sprintf(sqlConsoleParkedRows, placeholders(len(ids))), ids...); err != nil {
		return out, fmt.Errorf("storage: console parked rows: %w", translate(err))
	}
	var err error
	out.Records, err = recordsOf(recs)
	return out, err
}

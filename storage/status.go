package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/mendq/mend"
)

// QueueStatus is what an operator asks about one queue: how many records
// are in each state, how long the longest-overdue record has waited, and
// who holds the queue's lease. Ages and time left come from the database
// clock.
type QueueStatus struct {
	Queue string
	// Counts by record state; states without records are absent.
	Counts map[mend.State]int64
	// Due is how many records are due now (next attempt at or before NOW(6)).
	Due int64
	// OldestDue is how long the longest-overdue record has been due; zero
	// when nothing is due.
	OldestDue time.Duration
	// OldestOpen is how long the oldest unfinished record (due or in
	// backoff) has existed, as OldestOpen reports it; Status leaves it zero
	// for the caller to fill (it is another query).
	OldestOpen time.Duration
	// Failing is how many records are failing: in a step (pending or
	// settled) whose every attempt so far has failed, waiting out a backoff
	// (FailingCondition).
	Failing int64
	// OldestFailing is how long the longest-failing of them has been in its
	// step (since its state_since, by the database clock): the age
	// mend_oldest_failing_seconds reports and MendRepairsFailing pages on,
	// while the record backs off and before it is parked. Zero when none.
	OldestFailing time.Duration
	// FailingLastError is the last error of the queue's longest-failing
	// record, as StatusFailing reads it; Status leaves it empty for the
	// caller to fill (it is another query).
	FailingLastError string
	// Recorded counts the queue's records of topics recorded for the audit
	// or handled by their host (mend.TopicAudit, mend.TopicHost), by kind:
	// they are stored parked but are nobody's to act on, so Counts' parked
	// leaves them out. Absent kinds have no records.
	Recorded map[mend.TopicKind]int64
	// Lease is the queue's lease row; nil if the queue was never leased.
	Lease *LeaseStatus
}

// FailingCondition is the one definition of a failing record (issue 47):
// in a step the planner retries with backoff (pending: settling the
// batch; settled: publishing the wake-up) with at least one failed
// attempt recorded since it entered the step (attempts restart at zero
// on every state change and on mend retry, and only a failed attempt
// raises them in these states). A waiting record counts its checks in
// attempts and is bounded by --grace instead, so it is not failing; a
// parked one is MendRecordsParked's. Its age is NOW(6) - state_since:
// every attempt since then has failed. Migration 0017's generated column
// mend_records.failing_attempts is attempts where this holds and NULL
// elsewhere, for its index (TestFailingAttemptsColumn holds them together).
const FailingCondition = `state IN ('pending', 'settled') AND attempts > 0`

// FailingAgeUS is how long a record FailingCondition names has been
// failing, in microseconds by the database clock: since it entered its
// step. mend status (oldest failing, the failing list), the metric
// mend_oldest_failing_seconds and mend console's "failing for" all read it.
const FailingAgeUS = `TIMESTAMPDIFF(MICROSECOND, state_since, NOW(6))`

// The GROUP BY reads every record of every queue: it is an operator and
// metrics query, run at human or scrape rate, never on the repair path.
// A parked record whose topic is recorded for the audit or handled by its
// host (mend.TopicKind.Recorded) is counted by its kind, apart from the
// parked; the kind is derived from its topic here (statusKindArgs).
var sqlStatusCounts = `-- name: StatusCounts
SELECT queue, state, CASE WHEN state <> 'parked' THEN ''
		WHEN ` + statusAudit + ` THEN 'audit' WHEN ` + statusHost + ` THEN 'host' ELSE '' END AS kind,
	COUNT(*) AS n,
	COALESCE(SUM(next_attempt_at <= NOW(6)), 0) AS due,
	COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, next_attempt_at, NOW(6))), 0) AS oldest_due_us,
	COALESCE(SUM(` + FailingCondition + `), 0) AS failing,
	COALESCE(MAX(CASE WHEN ` + FailingCondition + ` THEN ` + FailingAgeUS + ` END), 0) AS oldest_failing_us
FROM mend_records
GROUP BY queue, state, kind`

var (
	statusAudit, statusAuditArgs = topicOfKind(mend.TopicAudit)
	statusHost, statusHostArgs   = topicOfKind(mend.TopicHost)
	statusKindArgs               = append(append([]any{}, statusAuditArgs...), statusHostArgs...)
)

const sqlStatusLeases = `-- name: StatusLeases
` + leaseSelect

// Status returns every queue that has records or a lease row, sorted by
// queue name (bytewise). mend's own slot leases (SlotLease) without records
// are left out: they are not queues.
func (d *DB) Status(ctx context.Context) ([]QueueStatus, error) {
	byQueue := map[string]*QueueStatus{}
	get := func(q string) *QueueStatus {
		s, ok := byQueue[q]
		if !ok {
			s = &QueueStatus{Queue: q, Counts: map[mend.State]int64{}}
			byQueue[q] = s
		}
		return s
	}
	var counts []struct {
		Queue       []byte `db:"queue"`
		State       string `db:"state"`
		Kind        string `db:"kind"`
		N           int64  `db:"n"`
		Due         int64  `db:"due"`
		OldestDueUS int64  `db:"oldest_due_us"`
		Failing     int64  `db:"failing"`
		FailingUS   int64  `db:"oldest_failing_us"`
	}
	if err := d.db.SelectContext(ctx, &counts, sqlStatusCounts, statusKindArgs...); err != nil {
		return nil, fmt.Errorf("storage: status: %w", translate(err))
	}
	for _, c := range counts {
		s := get(string(c.Queue))
		if c.Kind != "" {
			if s.Recorded == nil {
				s.Recorded = map[mend.TopicKind]int64{}
			}
			s.Recorded[mend.TopicKind(c.Kind)] += c.N
			continue
		}
		s.Counts[mend.State(c.State)] += c.N
		s.Due += c.Due
		if c.Due > 0 {
			s.OldestDue = max(s.OldestDue, time.Duration(c.OldestDueUS)*time.Microsecond)
		}
		s.Failing += c.Failing
		if c.Failing > 0 {
			s.OldestFailing = max(s.OldestFailing, time.Duration(c.FailingUS)*time.Microsecond)
		}
	}
	var leases []leaseRow
	if err := d.db.SelectContext(ctx, &leases, sqlStatusLeases); err != nil {
		return nil, fmt.Errorf("storage: status: %w", translate(err))
	}
	for _, l := range leases {
		ls := l.status()
		get(ls.Term.Queue).Lease = &ls
	}
	out := make([]QueueStatus, 0, len(byQueue))
	for _, s := range byQueue {
		// mend's own slot leases are not queues: they would pollute every
		// per-queue view and grow the metrics' cardinality with replicas.
		if len(s.Counts) == 0 && s.Lease != nil && s.Lease.Internal() {
			continue
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, nil
}

// The longest-failing records, oldest step first: the row lookups are for
// the LIMIT only; the filter reads the (state, ...) index's pending and
// settled ranges, as StatusCounts reads every record.
const sqlStatusFailing = `-- name: StatusFailing
SELECT queue, record_id, attempts, ` + FailingAgeUS + ` AS us, last_error
FROM mend_records WHERE ` + FailingCondition + `
ORDER BY state_since, record_id LIMIT ?`

// FailingRecord is a record whose every attempt in its step has failed
// (FailingCondition), as mend status lists it.
type FailingRecord struct {
	Queue     string
	ID        mend.RecordID
	Attempts  int
	For       time.Duration // since its state_since, by the database clock
	LastError string        // a denied statement's names its GRANT
}

// StatusFailing returns up to limit failing records, longest-failing first.
func (d *DB) StatusFailing(ctx context.Context, limit int) ([]FailingRecord, error) {
	if limit < 1 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var rows []struct {
		Queue     []byte `db:"queue"`
		ID        []byte `db:"record_id"`
		Attempts  int    `db:"attempts"`
		US        int64  `db:"us"`
		LastError []byte `db:"last_error"`
	}
	if err := d.db.SelectContext(ctx, &rows, sqlStatusFailing, limit); err != nil {
		return nil, fmt.Errorf("storage: failing records: %w", translate(err))
	}
	out := make([]FailingRecord, len(rows))
	for i, r := range rows {
		out[i] = FailingRecord{Queue: string(r.Queue), Attempts: r.Attempts, For: time.Duration(r.US) * time.Microsecond, LastError: string(r.LastError)}
		copy(out[i].ID[:], r.ID)
	}
	return out, nil
}

const sqlRecordFind = `-- name: RecordFind
SELECT ` + freshRead + recordColumns + ` FROM mend_records WHERE record_id = ?`

// RecordFind returns a record by its ID alone, for operators who have an ID
// from a log line or a view and do not know its queue. The repair path
// always names the queue (RecordGetByID).
//
// Returns ErrNotFound if no record has that ID (it may have been pruned).
func (d *DB) RecordFind(ctx context.Context, id mend.RecordID) (mend.Record, error) {
	var row recordRow
	if err := d.db.GetContext(ctx, &row, sqlRecordFind, id[:]); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return mend.Record{}, fmt.Errorf("storage: find record: %w: no record %s (it may have been pruned)", mend.ErrNotFound, id)
		}
		return mend.Record{}, fmt.Errorf("storage: find record: %w", translate(err))
	}
	rec, err := row.record()
	if err != nil {
		return mend.Record{}, err
	}
	if err := row.checkIdentity(rec.Source); err != nil {
		return mend.Record{}, fmt.Errorf("storage: find record: %w", err)
	}
	return rec, nil
}

const sqlRecordsList = `-- name: RecordsList
SELECT ` + freshRead + recordColumns + ` FROM mend_records WHERE queue = ?
ORDER BY created_at DESC, record_id
LIMIT ?`

// RecordsList returns up to limit records of queue, newest first.
func (d *DB) RecordsList(ctx context.Context, queue string, limit int) ([]mend.Record, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var rows []recordRow
	if err := d.db.SelectContext(ctx, &rows, sqlRecordsList, queue, limit); err != nil {
		return nil, fmt.Errorf("storage: list records: %w", translate(err))
	}
	return recordsOf(rows)
}

// RetryParams names a parked record to put back.
type RetryParams struct {
	ID     mend.RecordID
	Actor  string // who asked, e.g. "operator/alice"; required
	OpID   string // see mend.NewOpID; required
	Reason string // optional note kept in the event
	// Version, when not 0, is the version the caller saw and decided on
	// (a confirmation page's): the retry happens only if the record is
	// still at it, as part of the same compare-and-set. 0 retries the
	// record at whatever version it is, if it is parked (mend retry).
	Version int64
}

// ErrNotParked is returned by RecordRetry for a record that is not parked.
var ErrNotParked = fmt.Errorf("%w: only a parked record can be retried", mend.ErrInvalid)

// RecordRetry puts a parked record back to pending, due now, with its
// attempt count reset, as one retried event appended by the normal
// compare-and-set (unfenced, epoch 0: a parked record is not due, so no
// planner is working on it). It returns the record as it now is.
//
// Returns ErrNotFound if there is no such record, ErrConflict if it is
// not at p.Version (when set) or changed while being retried, an error
// matching ErrNotParked (and ErrInvalid) if it is not parked, and
// *mend.AmbiguousError if the commit's outcome is unknown (look OpID up).
func (d *DB) RecordRetry(ctx context.Context, p RetryParams) (mend.Record, error) {
	if err := validateActor(p.Actor); err != nil {
		return mend.Record{}, err
	}
	if err := mend.ValidateOpID(p.OpID); err != nil {
		return mend.Record{}, err
	}
	rec, err := d.findAtVersion(ctx, p.ID, p.Version)
	if err != nil {
		return rec, err
	}
	if rec.State != mend.StateParked {
		return rec, fmt.Errorf("storage: retry record %s: %w (it is %s)", rec.ID, ErrNotParked, rec.State)
	}
	data, err := jsonObject(map[string]any{"from": string(mend.StateParked), "parked_reason": rec.LastError, "note": p.Reason})
	if err != nil {
		return mend.Record{}, err
	}
	ap := AppendTo(rec)
	ap.Kind, ap.Actor, ap.OpID, ap.Data = mend.EventRetried, p.Actor, p.OpID, data
	ap.State, ap.Attempts, ap.LastError, ap.RetryIn = mend.StatePending, 0, "", 0
	if _, err := d.RecordAppend(ctx, ap); err != nil {
		return mend.Record{}, err
	}
	return d.RecordGetByID(ctx, rec.Source.Queue, rec.ID)
}

// findAtVersion reads a record for an operator's change decided at
// version (0: at any version). The change's append is a compare-and-set
// from the version read here, so a record found at the expected version
// cannot move before the change lands: the check and the change are one.
//
// Returns ErrNotFound if there is no such record, ErrConflict (with the
// record as it is) if it is not at version, ErrInvalid for a negative
// version.
func (d *DB) findAtVersion(ctx context.Context, id mend.RecordID, version int64) (mend.Record, error) {
	if version < 0 {
		return mend.Record{}, &mend.ValidationError{Field: "version", Reason: fmt.Sprintf("a record version is 1 or more (0: any), got %d", version)}
	}
	rec, err := d.RecordFind(ctx, id)
	if err != nil {
		return mend.Record{}, err
	}
	if version != 0 && rec.Version != version {
		return rec, fmt.Errorf("storage: record %s is at version %d, not %d: %w", id, rec.Version, version, mend.ErrConflict)
	}
	return rec, nil
}

// jsonObject encodes an event's data, leaving out empty strings.
func jsonObject(m map[string]any) (json.RawMessage, error) {
	for k, v := range m {
		if s, ok := v.(string); ok && s == "" {
			delete(m, k)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("storage: encode event data: %w", err)
	}
	return b, nil
}

// RepairLatencyWindowDefault is the window mend status summarises repair
// latency over.
const RepairLatencyWindowDefault = time.Hour

// The repair SLO (issue 47): one definition, in these fragments, for mend
// status (RepairLatency), the planner's histogram mend_repair_latency_seconds
// (RepairLatencyOf, after the planner finished the records), and so the
// alert rules, and mend console (its latency chart, per-queue latencies and
// slow repairs read SLOLatencyUS where SLOCounted holds).
//
//   - From: the dead letter's failed_at (stamped by the host), or, for a
//     record an operator retried after it was parked, the latest retried
//     event: the time it sat parked is MendRecordsParked's, not the SLO's.
//   - To: the record's finishing event by the planner (woken: its wake-up
//     durable; done: nothing to wake), its updated_at.
//   - Counted: records so finished whose dead letter carried a failure
//     time. A record an operator closed by hand (resolved, say a letter
//     with nothing to repair) is not a repair and never counts.
//
// Latencies are clamped at zero against clock skew between the host that
// stamped failed_at and the database. The lookups are of the record's own
// events by their primary key (record_id, seq), on the record's shard.

// SLOStart is the instant a record's repair latency counts from (r is
// mend_records).
const SLOStart = `GREATEST(r.failed_at, COALESCE((SELECT MAX(e.created_at) FROM mend_events e
		WHERE e.record_id = r.record_id AND e.queue = r.queue AND e.kind = 'retried'), r.failed_at))`

// SLOLatencyUS is a counted record's repair latency in microseconds.
const SLOLatencyUS = `GREATEST(TIMESTAMPDIFF(MICROSECOND, ` + SLOStart + `, r.updated_at), 0)`

// SLOCounted holds for the records whose latency the SLO counts.
// A done record an operator resolved has its resolved event as its last
// (nothing follows a resolve), so "has a resolved event" is the same test
// as "finished by resolve"; it reads only the record's ID and queue, which
// every index of mend_records carries, so the console's reads through its
// covering indexes stay index-only on mend_records.
const SLOCounted = `r.state = 'done' AND r.failed_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM mend_events e
		WHERE e.record_id = r.record_id AND e.queue = r.queue AND e.kind = 'resolved')`

// repairLatencyFrom is the SLO latency of every counted record finished
// within the window. It reads the (state, updated_at) index's range for
// the window.
const repairLatencyFrom = `(SELECT r.queue, ` + SLOLatencyUS + ` AS us
	FROM mend_records r
	WHERE r.state = 'done' AND r.updated_at >= NOW(6) - INTERVAL ? MICROSECOND AND ` + SLOCounted + `)`

const sqlRepairLatencyOf = `-- name: RepairLatencyOf
SELECT r.record_id, ` + SLOLatencyUS + ` AS us FROM mend_records r
WHERE r.queue = ? AND r.record_id IN (%s) AND ` + SLOCounted

// RepairLatencyOf returns the SLO latency of each of queue's records ids
// that the SLO counts (finished by the planner, with a failure time), by
// the same definition as RepairLatency; the others are absent. The planner
// calls it for the records it just finished, so the histogram observes what
// mend status reports. One statement per 500 records.
func (d *DB) RepairLatencyOf(ctx context.Context, queue string, ids []mend.RecordID) (map[mend.RecordID]time.Duration, error) {
	out := make(map[mend.RecordID]time.Duration, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), recordFailuresChunk)]
		ids = ids[len(chunk):]
		args := []any{queue}
		for _, id := range chunk {
			args = append(args, id[:])
		}
		rows, err := d.db.QueryContext(ctx, fmt.Sprintf(sqlRepairLatencyOf, placeholders(len(chunk))), args...)
		if err != nil {
			return nil, fmt.Errorf("storage: repair latency of records: %w", translate(err))
		}
		for rows.Next() {
			var raw []byte
			var us int64
			if err := rows.Scan(&raw, &us); err != nil {
				rows.Close()
				return nil, fmt.Errorf("storage: repair latency of records: %w", err)
			}
			var id mend.RecordID
			copy(id[:], raw)
			out[id] = time.Duration(us) * time.Microsecond
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("storage: repair latency of records: %w", translate(err))
		}
	}
	return out, nil
}

// The count and the maximum, then each percentile by the nearest-rank
// method: the row at rank ceil(p*n) of the latencies in order, read with
// ORDER BY ... LIMIT 1 OFFSET rank-1. Not window functions: vtgate runs
// those only on a single shard, while a sorted LIMIT it merges across
// shards.
const sqlRepairLatency = `-- name: RepairLatency
SELECT COUNT(*) AS n, COALESCE(MAX(us), 0) AS mx FROM ` + repairLatencyFrom + ` l`

const sqlRepairLatencyRank = `-- name: RepairLatencyRank
SELECT us FROM ` + repairLatencyFrom + ` l ORDER BY us LIMIT 1 OFFSET ?`

const sqlRepairLatencyWorst = `-- name: RepairLatencyWorst
SELECT queue, COUNT(*) AS n, MAX(us) AS mx FROM ` + repairLatencyFrom + ` l
GROUP BY queue ORDER BY mx DESC, queue LIMIT ?`

// QueueLatency is one queue's repair latency over the window.
type QueueLatency struct {
	Queue string
	Count int64
	Max   time.Duration
}

// RepairLatency summarises how long repairs took over a window, by the
// SLO's definition (SLOStart to the planner's finishing event; records an
// operator resolved are not counted).
type RepairLatency struct {
	Window        time.Duration
	Count         int64
	P50, P99, Max time.Duration
	// Worst are the queues with the slowest repair in the window, slowest
	// first.
	Worst []QueueLatency
}

// RepairLatency computes the repair latency of the records finished within
// window by the database clock, p50, p99 and max over all queues and the
// worst queues (at most worst), in SQL, so every replica and every operator
// reads the same numbers. Records whose dead letter carried no failure time
// are left out.
func (d *DB) RepairLatency(ctx context.Context, window time.Duration, worst int) (RepairLatency, error) {
	out := RepairLatency{Window: window}
	if window <= 0 || worst < 0 {
		return out, &mend.ValidationError{Field: "window", Reason: "window must be positive and worst not negative"}
	}
	var row struct {
		N   int64 `db:"n"`
		Max int64 `db:"mx"`
	}
	if err := d.db.GetContext(ctx, &row, sqlRepairLatency, window.Microseconds()); err != nil {
		return out, fmt.Errorf("storage: repair latency: %w", translate(err))
	}
	out.Count, out.Max = row.N, time.Duration(row.Max)*time.Microsecond
	if row.N == 0 {
		return out, nil
	}
	for _, pc := range []struct {
		p   float64
		out *time.Duration
	}{{0.5, &out.P50}, {0.99, &out.P99}} {
		rank := int64(math.Ceil(pc.p * float64(row.N)))
		var us int64
		// A record finishing between the two reads can move the ranks by
		// one; the summary is of a moving window either way.
		if err := d.db.GetContext(ctx, &us, sqlRepairLatencyRank, window.Microseconds(), rank-1); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return out, fmt.Errorf("storage: repair latency: %w", translate(err))
		}
		*pc.out = time.Duration(us) * time.Microsecond
	}
	if worst == 0 {
		return out, nil
	}
	var rows []struct {
		Queue []byte `db:"queue"`
		N     int64  `db:"n"`
		Max   int64  `db:"mx"`
	}
	if err := d.db.SelectContext(ctx, &rows, sqlRepairLatencyWorst, window.Microseconds(), worst); err != nil {
		return out, fmt.Errorf("storage: repair latency by queue: %w", translate(err))
	}
	for _, r := range rows {
		out.Worst = append(out.Worst, QueueLatency{Queue: string(r.Queue), Count: r.N, Max: time.Duration(r.Max) * time.Microsecond})
	}
	return out, nil
}

// sqlRecordFailures counts the events that record a failed attempt: a host
// step that failed (attempt_failed), a wake-up publish that failed
// (wake_failed), and the failed attempt that parked a record, which the
// planner writes as the parked event itself with the attempt's number in
// its data (so "gave up after 10 attempts" shows 10 failures, not 9).
const sqlRecordFailures = `-- name: RecordFailures
SELECT record_id, COUNT(*) FROM mend_events
WHERE queue IN (%s) AND record_id IN (%s)
	AND (kind IN ('attempt_failed', 'wake_failed') OR (kind = 'parked' AND JSON_EXTRACT(data, '$.attempt') IS NOT NULL))
GROUP BY record_id`

// recordFailuresChunk bounds one RecordFailures statement's IN lists.
const recordFailuresChunk = 500

// RecordFailures counts each record's failed attempts over its whole life,
// from its events. A record's Attempts is the tries of its current step
// (it is the backoff and parking counter and starts again when the outcome
// settles), so it undercounts a record that failed in more than one step;
// this is the number an operator asks for. Records without failures are
// absent from the map. One statement per 500 records, read through the
// events' primary key.
func (d *DB) RecordFailures(ctx context.Context, recs []mend.Record) (map[mend.RecordID]int, error) {
	out := make(map[mend.RecordID]int)
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), recordFailuresChunk)]
		recs = recs[len(chunk):]
		queues := map[string]bool{}
		var qargs, idargs []any
		for _, r := range chunk {
			if !queues[r.Source.Queue] {
				queues[r.Source.Queue] = true
				qargs = append(qargs, r.Source.Queue)
			}
			idargs = append(idargs, r.ID[:])
		}
		q := fmt.Sprintf(sqlRecordFailures, placeholders(len(qargs)), placeholders(len(idargs)))
		rows, err := d.db.QueryContext(ctx, q, append(qargs, idargs...)...)
		if err != nil {
			return nil, fmt.Errorf("storage: count failures: %w", translate(err))
		}
		for rows.Next() {
			var raw []byte
			var n int
			if err := rows.Scan(&raw, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("storage: count failures: %w", err)
			}
			var id mend.RecordID
			copy(id[:], raw)
			out[id] = n
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("storage: count failures: %w", translate(err))
		}
	}
	return out, nil
}

// placeholders is n comma-separated "?" marks, for an IN list.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// appendManyMax bounds the appends of one RecordAppendMany packet.
const appendManyMax = 100

// sqlRecordAppendManyName labels the packet in the processlist; the
// statements are RecordAppend's (or RecordAppendFenced's), once per record.
const sqlRecordAppendManyName = `-- name: RecordAppendMany
START TRANSACTION;
`

// RecordAppendMany appends one event to each of several records of one
// queue in one transaction, each as RecordAppend would (a compare-and-set
// on its own version, its event only if its projection moved), in one
// packet plus COMMIT: with ps fenced (every Fence set, the same term), the
// lease row is read LOCK IN SHARE MODE once and every UPDATE checks the
// term again. It returns one error per item: nil, or what RecordAppend
// would return for that record alone (ErrConflict, ErrNotFound,
// ErrStaleRecord); the items that hit are written, the others not.
//
// The packet first tries every record at once (appendTogether: one UPDATE
// for all the records, one INSERT for all the events, the INSERT only if
// the UPDATE moved every record); when any record missed, that transaction
// is rolled back and the records are appended each with its own
// statements, which say which missed and why.
//
// The error result is for the call as a whole, and then nothing was
// written: a *mend.ValidationError for bad input (items of several queues
// or terms, an op ID used twice), an error matching mend.ErrFenced if the
// term is not current, or a store error; a *mend.AmbiguousError (naming
// the first item's op ID) if the commit's outcome is unknown.
func (d *DB) RecordAppendMany(ctx context.Context, ps []AppendParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	if len(ps) > appendManyMax {
		return nil, &mend.ValidationError{Field: "appends", Reason: fmt.Sprintf("%d in one call; at most %d", len(ps), appendManyMax)}
	}
	ops := map[string]bool{}
	for i := range ps {
		if err := validateAppend(&ps[i]); err != nil {
			return nil, err
		}
		p, first := ps[i], ps[0]
		switch {
		case p.Source.Queue != first.Source.Queue:
			return nil, &mend.ValidationError{Field: "appends", Reason: "all records must be in one queue"}
		case (p.Fence == nil) != (first.Fence == nil) || (p.Fence != nil && *p.Fence != *first.Fence):
			return nil, &mend.ValidationError{Field: "fence", Reason: "all appends must carry the same term, or none"}
		case ops[p.OpID]:
			return nil, opIDUsed(p.OpID, p.Source.Queue)
		}
		ops[p.OpID] = true
	}
	if len(ps) > 1 && distinctRecords(ps) {
		results, err := d.appendTogether(ctx, ps)
		if !errors.Is(err, errAppendMissed) {
			if err != nil {
				return nil, fmt.Errorf("storage: append %d events in queue %q: %w", len(ps), ps[0].Source.Queue, err)
			}
			return results, nil
		}
	}
	return d.appendEach(ctx, ps)
}

// appendEach is RecordAppendMany's general form: each record's own
// statements (RecordAppend's), so a miss is explained record by record.
func (d *DB) appendEach(ctx context.Context, ps []AppendParams) ([]error, error) {
	fence := ps[0].Fence
	var q strings.Builder
	q.WriteString(sqlRecordAppendManyName)
	var args []any
	if fence != nil {
		q.WriteString(sqlLeaseCheckStmt + ";\n")
		args = append(args, fence.Queue)
	}
	for _, p := range ps {
		q.WriteString(appendAdvance)
		args = append(args, string(p.State), string(p.State), p.Attempts, p.LastError, p.Epoch,
			p.State.Due(), p.RetryIn.Microseconds(), p.RecordID[:], p.Source.Queue, p.Version)
		if fence != nil {
			q.WriteString(` AND EXISTS (SELECT 1 FROM mend_leases WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6))`)
			args = append(args, fence.Queue, fence.Holder, fence.Epoch)
		}
		q.WriteString(";\n" + appendEvent + ";\n")
		args = append(args, appendEventArgs(p)...)
	}
	query := strings.TrimSuffix(q.String(), ";\n")
	var results []error
	err := d.withBatchTx(ctx, "RecordAppendMany", ps[0].OpID, func(ctx context.Context, tx *batchTx) error {
		results = make([]error, len(ps))
		changed, err := appendPacket(ctx, tx, query, args, ps, len(ps))
		if err != nil {
			return err
		}
		for i, n := range changed {
			if n == 1 {
				continue
			}
			err := probeMiss(ctx, tx.conn, ps[i])
			if fence != nil && errors.Is(err, errVersionMatched) {
				// At the expected version, under a term current at the
				// lease read: it ran out during the packet.
				return fmt.Errorf("%w: term of %q at epoch %d on queue %q expired by the database clock during the write",
					mend.ErrFenced, fence.Holder, fence.Epoch, fence.Queue)
			}
			results[i] = err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: append %d events in queue %q: %w", len(ps), ps[0].Source.Queue, err)
	}
	return results, nil
}

// The statements of appendTogether, in one packet: the records' new
// projections in one UPDATE, each row's values chosen by its record ID
// and its compare-and-set on its own version in the WHERE clause; then the
// events of all of them in one INSERT ... SELECT, which copies each
// record's new projection as appendEvent does, and inserts only if the
// UPDATE moved every record of the call (appendTogetherGuard).
//
// One table, so the assignments run left to right on both engines (a
// multi-table UPDATE has no such order): state_since compares the state
// before state is assigned, as in appendAdvance. MariaDB's
// SIMULTANEOUS_ASSIGNMENT mode, if a user sets it, gives the same result:
// every right-hand side then sees the old row.
const (
	appendTogetherUpdate = `UPDATE mend_records SET
	version = version + 1,
	state_since = CASE record_id %[1]s END,
	state = CASE record_id %[2]s END,
	attempts = CASE record_id %[2]s END,
	last_error = CASE record_id %[2]s END,
	epoch = CASE record_id %[2]s END,
	next_attempt_at = CASE record_id %[3]s END,
	updated_at = NOW(6)
WHERE queue = ? AND record_id IN (%[4]s) AND version = CASE record_id %[2]s END`
	appendTogetherSince = ` WHEN ? THEN IF(state = ?, state_since, NOW(6))`
	appendTogetherValue = ` WHEN ? THEN ?`
	appendTogetherDue   = ` WHEN ? THEN IF(?, NOW(6) + INTERVAL ? MICROSECOND, NULL)`
	appendTogetherFence = ` AND EXISTS (SELECT 1 FROM mend_leases WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6))`

	appendTogetherEvents = `SET @mend_changed = ROW_COUNT();
INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, ` + eventProjection + `)
SELECT v.record_id, v.seq, r.queue, v.kind, v.epoch, v.actor, v.op_id, v.data, ` + eventProjectionFrom + `
FROM (`
	appendTogetherRowFirst = `SELECT ? AS record_id, ? AS seq, ? AS kind, ? AS epoch, ? AS actor, ? AS op_id, ? AS data`
	appendTogetherRowNext  = `
	UNION ALL SELECT ?, ?, ?, ?, ?, ?, ?`
	appendTogetherJoin = `) v JOIN mend_records r ON r.record_id = v.record_id
WHERE r.queue = ?`
	appendTogetherChanged = `;
SELECT @mend_changed AS changed`
)

// appendTogetherGuard makes the events' INSERT conditional on the UPDATE
// having moved every record. The try is rolled back on a miss anyway; the
// guard keeps the INSERT from failing first on the event of a record
// another writer moved by exactly one version (its seq is taken), a
// duplicate key that would read as an op ID used twice.
const appendTogetherGuard = ` AND @mend_changed = ?`

// errAppendMissed: appendTogether's UPDATE did not move every record (a
// version moved, a record went away, or the term ran out), so nothing was
// kept and the records are appended one by one instead.
var errAppendMissed = errors.New("storage: a record of the batch missed its compare-and-set")

// distinctRecords reports whether ps names each record once: a record
// named twice needs its appends in order, one after the other.
func distinctRecords(ps []AppendParams) bool {
	seen := make(map[mend.RecordID]bool, len(ps))
	for _, p := range ps {
		if seen[p.RecordID] {
			return false
		}
		seen[p.RecordID] = true
	}
	return true
}

// appendTogether appends ps (one queue, distinct records, validated) as
// one UPDATE and one INSERT in one packet plus COMMIT. Returns
// errAppendMissed, having written nothing, if any record missed its
// compare-and-set; an error matching mend.ErrFenced if the term is not
// current; else one nil result per item.
func (d *DB) appendTogether(ctx context.Context, ps []AppendParams) ([]error, error) {
	fence := ps[0].Fence
	var q strings.Builder
	q.WriteString(sqlRecordAppendManyName)
	var args []any
	if fence != nil {
		q.WriteString(sqlLeaseCheckStmt + ";\n")
		args = append(args, fence.Queue)
	}
	var since, value, due, in strings.Builder
	var sinceArgs, stateArgs, attemptArgs, errorArgs, epochArgs, dueArgs, inArgs, versionArgs []any
	for i, p := range ps {
		since.WriteString(appendTogetherSince)
		value.WriteString(appendTogetherValue)
		due.WriteString(appendTogetherDue)
		if i > 0 {
			in.WriteString(", ")
		}
		in.WriteString("?")
		id := p.RecordID[:]
		sinceArgs = append(sinceArgs, id, string(p.State))
		stateArgs = append(stateArgs, id, string(p.State))
		attemptArgs = append(attemptArgs, id, p.Attempts)
		errorArgs = append(errorArgs, id, p.LastError)
		epochArgs = append(epochArgs, id, p.Epoch)
		dueArgs = append(dueArgs, id, p.State.Due(), p.RetryIn.Microseconds())
		inArgs = append(inArgs, id)
		versionArgs = append(versionArgs, id, p.Version)
	}
	fmt.Fprintf(&q, appendTogetherUpdate, since.String(), value.String(), due.String(), in.String())
	args = slices.Concat(args, sinceArgs, stateArgs, attemptArgs, errorArgs, epochArgs, dueArgs,
		[]any{ps[0].Source.Queue}, inArgs, versionArgs)
	if fence != nil {
		q.WriteString(appendTogetherFence)
		args = append(args, fence.Queue, fence.Holder, fence.Epoch)
	}
	q.WriteString(";\n" + appendTogetherEvents)
	for i, p := range ps {
		if i == 0 {
			q.WriteString(appendTogetherRowFirst)
		} else {
			q.WriteString(appendTogetherRowNext)
		}
		args = append(args, p.RecordID[:], p.Version+1, string(p.Kind), p.Epoch, p.Actor, p.OpID, string(p.Data))
	}
	q.WriteString(appendTogetherJoin)
	args = append(args, ps[0].Source.Queue)
	if !d.appendTogetherUnguarded {
		q.WriteString(appendTogetherGuard)
		args = append(args, len(ps))
	}
	q.WriteString(appendTogetherChanged)
	query := q.String()
	results := make([]error, len(ps))
	err := d.withBatchTx(ctx, "RecordAppendMany", ps[0].OpID, func(ctx context.Context, tx *batchTx) error {
		changed, err := appendPacket(ctx, tx, query, args, ps, 1)
		if err != nil {
			return err
		}
		if changed[0] != int64(len(ps)) {
			return errAppendMissed
		}
		return nil
	})
	if d.afterAppendTogether != nil {
		d.afterAppendTogether(errors.Is(err, errAppendMissed))
	}
	if err != nil {
		return nil, err
	}
	return results, nil
}

// appendPacket sends a RecordAppendMany packet (its lease check first when
// ps are fenced, then sets result sets of one "changed" count each) and
// returns the counts. An op ID used before is the caller's bad input; a
// term that is not current matches mend.ErrFenced.
func appendPacket(ctx context.Context, tx *batchTx, query string, args []any, ps []AppendParams, sets int) ([]int64, error) {
	fence := ps[0].Fence
	changed := make([]struct {
		N int64 `db:"changed"`
	}, sets)
	var (
		lease leaseCheckRow
		found bool
		scans []func(*sqlx.Rows) error
	)
	if fence != nil {
		scans = append(scans, scanOptional(&lease, &found))
	}
	for i := range changed {
		scans = append(scans, scanOne(&changed[i]))
	}
	err := tx.query(ctx, query, args, scans...)
	if mysqlErrNumber(err) == errDupEntry {
		return nil, &mend.ValidationError{Field: "op_id", Reason: fmt.Sprintf("an op id of the batch was already used in queue %q; use new op ids", ps[0].Source.Queue)}
	}
	if err != nil {
		return nil, fmt.Errorf("append many: %w", err)
	}
	if fence != nil {
		if err := lease.check(*fence, found); err != nil {
			return nil, err
		}
	}
	out := make([]int64, sets)
	for i, c := range changed {
		out[i] = c.N
	}
	return out, nil
}

package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// AppendParams is mend.AppendParams, kept here for callers of the store.
type AppendParams = mend.AppendParams

// AppendTo starts AppendParams for a change to rec as read.
func AppendTo(rec mend.Record) AppendParams {
	return AppendParams{Source: rec.Source, RecordID: rec.ID, Version: rec.Version,
		State: rec.State, Attempts: rec.Attempts, LastError: rec.LastError}
}

func validateAppend(p *AppendParams) error {
	if err := p.Source.Validate(); err != nil {
		return err
	}
	if p.RecordID.IsZero() {
		return &mend.ValidationError{Field: "record_id", Reason: "must be set"}
	}
	if p.Version < 1 {
		return &mend.ValidationError{Field: "version", Reason: fmt.Sprintf("must be the version read (>= 1), got %d", p.Version)}
	}
	if p.Kind == "" || p.Kind == mend.EventCreated {
		return &mend.ValidationError{Field: "kind", Reason: "must name the change; created events come only from RecordCreate"}
	}
	if !p.State.Valid() {
		return &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a record state", p.State)}
	}
	if p.Attempts < 0 || p.RetryIn < 0 || p.Epoch < 0 {
		return &mend.ValidationError{Field: "attempts", Reason: "attempts, retry delay and epoch must not be negative"}
	}
	if p.Fence != nil {
		if err := validateTerm(*p.Fence); err != nil {
			return err
		}
		if p.Fence.Queue != p.Source.Queue {
			return &mend.ValidationError{Field: "fence", Reason: fmt.Sprintf("term is for queue %q, the record is in %q", p.Fence.Queue, p.Source.Queue)}
		}
		if p.Epoch != 0 && p.Epoch != p.Fence.Epoch {
			return &mend.ValidationError{Field: "epoch", Reason: fmt.Sprintf("is %d but the fence term is at epoch %d; leave it 0", p.Epoch, p.Fence.Epoch)}
		}
		p.Epoch = p.Fence.Epoch
	}
	if p.Data == nil {
		p.Data = json.RawMessage(`{}`)
	}
	var obj map[string]any
	if err := json.Unmarshal(p.Data, &obj); err != nil {
		return &mend.ValidationError{Field: "data", Reason: "must be a JSON object: " + err.Error()}
	}
	if err := validateActor(p.Actor); err != nil {
		return err
	}
	return mend.ValidateOpID(p.OpID)
}

// The statements of an append, sent as one packet (see batchTx). The SET
// list of a single-table UPDATE is evaluated left to right on both MySQL and
// MariaDB, so state_since compares against the old state before state is
// assigned (a multi-table UPDATE promises no order, hence the fence as a
// subquery rather than a join). ROW_COUNT() of the UPDATE is kept in a
// session variable: the event is inserted only if the projection moved,
// and the final SELECT reports whether it did. The variable is set before
// every use on the connection, so a value left from an earlier packet is
// never read. The event's values are selected from the record row (by
// record and queue), not FROM DUAL, so a sharded cluster routes the whole
// append to the queue's shard (see sqlRecordCreate).
const appendAdvance = `UPDATE mend_records SET
	version = version + 1,
	state_since = IF(state = ?, state_since, NOW(6)),
	state = ?,
	attempts = ?,
	last_error = ?,
	epoch = ?,
	next_attempt_at = IF(?, NOW(6) + INTERVAL ? MICROSECOND, NULL),
	updated_at = NOW(6)
WHERE record_id = ? AND queue = ? AND version = ?`

const appendEvent = `SET @mend_changed = ROW_COUNT();
INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, ` + eventProjection + `)
SELECT ?, ?, r.queue, ?, ?, ?, ?, ?, ` + eventProjectionFrom + ` FROM mend_records r WHERE r.record_id = ? AND r.queue = ? AND @mend_changed = 1;
SELECT @mend_changed AS changed`

// eventProjection are the columns of an event that record the projection
// the event produced (migration 0013), and eventProjectionFrom copies them
// from the record row r the same transaction just wrote: its updated_at is
// the event's created_at, so the two times are one NOW(6), and the state,
// attempts, last error and due time are what the writer chose, which the
// event kind and data alone do not determine. mend verify re-folds the
// events with them and compares the fold with the projection.
const (
	eventProjection     = `created_at, state, attempts, last_error, next_attempt_at`
	eventProjectionFrom = `r.updated_at, r.state, r.attempts, r.last_error, r.next_attempt_at`
)

const sqlRecordAppend = `-- name: RecordAppend
START TRANSACTION;
` + appendAdvance + `;
` + appendEvent

// The fenced append first reads the lease row LOCK IN SHARE MODE, which a
// takeover (FOR UPDATE) must wait for until this transaction ends, and
// reports it; the UPDATE checks the same term again in its own WHERE, so
// nothing is written unless the term is current. The lease row cannot
// change between the two while the shared lock is held; it can only run
// out, and the UPDATE's later NOW(6) then refuses.
const sqlRecordAppendFenced = `-- name: RecordAppendFenced
START TRANSACTION;
` + sqlLeaseCheckStmt + `;
` + appendAdvance + ` AND EXISTS (SELECT 1 FROM mend_leases WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6));
` + appendEvent

const sqlRecordProbe = `-- name: RecordProbe
SELECT record_id, version FROM mend_records WHERE queue = ? AND (record_id = ? OR source_key = ?)`

// RecordAppend appends an event to a record and updates its projection in
// one transaction, as a compare-and-set from p.Version to p.Version+1. It
// returns the new version. It costs two round trips: the statements, then
// COMMIT (a miss costs a probe and a ROLLBACK more).
//
// Returns ErrConflict if the version moved (re-read and decide again),
// ErrNotFound if the queue holds no record with that ID or source identity,
// ErrStaleRecord if the source identity is now recorded under another ID
// (the record was pruned and recreated), ErrInvalid for bad input or an op
// ID already used, and *mend.AmbiguousError if the commit's outcome is
// unknown (resolve with OpLookup). A fenced append (p.Fence set) returns an
// error matching ErrFenced, having written nothing, if its term is not the
// queue's current, unexpired lease term; it is never retried.
func (d *DB) RecordAppend(ctx context.Context, p AppendParams) (int64, error) {
	if err := validateAppend(&p); err != nil {
		return 0, err
	}
	err := d.withBatchTx(ctx, "RecordAppend", p.OpID, func(ctx context.Context, tx *batchTx) error { return appendTx(ctx, tx, p) })
	if err != nil {
		return 0, fmt.Errorf("storage: append %s to record %s: %w", p.Kind, p.RecordID, err)
	}
	return p.Version + 1, nil
}

// appendEventArgs are appendEvent's arguments for p: the event's values,
// then the record row (by ID and queue) its projection is copied from.
func appendEventArgs(p AppendParams) []any {
	return []any{p.RecordID[:], p.Version + 1, string(p.Kind), p.Epoch, p.Actor, p.OpID, string(p.Data), p.RecordID[:], p.Source.Queue}
}

// appendTx sends an append's statements and explains a miss.
func appendTx(ctx context.Context, tx *batchTx, p AppendParams) error {
	args := []any{string(p.State), string(p.State), p.Attempts, p.LastError, p.Epoch,
		p.State.Due(), p.RetryIn.Microseconds(),
		p.RecordID[:], p.Source.Queue, p.Version}
	eventArgs := appendEventArgs(p)
	var changed struct {
		N int64 `db:"changed"`
	}
	var (
		lease leaseCheckRow
		found bool
		err   error
	)
	if p.Fence == nil {
		err = tx.query(ctx, sqlRecordAppend, append(args, eventArgs...), scanOne(&changed))
	} else {
		t := *p.Fence
		all := append([]any{t.Queue}, args...)
		all = append(all, t.Queue, t.Holder, t.Epoch)
		err = tx.query(ctx, sqlRecordAppendFenced, append(all, eventArgs...), scanOptional(&lease, &found), scanOne(&changed))
	}
	if mysqlErrNumber(err) == errDupEntry {
		// The projection row is locked by our update, so seq cannot be
		// taken concurrently: the duplicate is the op ID.
		return opIDUsed(p.OpID, p.Source.Queue)
	}
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	if changed.N == 1 {
		return nil
	}
	if p.Fence != nil {
		if err := lease.check(*p.Fence, found); err != nil {
			return err
		}
	}
	err = probeMiss(ctx, tx.conn, p)
	if p.Fence != nil && errors.Is(err, errVersionMatched) {
		// The record was at the expected version and the term was current
		// at the lease read: it ran out before the UPDATE's check.
		return fmt.Errorf("%w: term of %q at epoch %d on queue %q expired by the database clock during the write",
			mend.ErrFenced, p.Fence.Holder, p.Fence.Epoch, p.Fence.Queue)
	}
	return err
}

// errVersionMatched is probeMiss's answer when the record is at the
// expected version after all: the CAS was refused for another reason.
var errVersionMatched = errors.New("storage: record is at the expected version")

// opIDUsed is the error for an op ID another operation already wrote.
func opIDUsed(opID, queue string) error {
	return &mend.ValidationError{Field: "op_id", Reason: fmt.Sprintf("%q was already used in queue %q; use a new op id per call", opID, queue)}
}

// probeMiss explains why a CAS matched no row.
func probeMiss(ctx context.Context, q sqlx.QueryerContext, p AppendParams) error {
	key := p.Source.Key()
	rows, err := q.QueryContext(ctx, sqlRecordProbe, p.Source.Queue, p.RecordID[:], key[:])
	if err != nil {
		return fmt.Errorf("probe record: %w", err)
	}
	defer rows.Close()
	var other bool
	for rows.Next() {
		var id []byte
		var version int64
		if err := rows.Scan(&id, &version); err != nil {
			return fmt.Errorf("probe record: %w", err)
		}
		if string(id) == string(p.RecordID[:]) {
			if version == p.Version {
				return errVersionMatched
			}
			return fmt.Errorf("%w: record is at version %d, not %d", mend.ErrConflict, version, p.Version)
		}
		other = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("probe record: %w", err)
	}
	if other {
		return fmt.Errorf("%w: %s is now recorded under another id", mend.ErrStaleRecord, p.Source)
	}
	return fmt.Errorf("%w: no record %s in queue %q", mend.ErrNotFound, p.RecordID, p.Source.Queue)
}

const eventColumns = `record_id, seq, queue, kind, epoch, actor, op_id, data, created_at`

type eventRow struct {
	RecordID  []byte    `db:"record_id"`
	Seq       int64     `db:"seq"`
	Queue     []byte    `db:"queue"`
	Kind      string    `db:"kind"`
	Epoch     int64     `db:"epoch"`
	Actor     []byte    `db:"actor"`
	OpID      []byte    `db:"op_id"`
	Data      []byte    `db:"data"`
	CreatedAt time.Time `db:"created_at"`
}

func (r *eventRow) event() mend.Event {
	var ev mend.Event
	copy(ev.RecordID[:], r.RecordID)
	ev.Seq, ev.Queue, ev.Kind, ev.Epoch = r.Seq, string(r.Queue), mend.EventKind(r.Kind), r.Epoch
	ev.Actor, ev.OpID, ev.Data, ev.CreatedAt = string(r.Actor), string(r.OpID), json.RawMessage(r.Data), r.CreatedAt
	return ev
}

// A locking read: the event of an operation whose COMMIT is still in flight
// is already in the op_id index, uncommitted and locked by its writer, so
// this read waits for that writer to commit or roll back instead of
// reporting "not found" for an operation about to land. In READ COMMITTED
// an absent key takes no gap lock, so the read blocks no later writer.
const sqlOpLookup = `-- name: OpLookup
SELECT ` + freshRead + eventColumns + ` FROM mend_events WHERE queue = ? AND op_id = ? LOCK IN SHARE MODE`

// OpLookup returns the event an operation wrote, to resolve an ambiguous
// outcome: found means the operation committed. It waits for a transaction
// still writing that op ID to finish, so "not found" is final: the
// operation did not commit and never will (its session is gone or it rolled
// back).
//
// Returns ErrNotFound if no event of queue carries opID (the operation did
// not commit, or it was a create that lost to an earlier writer, or its
// record has since been pruned). Returns ErrBusy ("unknown yet") if a
// writer of that op ID is still undecided when the lock wait times out
// (innodb_lock_wait_timeout): its session still holds the transaction open,
// and the server drops it after the session idle timeout; ask again then.
func (d *DB) OpLookup(ctx context.Context, queue, opID string) (mend.Event, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return mend.Event{}, err
	}
	if err := mend.ValidateOpID(opID); err != nil {
		return mend.Event{}, err
	}
	var row eventRow
	err := d.withTx(ctx, "OpLookup", "", func(ctx context.Context, tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &row, sqlOpLookup, queue, opID)
	})
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return mend.Event{}, fmt.Errorf("storage: look up op: %w: no op %q in queue %q", mend.ErrNotFound, opID, queue)
		}
		return mend.Event{}, fmt.Errorf("storage: look up op: %w", err)
	}
	return row.event(), nil
}

const sqlRecordHistory = `-- name: RecordHistory
SELECT ` + freshRead + eventColumns + ` FROM mend_events WHERE record_id = ? AND queue = ? ORDER BY seq`

// RecordHistory returns a record's events in order, oldest first.
//
// Returns ErrNotFound if queue holds no events for id.
func (d *DB) RecordHistory(ctx context.Context, queue string, id mend.RecordID) ([]mend.Event, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	var rows []eventRow
	if err := d.db.SelectContext(ctx, &rows, sqlRecordHistory, id[:], queue); err != nil {
		return nil, fmt.Errorf("storage: record history: %w", translate(err))
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("storage: record history: %w: no record %s in queue %q", mend.ErrNotFound, id, queue)
	}
	evs := make([]mend.Event, len(rows))
	for i := range rows {
		evs[i] = rows[i].event()
	}
	return evs, nil
}

const sqlRecordsDue = `-- name: RecordsDue
SELECT ` + freshRead + recordColumns + ` FROM mend_records
WHERE queue = ? AND next_attempt_at <= NOW(6)
ORDER BY next_attempt_at, record_id
LIMIT ?`

// RecordsDue returns up to limit records of queue whose next attempt is due
// by the database clock, oldest due first. It reads through the
// (queue, next_attempt_at) index, so finished records cost nothing.
func (d *DB) RecordsDue(ctx context.Context, queue string, limit int) ([]mend.Record, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var rows []recordRow
	if err := d.db.SelectContext(ctx, &rows, sqlRecordsDue, queue, limit); err != nil {
		return nil, fmt.Errorf("storage: due records: %w", translate(err))
	}
	recs := make([]mend.Record, 0, len(rows))
	for i := range rows {
		rec, err := rows[i].record()
		if err != nil {
			return nil, err
		}
		if err := rows[i].checkIdentity(rec.Source); err != nil {
			return nil, fmt.Errorf("storage: due records: %w", err)
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

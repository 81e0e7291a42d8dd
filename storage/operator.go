package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// This file holds what only operators call: closing a record by hand,
// selecting records across queues, the lease list and history, ending a
// dead holder's term, and the schema version a readiness probe compares.
// None of it is on the repair path.

// leaseCodeOperator is how mend_lease_history stores a term an operator
// ended with LeaseEndByOperator (ended_how holds at most 16 ASCII bytes).
const leaseCodeOperator = "operator"

// RecordFilter selects records across queues for operators.
type RecordFilter struct {
	// State is required: the records' current state.
	State mend.State
	// Queue, when set, keeps only that queue's records.
	Queue string
	// ReasonContains, when set, keeps only records whose last error (for a
	// parked record, why it was parked) contains it, byte for byte.
	ReasonContains string
	// Limit bounds the result; it must be at least 1.
	Limit int
}

// The (state, updated_at) index narrows the scan to the state asked for;
// the queue and reason filters are applied to those rows. LOCATE on a
// binary column compares bytes, so the substring is case-sensitive.
const sqlRecordsSelect = `-- name: RecordsSelect
SELECT ` + recordColumns + ` FROM mend_records
WHERE state = ? AND (? = '' OR queue = ?) AND (? = '' OR LOCATE(?, last_error) > 0)
ORDER BY updated_at, record_id
LIMIT ?`

// RecordsSelect returns up to f.Limit records in f.State, across queues
// unless f.Queue is set, least recently changed first.
//
// Returns ErrInvalid for an unknown state, a bad queue or a limit below 1.
func (d *DB) RecordsSelect(ctx context.Context, f RecordFilter) ([]mend.Record, error) {
	if !f.State.Valid() {
		return nil, &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a record state (pending, waiting, settled, parked, done)", f.State)}
	}
	if f.Queue != "" {
		if err := mend.ValidateIdentity("queue", f.Queue, true); err != nil {
			return nil, err
		}
	}
	if f.Limit < 1 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var rows []recordRow
	err := d.db.SelectContext(ctx, &rows, sqlRecordsSelect, string(f.State), f.Queue, f.Queue,
		f.ReasonContains, []byte(f.ReasonContains), f.Limit)
	if err != nil {
		return nil, fmt.Errorf("storage: select records: %w", translate(err))
	}
	return recordsOf(rows)
}

// ResolveParams names a record an operator closes by hand.
type ResolveParams struct {
	ID     mend.RecordID
	Actor  string // who closes it; required
	OpID   string // see mend.NewOpID; required
	Reason string // why; required, kept in the event and the record's last error
	// Version, when not 0, is the version the caller saw and decided on
	// (a confirmation page's): the record is closed only if it is still
	// at it, as part of the same compare-and-set. 0 closes it at whatever
	// version it is (mend resolve).
	Version int64
}

// ErrResolveDone is returned by RecordResolve for a record that is already done.
var ErrResolveDone = fmt.Errorf("%w: the record is already done", mend.ErrInvalid)

// RecordResolve closes a record an operator has dealt with by hand (the
// batch settled and the queue woken some other way, or the dead letter
// needs nothing): one resolved event, recording who, why and the state it
// left, moves it to done. It then leaves the parked count and is pruned
// with the other done records after the retention. The append is the
// normal unfenced compare-and-set: a planner working on a due record at
// the same moment gets ErrConflict and sees it done.
//
// Returns ErrNotFound if there is no such record, ErrConflict if it is not
// at p.Version (when set) or changed meanwhile, an error matching
// ErrResolveDone (and ErrInvalid) if it is done already, ErrInvalid for a
// missing actor or reason, and
// *mend.AmbiguousError if the commit's outcome is unknown (look OpID up).
func (d *DB) RecordResolve(ctx context.Context, p ResolveParams) (mend.Record, error) {
	if err := validateActor(p.Actor); err != nil {
		return mend.Record{}, err
	}
	if err := mend.ValidateOpID(p.OpID); err != nil {
		return mend.Record{}, err
	}
	if p.Reason == "" {
		return mend.Record{}, &mend.ValidationError{Field: "reason", Reason: "must say why the record is closed by hand"}
	}
	rec, err := d.findAtVersion(ctx, p.ID, p.Version)
	if err != nil {
		return rec, err
	}
	if rec.State == mend.StateDone {
		return rec, fmt.Errorf("storage: resolve record %s: %w", rec.ID, ErrResolveDone)
	}
	data, err := jsonObject(map[string]any{"from": string(rec.State), "previous_error": rec.LastError, "reason": p.Reason})
	if err != nil {
		return mend.Record{}, err
	}
	ap := AppendTo(rec)
	ap.Kind, ap.Actor, ap.OpID, ap.Data = mend.EventResolved, p.Actor, p.OpID, data
	ap.State, ap.LastError, ap.RetryIn = mend.StateDone, "resolved by "+p.Actor+": "+p.Reason, 0
	if _, err := d.RecordAppend(ctx, ap); err != nil {
		return mend.Record{}, err
	}
	return d.RecordGetByID(ctx, rec.Source.Queue, rec.ID)
}

// The join with the history says how the latest term ended; without it a
// released term read as expired.
const sqlLeaseList = `-- name: LeaseList
` + leaseSelect + `
ORDER BY l.queue`

// LeaseList returns every queue's lease row with the time left by the
// database clock, sorted by queue.
func (d *DB) LeaseList(ctx context.Context) ([]LeaseStatus, error) {
	var rows []leaseRow
	if err := d.db.SelectContext(ctx, &rows, sqlLeaseList); err != nil {
		return nil, fmt.Errorf("storage: list leases: %w", translate(err))
	}
	out := make([]LeaseStatus, len(rows))
	for i, r := range rows {
		out[i] = r.status()
	}
	return out, nil
}

// LeaseTerm is one row of a queue's lease history.
type LeaseTerm struct {
	Term       mend.Term
	AcquiredAt time.Time
	// EndedAt is nil while the term is current. A term that ran out and
	// that no later acquire has closed yet ended at its expires_at.
	EndedAt *time.Time
	// EndedHow is LeaseEndedHolder, LeaseEndedOperator, LeaseEndedExpired or
	// LeaseEndedTakenOver; empty while the term is current.
	EndedHow string
}

// The lease row says whether the newest, unclosed term is current or ran
// out (and when).
const sqlLeaseHistory = `-- name: LeaseHistory
SELECT h.queue, h.epoch, h.holder, h.acquired_at, h.ended_at, COALESCE(h.ended_how, '') AS ended_how,
	COALESCE(l.epoch = h.epoch AND l.expires_at > NOW(6), FALSE) AS live,
	CASE WHEN l.epoch = h.epoch THEN l.expires_at END AS expires_at
FROM mend_lease_history h LEFT JOIN mend_leases l ON l.queue = h.queue
WHERE h.queue = ?
ORDER BY h.epoch DESC
LIMIT ?`

// LeaseHistory returns up to limit of queue's terms, newest first.
//
// Returns ErrInvalid for a bad queue or a limit below 1.
func (d *DB) LeaseHistory(ctx context.Context, queue string, limit int) ([]LeaseTerm, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	var rows []struct {
		Queue      []byte       `db:"queue"`
		Epoch      int64        `db:"epoch"`
		Holder     []byte       `db:"holder"`
		AcquiredAt time.Time    `db:"acquired_at"`
		EndedAt    sql.NullTime `db:"ended_at"`
		EndedHow   string       `db:"ended_how"`
		Live       bool         `db:"live"`
		ExpiresAt  sql.NullTime `db:"expires_at"`
	}
	if err := d.db.SelectContext(ctx, &rows, sqlLeaseHistory, queue, limit); err != nil {
		return nil, fmt.Errorf("storage: lease history: %w", translate(err))
	}
	out := make([]LeaseTerm, len(rows))
	for i, r := range rows {
		out[i] = LeaseTerm{Term: mend.Term{Queue: string(r.Queue), Holder: string(r.Holder), Epoch: r.Epoch},
			AcquiredAt: r.AcquiredAt, EndedHow: leaseEndedHow(r.EndedHow)}
		switch {
		case r.EndedAt.Valid:
			t := r.EndedAt.Time
			out[i].EndedAt = &t
		case !r.Live && r.ExpiresAt.Valid:
			t := r.ExpiresAt.Time
			out[i].EndedAt, out[i].EndedHow = &t, LeaseEndedExpired
		}
	}
	return out, nil
}

// Scoped to the exact epoch and to a live term, like LeaseRelease, but
// without the holder: the operator names the term by its epoch alone, and a
// newer term (another epoch) is never touched.
// sqlLeaseRowLock reads and locks a queue's lease row, to learn the holder
// of the term being ended.
const sqlLeaseRowLock = `-- name: LeaseRowLock
SELECT holder, epoch, expires_at, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at) AS remaining_us
FROM mend_leases WHERE queue = ? FOR UPDATE`

// The lease row first, then its term in history at the same instant (the
// row's new expires_at), as single-table statements (see sqlLeaseTake).
const sqlLeaseEndByOperator = `-- name: LeaseEndByOperator
UPDATE mend_leases SET expires_at = NOW(6), transitions = transitions + 1
WHERE queue = ? AND epoch = ? AND expires_at > NOW(6)`

const sqlLeaseEndByOperatorHistory = `-- name: LeaseEndByOperatorHistory
UPDATE mend_lease_history
SET ended_at = (SELECT expires_at FROM mend_leases WHERE queue = ?), ended_how = 'operator'
WHERE queue = ? AND epoch = ?`

// LeaseEndByOperator ends queue's current term if its epoch is epoch, for
// an operator who knows the holder is dead and does not want to wait out
// the TTL. The history records the term as ended by the operator. It is
// fenced like every lease write: the holder's next fenced write, renew or
// release finds its term over and steps back, and the next acquire gets
// epoch+1. It returns the term it ended.
//
// Returns ErrLeaseLost if epoch is not the queue's current, unexpired term
// (nothing is changed: it expired, was released, or a newer term replaced
// it), ErrInvalid for a bad queue or epoch.
func (d *DB) LeaseEndByOperator(ctx context.Context, queue string, epoch int64) (mend.Term, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return mend.Term{}, err
	}
	if epoch < 1 {
		return mend.Term{}, &mend.ValidationError{Field: "epoch", Reason: fmt.Sprintf("a granted term has epoch >= 1, got %d", epoch)}
	}
	var term mend.Term
	err := d.withTx(ctx, "LeaseEndByOperator", "", func(ctx context.Context, tx *sqlx.Tx) error {
		var row leaseRow
		if err := tx.GetContext(ctx, &row, sqlLeaseRowLock, queue); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: queue %q was never leased", mend.ErrLeaseLost, queue)
			}
			return err
		}
		term = mend.Term{Queue: queue, Holder: string(row.Holder), Epoch: row.Epoch}
		res, err := tx.ExecContext(ctx, sqlLeaseEndByOperator, queue, epoch)
		if err != nil {
			return err
		}
		// The statement sets expires_at to NOW(6), so a matched row is a
		// changed row: zero means the term was not current.
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("%w: term %d is not the current, unexpired term", mend.ErrLeaseLost, epoch), err)
		}
		_, err = tx.ExecContext(ctx, sqlLeaseEndByOperatorHistory, queue, queue, epoch)
		return err
	})
	if err != nil {
		return mend.Term{}, fmt.Errorf("storage: end lease term %d of queue %q: %w", epoch, queue, err)
	}
	return term, nil
}

const sqlSchemaTableExists = `-- name: SchemaTableExists
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'mend_schema_migrations'`

const sqlSchemaVersion = `-- name: SchemaVersion
SELECT version, dirty FROM mend_schema_migrations LIMIT 1`

// SchemaVersion reads mend's schema version and dirty flag from the
// migration bookkeeping table without creating it (golang-migrate's own
// reader creates the table in whatever database it opens, which a check
// must never do). Version 0 means no migration was applied.
func (d *DB) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	return ReadSchemaVersion(ctx, d.db.DB)
}

// ReadSchemaVersion is SchemaVersion on any connection to mend's database.
func ReadSchemaVersion(ctx context.Context, db *sql.DB) (version uint, dirty bool, err error) {
	var n int
	if err := db.QueryRowContext(ctx, sqlSchemaTableExists).Scan(&n); err != nil {
		return 0, false, fmt.Errorf("storage: schema version: %w", translate(err))
	}
	if n == 0 {
		return 0, false, nil
	}
	var v int64
	err = db.QueryRowContext(ctx, sqlSchemaVersion).Scan(&v, &dirty)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("storage: schema version: %w", translate(err))
	case v < 0:
		return 0, dirty, nil // golang-migrate's "nil version" after a full down
	}
	return uint(v), dirty, nil
}

// next_attempt_at is set exactly while a record is unfinished (pending,
// waiting or settled, due or in backoff), so the (next_attempt_at, queue)
// index range IS NOT NULL holds only those: the cost follows open work.
const sqlOldestOpen = `-- name: OldestOpen
SELECT queue, MAX(TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6))) AS age_us
FROM mend_records WHERE next_attempt_at IS NOT NULL
GROUP BY queue`

// OldestOpen returns, per queue with unfinished records, how long the
// oldest of them has existed by the database clock, whether it is due now
// or waiting out a backoff. Queues with no unfinished record are absent, so
// zero always means "just recorded", never "none".
func (d *DB) OldestOpen(ctx context.Context) (map[string]time.Duration, error) {
	var rows []struct {
		Queue []byte `db:"queue"`
		AgeUS int64  `db:"age_us"`
	}
	if err := d.db.SelectContext(ctx, &rows, sqlOldestOpen); err != nil {
		return nil, fmt.Errorf("storage: oldest unfinished records: %w", translate(err))
	}
	out := make(map[string]time.Duration, len(rows))
	for _, r := range rows {
		out[string(r.Queue)] = time.Duration(max(r.AgeUS, 0)) * time.Microsecond
	}
	return out, nil
}

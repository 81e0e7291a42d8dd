package storage

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// VerifyPageDefault is how many records Verify reads at a time.
const VerifyPageDefault = 500

// VerifyParams selects the records Verify checks; the zero value checks
// every record.
type VerifyParams struct {
	// Queue, if set, checks only that queue's records.
	Queue string
	// Record, if set, checks only that record.
	Record mend.RecordID
	// Since, if positive, checks only records updated within it (by the
	// database clock).
	Since time.Duration
	// PageSize is how many records are read (with their events) at a time;
	// memory is bounded by one page. Zero means VerifyPageDefault.
	PageSize int
}

// Divergence is one projection column that differs from the fold of the
// record's events.
type Divergence struct {
	Queue    string
	RecordID mend.RecordID
	// Column names the mend_records column ("events" when the log itself is
	// malformed: a gap in seq, no created event first, another queue).
	Column string
	// Projection is the column's value in mend_records, Fold the value the
	// events give, both as text.
	Projection, Fold string
}

func (d Divergence) String() string {
	return fmt.Sprintf("queue %q record %s: %s: projection %s, events %s", d.Queue, d.RecordID, d.Column, d.Projection, d.Fold)
}

// VerifyStats counts what Verify read.
type VerifyStats struct {
	Records, Events int
	// Divergent counts records with at least one divergence.
	Divergent int
	// Legacy counts records with events written before migration 0013,
	// which do not record the projection they produced: their state,
	// attempts, last error, due time and timestamps are not compared.
	Legacy int
	Took   time.Duration
}

// Rate is the records verified per second.
func (s VerifyStats) Rate() float64 {
	if s.Took <= 0 {
		return 0
	}
	return float64(s.Records) / s.Took.Seconds()
}

const sqlVerifyRecords = `-- name: VerifyRecords
SELECT record_id, queue, source_key, topic, partition_key, message_id, batch_id, desired_outcome, state, version,
	attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since
FROM mend_records
WHERE record_id > ? AND (? = '' OR queue = ?) AND (? IS NULL OR record_id = ?)
	AND (? = 0 OR updated_at >= NOW(6) - INTERVAL ? MICROSECOND)
ORDER BY record_id
LIMIT ?`

// sqlVerifyEvents reads the events of a page of records; %s is one
// placeholder per record.
const sqlVerifyEvents = `-- name: VerifyEvents
SELECT record_id, seq, queue, kind, epoch, data, created_at, state, attempts, last_error, next_attempt_at
FROM mend_events WHERE record_id IN (%s) ORDER BY record_id, seq`

// verifyRecord is a projection row as Verify reads it.
type verifyRecord struct {
	RecordID      []byte       `db:"record_id"`
	Queue         []byte       `db:"queue"`
	SourceKey     []byte       `db:"source_key"`
	Topic         []byte       `db:"topic"`
	Partition     []byte       `db:"partition_key"`
	MessageID     []byte       `db:"message_id"`
	BatchID       []byte       `db:"batch_id"`
	Desired       string       `db:"desired_outcome"`
	State         string       `db:"state"`
	Version       int64        `db:"version"`
	Attempts      int          `db:"attempts"`
	NextAttemptAt sql.NullTime `db:"next_attempt_at"`
	LastError     []byte       `db:"last_error"`
	Epoch         int64        `db:"epoch"`
	CreatedAt     time.Time    `db:"created_at"`
	UpdatedAt     time.Time    `db:"updated_at"`
	StateSince    time.Time    `db:"state_since"`
}

// verifyEvent is an event as Verify reads it; State is NULL for events
// written before migration 0013.
type verifyEvent struct {
	RecordID      []byte         `db:"record_id"`
	Seq           int64          `db:"seq"`
	Queue         []byte         `db:"queue"`
	Kind          string         `db:"kind"`
	Epoch         int64          `db:"epoch"`
	Data          []byte         `db:"data"`
	CreatedAt     time.Time      `db:"created_at"`
	State         sql.NullString `db:"state"`
	Attempts      sql.NullInt64  `db:"attempts"`
	LastError     []byte         `db:"last_error"`
	NextAttemptAt sql.NullTime   `db:"next_attempt_at"`
}

// fold is a record's projection as its events give it.
type fold struct {
	legacy        bool // some event predates migration 0013
	version       int64
	batchID       string
	desired       string
	state         string
	attempts      int64
	lastError     []byte
	nextAttemptAt sql.NullTime
	epoch         int64
	createdAt     time.Time
	updatedAt     time.Time
	stateSince    time.Time
	malformed     string // why the log is not a record's history, if it is not
}

// foldEvents folds a record's events, in seq order, into its projection.
func foldEvents(queue []byte, evs []verifyEvent) fold {
	var f fold
	if len(evs) == 0 {
		f.malformed = "no events"
		return f
	}
	for i, ev := range evs {
		switch {
		case ev.Seq != int64(i+1):
			f.malformed = fmt.Sprintf("event %d has seq %d (a gap or a duplicate)", i+1, ev.Seq)
			return f
		case !bytes.Equal(ev.Queue, queue):
			f.malformed = fmt.Sprintf("event %d is in queue %q", ev.Seq, ev.Queue)
			return f
		case i == 0 && ev.Kind != string(mend.EventCreated):
			f.malformed = fmt.Sprintf("the first event is %q, not created", ev.Kind)
			return f
		case i > 0 && ev.Kind == string(mend.EventCreated):
			f.malformed = fmt.Sprintf("event %d is a second created event", ev.Seq)
			return f
		}
		if i == 0 {
			var cd createdData
			if err := json.Unmarshal(ev.Data, &cd); err != nil {
				f.malformed = "created event data: " + err.Error()
				return f
			}
			f.batchID, f.desired = cd.BatchID, string(cd.Desired)
			f.createdAt = ev.CreatedAt
		}
		if !ev.State.Valid {
			f.legacy = true
			continue
		}
		if ev.State.String != f.state || i == 0 {
			f.stateSince = ev.CreatedAt
		}
		f.state, f.attempts, f.lastError, f.nextAttemptAt = ev.State.String, ev.Attempts.Int64, ev.LastError, ev.NextAttemptAt
	}
	last := evs[len(evs)-1]
	f.version, f.epoch, f.updatedAt = last.Seq, last.Epoch, last.CreatedAt
	return f
}

// compare returns the columns where the projection differs from the fold.
func (r *verifyRecord) compare(f fold) []Divergence {
	var id mend.RecordID
	copy(id[:], r.RecordID)
	var out []Divergence
	add := func(col, proj, folded string) {
		if proj != folded {
			out = append(out, Divergence{Queue: string(r.Queue), RecordID: id, Column: col, Projection: proj, Fold: folded})
		}
	}
	if f.malformed != "" {
		add("events", "a record", f.malformed)
		return out
	}
	src := mend.SourceID{Queue: string(r.Queue), Topic: string(r.Topic), Partition: string(r.Partition), MessageID: string(r.MessageID)}
	key := src.Key()
	add("source_key", fmt.Sprintf("%x", r.SourceKey), fmt.Sprintf("%x", key[:]))
	add("version", fmt.Sprint(r.Version), fmt.Sprint(f.version))
	add("batch_id", fmt.Sprintf("%q", r.BatchID), fmt.Sprintf("%q", f.batchID))
	add("desired_outcome", fmt.Sprintf("%q", r.Desired), fmt.Sprintf("%q", f.desired))
	add("epoch", fmt.Sprint(r.Epoch), fmt.Sprint(f.epoch))
	if f.legacy {
		return out
	}
	add("state", r.State, f.state)
	add("attempts", fmt.Sprint(r.Attempts), fmt.Sprint(f.attempts))
	add("last_error", fmt.Sprintf("%q", r.LastError), fmt.Sprintf("%q", f.lastError))
	add("next_attempt_at", nullTime(r.NextAttemptAt), nullTime(f.nextAttemptAt))
	add("created_at", stamp(r.CreatedAt), stamp(f.createdAt))
	add("updated_at", stamp(r.UpdatedAt), stamp(f.updatedAt))
	add("state_since", stamp(r.StateSince), stamp(f.stateSince))
	return out
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

func nullTime(t sql.NullTime) string {
	if !t.Valid {
		return "NULL"
	}
	return stamp(t.Time)
}

// Verify re-folds the events of the records p selects and compares each
// fold with the record's projection in mend_records, column by column:
// version (the last seq; seqs must run 1..n from a created event, all in
// the record's queue), source_key (the hash of the identity columns),
// batch_id and desired_outcome (the created event), epoch, and, from the
// projection every event records since migration 0013, state, attempts,
// last_error, next_attempt_at, created_at, updated_at and state_since (the
// first event of the last run of the current state). The snapshot copied
// from the dead letter (payload, failure columns) is written once at
// creation and is not in the events.
//
// It reads p.PageSize records at a time in record_id order, with their
// events, so memory is bounded by a page and the cost is linear in events.
// Each divergence is passed to report as found; an error from report stops
// Verify and is returned. Verify reads without locks: a record written
// while it runs may be reported with a version one behind; run it again
// (or use --record) to confirm.
func (d *DB) Verify(ctx context.Context, p VerifyParams, report func(Divergence) error) (VerifyStats, error) {
	start := time.Now()
	var st VerifyStats
	if p.Queue != "" {
		if err := mend.ValidateIdentity("queue", p.Queue, true); err != nil {
			return st, err
		}
	}
	if p.Since < 0 || p.PageSize < 0 {
		return st, &mend.ValidationError{Field: "verify", Reason: "since and page size must not be negative"}
	}
	page := cmp.Or(p.PageSize, VerifyPageDefault)
	var only []byte
	if !p.Record.IsZero() {
		only = p.Record[:]
	}
	after := []byte{}
	for {
		var recs []verifyRecord
		err := d.db.SelectContext(ctx, &recs, sqlVerifyRecords, after, p.Queue, p.Queue, only, only,
			p.Since.Microseconds(), p.Since.Microseconds(), page)
		if err != nil {
			return st, fmt.Errorf("storage: verify: read records: %w", translate(err))
		}
		if len(recs) == 0 {
			break
		}
		events, err := d.verifyEvents(ctx, recs)
		if err != nil {
			return st, err
		}
		for i := range recs {
			r := &recs[i]
			evs := events[string(r.RecordID)]
			st.Records++
			st.Events += len(evs)
			f := foldEvents(r.Queue, evs)
			if f.legacy {
				st.Legacy++
			}
			divs := r.compare(f)
			if len(divs) > 0 {
				st.Divergent++
			}
			for _, dv := range divs {
				if err := report(dv); err != nil {
					st.Took = time.Since(start)
					return st, err
				}
			}
		}
		after = recs[len(recs)-1].RecordID
		if len(recs) < page {
			break
		}
	}
	st.Took = time.Since(start)
	return st, nil
}

// verifyEvents reads the events of recs, by record ID.
func (d *DB) verifyEvents(ctx context.Context, recs []verifyRecord) (map[string][]verifyEvent, error) {
	args := make([]any, len(recs))
	for i := range recs {
		args[i] = recs[i].RecordID
	}
	q := fmt.Sprintf(sqlVerifyEvents, placeholders(len(recs)))
	var evs []verifyEvent
	if err := d.db.SelectContext(ctx, &evs, q, args...); err != nil {
		return nil, fmt.Errorf("storage: verify: read events: %w", translate(err))
	}
	out := make(map[string][]verifyEvent, len(recs))
	for _, ev := range evs {
		out[string(ev.RecordID)] = append(out[string(ev.RecordID)], ev)
	}
	return out, nil
}

const sqlRebuildRecord = `-- name: RebuildRecord
SELECT record_id, queue, source_key, topic, partition_key, message_id, batch_id, desired_outcome, state, version,
	attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since
FROM mend_records WHERE record_id = ? AND queue = ? FOR UPDATE`

const sqlRebuildEvents = `-- name: RebuildEvents
SELECT record_id, seq, queue, kind, epoch, data, created_at, state, attempts, last_error, next_attempt_at
FROM mend_events WHERE record_id = ? AND queue = ? ORDER BY seq LOCK IN SHARE MODE`

// sqlRebuildWrite rewrites the derivable columns; the fence is checked
// again in the statement, as in every fenced write.
const sqlRebuildWrite = `-- name: RebuildWrite
UPDATE mend_records SET version = ?, batch_id = ?, desired_outcome = ?, epoch = ?,
	state = ?, attempts = ?, last_error = ?, next_attempt_at = ?, created_at = ?, updated_at = ?, state_since = ?
WHERE record_id = ? AND queue = ? AND version = ?
	AND EXISTS (SELECT 1 FROM mend_leases WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6))`

// sqlRebuildTermLive asks whether term is still the queue's live lease by
// the database clock, after a rewrite that changed no row.
const sqlRebuildTermLive = `-- name: RebuildTermLive
SELECT COUNT(*) FROM mend_leases WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6)`

// ErrNotDerivable is returned by RebuildRecord for a record whose events
// cannot rebuild it: a malformed log, or events from before migration 0013.
var ErrNotDerivable = fmt.Errorf("%w: the projection cannot be derived from the events", mend.ErrInvalid)

// RebuildRecord rewrites a record's projection from the fold of its events
// (the columns Verify compares), under term, the lease of the record's
// queue, in one fenced transaction: it reads the lease row LOCK IN SHARE
// MODE, the record FOR UPDATE and its events, folds, and writes only if
// something it writes differs. It returns the divergences it found (none:
// the record already matched). The snapshot columns and source identity
// are never written; a source_key divergence is returned but not
// repaired, and alone it writes nothing.
//
// Returns an error matching mend.ErrFenced if term is not the queue's
// current lease (nothing written; a rewrite that changes no row is fenced
// only if the term has really ended by the database clock), mend.ErrNotFound if the queue holds no
// such record, and ErrNotDerivable if the events cannot rebuild it.
func (d *DB) RebuildRecord(ctx context.Context, term mend.Term, id mend.RecordID) ([]Divergence, error) {
	if err := validateTerm(term); err != nil {
		return nil, err
	}
	if id.IsZero() {
		return nil, &mend.ValidationError{Field: "record_id", Reason: "must be set"}
	}
	var fixed []Divergence
	err := d.withTx(ctx, "RebuildRecord", "", func(ctx context.Context, tx *sqlx.Tx) error {
		fixed = nil
		var lease leaseCheckRow
		found := true
		if err := tx.GetContext(ctx, &lease, sqlLeaseCheckStmt, term.Queue); errors.Is(err, sql.ErrNoRows) {
			found = false
		} else if err != nil {
			return fmt.Errorf("read lease: %w", err)
		}
		if err := lease.check(term, found); err != nil {
			return err
		}
		var r verifyRecord
		if err := tx.GetContext(ctx, &r, sqlRebuildRecord, id[:], term.Queue); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: no record %s in queue %q", mend.ErrNotFound, id, term.Queue)
		} else if err != nil {
			return fmt.Errorf("read record: %w", err)
		}
		var evs []verifyEvent
		if err := tx.SelectContext(ctx, &evs, sqlRebuildEvents, id[:], term.Queue); err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		f := foldEvents(r.Queue, evs)
		if f.malformed != "" || f.legacy {
			return fmt.Errorf("record %s: %w", id, ErrNotDerivable)
		}
		fixed = r.compare(f)
		if !slices.ContainsFunc(fixed, func(d Divergence) bool { return d.Column != "source_key" }) {
			return nil // nothing the rewrite writes differs (source_key is never written)
		}
		res, err := tx.ExecContext(ctx, sqlRebuildWrite, f.version, []byte(f.batchID), f.desired, f.epoch,
			f.state, f.attempts, f.lastError, f.nextAttemptAt, f.createdAt, f.updatedAt, f.stateSince,
			id[:], term.Queue, r.Version, term.Queue, term.Holder, term.Epoch)
		if err != nil {
			return fmt.Errorf("rewrite projection: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			return nil
		}
		// No row changed: the term expired by the database clock since the
		// lease was read, or the row already held every value written
		// (the server counts only changed rows). Only the first is fenced.
		var live int
		if err := tx.GetContext(ctx, &live, sqlRebuildTermLive, term.Queue, term.Holder, term.Epoch); err != nil {
			return fmt.Errorf("read lease: %w", err)
		}
		if live == 0 {
			return fmt.Errorf("%w: term of %q at epoch %d on queue %q expired by the database clock during the rebuild",
				mend.ErrFenced, term.Holder, term.Epoch, term.Queue)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: rebuild record %s: %w", id, err)
	}
	return fixed, nil
}

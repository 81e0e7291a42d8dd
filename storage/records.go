package storage

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// recordColumns is the select list every record read uses, in the order
// recordRow's tags name them.
const recordColumns = `record_id, queue, source_key, topic, partition_key, message_id, original_topic, payload,
	failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome,
	state, version, attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since,
	TIMESTAMPDIFF(MICROSECOND, state_since, NOW(6)) AS state_age_us`

// recordRow is a mend_records row as the driver returns it.
type recordRow struct {
	RecordID        []byte       `db:"record_id"`
	Queue           []byte       `db:"queue"`
	SourceKey       []byte       `db:"source_key"`
	Topic           []byte       `db:"topic"`
	Partition       []byte       `db:"partition_key"`
	MessageID       []byte       `db:"message_id"`
	OriginalTopic   []byte       `db:"original_topic"`
	Payload         []byte       `db:"payload"`
	FailureCount    int          `db:"failure_count"`
	FailureError    []byte       `db:"failure_error"`
	FailedAt        sql.NullTime `db:"failed_at"`
	FailureSubjects []byte       `db:"failure_subjects"`
	BatchID         []byte       `db:"batch_id"`
	DesiredOutcome  string       `db:"desired_outcome"`
	State           string       `db:"state"`
	Version         int64        `db:"version"`
	Attempts        int          `db:"attempts"`
	NextAttemptAt   sql.NullTime `db:"next_attempt_at"`
	LastError       []byte       `db:"last_error"`
	Epoch           int64        `db:"epoch"`
	CreatedAt       time.Time    `db:"created_at"`
	UpdatedAt       time.Time    `db:"updated_at"`
	StateSince      time.Time    `db:"state_since"`
	StateAgeMicros  int64        `db:"state_age_us"`
}

func (r *recordRow) record() (mend.Record, error) {
	var rec mend.Record
	if len(r.RecordID) != len(rec.ID) {
		return rec, fmt.Errorf("storage: record_id is %d bytes, want %d", len(r.RecordID), len(rec.ID))
	}
	copy(rec.ID[:], r.RecordID)
	rec.Source = mend.SourceID{Queue: string(r.Queue), Topic: string(r.Topic), Partition: string(r.Partition), MessageID: string(r.MessageID)}
	rec.Snapshot = mend.Snapshot{
		Payload:       r.Payload,
		OriginalTopic: string(r.OriginalTopic),
		FailureCount:  r.FailureCount,
		LastError:     string(r.FailureError),
	}
	if r.FailedAt.Valid {
		rec.Snapshot.FailedAt = r.FailedAt.Time
	}
	if err := json.Unmarshal(r.FailureSubjects, &rec.Snapshot.Subjects); err != nil {
		return rec, fmt.Errorf("storage: record %s: decode failure_subjects: %w", rec.ID, err)
	}
	rec.Target = mend.Target{BatchID: string(r.BatchID), Desired: mend.Outcome(r.DesiredOutcome)}
	rec.State = mend.State(r.State)
	rec.Version = r.Version
	rec.Attempts = r.Attempts
	if r.NextAttemptAt.Valid {
		t := r.NextAttemptAt.Time
		rec.NextAttemptAt = &t
	}
	rec.LastError = string(r.LastError)
	rec.Epoch = r.Epoch
	rec.CreatedAt, rec.UpdatedAt, rec.StateSince = r.CreatedAt, r.UpdatedAt, r.StateSince
	rec.StateAge = time.Duration(r.StateAgeMicros) * time.Microsecond
	return rec, nil
}

// checkIdentity compares the stored verbatim identity with the request byte
// for byte. The source key is a hash, so equal keys with different bytes mean
// a collision or a damaged row: a hard error, never a silent match.
func (r *recordRow) checkIdentity(src mend.SourceID) error {
	key := src.Key()
	if !bytes.Equal(r.SourceKey, key[:]) || string(r.Queue) != src.Queue || string(r.Topic) != src.Topic ||
		string(r.Partition) != src.Partition || string(r.MessageID) != src.MessageID {
		return fmt.Errorf("%w: asked for %s, stored row has queue=%q topic=%q partition=%q message_id=%q",
			mend.ErrIdentityMismatch, src, r.Queue, r.Topic, r.Partition, r.MessageID)
	}
	return nil
}

// CreateParams is mend.CreateParams, kept here for callers of the store.
type CreateParams = mend.CreateParams

func validateCreate(p *CreateParams, maxPayload int) error {
	if err := p.Source.Validate(); err != nil {
		return err
	}
	if err := mend.ValidateIdentity("batch_id", p.Target.BatchID, false); err != nil {
		return err
	}
	if err := mend.ValidateIdentity("original_topic", p.Snapshot.OriginalTopic, false); err != nil {
		return err
	}
	switch p.Target.Desired {
	case mend.OutcomeNone, mend.OutcomeFailed, mend.OutcomeSucceeded, mend.OutcomeWake:
	default:
		return &mend.ValidationError{Field: "desired_outcome", Reason: fmt.Sprintf("%q is not one of failed, succeeded, wake or empty", p.Target.Desired)}
	}
	if p.State == "" {
		p.State = mend.StatePending
	}
	if p.State != mend.StatePending && p.State != mend.StateParked {
		return &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("a record starts pending or parked, not %q", p.State)}
	}
	if len(p.Snapshot.Payload) > maxPayload {
		return &mend.ValidationError{Field: "payload", Reason: fmt.Sprintf("is %d bytes; at most %d are allowed", len(p.Snapshot.Payload), maxPayload)}
	}
	if p.Snapshot.FailureCount < 0 {
		return &mend.ValidationError{Field: "failure_count", Reason: "must not be negative"}
	}
	if err := validateActor(p.Actor); err != nil {
		return err
	}
	return mend.ValidateOpID(p.OpID)
}

func validateActor(actor string) error {
	if actor == "" || len(actor) > 255 {
		return &mend.ValidationError{Field: "actor", Reason: "must be 1 to 255 bytes naming the writer"}
	}
	return nil
}

// createdData is the payload of a created event.
type createdData struct {
	State   mend.State   `json:"state"`
	BatchID string       `json:"batch_id,omitempty"`
	Desired mend.Outcome `json:"desired,omitempty"`
	Reason  string       `json:"reason,omitempty"`
	// Note says what was changed on the way in (a clamped failure count);
	// FailureCountReported keeps the value the dead letter carried.
	Note                 string `json:"note,omitempty"`
	FailureCountReported int    `json:"failure_count_reported,omitempty"`
}

// maxFailureCount is the largest count failure_count (INT) holds.
const maxFailureCount = math.MaxInt32

// The no-op ODKU makes a duplicate report zero rows affected, which tells the
// loser apart; INSERT IGNORE would also hide truncation and other errors.
const recordInsert = `INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, original_topic, payload,
	failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome,
	state, version, attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since)
VALUES `

const recordInsertRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 0, IF(?, NOW(6), NULL), ?, 0, NOW(6), NOW(6), NOW(6))`

const recordInsertODKU = `
ON DUPLICATE KEY UPDATE record_id = record_id`

// One packet with its COMMIT (see batchTx.queryCommit): the insert, its
// created event only if the row is new (ROW_COUNT() is 1 for an insert and
// 0 for the no-op update), and the read back with whether this call created
// the row. The event's values
// are selected from the record row by its queue rather than FROM DUAL: a
// sharded cluster (Vitess) routes that SELECT to the queue's shard, where a
// SELECT FROM DUAL could go to any shard and make the transaction span two.
const sqlRecordCreate = `-- name: RecordCreate
START TRANSACTION;
` + recordInsert + recordInsertRow + recordInsertODKU + `;
SET @mend_changed = ROW_COUNT();
INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, ` + eventProjection + `)
SELECT r.record_id, 1, r.queue, 'created', 0, ?, ?, ?, ` + eventProjectionFrom + ` FROM mend_records r WHERE r.queue = ? AND r.source_key = ? AND @mend_changed = 1;
SELECT @mend_changed AS created, ` + recordColumns + ` FROM mend_records WHERE queue = ? AND source_key = ?`

// createdRow is the read back of a create: the record and whether the
// statement before it inserted it.
type createdRow struct {
	Created int64 `db:"created"`
	recordRow
}

// RecordCreate creates the record for p.Source if none exists, together with
// its created event, in one transaction. It returns the stored record and
// whether this call created it. When the source identity is already recorded
// the existing record is returned unchanged (first writer wins) and created
// is false; p's snapshot is then ignored.
//
// Returns a *mend.ValidationError (ErrInvalid) for bad input before touching
// the database. Returns ErrIdentityMismatch if the stored identity differs
// from p.Source byte for byte, and ErrInvalid if p.OpID was already used in
// the queue by another operation (nothing is written then). A FailureCount
// above what the column holds (2^31-1) is stored clamped, the reported value
// kept in the created event. Repeating the call after an ambiguous failure
// is safe: it returns the record either way.
func (d *DB) RecordCreate(ctx context.Context, p CreateParams) (rec mend.Record, created bool, err error) {
	if err := validateCreate(&p, d.maxPayload); err != nil {
		return mend.Record{}, false, err
	}
	c, err := prepareCreate(p)
	if err != nil {
		return mend.Record{}, false, err
	}
	p, key := c.p, c.key
	err = d.withBatchTx(ctx, "RecordCreate", p.OpID, func(ctx context.Context, tx *batchTx) error {
		id := mend.NewRecordID()
		var row createdRow
		args := append(c.rowArgs(id), p.Actor, p.OpID, c.data, p.Source.Queue, key[:], p.Source.Queue, key[:])
		// The read back is all the body decides on, so COMMIT goes in the
		// same packet: a create is one round trip.
		err := tx.queryCommit(ctx, sqlRecordCreate, args, scanOne(&row))
		switch {
		case mysqlErrNumber(err) == errDupEntry:
			// The record ID is new and the insert is an upsert, so the
			// duplicate is the created event's op ID.
			return opIDUsed(p.OpID, p.Source.Queue)
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read back: %w: no record for %s after the insert", mend.ErrNotFound, p.Source)
		case err != nil:
			return fmt.Errorf("create record: %w", err)
		}
		if err := row.checkIdentity(p.Source); err != nil {
			return fmt.Errorf("read back: %w", err)
		}
		if rec, err = row.record(); err != nil {
			return fmt.Errorf("read back: %w", err)
		}
		created = row.Created == 1
		if created && rec.ID != id {
			return fmt.Errorf("storage: inserted record %s but read back %s", id, rec.ID)
		}
		return nil
	})
	if err != nil {
		return mend.Record{}, false, fmt.Errorf("storage: create record: %w", err)
	}
	return rec, created, nil
}

// createArgs is a validated CreateParams encoded for the INSERT.
type createArgs struct {
	p            CreateParams // FailureCount clamped, payload never nil
	key          [32]byte
	subjectsJSON string
	data         string // the created event's JSON
	failedAt     sql.NullTime
}

// prepareCreate encodes p, validated, for the INSERT.
func prepareCreate(p CreateParams) (createArgs, error) {
	// An absurd count is no reason to lose the dead letter: store the most
	// the column holds and keep the reported value in the created event.
	cd := createdData{State: p.State, BatchID: p.Target.BatchID, Desired: p.Target.Desired, Reason: p.Reason}
	if p.Snapshot.FailureCount > maxFailureCount {
		cd.FailureCountReported = p.Snapshot.FailureCount
		cd.Note = fmt.Sprintf("failure_count %d is over %d; stored clamped", p.Snapshot.FailureCount, maxFailureCount)
		p.Snapshot.FailureCount = maxFailureCount
	}
	subjects := p.Snapshot.Subjects
	if subjects == nil {
		subjects = []mend.Subject{}
	}
	// JSON goes out as a string: with interpolateParams a []byte is sent as
	// _binary'...', which MySQL 8 refuses for a JSON column.
	subjectsJSON, err := json.Marshal(subjects)
	if err != nil {
		return createArgs{}, fmt.Errorf("storage: encode subjects: %w", err)
	}
	data, err := json.Marshal(cd)
	if err != nil {
		return createArgs{}, fmt.Errorf("storage: encode event: %w", err)
	}
	c := createArgs{key: p.Source.Key(), subjectsJSON: string(subjectsJSON), data: string(data)}
	if !p.Snapshot.FailedAt.IsZero() {
		// DATETIME(6) keeps microseconds; a finer time is cut here, not by
		// the server (MySQL rounds, MariaDB truncates), so both engines
		// store the same value and the client knows it (createArgs.record).
		c.failedAt = sql.NullTime{Time: p.Snapshot.FailedAt.UTC().Truncate(time.Microsecond), Valid: true}
	}
	if p.Snapshot.Payload == nil {
		p.Snapshot.Payload = []byte{}
	}
	c.p = p
	return c, nil
}

// rowArgs are the arguments of one recordInsertRow, for record ID id.
func (c *createArgs) rowArgs(id mend.RecordID) []any {
	p := &c.p
	return []any{id[:], p.Source.Queue, c.key[:], p.Source.Topic, p.Source.Partition, p.Source.MessageID, p.Snapshot.OriginalTopic, p.Snapshot.Payload,
		p.Snapshot.FailureCount, p.Snapshot.LastError, c.failedAt, c.subjectsJSON, p.Target.BatchID, string(p.Target.Desired),
		string(p.State), p.State.Due(), p.Reason}
}

// record is the record a create inserted from c under ID id, at time now
// (the row's NOW(6)), as reading the row back would return it with state
// age age: the columns hold exactly the values sent (VARBINARY and BLOB
// columns keep bytes, failed_at was cut to microseconds, the subjects are
// the JSON sent, decoded), and the rest are the insert's constants.
func (c *createArgs) record(id mend.RecordID, now time.Time, age time.Duration) (mend.Record, error) {
	p := &c.p
	subjects := []mend.Subject{}
	if c.subjectsJSON != "[]" {
		if err := json.Unmarshal([]byte(c.subjectsJSON), &subjects); err != nil {
			return mend.Record{}, fmt.Errorf("storage: record %s: decode failure_subjects: %w", id, err)
		}
	}
	rec := mend.Record{
		ID:     id,
		Source: p.Source,
		Snapshot: mend.Snapshot{Payload: bytes.Clone(p.Snapshot.Payload), OriginalTopic: p.Snapshot.OriginalTopic,
			FailureCount: p.Snapshot.FailureCount, LastError: p.Snapshot.LastError, Subjects: subjects},
		Target:     p.Target,
		State:      p.State,
		Version:    1,
		LastError:  p.Reason,
		CreatedAt:  now,
		UpdatedAt:  now,
		StateSince: now,
		StateAge:   age,
	}
	if c.failedAt.Valid {
		rec.Snapshot.FailedAt = c.failedAt.Time
	}
	if p.State.Due() {
		t := now
		rec.NextAttemptAt = &t
	}
	return rec, nil
}

// size estimates the bytes the row adds to a statement: every byte of a
// value may be escaped to two.
func (c *createArgs) size() int {
	p := &c.p
	n := len(p.Source.Queue) + len(p.Source.Topic) + len(p.Source.Partition) + len(p.Source.MessageID) + len(p.Snapshot.OriginalTopic) +
		len(p.Snapshot.Payload) + len(p.Snapshot.LastError) + len(c.subjectsJSON) + len(p.Target.BatchID) + len(p.Reason) +
		len(p.Actor) + len(p.OpID) + len(c.data)
	return 2*n + 512
}

// recordsOf turns rows read from mend_records into records, in order.
func recordsOf(rows []recordRow) ([]mend.Record, error) {
	recs := make([]mend.Record, 0, len(rows))
	for i := range rows {
		rec, err := rows[i].record()
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

const sqlRecordGetBySource = `-- name: RecordGetBySource
SELECT ` + freshRead + recordColumns + ` FROM mend_records WHERE queue = ? AND source_key = ?`

func getBySource(ctx context.Context, q sqlx.QueryerContext, src mend.SourceID) (mend.Record, error) {
	key := src.Key()
	var row recordRow
	if err := sqlx.GetContext(ctx, q, &row, sqlRecordGetBySource, src.Queue, key[:]); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return mend.Record{}, fmt.Errorf("%w: no record for %s", mend.ErrNotFound, src)
		}
		return mend.Record{}, err
	}
	if err := row.checkIdentity(src); err != nil {
		return mend.Record{}, err
	}
	return row.record()
}

// RecordGet returns the record of a source identity.
//
// Returns ErrInvalid for a bad identity, ErrNotFound if none is recorded and
// ErrIdentityMismatch if the stored identity differs byte for byte.
func (d *DB) RecordGet(ctx context.Context, src mend.SourceID) (mend.Record, error) {
	if err := src.Validate(); err != nil {
		return mend.Record{}, err
	}
	rec, err := getBySource(ctx, d.db, src)
	if err != nil {
		return mend.Record{}, fmt.Errorf("storage: get record: %w", translate(err))
	}
	return rec, nil
}

const sqlRecordGetByID = `-- name: RecordGetByID
SELECT ` + freshRead + recordColumns + ` FROM mend_records WHERE queue = ? AND record_id = ?`

// RecordGetByID returns a record of queue by its ID. Reads never cross
// queues: the ID of another queue's record is not found.
//
// Returns ErrNotFound if queue has no such record.
func (d *DB) RecordGetByID(ctx context.Context, queue string, id mend.RecordID) (mend.Record, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return mend.Record{}, err
	}
	var row recordRow
	if err := d.db.GetContext(ctx, &row, sqlRecordGetByID, queue, id[:]); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return mend.Record{}, fmt.Errorf("storage: get record: %w: no record %s in queue %q", mend.ErrNotFound, id, queue)
		}
		return mend.Record{}, fmt.Errorf("storage: get record: %w", translate(err))
	}
	if string(row.Queue) != queue {
		return mend.Record{}, fmt.Errorf("storage: get record: %w: record %s is stored under queue %q", mend.ErrIdentityMismatch, id, row.Queue)
	}
	rec, err := row.record()
	if err != nil {
		return mend.Record{}, err
	}
	// The verbatim columns must still hash to the stored key.
	if err := row.checkIdentity(rec.Source); err != nil {
		return mend.Record{}, fmt.Errorf("storage: get record: %w", err)
	}
	return rec, nil
}

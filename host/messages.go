package host

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mendq/mend"
)

// Message is one row of the message table, sq_messages.
type Message struct {
	Offset    int64  // assigned by the database; ignored by Publish
	Topic     string // e.g. "speculate" or "speculate_dlq"
	Partition string // the queue name for most topics
	ID        string // the dedupe key within (Topic, Partition)
	Payload   []byte
	// Metadata is a JSON object; nil means {}. Wake-ups carry
	// {"epoch": N, "record_id": "...", "batch_id": "..."}.
	Metadata json.RawMessage
	// Failure context, set on dead-lettered (DLQ) rows.
	FailureCount int
	LastError    string
	FailedAt     time.Time // zero: NULL
	CreatedAt    time.Time // database clock; ignored by Publish
}

func (m Message) validate() error {
	for _, f := range []struct {
		name, value string
		required    bool
	}{
		{"topic", m.Topic, true},
		{"partition", m.Partition, false},
		{"message_id", m.ID, true},
	} {
		if err := mend.ValidateIdentity(f.name, f.value, f.required); err != nil {
			return err
		}
	}
	if m.Metadata != nil && !json.Valid(m.Metadata) {
		return &mend.ValidationError{Field: "metadata", Reason: "is not valid JSON"}
	}
	if m.FailureCount < 0 {
		return &mend.ValidationError{Field: "failure_count", Reason: "must not be negative"}
	}
	return nil
}

// WakePayload is the payload of a wake-up: the same shape as any speculate
// message, {"batch_id": "..."}.
type WakePayload struct {
	BatchID string `json:"batch_id"`
}

// WakeMetadata is the metadata of a wake-up.
type WakeMetadata struct {
	Epoch    int64         `json:"epoch"`
	RecordID mend.RecordID `json:"record_id"`
	BatchID  string        `json:"batch_id"`
}

// Wake publishes w to the wake topic (Options.WakeTopic, "speculate" by
// default) with the queue as partition key and w.MessageID as message ID.
// Publishing an ID the table still holds for that topic and partition is a
// no-op that returns nil. Returns a *mend.ValidationError before touching the
// database if the queue, message ID or batch ID cannot be stored exactly or
// the epoch is negative; any other error means the wake-up may not have been
// published (a trigger's SIGNAL included).
func (d *DB) Wake(ctx context.Context, w mend.WakeUp) error {
	if err := mend.ValidateIdentity("queue", w.Queue, true); err != nil {
		return err
	}
	if err := mend.ValidateIdentity("message_id", w.MessageID, true); err != nil {
		return err
	}
	if err := mend.ValidateIdentity("batch_id", w.BatchID, true); err != nil {
		return err
	}
	if w.Epoch < 0 {
		return &mend.ValidationError{Field: "epoch", Reason: fmt.Sprintf("is %d; must not be negative", w.Epoch)}
	}
	payload, err := json.Marshal(WakePayload{BatchID: w.BatchID})
	if err != nil {
		return fmt.Errorf("host: wake: %w", err)
	}
	meta, err := json.Marshal(WakeMetadata{Epoch: w.Epoch, RecordID: w.RecordID, BatchID: w.BatchID})
	if err != nil {
		return fmt.Errorf("host: wake: %w", err)
	}
	_, err = d.Publish(ctx, Message{Topic: d.wakeTopic, Partition: w.Queue, ID: w.MessageID, Payload: payload, Metadata: meta})
	if err != nil {
		return fmt.Errorf("host: wake queue %q: %w", w.Queue, err)
	}
	return nil
}

// sqlPublish creates the row unless (topic, partition_key, id) exists. The
// no-op update keeps a duplicate silent while every other error (a value too
// long, a trigger's SIGNAL) still fails the statement, which INSERT IGNORE
// would turn into warnings.
const sqlPublish = "-- name: Publish\n" +
	"INSERT INTO sq_messages (topic, partition_key, id, payload, metadata, failure_count, last_error, failed_at, created_at)\n" +
	"VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(6))\n" +
	"ON DUPLICATE KEY UPDATE id = id"

// Publish stores m in the message table and reports whether it created a
// row: false means a message with the same topic, partition and ID already
// exists and nothing changed. It is how tests and the demo put arbitrary
// messages, DLQ rows with their failure columns included, on the queue.
// Returns a *mend.ValidationError before touching the database for bad
// identity fields or metadata.
func (d *DB) Publish(ctx context.Context, m Message) (bool, error) {
	if err := m.validate(); err != nil {
		return false, err
	}
	meta := m.Metadata
	if meta == nil {
		meta = json.RawMessage("{}")
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	var failedAt any
	if !m.FailedAt.IsZero() {
		failedAt = m.FailedAt.UTC()
	}
	res, err := d.queue.ExecContext(ctx, sqlPublish, m.Topic, m.Partition, m.ID, payload, string(meta), m.FailureCount, []byte(m.LastError), failedAt)
	if err != nil {
		return false, fmt.Errorf("host: publish: %w", translate(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("host: publish: %w", translate(err))
	}
	return n == 1, nil
}

const sqlMessages = `-- name: Messages
SELECT ` + "`offset`" + `, topic, partition_key, id, payload, metadata, failure_count, last_error, failed_at, created_at
FROM sq_messages WHERE topic = ? AND partition_key = ? ORDER BY ` + "`offset`"

// Messages returns the messages of one topic and partition in offset order.
func (d *DB) Messages(ctx context.Context, topic, partition string) ([]Message, error) {
	if err := mend.ValidateIdentity("topic", topic, true); err != nil {
		return nil, err
	}
	if err := mend.ValidateIdentity("partition", partition, false); err != nil {
		return nil, err
	}
	rows, err := d.queue.QueryContext(ctx, sqlMessages, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("host: messages: %w", translate(err))
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var (
			m        Message
			meta     []byte
			lastErr  []byte
			failedAt *time.Time
		)
		if err := rows.Scan(&m.Offset, &m.Topic, &m.Partition, &m.ID, &m.Payload, &meta, &m.FailureCount, &lastErr, &failedAt, &m.CreatedAt); err != nil {
			return nil, fmt.Errorf("host: messages: %w", translate(err))
		}
		m.Metadata, m.LastError = json.RawMessage(meta), string(lastErr)
		if failedAt != nil {
			m.FailedAt = *failedAt
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: messages: %w", translate(err))
	}
	return out, nil
}

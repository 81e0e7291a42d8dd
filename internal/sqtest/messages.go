package sqtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// Message is a row of queue_messages.
type Message struct {
	Offset        uint64
	Topic         string
	PartitionKey  string
	ID            string
	Payload       []byte
	Metadata      []byte // raw JSON; nil when the column is NULL
	CreatedAt     uint64 // epoch ms
	PublishedAt   uint64 // epoch ms
	FailedAt      uint64 // epoch ms; 0 on a normal row
	FailureCount  uint32
	LastError     string
	OriginalTopic string
	FailureDetail []byte // raw JSON; nil when NULL
}

// Publish inserts a message the way the real message store does
// (message_store.go:57): all twelve columns, the DLQ fields at their normal
// values, and a duplicate (topic, partition_key, id) a silent success that
// leaves the first row as it was. metadata nil means NULL.
func (w World) Publish(ctx context.Context, topic, partition, id string, payload []byte, metadata map[string]string) error {
	var meta any
	if len(metadata) > 0 {
		b, err := json.Marshal(metadata)
		if err != nil {
			return err
		}
		meta = string(b)
	}
	now := w.now()
	_, err := w.Queue.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, '', '', NULL) ON DUPLICATE KEY UPDATE topic = topic",
		topic, id, payload, meta, partition, now, now)
	if err != nil {
		return fmt.Errorf("sqtest: publish %s/%s/%s: %w", topic, partition, id, err)
	}
	return nil
}

// Subject is one structured failure subject of a DLQ row.
type Subject struct {
	Type string `json:"type"` // batch, queue or request
	ID   string `json:"id"`
}

// Failure is what MoveToDLQ records about why a message was dead-lettered.
type Failure struct {
	Count     uint32 // the delivery's 1-based attempt
	LastError string
	Subjects  []Subject
	Detail    map[string]any
}

// MoveToDLQ moves a message to topic <topic>_dlq as the real store does
// (message_store.go:229), in one transaction: read the row, plain INSERT of
// the copy (a leftover DLQ row fails it with 1062), delete the original.
// A missing original is a success, as in the real store.
func (w World) MoveToDLQ(ctx context.Context, topic, partition, id string, f Failure) error {
	tx, err := w.Queue.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var m Message
	err = tx.QueryRowContext(ctx, "SELECT `offset`, payload, metadata, created_at, published_at FROM queue_messages WHERE topic = ? AND partition_key = ? AND id = ?",
		topic, partition, id).Scan(&m.Offset, &m.Payload, &m.Metadata, &m.CreatedAt, &m.PublishedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqtest: move to dlq: read: %w", err)
	}
	var detail any
	if len(f.Subjects) > 0 || len(f.Detail) > 0 {
		d := struct {
			Subjects []Subject      `json:"subjects,omitempty"`
			Detail   map[string]any `json:"detail,omitempty"`
		}{f.Subjects, f.Detail}
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		detail = string(b)
	}
	var meta any
	if m.Metadata != nil {
		meta = string(m.Metadata)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		topic+"_dlq", id, m.Payload, meta, partition, m.CreatedAt, m.PublishedAt, w.now(), f.Count, f.LastError, topic, detail); err != nil {
		return fmt.Errorf("sqtest: move to dlq: insert: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM queue_messages WHERE `offset` = ?", m.Offset); err != nil {
		return fmt.Errorf("sqtest: move to dlq: delete: %w", err)
	}
	return tx.Commit()
}

// Messages returns a partition's rows of a topic in offset order.
func (w World) Messages(ctx context.Context, topic, partition string) ([]Message, error) {
	rows, err := w.Queue.QueryContext(ctx, "SELECT `offset`, topic, partition_key, id, payload, metadata, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail "+
		"FROM queue_messages WHERE topic = ? AND partition_key = ? ORDER BY `offset`", topic, partition)
	if err != nil {
		return nil, fmt.Errorf("sqtest: messages: %w", err)
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		if err := rows.Scan(&m.Offset, &m.Topic, &m.PartitionKey, &m.ID, &m.Payload, &m.Metadata, &m.CreatedAt, &m.PublishedAt,
			&m.FailedAt, &m.FailureCount, &m.LastError, &m.OriginalTopic, &m.FailureDetail); err != nil {
			return nil, fmt.Errorf("sqtest: messages: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

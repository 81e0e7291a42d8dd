package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/mendq/mend"
)

// MaxPayloadBytes is the most a message payload can hold:
// queue_messages.payload is a BLOB.
const MaxPayloadBytes = 65535

// wakePayload is the real BatchID payload every speculate message carries,
// {"id": "<batch>", "queue": "<queue>"}; the speculate consumer reads the
// queue from it and gets the named batch.
type wakePayload struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
}

// Wake-up metadata keys. Values are always strings: the real message store
// scans metadata into map[string]string, and a single non-string value makes
// every fetch of the partition fail.
const (
	MetaRecordID = "mend.record_id"
	MetaEpoch    = "mend.epoch"
)

// Wake publishes w to the wake topic (Options.WakeTopic, "speculate" by
// default) as the real consumer expects a speculate message: partition key
// w.Queue, message ID w.MessageID, payload {"id": w.BatchID, "queue":
// w.Queue}, and metadata the flat string map {"mend.record_id": "<hex>",
// "mend.epoch": "<n>"}. Publishing an ID the table still holds for that
// topic and partition is a silent success that leaves the first row as it
// was (the store's dedupe).
//
// With Options.RequireWakeConsumer it first checks that a consumer group
// of the host reads the wake topic (CheckWakeTopic), and returns an error
// matching *UnjoinedTopicError, publishing nothing, while none does.
//
// Returns a *mend.ValidationError before touching the database if the
// queue, message ID or batch ID cannot be stored exactly, the epoch is
// negative or the payload would not fit; mend.ErrAmbiguous if the
// connection failed with the statement in flight; any error means the
// wake-up may not have been published.
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
	if err := d.wakeTopicJoined(ctx); err != nil {
		return fmt.Errorf("host: wake queue %q: %w", w.Queue, err)
	}
	payload, err := json.Marshal(wakePayload{ID: w.BatchID, Queue: w.Queue})
	if err != nil {
		return fmt.Errorf("host: wake: %w", err)
	}
	meta := map[string]string{MetaEpoch: strconv.FormatInt(w.Epoch, 10)}
	if !w.RecordID.IsZero() {
		meta[MetaRecordID] = w.RecordID.String()
	}
	if err := d.publish(ctx, "Wake", d.wakeTopic, w.Queue, w.MessageID, payload, meta); err != nil {
		return fmt.Errorf("host: wake queue %q: %w", w.Queue, err)
	}
	return nil
}

// sqlPublish is the real message store's publish (message_store.go:57):
// every column named, since queue_messages has no defaults, the DLQ fields
// at their normal values, and a duplicate (topic, partition_key, id) a
// no-op that keeps the first row. Unlike INSERT IGNORE the no-op update
// lets every other error (a value too long) still fail the statement.
const sqlPublish = `-- name: Publish
INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail)
VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, '', '', NULL)
ON DUPLICATE KEY UPDATE topic = topic`

// message is one row to publish.
type message struct {
	topic, partition, id string
	payload              []byte
	meta                 map[string]string
}

// publish inserts one message. meta nil or empty is stored as NULL, as the
// real store does.
func (d *DB) publish(ctx context.Context, op, topic, partition, id string, payload []byte, meta map[string]string) error {
	return d.publishMany(ctx, op, []message{{topic: topic, partition: partition, id: id, payload: payload, meta: meta}})
}

// sqlPublishRow is one more row of sqlPublish's VALUES list.
const sqlPublishRow = `, (?, ?, ?, ?, ?, ?, ?, 0, 0, '', '', NULL)`

// publishMany inserts msgs with one statement, each row exactly as publish
// would insert it alone: the real store's dedupe applies per row, and the
// statement is atomic.
func (d *DB) publishMany(ctx context.Context, op string, msgs []message) error {
	// Epoch milliseconds from the client clock, as the real store writes
	// them; nothing compares them with mend's database clock.
	now := d.nowMS()
	args := make([]any, 0, 7*len(msgs))
	for _, m := range msgs {
		if err := mend.ValidateIdentity("topic", m.topic, true); err != nil {
			return err
		}
		if err := mend.ValidateIdentity("partition_key", m.partition, false); err != nil {
			return err
		}
		if err := mend.ValidateIdentity("message_id", m.id, true); err != nil {
			return err
		}
		if len(m.payload) > MaxPayloadBytes {
			return &mend.ValidationError{Field: "payload", Reason: fmt.Sprintf("is %d bytes; queue_messages.payload holds at most %d", len(m.payload), MaxPayloadBytes)}
		}
		var metaArg any // NULL
		if len(m.meta) > 0 {
			b, err := json.Marshal(m.meta)
			if err != nil {
				return err
			}
			metaArg = string(b)
		}
		args = append(args, m.topic, m.id, m.payload, metaArg, m.partition, now, now)
	}
	if len(msgs) == 0 {
		return nil
	}
	query := sqlPublish
	if len(msgs) > 1 {
		i := strings.Index(query, "\nON DUPLICATE KEY")
		query = query[:i] + strings.Repeat(sqlPublishRow, len(msgs)-1) + query[i:]
	}
	_, err := d.exec(ctx, d.queue, op, query, args...)
	return err
}

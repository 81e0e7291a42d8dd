package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
)

func TestWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("same ID twice is one row, nil both times", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := mend.WakeUp{Queue: "q", MessageID: "wake/r1/1", BatchID: "b2", Epoch: 7, RecordID: mend.NewRecordID()}
		for i := range 2 {
			if err := b.h.Wake(ctx, w); err != nil {
				t.Fatalf("Wake #%d: %v", i+1, err)
			}
		}
		// A re-send under the same ID is swallowed even if it names
		// another batch or epoch: the first message stays as it was.
		again := w
		again.BatchID, again.Epoch = "b3", 8
		if err := b.h.Wake(ctx, again); err != nil {
			t.Fatal(err)
		}
		msgs, err := b.h.Messages(ctx, "speculate", "q")
		if err != nil || len(msgs) != 1 {
			t.Fatalf("Messages = %d rows, %v; want 1", len(msgs), err)
		}
		m := msgs[0]
		if m.Topic != "speculate" || m.Partition != "q" || m.ID != "wake/r1/1" {
			t.Fatalf("message identity = %q/%q/%q; want speculate/q/wake/r1/1", m.Topic, m.Partition, m.ID)
		}
		var payload host.WakePayload
		if err := json.Unmarshal(m.Payload, &payload); err != nil || payload.BatchID != "b2" {
			t.Fatalf("payload %s (%v); want {\"batch_id\":\"b2\"}", m.Payload, err)
		}
		var meta host.WakeMetadata
		if err := json.Unmarshal(m.Metadata, &meta); err != nil {
			t.Fatalf("metadata %s: %v", m.Metadata, err)
		}
		if want := (host.WakeMetadata{Epoch: 7, RecordID: w.RecordID, BatchID: "b2"}); meta != want {
			t.Fatalf("metadata = %+v; want %+v", meta, want)
		}
		if m.FailureCount != 0 || m.LastError != "" || !m.FailedAt.IsZero() || m.CreatedAt.IsZero() {
			t.Fatalf("fresh message failure columns = %d %q %v, created %v; want empty and a creation time", m.FailureCount, m.LastError, m.FailedAt, m.CreatedAt)
		}
	})

	t.Run("different IDs are different rows, byte for byte", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := []string{"m", "M", "m ", "\u00e9", "e\u0301", strings.Repeat("😀", 255)}
		for _, id := range ids {
			if err := b.h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: id, BatchID: "b", Epoch: 1}); err != nil {
				t.Fatalf("Wake(%q): %v", id, err)
			}
		}
		msgs, err := b.h.Messages(ctx, "speculate", "q")
		if err != nil || len(msgs) != len(ids) {
			t.Fatalf("Messages = %d rows, %v; want %d", len(msgs), err, len(ids))
		}
		for i, m := range msgs {
			if m.ID != ids[i] {
				t.Errorf("message %d has ID %q; want %q", i, m.ID, ids[i])
			}
		}
	})

	t.Run("partition is the queue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, q := range []string{"qa", "qb"} {
			if err := b.h.Wake(ctx, mend.WakeUp{Queue: q, MessageID: "same", BatchID: "b"}); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range []string{"qa", "qb"} {
			if msgs, err := b.h.Messages(ctx, "speculate", q); err != nil || len(msgs) != 1 {
				t.Fatalf("Messages(speculate, %s) = %d rows, %v; want 1", q, len(msgs), err)
			}
		}
	})

	t.Run("configurable topic", func(t *testing.T) {
		t.Parallel()
		db := setup(t).db
		h, err := host.Open(ctx, db.DSN, db.DSN, host.Options{WakeTopic: "plan"})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m", BatchID: "b"}); err != nil {
			t.Fatal(err)
		}
		if msgs, err := h.Messages(ctx, "plan", "q"); err != nil || len(msgs) != 1 {
			t.Fatalf("Messages(plan, q) = %d rows, %v; want 1", len(msgs), err)
		}
	})
}

func TestPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	failedAt := time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)
	dlq := host.Message{
		Topic: "speculate_dlq", Partition: "q", ID: "speculate/b1/3",
		Payload:      []byte(`{"batch_id":"b1"}`),
		Metadata:     json.RawMessage(`{"subjects":[{"kind":"batch","id":"b1"}]}`),
		FailureCount: 5, LastError: "build timed out", FailedAt: failedAt,
	}
	created, err := b.h.Publish(ctx, dlq)
	if err != nil || !created {
		t.Fatalf("Publish = %v, %v; want created", created, err)
	}
	changed := dlq
	changed.FailureCount = 9
	if created, err := b.h.Publish(ctx, changed); err != nil || created {
		t.Fatalf("Publish of the same ID = %v, %v; want a silent no-op", created, err)
	}
	msgs, err := b.h.Messages(ctx, "speculate_dlq", "q")
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Messages = %d rows, %v; want 1", len(msgs), err)
	}
	m := msgs[0]
	if string(m.Payload) != string(dlq.Payload) || m.FailureCount != 5 || m.LastError != dlq.LastError || !m.FailedAt.Equal(failedAt) {
		t.Fatalf("stored DLQ row = %+v; want %+v", m, dlq)
	}
	if got, want := canonicalJSON(t, m.Metadata), canonicalJSON(t, dlq.Metadata); got != want {
		t.Fatalf("metadata = %s; want %s (compared semantically)", got, want)
	}
	// Other topics and partitions stay apart.
	if msgs, err := b.h.Messages(ctx, "speculate", "q"); err != nil || len(msgs) != 0 {
		t.Fatalf("Messages(speculate, q) = %d rows, %v; want none", len(msgs), err)
	}
}

// TestSeparateQueueDatabase runs the ports with batches in one database and
// messages in another, as a host with an application and a queue database.
func TestSeparateQueueDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app, queue := setup(t), setup(t)
	h := open(t, app.db.DSN, queue.db.DSN)
	if err := h.SeedBatch(ctx, "q", "b1", mend.BatchCreated); err != nil {
		t.Fatal(err)
	}
	if err := h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m", BatchID: "b1"}); err != nil {
		t.Fatal(err)
	}
	count := func(b *bundle, table string) int {
		var n int
		if err := b.sql.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := [4]int{count(app, "sq_batches"), count(app, "sq_messages"), count(queue, "sq_batches"), count(queue, "sq_messages")}; got != [4]int{1, 0, 0, 1} {
		t.Fatalf("rows (app batches, app messages, queue batches, queue messages) = %v; want [1 0 0 1]", got)
	}
	if _, err := h.BatchGet(ctx, "q", "b1"); err != nil {
		t.Fatal(err)
	}
	if err := h.FailNextPublish(ctx, "speculate", "q"); err != nil {
		t.Fatal(err)
	}
	if err := h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m2", BatchID: "b1"}); err == nil {
		t.Fatal("Wake after FailNextPublish on the queue database = nil; want the injected failure")
	}
}

func hostMessage(topic, partition, id string) host.Message {
	return host.Message{Topic: topic, Partition: partition, ID: id, Payload: []byte("{}")}
}

// canonicalJSON re-encodes raw so that two semantically equal documents
// compare equal: MariaDB and MySQL store JSON text differently.
func canonicalJSON(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("not JSON: %s: %v", raw, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

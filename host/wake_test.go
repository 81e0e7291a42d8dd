package host_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

func mustRecordID(t *testing.T, s string) mend.RecordID {
	t.Helper()
	id, err := mend.ParseRecordID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const recHex = "00112233445566778899aabbccddeeff"

	t.Run("the real speculate consumer reads it", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/2", "created")
		w := mend.WakeUp{Queue: "q", MessageID: "mend/wake/" + recHex + "/v3", BatchID: "q/batch/2", Epoch: 7, RecordID: mustRecordID(t, recHex)}
		if err := b.h.Wake(ctx, w); err != nil {
			t.Fatal(err)
		}
		got, err := b.w.ConsumeSpeculate(ctx, "q", true)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("speculate messages = %+v; want one", got)
		}
		m := got[0]
		if string(m.Payload) != `{"id":"q/batch/2","queue":"q"}` {
			t.Errorf("payload = %s; want {\"id\":\"q/batch/2\",\"queue\":\"q\"}", m.Payload)
		}
		if want := map[string]string{"mend.epoch": "7", "mend.record_id": recHex}; !maps.Equal(m.Meta, want) {
			t.Errorf("metadata = %q; want %q", m.Meta, want)
		}
		if m.Topic != "speculate" || m.PartitionKey != "q" || m.ID != w.MessageID {
			t.Errorf("message key = %s/%s/%s; want speculate/q/%s", m.Topic, m.PartitionKey, m.ID, w.MessageID)
		}
		if m.CreatedAt != uint64(testNow.UnixMilli()) || m.PublishedAt != m.CreatedAt || m.FailedAt != 0 || m.FailureCount != 0 ||
			m.LastError != "" || m.OriginalTopic != "" || m.FailureDetail != nil {
			t.Errorf("row = %+v; want epoch-ms times and the normal DLQ fields 0, 0, '', '', NULL", m.Message)
		}
	})

	t.Run("a duplicate ID is a silent success that keeps the first row", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/2", "created")
		b.seed(t, "q", "q/batch/3", "created")
		w := mend.WakeUp{Queue: "q", MessageID: "mend/wake/x/v2", BatchID: "q/batch/2", Epoch: 1}
		if err := b.h.Wake(ctx, w); err != nil {
			t.Fatal(err)
		}
		w.BatchID, w.Epoch = "q/batch/3", 2
		if err := b.h.Wake(ctx, w); err != nil {
			t.Fatalf("second Wake with the same ID = %v; want nil", err)
		}
		got, err := b.w.ConsumeSpeculate(ctx, "q", true)
		if err != nil || len(got) != 1 || got[0].Batch.ID != "q/batch/2" || got[0].Meta["mend.epoch"] != "1" {
			t.Fatalf("speculate messages = %+v, %v; want only the first", got, err)
		}
	})

	t.Run("the wake topic is configurable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := open(t, b.db.DSN, b.db.DSN, host.Options{WakeTopic: "speculate-2"})
		if err := h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m", BatchID: "q/batch/1"}); err != nil {
			t.Fatal(err)
		}
		if msgs, _ := b.w.Messages(ctx, "speculate-2", "q"); len(msgs) != 1 {
			t.Fatalf("messages on speculate-2 = %+v; want one", msgs)
		}
	})

	t.Run("bad input is refused before SQL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ok := mend.WakeUp{Queue: "q", MessageID: "m", BatchID: "q/batch/1"}
		for name, mutate := range map[string]func(*mend.WakeUp){
			"empty queue":        func(w *mend.WakeUp) { w.Queue = "" },
			"256-char ID":        func(w *mend.WakeUp) { w.MessageID = strings.Repeat("m", 256) },
			"empty batch":        func(w *mend.WakeUp) { w.BatchID = "" },
			"invalid UTF-8":      func(w *mend.WakeUp) { w.BatchID = "q/\xff" },
			"negative epoch":     func(w *mend.WakeUp) { w.Epoch = -1 },
			"over 1020 bytes ID": func(w *mend.WakeUp) { w.MessageID = strings.Repeat("€", 341) },
		} {
			w := ok
			mutate(&w)
			var ve *mend.ValidationError
			if err := b.h.Wake(ctx, w); !errors.As(err, &ve) {
				t.Errorf("%s: Wake = %v; want a ValidationError", name, err)
			}
		}
		if msgs, _ := b.w.Messages(ctx, "speculate", "q"); len(msgs) != 0 {
			t.Fatalf("messages = %+v; want none", msgs)
		}
	})

	// Negative control: the consumer-side decoder these tests trust does
	// reject the first round's wake-up ({"batch_id"} payload, numeric
	// metadata), so its passing above means something.
	t.Run("the old wake-up shape is rejected by the consumer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/2", "created")
		if err := b.w.Publish(ctx, "speculate", "q", "old-1", []byte(`{"batch_id":"q/batch/2"}`), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.ConsumeSpeculate(ctx, "q", true); err == nil {
			t.Fatal("a {\"batch_id\"} payload was accepted")
		}
		b2 := setup(t)
		b2.seed(t, "q", "q/batch/2", "created")
		b2.exec(t, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
			"VALUES ('speculate', 'old-2', '{\"id\":\"q/batch/2\",\"queue\":\"q\"}', '{\"epoch\":7}', 'q', 1, 1, 0, 0, '', '', NULL)")
		if _, err := b2.w.ConsumeSpeculate(ctx, "q", true); !errors.Is(err, sqtest.ErrWedged) {
			t.Fatalf("numeric metadata: ConsumeSpeculate = %v; want ErrWedged", err)
		}
	})

	t.Run("two databases: batches from the app, wake-ups to the queue", func(t *testing.T) {
		t.Parallel()
		appDB := mysqltest.NewDB(t, sqtest.Apply)
		queueDB := mysqltest.NewDB(t, sqtest.Apply)
		w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
		if err := w.SeedBatch(ctx, "q", "q/batch/2", "created"); err != nil {
			t.Fatal(err)
		}
		h := open(t, appDB.DSN, queueDB.DSN, host.Options{})
		live, err := h.LiveBatches(ctx, "q", 1)
		if err != nil || len(live) != 1 {
			t.Fatalf("LiveBatches = %q, %v", live, err)
		}
		if err := h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m", BatchID: live[0]}); err != nil {
			t.Fatal(err)
		}
		if got, err := w.ConsumeSpeculate(ctx, "q", true); err != nil || len(got) != 1 {
			t.Fatalf("speculate on the queue database = %+v, %v; want the wake-up", got, err)
		}
		if msgs, _ := (sqtest.World{Queue: w.App}).Messages(ctx, "speculate", "q"); len(msgs) != 0 {
			t.Fatalf("the application database got messages: %+v", msgs)
		}
	})
}

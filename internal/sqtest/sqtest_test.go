package sqtest_test

import (
	"errors"
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

func setup(t *testing.T) sqtest.World {
	t.Helper()
	db := mysqltest.NewDB(t, sqtest.Apply)
	s := db.SQL(t)
	return sqtest.World{App: s, Queue: s}
}

func TestConsumeSpeculate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("a well-formed wake-up naming a live batch is read", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		if err := w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/7"); err != nil {
			t.Fatal(err)
		}
		if err := w.Publish(ctx, "speculate", "q", "w1", []byte(`{"id":"q/batch/2","queue":"q"}`), map[string]string{"mend.epoch": "3"}); err != nil {
			t.Fatal(err)
		}
		got, err := w.ConsumeSpeculate(ctx, "q", true)
		if err != nil || len(got) != 1 || got[0].Meta["mend.epoch"] != "3" {
			t.Fatalf("got %+v, %v", got, err)
		}
	})

	// Negative controls: the first round's wake-up shapes are refused.
	t.Run("numeric metadata wedges the partition", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		if err := w.SeedBatch(ctx, "q", "q/batch/2", "created"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Queue.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES ('speculate', 'w1', ?, ?, 'q', 1, 1, 0, 0, '', '', NULL)",
			`{"id":"q/batch/2","queue":"q"}`, `{"epoch":3}`); err != nil {
			t.Fatal(err)
		}
		if _, err := w.ConsumeSpeculate(ctx, "q", true); !errors.Is(err, sqtest.ErrWedged) {
			t.Fatalf("err = %v; want ErrWedged", err)
		}
	})
	t.Run("a batch_id payload is refused", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		if err := w.SeedBatch(ctx, "q", "q/batch/2", "created"); err != nil {
			t.Fatal(err)
		}
		if err := w.Publish(ctx, "speculate", "q", "w1", []byte(`{"batch_id":"q/batch/2"}`), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := w.ConsumeSpeculate(ctx, "q", true); err == nil {
			t.Fatal("a {batch_id} payload was accepted")
		}
	})
	t.Run("a case-variant batch ID is refused", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		if err := w.SeedBatch(ctx, "q", "q/batch/2", "created"); err != nil {
			t.Fatal(err)
		}
		if err := w.Publish(ctx, "speculate", "q", "w1", []byte(`{"id":"Q/BATCH/2","queue":"q"}`), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := w.ConsumeSpeculate(ctx, "q", true); err == nil {
			t.Fatal("a case-variant batch ID was accepted")
		}
	})
}

func TestMoveToDLQ(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w := setup(t)
	if err := w.Publish(ctx, "speculate", "q", "q/batch/1", []byte(`{"id":"q/batch/1","queue":"q"}`), nil); err != nil {
		t.Fatal(err)
	}
	// A duplicate publish is a silent no-op.
	if err := w.Publish(ctx, "speculate", "q", "q/batch/1", []byte(`{}`), nil); err != nil {
		t.Fatal(err)
	}
	f := sqtest.Failure{Count: 3, LastError: "boom", Subjects: []sqtest.Subject{{Type: "batch", ID: "q/batch/1"}}}
	if err := w.MoveToDLQ(ctx, "speculate", "q", "q/batch/1", f); err != nil {
		t.Fatal(err)
	}
	got, err := w.Messages(ctx, "speculate_dlq", "q")
	if err != nil || len(got) != 1 {
		t.Fatalf("dlq rows %+v, %v", got, err)
	}
	m := got[0]
	if m.OriginalTopic != "speculate" || m.FailureCount != 3 || m.LastError != "boom" || m.FailedAt == 0 || string(m.Payload) != `{"id":"q/batch/1","queue":"q"}` {
		t.Fatalf("dlq row %+v", m)
	}
	if rest, _ := w.Messages(ctx, "speculate", "q"); len(rest) != 0 {
		t.Fatalf("original left behind: %+v", rest)
	}
}

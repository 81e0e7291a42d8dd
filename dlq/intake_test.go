package dlq_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// Compile-time check that the store fits the intake's port.
var _ dlq.Store = (*storage.DB)(nil)

// bundle is one test's intake over a fresh database that holds both mend's
// tables and the real submit queue's (sqtest), as one database.
type bundle struct {
	in    *dlq.Intake
	store *storage.DB
	world sqtest.World
}

// failedAtMS is the message store's clock in these tests.
const failedAtMS = 1_760_000_000_123

func setup(t *testing.T, cfg dlq.Config) *bundle {
	t.Helper()
	db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
	store, err := storage.Open(context.Background(), db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	conn := db.SQL(t)
	w := sqtest.World{App: conn, Queue: conn, NowMS: func() int64 { return failedAtMS }}
	if cfg.Builds == nil {
		cfg.Builds = buildTable{conn}
	}
	in, err := dlq.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{in: in, store: store, world: w}
}

// buildTable is a minimal dlq.Builds over sqtest's build table, with the
// byte-exact check a host adapter makes after reading a row through a
// case-insensitive collation.
type buildTable struct{ db *sql.DB }

func (b buildTable) BuildBatch(ctx context.Context, queue, buildID string) (string, error) {
	var q, id, batch string
	err := b.db.QueryRowContext(ctx, "SELECT queue, id, batch_id FROM build WHERE queue = ? AND id = ?", queue, buildID).Scan(&q, &id, &batch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", fmt.Errorf("%w: no build %q in queue %q", mend.ErrNotFound, buildID, queue)
	case err != nil:
		return "", err
	case id != buildID:
		return "", &mend.SpellingError{Field: "build id", Asked: buildID, Stored: id}
	case q != queue:
		return "", &mend.SpellingError{Field: "queue", Asked: queue, Stored: q}
	}
	return batch, nil
}

// noBuilds is a Config.Builds that must never be called.
type buildsFunc func(ctx context.Context, queue, buildID string) (string, error)

func (f buildsFunc) BuildBatch(ctx context.Context, queue, buildID string) (string, error) {
	return f(ctx, queue, buildID)
}

// deadLetter publishes a message the way the real store does, moves it to
// its DLQ topic the way MoveToDLQ does, and returns the DLQ row as a
// consumer of the queue database reads it.
func (b *bundle) deadLetter(t *testing.T, topic, partition, id, payload string, f sqtest.Failure) dlq.Row {
	t.Helper()
	ctx := context.Background()
	if err := b.world.Publish(ctx, topic, partition, id, []byte(payload), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.world.MoveToDLQ(ctx, topic, partition, id, f); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.world.Messages(ctx, topic+"_dlq", partition)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.ID == id {
			return dlq.Row{Offset: m.Offset, Topic: m.Topic, PartitionKey: m.PartitionKey, ID: m.ID, Payload: m.Payload,
				Metadata: m.Metadata, FailedAtMS: m.FailedAt, FailureCount: m.FailureCount, LastError: m.LastError,
				OriginalTopic: m.OriginalTopic, FailureDetail: m.FailureDetail}
		}
	}
	t.Fatalf("no %s_dlq row %q after MoveToDLQ", topic, id)
	return dlq.Row{}
}

// record runs the intake on a row and reads the record back from the store.
func (b *bundle) record(t *testing.T, r dlq.Row) mend.Record {
	t.Helper()
	ctx := context.Background()
	res, err := b.in.Record(ctx, r.Delivery())
	if err != nil {
		t.Fatalf("Record(%s/%s/%s) = %v", r.Topic, r.PartitionKey, r.ID, err)
	}
	got, err := b.store.RecordGet(ctx, res.Record.Source)
	if err != nil || got.ID != res.Record.ID {
		t.Fatalf("read back %v: %+v, %v", res.Record.Source, got, err)
	}
	return got
}

func failure(subjects ...sqtest.Subject) sqtest.Failure {
	return sqtest.Failure{Count: 4, LastError: "boom", Subjects: subjects, Detail: map[string]any{"step": "plan"}}
}

func batchSubject(id string) sqtest.Subject { return sqtest.Subject{Type: "batch", ID: id} }

func wantPending(t *testing.T, r mend.Record, queue, batch string, desired mend.Outcome) {
	t.Helper()
	if r.State != mend.StatePending || r.Source.Queue != queue || r.Target.BatchID != batch || r.Target.Desired != desired {
		t.Fatalf("record = %s in queue %q, batch %q, desired %q (%s); want pending in %q, batch %q, desired %q",
			r.State, r.Source.Queue, r.Target.BatchID, r.Target.Desired, r.LastError, queue, batch, desired)
	}
}

func wantParked(t *testing.T, r mend.Record, queue string, reason ...string) {
	t.Helper()
	if r.State != mend.StateParked || r.Source.Queue != queue || r.Target.BatchID != "" {
		t.Fatalf("record = %s in queue %q, batch %q (%s); want parked in %q with no batch", r.State, r.Source.Queue, r.Target.BatchID, r.LastError, queue)
	}
	for _, s := range reason {
		if !strings.Contains(r.LastError, s) {
			t.Errorf("park reason %q; want it to mention %q", r.LastError, s)
		}
	}
}

// TestRecordRealRows records dead letters written the way the real message
// store writes them, one original topic at a time.
func TestRecordRealRows(t *testing.T) {
	t.Parallel()
	F, S := mend.OutcomeFailed, mend.OutcomeSucceeded

	t.Run("speculate: snapshot copied, blamed batch targeted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		row := b.deadLetter(t, "speculate", "q", "q/batch/2/build-signal/x/ok", `{"id":"q/batch/2","queue":"q"}`,
			failure(batchSubject("q/batch/1"), sqtest.Subject{Type: "queue", ID: "q"}))
		r := b.record(t, row)
		// The host's speculate controller fails the batch the failure
		// blames, not the batch the message named.
		wantPending(t, r, "q", "q/batch/1", F)
		s := r.Snapshot
		if r.Source.Topic != "speculate_dlq" || r.Source.Partition != "q" || r.Source.MessageID != "q/batch/2/build-signal/x/ok" {
			t.Errorf("source = %+v; want the DLQ row's identity", r.Source)
		}
		if s.OriginalTopic != "speculate" || s.FailureCount != 4 || s.LastError != "boom" || !s.FailedAt.Equal(time.UnixMilli(failedAtMS)) ||
			string(s.Payload) != `{"id":"q/batch/2","queue":"q"}` {
			t.Errorf("snapshot = %+v; want original topic, count, error, failed-at and payload copied", s)
		}
		if len(s.Subjects) != 2 || s.Subjects[0] != (mend.Subject{Kind: "batch", ID: "q/batch/1"}) || s.Subjects[1] != (mend.Subject{Kind: "queue", ID: "q"}) {
			t.Errorf("subjects = %+v; want the failure's two subjects", s.Subjects)
		}
	})

	t.Run("speculate: no batch blamed, the payload's batch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		r := b.record(t, b.deadLetter(t, "speculate", "q", "q/batch/1", `{"id":"q/batch/1","queue":"q"}`, sqtest.Failure{Count: 1, LastError: "x"}))
		wantPending(t, r, "q", "q/batch/1", F)
		if len(r.Snapshot.Subjects) != 0 {
			t.Errorf("subjects = %+v; want none (failure_detail NULL)", r.Snapshot.Subjects)
		}
	})

	t.Run("speculate: several batches blamed is parked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		r := b.record(t, b.deadLetter(t, "speculate", "q", "m", `{"id":"q/batch/3","queue":"q"}`,
			failure(batchSubject("q/batch/1"), batchSubject("q/batch/2"), batchSubject("q/batch/1"))))
		wantParked(t, r, "q", "blames 2 batches", `"q/batch/1", "q/batch/2"`)
	})

	for _, topic := range []string{"dependency-analysis", "submitqueue-merge", "conclude"} {
		t.Run(topic+": the payload's batch, failed", func(t *testing.T) {
			t.Parallel()
			b := setup(t, dlq.Config{})
			// Only speculate reads the blame; these fail the payload's batch.
			r := b.record(t, b.deadLetter(t, topic, "q", "q/batch/5/"+topic, `{"id":"q/batch/5","queue":"q"}`, failure(batchSubject("q/batch/9"))))
			wantPending(t, r, "q", "q/batch/5", F)
			if r.Snapshot.OriginalTopic != topic || r.Source.Topic != topic+"_dlq" {
				t.Errorf("original topic %q, topic %q", r.Snapshot.OriginalTopic, r.Source.Topic)
			}
		})
	}

	t.Run("build: partitioned by batch, queue from the payload", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		r := b.record(t, b.deadLetter(t, "build", "q/batch/5", "b@1-1", `{"id":"q/batch/5","queue":"q"}`, failure()))
		wantPending(t, r, "q", "q/batch/5", F)
		if r.Source.Partition != "q/batch/5" {
			t.Errorf("partition %q; want the row's", r.Source.Partition)
		}
	})

	t.Run("merge-signal: the outcome decides", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		ok := b.record(t, b.deadLetter(t, "merge-signal", "q", "q/batch/1",
			`{"id":"q/batch/1","outcome":"SUCCEEDED","reason":"","steps":[],"queue_name":"q"}`, failure()))
		wantPending(t, ok, "q", "q/batch/1", S)
		bad := b.record(t, b.deadLetter(t, "merge-signal", "q", "q/batch/2", `{"id":"q/batch/2","outcome":"FAILED","reason":"conflict","queue_name":"q"}`, failure()))
		wantPending(t, bad, "q", "q/batch/2", F)
	})

	t.Run("buildsignal: the build's batch through the build table", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		if err := b.world.SeedBuild(context.Background(), "q", "build-9", "q/batch/4"); err != nil {
			t.Fatal(err)
		}
		r := b.record(t, b.deadLetter(t, "buildsignal", "build-9", "build-9", `{"id":"build-9","queue":"q"}`, failure()))
		wantPending(t, r, "q", "q/batch/4", F)
	})

	t.Run("buildsignal: a missing build is parked naming it", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		r := b.record(t, b.deadLetter(t, "buildsignal", "build-9", "build-9", `{"id":"build-9","queue":"q"}`, failure()))
		wantParked(t, r, "q", `build "build-9"`, "no build spelled exactly so", `queue "q"`, "no-op")
	})

	t.Run("buildsignal: a build spelled differently is parked naming both spellings", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		if err := b.world.SeedBuild(context.Background(), "q", "Build-9", "q/batch/4"); err != nil {
			t.Fatal(err)
		}
		r := b.record(t, b.deadLetter(t, "buildsignal", "build-9", "build-9", `{"id":"build-9","queue":"q"}`, failure()))
		// On a case-insensitive server the row matches and the adapter
		// reports the spelling; on a binary one it is simply missing.
		wantParked(t, r, "q", `build "build-9"`)
		if strings.Contains(r.LastError, "matched a row") && !strings.Contains(r.LastError, `"Build-9"`) {
			t.Errorf("park reason %q; want the stored spelling named", r.LastError)
		}
	})

	t.Run("buildsignal: without a build lookup it is parked saying so", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		in, err := dlq.New(b.store, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := in.Record(context.Background(), b.deadLetter(t, "buildsignal", "build-9", "build-9", `{"id":"build-9","queue":"q"}`, failure()).Delivery())
		if err != nil {
			t.Fatal(err)
		}
		wantParked(t, res.Record, "q", "without a build lookup", "dlq.Config.Builds")
	})

	t.Run("buildsignal: a failing lookup fails Record and stores nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		in, err := dlq.New(b.store, dlq.Config{Builds: buildsFunc(func(context.Context, string, string) (string, error) {
			return "", mend.ErrUnavailable
		})})
		if err != nil {
			t.Fatal(err)
		}
		d := b.deadLetter(t, "buildsignal", "build-9", "build-9", `{"id":"build-9","queue":"q"}`, failure()).Delivery()
		if _, err := in.Record(context.Background(), d); !errors.Is(err, mend.ErrUnavailable) {
			t.Fatalf("Record = %v; want the lookup's error, so the message is not acknowledged", err)
		}
		d.Source.Queue = "q"
		if _, err := b.store.RecordGet(context.Background(), d.Source); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("a record was stored: %v", err)
		}
	})

	for _, tc := range []struct{ topic, partition, payload string }{
		{"start", "q", `{"id":"q/7","queue":"q"}`},
		{"validate", "q", `{"id":"q/7","queue":"q"}`},
		{"batch", "q", `{"id":"q/7","queue":"q"}`},
		{"cancel", "q/7", `{"id":"q/7","queue":"q"}`},
		{"merge-conflict-check-signal", "q", `{"id":"q/7","outcome":"FAILED","queue_name":"q"}`},
		{"log", "q/7", `{"request_id":"q/7","queue":"q","timestamp_ms":1,"type":"status","status":"error","event":"","request_version":2,"last_error":"","metadata":{}}`},
	} {
		t.Run(tc.topic+": a request topic is parked, not repaired", func(t *testing.T) {
			t.Parallel()
			b := setup(t, dlq.Config{})
			r := b.record(t, b.deadLetter(t, tc.topic, tc.partition, "q/7/x", tc.payload, failure()))
			wantParked(t, r, "q", fmt.Sprintf("request topic %q", tc.topic), `request "q/7"`)
		})
	}

	t.Run("legacy empty queue: the partition key where it is the queue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		r := b.record(t, b.deadLetter(t, "conclude", "q", "q/batch/1/conclude/speculate", `{"id":"q/batch/1","queue":""}`, failure()))
		wantPending(t, r, "q", "q/batch/1", F)
	})

	t.Run("legacy empty queue on build: parked, unresolved", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		r := b.record(t, b.deadLetter(t, "build", "q/batch/1", "b@1", `{"id":"q/batch/1","queue":""}`, failure()))
		wantParked(t, r, dlq.QueueUnresolved, "is the batch ID, not the queue")
	})

	for _, tc := range []struct{ name, payload, reason string }{
		{"case-variant keys", `{"ID":"q/batch/1","Queue":"q"}`, `"ID" is not "id"`},
		{"duplicate keys", `{"id":"q/batch/1","id":"q/batch/2","queue":"q"}`, `duplicate key "id"`},
		{"invalid UTF-8", "{\"id\":\"q/batch/\xc3\x28\",\"queue\":\"q\"}", "not valid UTF-8"},
		{"wrong JSON type", `{"id":["q/batch/1"],"queue":"q"}`, `"id" is an array`},
		{"trailing data", `{"id":"q/batch/1","queue":"q"}{"id":"q/batch/2"}`, "trailing data"},
		{"the first round's payload", `{"batch_id":"q/batch/1"}`, `missing "id"`},
	} {
		t.Run(tc.name+" refused: parked under the partition's queue", func(t *testing.T) {
			t.Parallel()
			b := setup(t, dlq.Config{})
			r := b.record(t, b.deadLetter(t, "speculate", "q", "m", tc.payload, failure()))
			wantParked(t, r, "q", "cannot decode", tc.reason)
			if !bytes.Equal(r.Snapshot.Payload, []byte(tc.payload)) {
				t.Errorf("payload %q; want the bytes kept as they were", r.Snapshot.Payload)
			}
		})
	}

	t.Run("a malformed failure_detail is parked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		row := b.deadLetter(t, "speculate", "q", "m", `{"id":"q/batch/1","queue":"q"}`, failure())
		row.FailureDetail = []byte(`{"subjects":"q/batch/1"}`)
		wantParked(t, b.record(t, row), "q", "failure_detail")
	})

	t.Run("over 64 KiB is refused before the database", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		// The host's BLOB cannot hold it, so no real row can: build it by hand.
		row := dlq.Row{Topic: "speculate_dlq", PartitionKey: "q", ID: "m", OriginalTopic: "speculate",
			Payload: append([]byte(`{"id":"q/batch/1","queue":"q","pad":"`), bytes.Repeat([]byte("x"), dlq.MaxHostPayload)...)}
		_, err := b.in.Record(context.Background(), row.Delivery())
		var ve *mend.ValidationError
		if !errors.As(err, &ve) || ve.Field != "payload" || !strings.Contains(err.Error(), "65535") {
			t.Fatalf("Record = %v; want a payload ValidationError naming the host's limit", err)
		}
		src := mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "m"}
		if _, err := b.store.RecordGet(context.Background(), src); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("a refused delivery was stored: %v", err)
		}
		// Exactly the host's limit is accepted (and decoded as usual).
		row.Payload = row.Payload[:dlq.MaxHostPayload]
		if _, err := b.in.Record(context.Background(), row.Delivery()); err != nil {
			t.Fatalf("Record of %d bytes = %v; want it recorded", dlq.MaxHostPayload, err)
		}
	})

	t.Run("the row's queue wins over the caller's, and both paths find one record", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		row := b.deadLetter(t, "speculate", "q", "m", `{"id":"q/batch/1","queue":"q"}`, failure())
		first := b.record(t, row) // as mend import hands it in: no queue
		d := row.Delivery()
		d.Source.Queue = "elsewhere" // a mis-wired consumer
		res, err := b.in.Record(context.Background(), d)
		if err != nil || res.Created || res.Record.ID != first.ID || res.Record.Source.Queue != "q" {
			t.Fatalf("Record with queue %q = %+v, %v; want the existing record of queue q", d.Source.Queue, res, err)
		}
	})

	t.Run("original topic derived from the topic when the caller has none", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		d := dlq.Delivery{Source: mend.SourceID{Topic: "merge-signal_dlq", Partition: "q", MessageID: "m"},
			Payload: []byte(`{"id":"q/batch/1","outcome":"SUCCEEDED","queue_name":"q"}`)}
		res, err := b.in.Record(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		wantPending(t, res.Record, "q", "q/batch/1", S)
		if res.Record.Snapshot.OriginalTopic != "merge-signal" {
			t.Fatalf("original topic %q; want merge-signal", res.Record.Snapshot.OriginalTopic)
		}
	})
}

func TestRecordQueue(t *testing.T) {
	t.Parallel()
	row := func(topic, partition, payload string) dlq.Delivery {
		return dlq.Row{Topic: topic + "_dlq", PartitionKey: partition, ID: "m", OriginalTopic: topic, Payload: []byte(payload)}.Delivery()
	}
	for _, tc := range []struct {
		name string
		d    dlq.Delivery
		want string
	}{
		{"payload queue", row("build", "q/batch/1", `{"id":"q/batch/1","queue":"q"}`), "q"},
		{"partition for a queue topic", row("speculate", "q", `{"id":"b","queue":""}`), "q"},
		{"partition even when undecodable", row("speculate", "q", `not json`), "q"},
		{"unresolved", row("build", "q/batch/1", `{"id":"q/batch/1"}`), dlq.QueueUnresolved},
		{"unknown topic", row("mystery", "q", `{"id":"b","queue":"q"}`), dlq.QueueUnresolved},
	} {
		if got := dlq.RecordQueue(tc.d); got != tc.want {
			t.Errorf("%s: RecordQueue = %q; want %q", tc.name, got, tc.want)
		}
	}
}

// TestRecordQueueAfterChange: Row.Delivery decodes the payload once and the
// intake reuses that, but only while the delivery holds what was decoded:
// a payload changed in place, another partition or original topic is
// decoded again.
func TestRecordQueueAfterChange(t *testing.T) {
	t.Parallel()
	d := dlq.Row{Topic: "speculate_dlq", PartitionKey: "p", ID: "m", OriginalTopic: "speculate", Payload: []byte(`{"id":"b","queue":"qa"}`)}.Delivery()
	if got := dlq.RecordQueue(d); got != "qa" {
		t.Fatalf("RecordQueue = %q; want qa", got)
	}
	copy(d.Payload[len(d.Payload)-4:], "qb") // the same slice, changed in place
	if got := dlq.RecordQueue(d); got != "qb" {
		t.Errorf("after the payload changed in place: RecordQueue = %q; want qb", got)
	}
	d.Payload = []byte(`{"id":"b","queue":""}`)
	if got := dlq.RecordQueue(d); got != "p" {
		t.Errorf("after the payload was replaced: RecordQueue = %q; want the partition p", got)
	}
	d.Source.Partition = "r"
	if got := dlq.RecordQueue(d); got != "r" {
		t.Errorf("after the partition changed: RecordQueue = %q; want r", got)
	}
	d.OriginalTopic = "build" // partitioned by batch ID, so the partition names no queue
	if got := dlq.RecordQueue(d); got != dlq.QueueUnresolved {
		t.Errorf("after the original topic changed: RecordQueue = %q; want %q", got, dlq.QueueUnresolved)
	}
}

func delivery(payload string) dlq.Delivery {
	return dlq.Delivery{
		Source:       mend.SourceID{Topic: "speculate_dlq", Partition: "q", MessageID: "m-1"},
		Payload:      []byte(payload),
		FailureCount: 5,
		LastError:    "boom",
	}
}

// repairFunc is a hand-written Repairer.
type repairFunc func(ctx context.Context, queue string) error

func (f repairFunc) TryRepair(ctx context.Context, queue string) error { return f(ctx, queue) }

func TestRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("redelivery returns the same record unchanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		first, err := b.in.Record(ctx, delivery(`{"id":"q/batch/1","queue":"q"}`))
		if err != nil || !first.Created {
			t.Fatalf("Record = %+v, %v", first, err)
		}
		again := delivery(`{"id":"q/batch/1","queue":"q"}`)
		again.FailureCount = 9
		second, err := b.in.Record(ctx, again)
		if err != nil || second.Created || second.Record.ID != first.Record.ID || second.Record.Snapshot.FailureCount != 5 {
			t.Fatalf("redelivery = %+v, %v; want the first record unchanged", second, err)
		}
	})

	t.Run("a payload over a lowered cap is refused before the database", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{MaxPayload: 16})
		d := delivery(`{"id":"a-long-batch-id","queue":"q"}`)
		_, err := b.in.Record(ctx, d)
		var ve *mend.ValidationError
		if !errors.As(err, &ve) || ve.Field != "payload" {
			t.Fatalf("Record = %v; want a payload ValidationError", err)
		}
		d.Source.Queue = "q"
		if _, err := b.store.RecordGet(ctx, d.Source); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("a refused delivery was stored: %v", err)
		}
	})

	t.Run("the cap cannot be raised above the host's limit", func(t *testing.T) {
		t.Parallel()
		if _, err := dlq.New(nil, dlq.Config{MaxPayload: dlq.MaxHostPayload + 1}); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("New with MaxPayload above the host's limit = %v; want ErrInvalid", err)
		}
		if dlq.MaxPayloadDefault != 65535 {
			t.Fatalf("MaxPayloadDefault = %d; want the host BLOB's 65535", dlq.MaxPayloadDefault)
		}
	})

	t.Run("bad identity is refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{})
		for name, mutate := range map[string]func(*dlq.Delivery){
			"message id not UTF-8":     func(d *dlq.Delivery) { d.Source.MessageID = "\xff" },
			"no topic":                 func(d *dlq.Delivery) { d.Source.Topic = "" },
			"original topic too long":  func(d *dlq.Delivery) { d.OriginalTopic = strings.Repeat("t", 256) },
			"caller's queue not UTF-8": func(d *dlq.Delivery) { d.Source.Queue = "q\xff" },
		} {
			d := delivery(`{"id":"q/batch/1","queue":"q"}`)
			mutate(&d)
			if _, err := b.in.Record(ctx, d); !errors.Is(err, mend.ErrInvalid) {
				t.Errorf("%s: Record = %v; want ErrInvalid", name, err)
			}
		}
	})

	t.Run("long last error is clipped at a character boundary", func(t *testing.T) {
		t.Parallel()
		b := setup(t, dlq.Config{MaxError: 100})
		d := delivery(`{"id":"q/batch/1","queue":"q"}`)
		d.LastError = strings.Repeat("é", 200)
		res, err := b.in.Record(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Record.Snapshot.LastError
		if len(got) > 100 || !utf8.ValidString(got) || !strings.HasSuffix(got, "[truncated]") {
			t.Fatalf("last error = %q (%d bytes); want at most 100 valid bytes marked truncated", got, len(got))
		}
	})

	t.Run("inline repair runs for due records and its failure does not fail Record", func(t *testing.T) {
		t.Parallel()
		var calls []string
		rep := repairFunc(func(_ context.Context, q string) error {
			calls = append(calls, q)
			return errors.New("host down")
		})
		b := setup(t, dlq.Config{Repairer: rep})
		res, err := b.in.Record(ctx, delivery(`{"id":"q/batch/1","queue":"q"}`))
		if err != nil || res.RepairErr == nil || len(calls) != 1 || calls[0] != "q" {
			t.Fatalf("Record = %+v, %v, calls %v; want durable, repair tried once on the payload's queue and its error reported", res, err, calls)
		}
		// A parked record is not due: no inline repair.
		parked := delivery(`{}`)
		parked.Source.MessageID = "m-2"
		if _, err := b.in.Record(ctx, parked); err != nil || len(calls) != 1 {
			t.Fatalf("parked delivery: %v, calls %v; want no repair attempt", err, calls)
		}
	})

	t.Run("after an inline repair the result shows the record as the repair left it", func(t *testing.T) {
		t.Parallel()
		var b *bundle
		rep := repairFunc(func(ctx context.Context, q string) error {
			// Stands in for the planner: finish the queue's one record.
			recs, err := b.store.RecordsDue(ctx, q, 10)
			if err != nil || len(recs) != 1 {
				return fmt.Errorf("due = %d, %v", len(recs), err)
			}
			p := storage.AppendTo(recs[0])
			p.Kind, p.State, p.Actor, p.OpID = mend.EventDone, mend.StateDone, "test", mend.NewOpID()
			_, err = b.store.RecordAppend(ctx, p)
			return err
		})
		b = setup(t, dlq.Config{Repairer: rep})
		res, err := b.in.Record(ctx, delivery(`{"id":"q/batch/1","queue":"q"}`))
		if err != nil || res.RepairErr != nil || res.Record.State != mend.StateDone {
			t.Fatalf("Record = state %s, %v, repair %v; want done, as the inline repair left it", res.Record.State, err, res.RepairErr)
		}
	})
}

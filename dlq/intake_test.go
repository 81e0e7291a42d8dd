package dlq_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// Compile-time check that the store fits the intake's port.
var _ dlq.Store = (*storage.DB)(nil)

func setup(t *testing.T, cfg dlq.Config) (*dlq.Intake, *storage.DB) {
	t.Helper()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(context.Background(), db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	in, err := dlq.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in, store
}

func delivery(topic, payload string) dlq.Delivery {
	return dlq.Delivery{
		Source:       mend.SourceID{Queue: "q", Topic: topic, Partition: "q", MessageID: "m-1"},
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

	t.Run("decodable delivery is pending with its target", func(t *testing.T) {
		t.Parallel()
		in, _ := setup(t, dlq.Config{})
		res, err := in.Record(ctx, delivery("merge-signal_dlq", `{"batch_id":"7","outcome":"SUCCEEDED"}`))
		if err != nil || !res.Created {
			t.Fatalf("Record = %+v, %v", res, err)
		}
		r := res.Record
		if r.State != mend.StatePending || r.Target.BatchID != "7" || r.Target.Desired != mend.OutcomeSucceeded || r.Snapshot.FailureCount != 5 {
			t.Fatalf("record = %+v; want pending, batch 7, succeeded, snapshot copied", r)
		}
	})

	t.Run("unknown topic and bad payload are parked, never dropped", func(t *testing.T) {
		t.Parallel()
		in, store := setup(t, dlq.Config{})
		for _, d := range []dlq.Delivery{delivery("mystery_dlq", `{"batch_id":"1"}`), delivery("speculate_dlq", `not json`)} {
			d.Source.MessageID = d.Source.Topic // a distinct identity each
			res, err := in.Record(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			got, err := store.RecordGet(ctx, d.Source)
			if err != nil || got.State != mend.StateParked || !strings.Contains(got.LastError, "cannot decode") || res.Record.ID != got.ID {
				t.Fatalf("%s: record = %+v, %v; want parked with the decode reason", d.Source.Topic, got, err)
			}
		}
	})

	t.Run("redelivery returns the same record unchanged", func(t *testing.T) {
		t.Parallel()
		in, _ := setup(t, dlq.Config{})
		first, err := in.Record(ctx, delivery("speculate_dlq", `{"batch_id":"1"}`))
		if err != nil {
			t.Fatal(err)
		}
		again := delivery("speculate_dlq", `{"batch_id":"1"}`)
		again.FailureCount = 9
		second, err := in.Record(ctx, again)
		if err != nil || second.Created || second.Record.ID != first.Record.ID || second.Record.Snapshot.FailureCount != 5 {
			t.Fatalf("redelivery = %+v, %v; want the first record unchanged", second, err)
		}
	})

	t.Run("payload over the cap is refused before the database", func(t *testing.T) {
		t.Parallel()
		in, store := setup(t, dlq.Config{MaxPayload: 16})
		d := delivery("speculate_dlq", `{"batch_id":"a-long-batch-id"}`)
		_, err := in.Record(ctx, d)
		var ve *mend.ValidationError
		if !errors.As(err, &ve) || ve.Field != "payload" || !strings.Contains(err.Error(), "MaxPayload") {
			t.Fatalf("Record = %v; want a payload ValidationError saying what to raise", err)
		}
		if _, err := store.RecordGet(ctx, d.Source); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("a refused delivery was stored: %v", err)
		}
	})

	t.Run("default cap is 1 MiB", func(t *testing.T) {
		t.Parallel()
		in, _ := setup(t, dlq.Config{})
		d := delivery("speculate_dlq", "")
		d.Payload = bytes.Repeat([]byte("x"), dlq.MaxPayloadDefault+1)
		if _, err := in.Record(ctx, d); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("Record of 1 MiB + 1 = %v; want ErrInvalid", err)
		}
	})

	t.Run("bad identity is refused", func(t *testing.T) {
		t.Parallel()
		in, _ := setup(t, dlq.Config{})
		d := delivery("speculate_dlq", `{"batch_id":"1"}`)
		d.Source.MessageID = "\xff"
		if _, err := in.Record(ctx, d); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("Record = %v; want ErrInvalid", err)
		}
	})

	t.Run("long last error is clipped at a character boundary", func(t *testing.T) {
		t.Parallel()
		in, _ := setup(t, dlq.Config{MaxError: 100})
		d := delivery("speculate_dlq", `{"batch_id":"1"}`)
		d.LastError = strings.Repeat("é", 200)
		res, err := in.Record(ctx, d)
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
		in, _ := setup(t, dlq.Config{Repairer: rep})
		res, err := in.Record(ctx, delivery("speculate_dlq", `{"batch_id":"1"}`))
		if err != nil || res.RepairErr == nil || len(calls) != 1 || calls[0] != "q" {
			t.Fatalf("Record = %+v, %v, calls %v; want durable, repair tried once and its error reported", res, err, calls)
		}
		// A parked record is not due: no inline repair.
		parked := delivery("mystery_dlq", `{}`)
		parked.Source.MessageID = "m-2"
		if _, err := in.Record(ctx, parked); err != nil || len(calls) != 1 {
			t.Fatalf("parked delivery: %v, calls %v; want no repair attempt", err, calls)
		}
	})
}

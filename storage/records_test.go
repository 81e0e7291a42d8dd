package storage_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

func TestRecordCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("first writer wins", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := src("q", "m1")
		first := b.create(t, s)
		if first.Version != 1 || first.State != mend.StatePending || first.NextAttemptAt == nil {
			t.Fatalf("new record = version %d state %s due %v; want 1, pending, due", first.Version, first.State, first.NextAttemptAt)
		}
		again := createParams(s, `{"batch_id":"other"}`)
		again.Snapshot.FailureCount = 9
		got, created, err := b.store.RecordCreate(ctx, again)
		if err != nil || created {
			t.Fatalf("second RecordCreate = created %v, %v; want not created", created, err)
		}
		if got.ID != first.ID || got.Version != 1 || string(got.Snapshot.Payload) != `{"batch_id":"b1"}` || got.Snapshot.FailureCount != 3 {
			t.Fatalf("loser got %+v; want the winner's record unchanged", got)
		}
		evs, err := b.store.RecordHistory(ctx, "q", first.ID)
		if err != nil || len(evs) != 1 || evs[0].Kind != mend.EventCreated || evs[0].Seq != 1 {
			t.Fatalf("history = %+v, %v; want one created event", evs, err)
		}
	})

	t.Run("concurrent creators agree on one record", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := src("q", "hot")
		const n = 24
		var wg sync.WaitGroup
		ids := make([]mend.RecordID, n)
		createdBy := make([]bool, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				rec, created, err := b.store.RecordCreate(ctx, createParams(s, "p"))
				ids[i], createdBy[i], errs[i] = rec.ID, created, err
			})
		}
		wg.Wait()
		creators := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("creator %d: %v", i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("creator %d got record %s, creator 0 got %s", i, ids[i], ids[0])
			}
			if createdBy[i] {
				creators++
			}
		}
		if creators != 1 {
			t.Fatalf("%d callers were told they created the record; want exactly 1", creators)
		}
		var rows, events int
		db := b.db.SQL(t)
		if err := db.QueryRow("SELECT COUNT(*) FROM mend_records").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("SELECT COUNT(*) FROM mend_events").Scan(&events); err != nil {
			t.Fatal(err)
		}
		if rows != 1 || events != 1 {
			t.Fatalf("%d records and %d events stored; want 1 and 1", rows, events)
		}
	})

	t.Run("starts parked with a reason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := createParams(src("q", "m"), "garbage")
		p.State, p.Reason = mend.StateParked, "cannot decode payload"
		rec, _, err := b.store.RecordCreate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != mend.StateParked || rec.NextAttemptAt != nil || rec.LastError != "cannot decode payload" {
			t.Fatalf("record = state %s due %v last error %q; want parked, not due, with the reason", rec.State, rec.NextAttemptAt, rec.LastError)
		}
	})
}

func TestQueueIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.create(t, mend.SourceID{Queue: "qa", Topic: "t", Partition: "p", MessageID: "m"})
	other := b.create(t, mend.SourceID{Queue: "qb", Topic: "t", Partition: "p", MessageID: "m"})
	if a.ID == other.ID {
		t.Fatalf("two queues share record %s", a.ID)
	}
	if _, err := b.store.RecordGetByID(ctx, "qa", other.ID); !errors.Is(err, mend.ErrNotFound) {
		t.Fatalf("reading qb's record through qa = %v; want ErrNotFound", err)
	}
	if _, err := b.store.RecordHistory(ctx, "qa", other.ID); !errors.Is(err, mend.ErrNotFound) {
		t.Fatalf("qb's history through qa = %v; want ErrNotFound", err)
	}
	due, err := b.store.RecordsDue(ctx, "qa", 10)
	if err != nil || len(due) != 1 || due[0].ID != a.ID {
		t.Fatalf("RecordsDue(qa) = %v, %v; want only qa's record", due, err)
	}
	// A write naming qa with qb's record is rejected and changes nothing.
	p := appendParams(other, mend.EventSettled, mend.StateSettled)
	p.Source.Queue = "qa"
	if _, err := b.store.RecordAppend(ctx, p); !errors.Is(err, mend.ErrNotFound) && !errors.Is(err, mend.ErrStaleRecord) {
		t.Fatalf("cross-queue append = %v; want rejection", err)
	}
	got, err := b.store.RecordGetByID(ctx, "qb", other.ID)
	if err != nil || got.Version != 1 {
		t.Fatalf("qb's record after cross-queue append = %+v, %v; want version 1", got, err)
	}
}

func TestExactIdentity(t *testing.T) {
	t.Parallel()
	max := strings.Repeat("😀", 255)
	base := mend.SourceID{Queue: "q", Topic: "t", Partition: "p", MessageID: "m"}
	with := func(f func(*mend.SourceID)) mend.SourceID { s := base; f(&s); return s }
	pairs := []struct {
		name string
		a, b mend.SourceID
	}{
		{"case", with(func(s *mend.SourceID) { s.MessageID = "a" }), with(func(s *mend.SourceID) { s.MessageID = "A" })},
		{"trailing space", with(func(s *mend.SourceID) { s.Topic = "a" }), with(func(s *mend.SourceID) { s.Topic = "a " })},
		{"two trailing spaces", with(func(s *mend.SourceID) { s.Queue = "a" }), with(func(s *mend.SourceID) { s.Queue = "a  " })},
		{"empty vs space partition", with(func(s *mend.SourceID) { s.Partition = "" }), with(func(s *mend.SourceID) { s.Partition = " " })},
		{"NFC vs NFD", with(func(s *mend.SourceID) { s.MessageID = "\u00e9" }), with(func(s *mend.SourceID) { s.MessageID = "e\u0301" })},
		{"different emoji", with(func(s *mend.SourceID) { s.MessageID = "😀" }), with(func(s *mend.SourceID) { s.MessageID = "😁" })},
		{"tab vs space", with(func(s *mend.SourceID) { s.Partition = "\t" }), with(func(s *mend.SourceID) { s.Partition = " " })},
		{"longest in every field", mend.SourceID{Queue: max, Topic: max, Partition: max, MessageID: max}, base},
	}
	for _, tt := range pairs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			ra, rb := b.create(t, tt.a), b.create(t, tt.b)
			if ra.ID == rb.ID {
				t.Fatalf("%v and %v share record %s", tt.a, tt.b, ra.ID)
			}
			for _, want := range []mend.SourceID{tt.a, tt.b} {
				got, err := b.store.RecordGet(ctx, want)
				if err != nil {
					t.Fatalf("RecordGet(%v): %v", want, err)
				}
				if got.Source != want {
					t.Fatalf("read back %v; want %v byte for byte", got.Source, want)
				}
				byID, err := b.store.RecordGetByID(ctx, want.Queue, got.ID)
				if err != nil || byID.Source != want {
					t.Fatalf("RecordGetByID = %v, %v; want %v", byID.Source, err, want)
				}
			}
		})
	}
}

func TestRejectedBeforeSQL(t *testing.T) {
	t.Parallel()
	// A closed store fails any statement it tries, so an ErrInvalid proves
	// validation ran first.
	b := setup(t)
	if err := b.store.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := src("q", "m")
	tests := []struct {
		name   string
		mutate func(*storage.CreateParams)
		field  string
	}{
		{"empty queue", func(p *storage.CreateParams) { p.Source.Queue = "" }, "queue"},
		{"empty topic", func(p *storage.CreateParams) { p.Source.Topic = "" }, "topic"},
		{"empty message id", func(p *storage.CreateParams) { p.Source.MessageID = "" }, "message_id"},
		{"invalid utf-8", func(p *storage.CreateParams) { p.Source.Partition = "\xff" }, "partition"},
		{"256 characters", func(p *storage.CreateParams) { p.Source.MessageID = strings.Repeat("x", 256) }, "message_id"},
		{"over 1020 bytes", func(p *storage.CreateParams) { p.Source.Queue = strings.Repeat("😀", 255) + "x" }, "queue"},
		{"payload over the cap", func(p *storage.CreateParams) {
			p.Snapshot.Payload = bytes.Repeat([]byte("x"), storage.MaxPayloadDefault+1)
		}, "payload"},
		{"missing op id", func(p *storage.CreateParams) { p.OpID = "" }, "op_id"},
		{"bad desired outcome", func(p *storage.CreateParams) { p.Target.Desired = "maybe" }, "desired_outcome"},
		{"original topic not utf-8", func(p *storage.CreateParams) { p.Snapshot.OriginalTopic = "spec\xffulate" }, "original_topic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := createParams(ok, "p")
			tt.mutate(&p)
			_, _, err := b.store.RecordCreate(ctx, p)
			var ve *mend.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field || !errors.Is(err, mend.ErrInvalid) {
				t.Fatalf("RecordCreate = %v; want a ValidationError naming %q", err, tt.field)
			}
		})
	}
	t.Run("get", func(t *testing.T) {
		if _, err := b.store.RecordGet(ctx, mend.SourceID{Queue: "q", Topic: "t"}); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("RecordGet with no message id = %v; want ErrInvalid", err)
		}
	})
	t.Run("append", func(t *testing.T) {
		p := storage.AppendParams{Source: ok, RecordID: mend.NewRecordID(), Version: 0, Kind: mend.EventSettled, State: mend.StateSettled, Actor: "a", OpID: "o"}
		if _, err := b.store.RecordAppend(ctx, p); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("RecordAppend at version 0 = %v; want ErrInvalid", err)
		}
	})
}

func TestOpenRejectsClientFoundRows(t *testing.T) {
	t.Parallel()
	_, err := storage.Open(context.Background(), "u:p@tcp(127.0.0.1:1)/db?clientFoundRows=true", storage.Options{})
	var pe *mysqlx.ParamError
	if !errors.As(err, &pe) || pe.Field != "dsn" || pe.Param != "clientFoundRows" || !errors.Is(err, mend.ErrInvalid) {
		t.Fatalf("Open = %v; want a dsn ParamError naming clientFoundRows", err)
	}
	if strings.Contains(err.Error(), ":p@") {
		t.Fatalf("error %q leaks the password", err)
	}
}

// TestOriginalTopicRoundTrip: the snapshot's original topic is stored byte
// for byte and comes back from every way a record is read.
func TestOriginalTopicRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s := src("q", "m1")
	p := createParams(s, `{"id":"q/batch/1","queue":"q"}`)
	p.Snapshot.OriginalTopic = "merge-signal " // a trailing space must survive
	created, _, err := b.store.RecordCreate(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	const want = "merge-signal "
	reads := map[string]func() (mend.Record, error){
		"RecordCreate": func() (mend.Record, error) { return created, nil },
		"RecordGet":    func() (mend.Record, error) { return b.store.RecordGet(ctx, s) },
		"RecordGetByID": func() (mend.Record, error) {
			return b.store.RecordGetByID(ctx, "q", created.ID)
		},
		"RecordFind": func() (mend.Record, error) { return b.store.RecordFind(ctx, created.ID) },
		"RecordsList": func() (mend.Record, error) {
			recs, err := b.store.RecordsList(ctx, "q", 10)
			if err != nil || len(recs) != 1 {
				return mend.Record{}, errors.Join(err, errors.New("want one record"))
			}
			return recs[0], nil
		},
		"RecordsDue": func() (mend.Record, error) {
			recs, err := b.store.RecordsDue(ctx, "q", 10)
			if err != nil || len(recs) != 1 {
				return mend.Record{}, errors.Join(err, errors.New("want one record"))
			}
			return recs[0], nil
		},
	}
	for name, read := range reads {
		got, err := read()
		if err != nil || got.Snapshot.OriginalTopic != want {
			t.Errorf("%s: original topic %q, %v; want %q", name, got.Snapshot.OriginalTopic, err, want)
		}
	}

	// A record made without one (or before migration 8) reads back empty.
	old := createParams(src("q", "m2"), "p")
	rec, _, err := b.store.RecordCreate(ctx, old)
	if err != nil || rec.Snapshot.OriginalTopic != "" {
		t.Fatalf("record without an original topic = %q, %v; want empty", rec.Snapshot.OriginalTopic, err)
	}
}

package storage_test

import (
	"context"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

type bundle struct {
	db    *mysqltest.DB
	store *storage.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := mysqltest.NewDB(t, migrations.Up)
	store := openStore(t, db.DSN, storage.Options{})
	return &bundle{db: db, store: store}
}

func openStore(t *testing.T, dsn string, opts storage.Options) *storage.DB {
	t.Helper()
	store, err := storage.Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

func src(queue, msg string) mend.SourceID {
	return mend.SourceID{Queue: queue, Topic: "speculate_dlq", Partition: queue, MessageID: msg}
}

func createParams(s mend.SourceID, payload string) storage.CreateParams {
	return storage.CreateParams{
		Source:   s,
		Snapshot: mend.Snapshot{Payload: []byte(payload), FailureCount: 3, LastError: "boom", Subjects: []mend.Subject{{Kind: "batch", ID: "b1"}}},
		Target:   mend.Target{BatchID: "b1", Desired: mend.OutcomeFailed},
		OpID:     mend.NewOpID(),
		Actor:    "test",
	}
}

func (b *bundle) create(t *testing.T, s mend.SourceID) mend.Record {
	t.Helper()
	rec, created, err := b.store.RecordCreate(context.Background(), createParams(s, `{"batch_id":"b1"}`))
	if err != nil || !created {
		t.Fatalf("RecordCreate(%v) = created %v, %v; want created", s, created, err)
	}
	return rec
}

func appendParams(rec mend.Record, kind mend.EventKind, state mend.State) storage.AppendParams {
	p := storage.AppendTo(rec)
	p.Kind, p.State, p.Actor, p.OpID = kind, state, "test", mend.NewOpID()
	return p
}

package main

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// onDSN adapts one of sqtest's table creators to a mysqltest.Migrator.
func onDSN(create func(context.Context, *sql.DB) error) mysqltest.Migrator {
	return func(ctx context.Context, dsn string) error {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		return create(ctx, db)
	}
}

// mend run --once against the submit queue's real tables, in databases of
// their own: the dead letter's batch is failed and the queue woken with a
// message the strict speculate consumer accepts, and a dangling membership
// row is skipped and logged instead of failing the queue.
func TestRunOnceRepairsOnTheRealTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	for _, seed := range []func() error{
		func() error { return w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
		func() error { return w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/2") },
		func() error { return w.AddMembership(ctx, "q", "created", "q/batch/0-gone") },
		func() error { return w.Join(ctx, "orchestrator", "speculate", "q") }, // the host's planner reads speculate
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}
	store, err := storage.Open(ctx, mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, _, err := store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"},
		Snapshot: mend.Snapshot{Payload: []byte(`{"id":"q/batch/1","queue":"q"}`), FailureCount: 3, LastError: "boom"},
		Target:   mend.Target{BatchID: "q/batch/1", Desired: mend.OutcomeFailed},
		OpID:     mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	args := []string{"run", "--once", "--dsn", mendDB.DSN, "--host-dsn", appDB.DSN, "--queue-dsn", queueDB.DSN}
	if code := Main(ctx, args, &out, &errOut, func(string) string { return "" }); code != exitOK {
		t.Fatalf("mend run --once: exit %d\n%s", code, errOut.String())
	}
	got, err := store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil || got.State != mend.StateDone {
		t.Fatalf("record = %s, %v; want done", got.State, err)
	}
	if b, _ := w.Batch(ctx, "q", "q/batch/1"); b.State != "failed" {
		t.Errorf("batch 1 = %s; want failed", b.State)
	}
	wakes, err := w.ConsumeSpeculate(ctx, "q", true)
	if err != nil || len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/2" {
		t.Fatalf("speculate = %+v, %v; want one wake-up naming q/batch/2", wakes, err)
	}
	if !strings.Contains(errOut.String(), "membership row names no batch") || !strings.Contains(errOut.String(), "q/batch/0-gone") {
		t.Errorf("the dangling row was not logged:\n%s", errOut.String())
	}
}

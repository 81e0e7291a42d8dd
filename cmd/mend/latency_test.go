package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// TestStatusShowsRepairLatency: mend status prints the last hour's repair
// latency and the slowest queue, from mend's tables.
func TestStatusShowsRepairLatency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	if r := opsMust(t, "status", "--dsn", db.DSN); !strings.Contains(r.stdout, "no repairs finished") {
		t.Fatalf("status on an empty database:\n%s", r.stdout)
	}
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, _, err := store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: "slow/q", Topic: "speculate_dlq", Partition: "slow/q", MessageID: "m"},
		Snapshot: mend.Snapshot{FailedAt: time.Now().Add(-3 * time.Minute)},
		Target:   mend.Target{BatchID: "b", Desired: mend.OutcomeFailed}, OpID: mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := storage.AppendTo(rec)
	p.Kind, p.State, p.Actor, p.OpID = mend.EventWoken, mend.StateDone, "test", mend.NewOpID()
	if _, err := store.RecordAppend(ctx, p); err != nil {
		t.Fatal(err)
	}
	r := opsMust(t, "status", "--dsn", db.DSN)
	if !strings.Contains(r.stdout, "last 1h0m0s: 1 repairs, p50 3m") || !strings.Contains(r.stdout, "SLOWEST QUEUE") || !strings.Contains(r.stdout, "slow/q") {
		t.Fatalf("status:\n%s\nwant 1 repair of about 3m in slow/q", r.stdout)
	}
}

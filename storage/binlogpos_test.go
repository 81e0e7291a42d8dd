package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// The binary-log reader's position is written only by its lease's current
// term: a saved position round-trips, a term that lost the lease is fenced
// and changes nothing, and no older epoch writes over a newer one's.
func TestBinlogPositionFenced(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	const name = "mend-binlog/queue_db"
	if _, err := b.store.BinlogPositionGet(ctx, name); !errors.Is(err, mend.ErrNotFound) {
		t.Fatalf("before any save: %v, want ErrNotFound", err)
	}
	first, err := b.store.LeaseAcquire(ctx, name, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 7, 1, 2, 3, 0, time.UTC)
	p := storage.BinlogPosition{Name: name, Flavor: "mysql", ServerUUID: "uuid-1", File: "mend-bin.000003", Pos: 1234,
		GTIDSet: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", EventAt: at, ResetReason: "first start", ResetAt: at}
	if err := b.store.BinlogPositionSave(ctx, first, p); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.BinlogPositionGet(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.File != p.File || got.Pos != p.Pos || got.GTIDSet != p.GTIDSet || got.ServerUUID != p.ServerUUID || !got.EventAt.Equal(at) ||
		got.Epoch != first.Epoch || got.Holder != "a" || got.ResetReason != p.ResetReason || !got.ResetAt.Equal(at) {
		t.Fatalf("saved %+v, read %+v", p, got)
	}
	if err := b.store.LeaseRelease(ctx, first); err != nil {
		t.Fatal(err)
	}
	second, err := b.store.LeaseAcquire(ctx, name, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stale := p
	stale.Pos = 9999
	if err := b.store.BinlogPositionSave(ctx, first, stale); !errors.Is(err, mend.ErrFenced) {
		t.Fatalf("a save by the ended term: %v, want ErrFenced", err)
	}
	next := p
	next.Pos = 2000
	if err := b.store.BinlogPositionSave(ctx, second, next); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.store.BinlogPositionGet(ctx, name); got.Pos != 2000 || got.Holder != "b" {
		t.Fatalf("after the new term's save: %+v", got)
	}
	all, err := b.store.BinlogPositions(ctx)
	if err != nil || len(all) != 1 || all[0].Name != name {
		t.Fatalf("BinlogPositions: %+v, %v", all, err)
	}
	bad := next
	bad.Flavor = "postgres"
	var ve *mend.ValidationError
	if err := b.store.BinlogPositionSave(ctx, second, bad); !errors.As(err, &ve) {
		t.Fatalf("a bad flavor: %v, want a ValidationError", err)
	}
	other := next
	other.Name = "mend-binlog/other"
	if err := b.store.BinlogPositionSave(ctx, second, other); !errors.As(err, &ve) {
		t.Fatalf("a position saved under another lease: %v, want a ValidationError", err)
	}
	if !storage.SlotLease(name) {
		t.Fatalf("%q is not taken for one of mend's own leases", name)
	}
}

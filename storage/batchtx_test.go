package storage_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// TestFailedPacketLeavesNoOpenTransaction: an append whose event insert
// fails (its op ID is taken) has already moved the projection inside its
// open transaction when the server stops the packet. The store must end
// that transaction before the connection is reused: on a pool of one
// connection, a leaked transaction would be committed by the next START
// TRANSACTION, leaving the record at version 2 with no event for it.
func TestFailedPacketLeavesNoOpenTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	other := b.create(t, src("q", "other"))
	store := openStore(t, b.db.DSN, storage.Options{})
	store.SQL().SetMaxOpenConns(1)

	used := appendParams(other, mend.EventSettled, mend.StateSettled)
	if _, err := store.RecordAppend(ctx, used); err != nil {
		t.Fatal(err)
	}
	for _, fenced := range []bool{false, true} {
		p := appendParams(rec, mend.EventSettled, mend.StateSettled)
		p.OpID = used.OpID
		if fenced {
			term, err := b.store.LeaseAcquire(ctx, "q", "h", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			p.Fence = &term
			defer func() { _ = b.store.LeaseRelease(ctx, term) }()
		}
		if _, err := store.RecordAppend(ctx, p); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("fenced=%v: append reusing an op ID = %v; want ErrInvalid", fenced, err)
		}
		// The same (only) connection runs the next transaction.
		got, err := store.RecordGetByID(ctx, "q", rec.ID)
		if err != nil || got.Version != 1 {
			t.Fatalf("fenced=%v: after the refused append: version %d, %v; want 1", fenced, got.Version, err)
		}
		if _, _, err := store.RecordCreate(ctx, createParams(src("q", "next"), "{}")); err != nil {
			t.Fatal(err)
		}
		got, err = b.store.RecordGetByID(ctx, "q", rec.ID)
		if err != nil || got.Version != 1 {
			t.Fatalf("fenced=%v: after the next transaction committed: version %d, %v; want 1 (a leaked update was committed)", fenced, got.Version, err)
		}
	}
}

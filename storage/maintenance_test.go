package storage_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

func TestQueuesDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.create(t, src("q1", "m"))
	b.create(t, src("q2", "m"))
	finished := b.create(t, src("q3", "m"))
	if _, err := b.store.RecordAppend(ctx, appendParams(finished, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.QueuesDue(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"q1", "q2"}) {
		t.Fatalf("QueuesDue = %q; want [q1 q2] (oldest due first, finished queue excluded)", got)
	}
	if got, _ := b.store.QueuesDue(ctx, 1); len(got) != 1 || got[0] != "q1" {
		t.Fatalf("QueuesDue(limit 1) = %q; want [q1]", got)
	}
}

func TestPruneDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.create(t, src("q", "old"))
	if _, err := b.store.RecordAppend(ctx, appendParams(old, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}
	parked := b.create(t, src("q", "parked"))
	if _, err := b.store.RecordAppend(ctx, appendParams(parked, mend.EventParked, mend.StateParked)); err != nil {
		t.Fatal(err)
	}
	pending := b.create(t, src("q", "pending"))
	// Age everything by a day, by the database clock.
	if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET updated_at = updated_at - INTERVAL 1 DAY"); err != nil {
		t.Fatal(err)
	}
	fresh := b.create(t, src("q", "fresh"))
	if _, err := b.store.RecordAppend(ctx, appendParams(fresh, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}
	historyLen := map[mend.RecordID]int{}
	for _, keep := range []mend.Record{parked, pending, fresh} {
		evs, err := b.store.RecordHistory(ctx, "q", keep.ID)
		if err != nil {
			t.Fatal(err)
		}
		historyLen[keep.ID] = len(evs)
	}

	n, err := b.store.PruneDone(ctx, time.Hour, 100)
	if err != nil || n != 1 {
		t.Fatalf("PruneDone = %d, %v; want 1 (only the old done record)", n, err)
	}
	if _, err := b.store.RecordGetByID(ctx, "q", old.ID); !errors.Is(err, mend.ErrNotFound) {
		t.Fatalf("pruned record still readable: %v", err)
	}
	if _, err := b.store.RecordHistory(ctx, "q", old.ID); !errors.Is(err, mend.ErrNotFound) {
		t.Fatalf("pruned record's events remain: %v", err)
	}
	for _, keep := range []mend.Record{parked, pending, fresh} {
		if _, err := b.store.RecordGetByID(ctx, "q", keep.ID); err != nil {
			t.Fatalf("record %s (%s) was pruned: %v", keep.ID, keep.Source.MessageID, err)
		}
		// A kept record keeps its whole history.
		if evs, err := b.store.RecordHistory(ctx, "q", keep.ID); err != nil || len(evs) != historyLen[keep.ID] {
			t.Fatalf("record %s (%s) has %d events after pruning (%v); want %d", keep.ID, keep.Source.MessageID, len(evs), err, historyLen[keep.ID])
		}
	}
	// Recording the pruned identity again gives a new record.
	again := b.create(t, src("q", "old"))
	if again.ID == old.ID {
		t.Fatalf("recreated record reused id %s", old.ID)
	}
}

// TestPruneRechecksState: a record listed for pruning that leaves the done
// state before the delete (simulated by the hook) keeps its row and its
// events: the delete re-checks the state in its own transaction.
func TestPruneRechecksState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	if _, err := b.store.RecordAppend(ctx, appendParams(rec, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}
	raw := b.db.SQL(t)
	if _, err := raw.Exec("UPDATE mend_records SET updated_at = updated_at - INTERVAL 1 DAY"); err != nil {
		t.Fatal(err)
	}
	storage.SetAfterPruneSelect(b.store, func() {
		if _, err := raw.Exec("UPDATE mend_records SET state = 'pending' WHERE record_id = ?", rec.ID[:]); err != nil {
			t.Error(err)
		}
	})
	n, err := b.store.PruneDone(ctx, time.Hour, 100)
	if err != nil || n != 0 {
		t.Fatalf("PruneDone = %d, %v; want 0", n, err)
	}
	if evs, err := b.store.RecordHistory(ctx, "q", rec.ID); err != nil || len(evs) != 2 {
		t.Fatalf("history of the record that left done: %d events, %v; want 2", len(evs), err)
	}
}

package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/mendq/mend"
)

func TestRecordAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("at the right version bumps it by one", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		p := appendParams(rec, mend.EventSettled, mend.StateSettled)
		p.Epoch, p.Data = 7, json.RawMessage(`{"outcome":"failed"}`)
		v, err := b.store.RecordAppend(ctx, p)
		if err != nil || v != 2 {
			t.Fatalf("RecordAppend = %d, %v; want 2", v, err)
		}
		got, err := b.store.RecordGetByID(ctx, "q", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != 2 || got.State != mend.StateSettled || got.Epoch != 7 || got.NextAttemptAt == nil {
			t.Fatalf("record = %+v; want version 2, settled, epoch 7, due", got)
		}
		evs, err := b.store.RecordHistory(ctx, "q", rec.ID)
		if err != nil || len(evs) != 2 {
			t.Fatalf("history = %v, %v", evs, err)
		}
		if e := evs[1]; e.Seq != 2 || e.Kind != mend.EventSettled || e.Epoch != 7 || e.OpID != p.OpID {
			t.Fatalf("event = %+v; want seq 2 settled epoch 7 op %s", e, p.OpID)
		}
		var data map[string]string
		if err := json.Unmarshal(evs[1].Data, &data); err != nil || data["outcome"] != "failed" {
			t.Fatalf("event data = %s, %v", evs[1].Data, err)
		}
	})

	t.Run("done clears the schedule and parks keep the reason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		p := appendParams(rec, mend.EventParked, mend.StateParked)
		p.LastError = "merge in flight too long"
		if _, err := b.store.RecordAppend(ctx, p); err != nil {
			t.Fatal(err)
		}
		got, err := b.store.RecordGetByID(ctx, "q", rec.ID)
		if err != nil || got.NextAttemptAt != nil || got.LastError != p.LastError || !got.StateSince.After(rec.StateSince) && !got.StateSince.Equal(rec.StateSince) {
			t.Fatalf("parked record = %+v, %v", got, err)
		}
		if due, _ := b.store.RecordsDue(ctx, "q", 10); len(due) != 0 {
			t.Fatalf("a parked record is due: %v", due)
		}
	})

	t.Run("at a stale version conflicts and changes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		if _, err := b.store.RecordAppend(ctx, appendParams(rec, mend.EventSettled, mend.StateSettled)); err != nil {
			t.Fatal(err)
		}
		stale := appendParams(rec, mend.EventParked, mend.StateParked) // still version 1
		if _, err := b.store.RecordAppend(ctx, stale); !errors.Is(err, mend.ErrConflict) {
			t.Fatalf("stale append = %v; want ErrConflict", err)
		}
		got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
		evs, _ := b.store.RecordHistory(ctx, "q", rec.ID)
		if got.Version != 2 || got.State != mend.StateSettled || len(evs) != 2 {
			t.Fatalf("after conflict: version %d state %s, %d events; want 2, settled, 2", got.Version, got.State, len(evs))
		}
		if _, err := b.store.OpLookup(ctx, "q", stale.OpID); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("OpLookup of the losing op = %v; want ErrNotFound", err)
		}
	})

	t.Run("on an unknown record is not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ghost := mend.Record{ID: mend.NewRecordID(), Source: src("q", "never"), Version: 1}
		_, err := b.store.RecordAppend(ctx, appendParams(ghost, mend.EventSettled, mend.StateSettled))
		if !errors.Is(err, mend.ErrNotFound) || errors.Is(err, mend.ErrConflict) {
			t.Fatalf("append to unknown record = %v; want ErrNotFound only", err)
		}
	})

	t.Run("with the id of a pruned and recreated record is stale", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := src("q", "m")
		old := b.create(t, s)
		db := b.db.SQL(t)
		for _, q := range []string{"DELETE FROM mend_events WHERE record_id = ?", "DELETE FROM mend_records WHERE record_id = ?"} {
			if _, err := db.Exec(q, old.ID[:]); err != nil {
				t.Fatal(err)
			}
		}
		fresh := b.create(t, s)
		if fresh.ID == old.ID {
			t.Fatalf("recreated record reused id %s", old.ID)
		}
		_, err := b.store.RecordAppend(ctx, appendParams(old, mend.EventSettled, mend.StateSettled))
		if !errors.Is(err, mend.ErrStaleRecord) || errors.Is(err, mend.ErrNotFound) || errors.Is(err, mend.ErrConflict) {
			t.Fatalf("append with the old id = %v; want ErrStaleRecord only", err)
		}
		got, _ := b.store.RecordGetByID(ctx, "q", fresh.ID)
		if got.Version != 1 {
			t.Fatalf("the new record moved to version %d", got.Version)
		}
	})

	t.Run("reusing an op id is invalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		p := appendParams(rec, mend.EventAttemptFailed, mend.StatePending)
		if _, err := b.store.RecordAppend(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Version = 2
		if _, err := b.store.RecordAppend(ctx, p); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("append with a used op id = %v; want ErrInvalid", err)
		}
		if got, _ := b.store.RecordGetByID(ctx, "q", rec.ID); got.Version != 2 {
			t.Fatalf("version %d after a rejected append; want 2", got.Version)
		}
	})

	t.Run("racing writers get one winner per version", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "race"))
		const writers, rounds = 16, 8
		var (
			mu      sync.Mutex
			winners = map[int64]int{}
			wins    int
		)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for range rounds {
					cur, err := b.store.RecordGetByID(ctx, "q", rec.ID)
					if err != nil {
						t.Errorf("writer %d read: %v", w, err)
						return
					}
					v, err := b.store.RecordAppend(ctx, appendParams(cur, mend.EventAttemptFailed, mend.StatePending))
					switch {
					case err == nil:
						mu.Lock()
						winners[v]++
						wins++
						mu.Unlock()
					case errors.Is(err, mend.ErrConflict):
					default:
						t.Errorf("writer %d append: %v", w, err)
						return
					}
				}
			})
		}
		wg.Wait()
		for v, n := range winners {
			if n != 1 {
				t.Errorf("version %d was produced by %d writers", v, n)
			}
		}
		got, err := b.store.RecordGetByID(ctx, "q", rec.ID)
		if err != nil || got.Version != int64(1+wins) {
			t.Fatalf("final version %d, %v; want 1 + %d successful appends", got.Version, err, wins)
		}
		evs, err := b.store.RecordHistory(ctx, "q", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("event %d has seq %d; the log is not contiguous from 1", i, e.Seq)
			}
		}
		if len(evs) != 1+wins {
			t.Fatalf("%d events for %d appends", len(evs), wins)
		}
	})
}

func TestOpLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	p := appendParams(rec, mend.EventSettled, mend.StateSettled)
	if _, err := b.store.RecordAppend(ctx, p); err != nil {
		t.Fatal(err)
	}
	ev, err := b.store.OpLookup(ctx, "q", p.OpID)
	if err != nil || ev.RecordID != rec.ID || ev.Seq != 2 {
		t.Fatalf("OpLookup = %+v, %v; want seq 2 of %s", ev, err, rec.ID)
	}
	if _, err := b.store.OpLookup(ctx, "other", p.OpID); !errors.Is(err, mend.ErrNotFound) {
		t.Fatalf("OpLookup through another queue = %v; want ErrNotFound", err)
	}
}

func TestRecordsDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var want []mend.RecordID
	for _, m := range []string{"a", "b", "c"} {
		want = append(want, b.create(t, src("q", m)).ID)
	}
	done := b.create(t, src("q", "done"))
	if _, err := b.store.RecordAppend(ctx, appendParams(done, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}
	later := b.create(t, src("q", "later"))
	p := appendParams(later, mend.EventAttemptFailed, mend.StatePending)
	p.RetryIn = 1 << 40 // about 12 days
	if _, err := b.store.RecordAppend(ctx, p); err != nil {
		t.Fatal(err)
	}
	due, err := b.store.RecordsDue(ctx, "q", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != len(want) {
		t.Fatalf("%d due records; want %d (done and later ones excluded)", len(due), len(want))
	}
	for i := range due {
		if due[i].ID != want[i] {
			t.Fatalf("due[%d] = %s; want %s (oldest first)", i, due[i].ID, want[i])
		}
	}
	if due, _ := b.store.RecordsDue(ctx, "q", 2); len(due) != 2 {
		t.Fatalf("limit 2 returned %d", len(due))
	}
}

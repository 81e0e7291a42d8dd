package planner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

// parkByOperator parks rec (as it now is) the way an operator's tooling
// would: an unfenced parked event.
func parkByOperator(t *testing.T, b *bundle, id mend.RecordID) {
	t.Helper()
	ctx := context.Background()
	rec, err := b.store.RecordGetByID(ctx, "q", id)
	if err != nil {
		t.Fatal(err)
	}
	p := storage.AppendTo(rec)
	p.Kind, p.State, p.Actor, p.OpID, p.LastError = mend.EventParked, mend.StateParked, "operator/test", mend.NewOpID(), "held by hand"
	if _, err := b.store.RecordAppend(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// coveredNotAnchor returns a record of recs whose last event is not the
// wake intent (the anchor holds it).
func coveredNotAnchor(t *testing.T, b *bundle, recs []mend.Record) mend.Record {
	t.Helper()
	for _, rec := range recs {
		evs, err := b.store.RecordHistory(context.Background(), "q", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if evs[len(evs)-1].Kind != mend.EventWakeIntent {
			return rec
		}
	}
	t.Fatal("every record holds a wake intent")
	return mend.Record{}
}

// byIDStore reads every wake intent back as if its covers named records by
// ID only: each entry is taken to be at the record's current version. It
// is the broken variant of TestCoversNameVersions.
type byIDStore struct{ *storage.DB }

func (s byIDStore) RecordHistory(ctx context.Context, queue string, id mend.RecordID) ([]mend.Event, error) {
	evs, err := s.DB.RecordHistory(ctx, queue, id)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Kind != mend.EventWakeIntent {
		return evs, err
	}
	var d map[string]any
	if err := json.Unmarshal(evs[len(evs)-1].Data, &d); err != nil {
		return nil, err
	}
	covers, _ := d["covers"].([]any)
	for i, c := range covers {
		key, _ := c.(string)
		rid, _, _ := strings.Cut(key, "/v")
		for _, r := range mustList(ctx, s.DB, queue) {
			if r.ID.String() == rid {
				v := r.Version
				if r.ID == id {
					v-- // the anchor is covered one version before its intent
				}
				covers[i] = fmt.Sprintf("%s/v%d", rid, v)
			}
		}
	}
	d["covers"] = covers
	evs[len(evs)-1].Data, err = json.Marshal(d)
	return evs, err
}

func mustList(ctx context.Context, s *storage.DB, queue string) []mend.Record {
	recs, err := s.RecordsList(ctx, queue, 1000)
	if err != nil {
		panic(err)
	}
	return recs
}

// publishedAfter makes h record which publishes create a message after
// batch has failed: only those tell the queue's planner to look past it.
func publishedAfter(h *fakeHost, batch string) *[]string {
	var after []string
	h.WakeFunc = func(w mend.WakeUp) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.batches[batch].State == mend.BatchFailed && !h.sent[w.MessageID] {
			after = append(after, w.MessageID)
		}
		return nil
	}
	return &after
}

// TestCoversNameVersions: a run cut off after its wake intent and a
// publish that landed; then a covered record is parked, retried by an
// operator and settled again by the next run (its batch failed again)
// while the anchor still carries the intent. The intent covered that
// record at its old version, so the next run must not re-send the intent's
// message ID, which the queue's dedupe would swallow: it publishes under a
// new ID after the batch failed. The negative control reads covers as
// record IDs (as they were before they named versions): the old ID is
// re-sent, and no wake-up follows the record's new settlement.
func TestCoversNameVersions(t *testing.T) {
	t.Parallel()
	for _, byID := range []bool{false, true} {
		t.Run(fmt.Sprintf("byID=%v", byID), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			h := newFakeHost()
			recs := stormQueue(t, b, h, "q", 3)
			l := b.lease(t, "q")
			first := cutAfterIntent(t, b, h, l, recs, true)
			x := coveredNotAnchor(t, b, recs)
			parkByOperator(t, b, x.ID)
			if _, err := b.store.RecordRetry(ctx, storage.RetryParams{ID: x.ID, Actor: "operator/test", OpID: mend.NewOpID()}); err != nil {
				t.Fatal(err)
			}
			// The batch is back in flight (the host re-ran it); settling the
			// record fails it again.
			h.batches[x.Target.BatchID] = mend.Batch{ID: x.Target.BatchID, State: mend.BatchSpeculating, Version: 5}
			after := publishedAfter(h, x.Target.BatchID)
			var store planner.Store = b.store
			if byID {
				store = byIDStore{b.store}
			}
			runAgain(t, b, h, l, store, 3)
			if byID {
				if len(*after) != 0 {
					t.Fatalf("the broken variant published %v after the batch failed again; the control shows nothing", *after)
				}
				return
			}
			if len(*after) != 1 || (*after)[0] == first {
				t.Fatalf("wake-ups after %s failed again: %v (the cut run's was %s); want one, under a new ID", x.Target.BatchID, *after, first)
			}
		})
	}
}

// TestIntentCoversTheSameRecordsNotAsMany: a run cut off after its wake
// intent over three records and a publish that landed; then one of them is
// parked by hand (no longer owed) and a new dead letter's record takes
// its place. The next run owes as many records as the intent covers, but
// not the same ones: it must not re-send the intent's message ID (the
// dedupe would swallow the only wake-up after the new batch failed).
// Reusing an intent by its count lost that wake-up unnoticed.
func TestIntentCoversTheSameRecordsNotAsMany(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newFakeHost()
	recs := stormQueue(t, b, h, "q", 3)
	l := b.lease(t, "q")
	first := cutAfterIntent(t, b, h, l, recs, true)
	parkByOperator(t, b, coveredNotAnchor(t, b, recs).ID)
	h.batches["q/bnew"] = mend.Batch{ID: "q/bnew", State: mend.BatchSpeculating, Version: 1}
	b.record(t, "q", "mnew", "q/bnew")
	after := publishedAfter(h, "q/bnew")
	runAgain(t, b, h, l, b.store, 3)
	if len(*after) != 1 || (*after)[0] == first {
		t.Fatalf("wake-ups after q/bnew failed: %v (the cut run's was %s); want one, under a new ID", *after, first)
	}
}

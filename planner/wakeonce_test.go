package planner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

// stormQueue seeds n dead-lettered speculating batches and one live batch
// to wake in queue q, and returns the records.
func stormQueue(t *testing.T, b *bundle, h *fakeHost, q string, n int) []mend.Record {
	t.Helper()
	h.batches[q+"/live"] = mend.Batch{ID: q + "/live", State: mend.BatchCreated, Version: 1}
	var recs []mend.Record
	for i := range n {
		id := fmt.Sprintf("%s/b%d", q, i)
		h.batches[id] = mend.Batch{ID: id, State: mend.BatchSpeculating, Version: 1}
		recs = append(recs, b.record(t, q, fmt.Sprintf("m%d", i), id))
	}
	return recs
}

// TestRunWakesOnce: a run over a queue's due records settles each (its
// batch failed, its own events) and publishes one wake-up for all of them,
// named by the first record at the version of its wake intent; every
// record is then woken by that message.
func TestRunWakesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost()
	recs := stormQueue(t, b, h, "q", 5)
	p := newPlanner(t, b, h, nil)
	st, err := p.Run(ctx, b.lease(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Settled != 5 || st.Woken != 5 || len(h.woken) != 1 {
		t.Fatalf("stats %+v, %d wake-ups; want 5 settled and woken by one wake-up", st, len(h.woken))
	}
	want := planner.WakeMessageID(recs[0].ID, 3) // created, settled, wake_intent
	if w := h.woken[0]; w.MessageID != want || w.BatchID != "q/live" || w.RecordID != recs[0].ID {
		t.Fatalf("wake-up %+v; want %s to q/live", w, want)
	}
	for i, rec := range recs {
		evs, err := b.store.RecordHistory(ctx, "q", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		kinds := []mend.EventKind{}
		for _, e := range evs {
			kinds = append(kinds, e.Kind)
		}
		wantKinds := fmt.Sprint([]mend.EventKind{mend.EventCreated, mend.EventSettled, mend.EventWoken})
		if i == 0 {
			wantKinds = fmt.Sprint([]mend.EventKind{mend.EventCreated, mend.EventSettled, mend.EventWakeIntent, mend.EventWoken})
		}
		if fmt.Sprint(kinds) != wantKinds {
			t.Fatalf("record %d events %v; want %s", i, kinds, wantKinds)
		}
		if last := evs[len(evs)-1]; !strings.Contains(string(last.Data), want) {
			t.Fatalf("record %d woken event %s; want it to name %s", i, last.Data, want)
		}
		if b := h.batches[rec.Target.BatchID]; b.State != mend.BatchFailed {
			t.Fatalf("batch %s is %s; want failed", b.ID, b.State)
		}
	}
}

// plainStore hides the store's RecordHistory: a planner on it cannot find
// a wake intent, which is the broken variant of the negative control.
type plainStore struct{ planner.Store }

// cutAfterIntent runs a planner over recs that is killed right after its
// wake-up publish (which lands when landed is set): the answer never comes
// back and nothing is recorded after the intent. It returns the message ID
// that was published.
func cutAfterIntent(t *testing.T, b *bundle, h *fakeHost, l planner.Lease, recs []mend.Record, landed bool) string {
	t.Helper()
	ctx := context.Background()
	cut := errors.New("process killed")
	var first string
	h.WakeFunc = func(w mend.WakeUp) error {
		if first == "" {
			first = w.MessageID
			if landed {
				h.mu.Lock()
				h.sent[w.MessageID] = true
				h.woken = append(h.woken, w)
				h.mu.Unlock()
			}
			return cut
		}
		return nil
	}
	p := newPlanner(t, b, h, func(cfg *planner.Config) {
		cfg.Hooks.OnWake = func(string, error) { panic(cut) }
	})
	func() {
		defer func() { _ = recover() }()
		_, _ = p.Run(ctx, l)
	}()
	h.WakeFunc = nil
	for _, rec := range recs {
		got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
		if got.State != mend.StateSettled {
			t.Fatalf("record %s is %s after the cut; want settled", rec.ID, got.State)
		}
	}
	return first
}

// runAgain is the run after the cut: a new planner over store, under the
// same lease, which must finish (wake) all woken records.
func runAgain(t *testing.T, b *bundle, h *fakeHost, l planner.Lease, store planner.Store, woken int) {
	t.Helper()
	p := newPlanner(t, b, h, func(cfg *planner.Config) { cfg.Store = store })
	st, err := p.Run(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	if st.Woken != woken {
		t.Fatalf("second run %+v; want all %d woken", st, woken)
	}
}

// TestCutAfterIntentResendsTheSameID: a run cut off after the wake intent
// (the publish may or may not have landed) leaves every record settled;
// the next run re-sends the wake-up under the same message ID, so a landed
// first publish is coalesced by the queue's dedupe, and finishes them. The
// negative control: a planner that cannot read the intent back picks a
// new ID, and the queue gets the wake-up twice.
func TestCutAfterIntentResendsTheSameID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		landed, blind bool
		messages      int
	}{
		{landed: false, messages: 1},
		{landed: true, messages: 1},
		{landed: true, blind: true, messages: 2}, // negative control
	} {
		t.Run(fmt.Sprintf("landed=%v/blind=%v", c.landed, c.blind), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			h := newFakeHost()
			recs := stormQueue(t, b, h, "q", 3)
			l := b.lease(t, "q")
			first := cutAfterIntent(t, b, h, l, recs, c.landed)
			var store planner.Store = b.store
			if c.blind {
				store = plainStore{b.store}
			}
			runAgain(t, b, h, l, store, 3)
			if len(h.woken) != c.messages || h.woken[0].MessageID != first {
				t.Fatalf("published %v; want %d message(s), the first %s", h.woken, c.messages, first)
			}
		})
	}
}

// reusingStore makes every wake intent it reads back claim to cover every
// record: the broken variant of TestRecordSettledAfterTheCutGetsItsOwnWake,
// a planner that re-sends any intent's message ID whatever was settled
// since.
type reusingStore struct{ *storage.DB }

func (s reusingStore) RecordHistory(ctx context.Context, queue string, id mend.RecordID) ([]mend.Event, error) {
	evs, err := s.DB.RecordHistory(ctx, queue, id)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Kind != mend.EventWakeIntent {
		return evs, err
	}
	var d map[string]any
	if err := json.Unmarshal(evs[len(evs)-1].Data, &d); err != nil {
		return nil, err
	}
	recs, err := s.DB.RecordsList(ctx, queue, 1000)
	if err != nil {
		return nil, err
	}
	var all []string
	for _, r := range recs {
		v := r.Version // covers name records at versions; the anchor one before its intent
		if r.ID == id {
			v--
		}
		all = append(all, fmt.Sprintf("%s/v%d", r.ID, v))
	}
	d["covers"] = all
	evs[len(evs)-1].Data, err = json.Marshal(d)
	return evs, err
}

// TestRecordSettledAfterTheCutGetsItsOwnWake: a run cut off after its
// wake intent and publish, then a new dead letter whose batch the next
// run fails. The first publish (landed or not) came before that batch was
// failed, so the next run must not re-send its message ID, which the
// queue's dedupe would swallow: it writes a new intent and publishes under
// a new ID, after the new batch is failed. The negative control re-sends
// the old ID (an intent taken to cover every record): when the first
// publish landed, no wake-up follows the new batch's failure, and the
// quiet queue would stay stuck.
func TestRecordSettledAfterTheCutGetsItsOwnWake(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ landed, reuse bool }{
		{landed: false}, {landed: true},
		{landed: true, reuse: true}, // negative control
	} {
		t.Run(fmt.Sprintf("landed=%v/reuse=%v", c.landed, c.reuse), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			h := newFakeHost()
			recs := stormQueue(t, b, h, "q", 3)
			l := b.lease(t, "q")
			first := cutAfterIntent(t, b, h, l, recs, c.landed)
			h.batches["q/bnew"] = mend.Batch{ID: "q/bnew", State: mend.BatchSpeculating, Version: 1}
			b.record(t, "q", "mnew", "q/bnew")
			// Which publishes came after the new batch was failed: only
			// those tell the queue's planner to look past it.
			var after []string
			h.WakeFunc = func(w mend.WakeUp) error {
				h.mu.Lock()
				defer h.mu.Unlock()
				if h.batches["q/bnew"].State == mend.BatchFailed && !h.sent[w.MessageID] {
					after = append(after, w.MessageID)
				}
				return nil
			}
			var store planner.Store = b.store
			if c.reuse {
				store = reusingStore{b.store}
			}
			runAgain(t, b, h, l, store, 4)
			if c.reuse {
				if len(after) != 0 {
					t.Fatalf("the broken variant published %v after the new batch failed; the control shows nothing", after)
				}
				return
			}
			if len(after) != 1 || after[0] == first {
				t.Fatalf("wake-ups that landed after q/bnew failed: %v (the cut run's was %s); want one, under a new ID", after, first)
			}
			var intents int
			for _, rec := range recs {
				evs, err := b.store.RecordHistory(ctx, "q", rec.ID)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range evs {
					if e.Kind == mend.EventWakeIntent {
						intents++
					}
				}
			}
			if intents != 2 {
				t.Fatalf("%d wake intents; want two (the cut run's and the new one)", intents)
			}
		})
	}
}

// TestCoalescedWakeFailureRetriesUnderNewID: a failed publish records a
// wake_failed on every record (with backoff); the next run's wake-up has a
// new ID, never the failed one's.
func TestCoalescedWakeFailureRetriesUnderNewID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost()
	stormQueue(t, b, h, "q", 3)
	var ids []string
	fail := true
	h.WakeFunc = func(w mend.WakeUp) error {
		ids = append(ids, w.MessageID)
		if fail {
			fail = false
			return errors.New("queue database down")
		}
		return nil
	}
	p := newPlanner(t, b, h, nil)
	st, err := p.Run(ctx, b.lease(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if st.WakeFailed != 3 || st.Woken != 3 || len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("stats %+v, publishes %v; want 3 failed then 3 woken, two distinct IDs", st, ids)
	}
}

// TestOnRepairedReportsLatency: every record finished, alone or in a
// coalesced wake-up, reports its latency from the dead letter's failure.
func TestOnRepairedReportsLatency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "q/live", State: mend.BatchCreated, Version: 1})
	failedAt := time.Now().Add(-time.Minute)
	for i := range 3 {
		id := fmt.Sprintf("q/b%d", i)
		h.batches[id] = mend.Batch{ID: id, State: mend.BatchSpeculating, Version: 1}
		b.recordWith(t, "q", fmt.Sprintf("m%d", i), id, mend.Snapshot{FailedAt: failedAt})
	}
	b.record(t, "q", "no-time", "q/none") // no failure time: not reported
	var got []time.Duration
	p := newPlanner(t, b, h, func(c *planner.Config) {
		c.Hooks.OnRepaired = func(q string, d time.Duration) { got = append(got, d) }
	})
	if _, err := p.Run(ctx, b.lease(t, "q")); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("OnRepaired called %d times; want 3", len(got))
	}
	for _, d := range got {
		if d < time.Minute || d > 2*time.Minute {
			t.Fatalf("latency %s; want about a minute", d)
		}
	}
}

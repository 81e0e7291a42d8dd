package planner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/planner"
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
			ctx := context.Background()
			b := setup(t)
			h := newFakeHost()
			recs := stormQueue(t, b, h, "q", 3)
			cut := errors.New("process killed")
			var first string
			h.WakeFunc = func(w mend.WakeUp) error {
				if first == "" {
					first = w.MessageID
					if c.landed {
						h.sent[w.MessageID] = true
						h.woken = append(h.woken, w)
					}
					return cut
				}
				return nil
			}
			// The kill: the publish's answer never comes back, and the run
			// ends with nothing recorded after the intent.
			p := newPlanner(t, b, h, func(cfg *planner.Config) {
				cfg.Hooks.OnWake = func(string, error) { panic(cut) }
			})
			l := b.lease(t, "q")
			func() {
				defer func() { _ = recover() }()
				_, _ = p.Run(ctx, l)
			}()
			for _, rec := range recs {
				got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
				if got.State != mend.StateSettled {
					t.Fatalf("record %s is %s after the cut; want settled", rec.ID, got.State)
				}
			}
			// A new dead letter arrives before the next run.
			h.batches["q/bnew"] = mend.Batch{ID: "q/bnew", State: mend.BatchSpeculating, Version: 1}
			b.record(t, "q", "mnew", "q/bnew")
			p2 := newPlanner(t, b, h, func(cfg *planner.Config) {
				if c.blind {
					cfg.Store = plainStore{b.store}
				}
			})
			st, err := p2.Run(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			if st.Woken != 4 {
				t.Fatalf("second run %+v; want all 4 woken", st)
			}
			if len(h.woken) != c.messages || h.woken[0].MessageID != first {
				t.Fatalf("published %v; want %d message(s), the first %s", h.woken, c.messages, first)
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

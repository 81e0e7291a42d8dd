package planner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/planner"
)

var allBatchStates = []mend.BatchState{
	mend.BatchCreating, mend.BatchCreated, mend.BatchSpeculating, mend.BatchMerging,
	mend.BatchSucceeded, mend.BatchFailed, mend.BatchCancelling, mend.BatchCancelled,
}

func TestDecideTable(t *testing.T) {
	t.Parallel()
	const grace = time.Hour
	type want struct {
		action    planner.Action
		to        mend.BatchState
		outcome   mend.BatchState
		divergent bool
	}
	F, S := mend.OutcomeFailed, mend.OutcomeSucceeded
	tests := []struct {
		state   mend.BatchState // "" means the batch is missing
		desired mend.Outcome
		waited  time.Duration
		want    want
	}{
		{mend.BatchCreating, F, 0, want{planner.ActTransition, mend.BatchFailed, mend.BatchFailed, false}},
		{mend.BatchCreated, F, 0, want{planner.ActTransition, mend.BatchFailed, mend.BatchFailed, false}},
		{mend.BatchSpeculating, F, 0, want{planner.ActTransition, mend.BatchFailed, mend.BatchFailed, false}},
		{mend.BatchCreated, S, 0, want{planner.ActPark, "", "", false}},
		{mend.BatchSpeculating, S, 0, want{planner.ActPark, "", "", false}},
		{mend.BatchMerging, F, 0, want{planner.ActWait, "", "", false}},
		{mend.BatchMerging, F, grace - 1, want{planner.ActWait, "", "", false}},
		{mend.BatchMerging, F, grace, want{planner.ActPark, "", "", false}},
		{mend.BatchCancelling, F, 0, want{planner.ActWait, "", "", false}},
		{mend.BatchCancelling, F, 2 * grace, want{planner.ActPark, "", "", false}},
		{mend.BatchMerging, S, 0, want{planner.ActTransition, mend.BatchSucceeded, mend.BatchSucceeded, false}},
		// The real controller refuses a racing merge result on a cancel.
		{mend.BatchCancelling, S, 0, want{planner.ActPark, "", "", false}},
		{mend.BatchFailed, F, 0, want{planner.ActFinish, "", mend.BatchFailed, false}},
		{mend.BatchFailed, S, 0, want{planner.ActFinish, "", mend.BatchFailed, true}},
		{mend.BatchSucceeded, F, 0, want{planner.ActFinish, "", mend.BatchSucceeded, true}},
		{mend.BatchSucceeded, S, 0, want{planner.ActFinish, "", mend.BatchSucceeded, false}},
		{mend.BatchCancelled, F, 0, want{planner.ActFinish, "", mend.BatchCancelled, true}},
		{mend.BatchCancelled, S, 0, want{planner.ActFinish, "", mend.BatchCancelled, true}},
		{"", F, 0, want{planner.ActSettle, "", "", false}},
		{"", S, 0, want{planner.ActSettle, "", "", false}},
		{mend.BatchCreated, mend.OutcomeNone, 0, want{planner.ActPark, "", "", false}},
		{"weird", F, 0, want{planner.ActPark, "", "", false}},
		// A stuck-queue record settles whatever the batch: it only owes
		// the wake-up, and never touches the host.
		{mend.BatchMerging, mend.OutcomeWake, 0, want{planner.ActSettle, "", "", false}},
		{mend.BatchCancelling, mend.OutcomeWake, 2 * grace, want{planner.ActSettle, "", "", false}},
		{mend.BatchSucceeded, mend.OutcomeWake, 0, want{planner.ActSettle, "", "", false}},
		{"", mend.OutcomeWake, 0, want{planner.ActSettle, "", "", false}},
	}
	for _, tt := range tests {
		in := planner.Input{Desired: tt.desired, Waited: tt.waited, Grace: grace}
		if tt.state != "" {
			in.Batch = &mend.Batch{ID: "b", State: tt.state, Version: 3}
		}
		got := planner.Decide(in)
		if got.Action != tt.want.action || got.To != tt.want.to || got.Outcome != tt.want.outcome || got.Divergent != tt.want.divergent {
			t.Errorf("Decide(%s, desired %q, waited %s) = %s to=%q outcome=%q divergent=%v; want %s to=%q outcome=%q divergent=%v",
				tt.state, tt.desired, tt.waited, got.Action, got.To, got.Outcome, got.Divergent,
				tt.want.action, tt.want.to, tt.want.outcome, tt.want.divergent)
		}
		if got.Reason == "" {
			t.Errorf("Decide(%s, %q) gave no reason", tt.state, tt.desired)
		}
	}
}

// TestDecideParksOverlongStatusIDs: a member request whose status message
// ID "<request>/<status>" would not fit a message ID (255 characters) is
// parked before the batch is touched, with the length as the reason; one
// that just fits is repaired.
func TestDecideParksOverlongStatusIDs(t *testing.T) {
	t.Parallel()
	F, S := mend.OutcomeFailed, mend.OutcomeSucceeded
	fits := strings.Repeat("r", 255-len("/error"))
	for _, tt := range []struct {
		state   mend.BatchState
		desired mend.Outcome
		member  string
		want    planner.Action
	}{
		{mend.BatchSpeculating, F, strings.Repeat("r", 250), planner.ActPark},
		{mend.BatchSpeculating, F, fits, planner.ActTransition},
		{mend.BatchSpeculating, F, strings.Repeat("é", 250), planner.ActPark},
		{mend.BatchMerging, S, strings.Repeat("r", 250), planner.ActPark},
		{mend.BatchMerging, S, strings.Repeat("r", 255-len("/landed")), planner.ActTransition},
		{mend.BatchFailed, F, strings.Repeat("r", 250), planner.ActPark},
		{mend.BatchCancelled, F, strings.Repeat("r", 250), planner.ActPark},
		{mend.BatchCancelled, F, strings.Repeat("r", 255-len("/cancelled")), planner.ActFinish},
	} {
		b := &mend.Batch{ID: "q/batch/1", State: tt.state, Version: 1, Requests: []string{"q/1", tt.member}}
		got := planner.Decide(planner.Input{Desired: tt.desired, Batch: b, Grace: time.Hour})
		if got.Action != tt.want {
			t.Errorf("Decide(%s, %s, member of %d characters) = %s (%s); want %s", tt.state, tt.desired, len([]rune(tt.member)), got.Action, got.Reason, tt.want)
		}
		if tt.want == planner.ActPark && !strings.Contains(got.Reason, "at most 255 characters") {
			t.Errorf("park reason %q does not give the length limit", got.Reason)
		}
	}
	if got := planner.StatusMessageID("q/1", mend.BatchFailed); got != "q/1/error" {
		t.Errorf("StatusMessageID = %q; want q/1/error", got)
	}
}

// TestDecideCoversEveryState makes sure no known batch state falls through
// to the unknown-state branch.
func TestDecideCoversEveryState(t *testing.T) {
	t.Parallel()
	for _, s := range allBatchStates {
		for _, d := range []mend.Outcome{mend.OutcomeFailed, mend.OutcomeSucceeded} {
			got := planner.Decide(planner.Input{Desired: d, Batch: &mend.Batch{State: s}, Grace: time.Hour})
			if got.Action == planner.ActPark && got.Reason == "batch in unknown state \""+string(s)+"\"" {
				t.Errorf("state %s is not handled", s)
			}
		}
	}
}

// FuzzDecideNeverOverwrites checks the invariants that make repairs safe,
// whatever the input.
func FuzzDecideNeverOverwrites(f *testing.F) {
	f.Add(uint8(0), uint8(0), int64(0), int64(0), false)
	f.Add(uint8(3), uint8(1), int64(10), int64(5), false)
	f.Add(uint8(6), uint8(0), int64(0), int64(1), true)
	f.Fuzz(func(t *testing.T, stateIdx, desiredIdx uint8, waited, grace int64, missing bool) {
		outcomes := []mend.Outcome{mend.OutcomeFailed, mend.OutcomeSucceeded, mend.OutcomeNone, mend.OutcomeWake, "other"}
		s := allBatchStates[int(stateIdx)%len(allBatchStates)]
		in := planner.Input{Desired: outcomes[int(desiredIdx)%len(outcomes)], Waited: time.Duration(waited), Grace: time.Duration(grace)}
		if !missing {
			in.Batch = &mend.Batch{State: s}
		}
		d := planner.Decide(in)
		if d.Action == planner.ActTransition {
			if in.Batch == nil {
				t.Fatalf("transition of a missing batch: %+v", d)
			}
			switch in.Batch.State {
			case mend.BatchSucceeded, mend.BatchCancelled, mend.BatchFailed:
				t.Fatalf("overwrote a settled %s batch: %+v", in.Batch.State, d)
			case mend.BatchMerging, mend.BatchCancelling:
				if d.To == mend.BatchFailed {
					t.Fatalf("failed a %s batch: %+v", in.Batch.State, d)
				}
				if in.Batch.State == mend.BatchCancelling {
					t.Fatalf("overrode a cancel: %+v", d)
				}
			}
			if in.Desired == mend.OutcomeSucceeded && d.To != mend.BatchSucceeded {
				t.Fatalf("told succeeded, moved to %s", d.To)
			}
			if !d.To.Terminal() || d.Outcome != d.To {
				t.Fatalf("transition to non-terminal or mismatched outcome: %+v", d)
			}
		}
		if d.Action == planner.ActFinish && (in.Batch == nil || !in.Batch.State.Terminal() || d.Outcome != in.Batch.State) {
			t.Fatalf("finish must use the batch's real terminal outcome: %+v for %+v", d, in.Batch)
		}
		if in.Desired == mend.OutcomeWake && d.Action != planner.ActSettle {
			t.Fatalf("a stuck-queue record must settle without a host write: %+v", d)
		}
		if d.Reason == "" {
			t.Fatalf("no reason: %+v", d)
		}
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	base, max := 100*time.Millisecond, 5*time.Second
	for n := range 12 {
		want := base << n
		if want > max || want <= 0 {
			want = max
		}
		for range 50 {
			got := planner.Backoff(n, base, max)
			if got < want/2 || got > want {
				t.Fatalf("Backoff(%d) = %s; want within [%s, %s]", n, got, want/2, want)
			}
		}
	}
}

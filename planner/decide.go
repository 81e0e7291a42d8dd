package planner

import (
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// Action is what the planner does to settle a record's batch.
type Action int

// The actions, in the order the decision table names them.
const (
	// ActTransition moves the batch to Decision.To with a compare-and-set on
	// its observed version, then finishes the fan-out, then settles.
	ActTransition Action = iota + 1
	// ActFinish leaves the batch as it is, finishes the fan-out of its real
	// outcome, then settles.
	ActFinish
	// ActSettle settles without touching the host: there is no batch.
	ActSettle
	// ActWait does nothing now: a merge may be in flight. Try again later.
	ActWait
	// ActPark hands the record to an operator with Decision.Reason.
	ActPark
)

func (a Action) String() string {
	switch a {
	case ActTransition:
		return "transition"
	case ActFinish:
		return "finish"
	case ActSettle:
		return "settle"
	case ActWait:
		return "wait"
	case ActPark:
		return "park"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Input is everything the decision depends on.
type Input struct {
	// Desired is what the dead letter asks for: failed for a dead-lettered
	// batch stage, succeeded for a merge-signal saying the merge succeeded.
	Desired mend.Outcome
	// Batch is the batch as the host reports it now; nil if it does not exist.
	Batch *mend.Batch
	// Waited is how long the record has been waiting on a merge in flight
	// (zero unless it is waiting), and Grace how long it may wait before it
	// is parked for an operator.
	Waited, Grace time.Duration
}

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	// To is the batch state to move to, for ActTransition.
	To mend.BatchState
	// Outcome is the batch state the record settles with: To for a
	// transition, the batch's own terminal state for a finish, empty when
	// the batch does not exist.
	Outcome mend.BatchState
	// Divergent is true when the batch's settled state contradicts what the
	// dead letter asked for. The batch is never overwritten; the divergence is
	// recorded for an operator to look at.
	Divergent bool
	// Reason explains the decision in one line, for the event log.
	Reason string
}

// Decide is the repair decision table of mend. It is pure: the same input
// always gives the same decision. Its invariants, checked by a fuzz test:
// a succeeded or cancelled batch is never transitioned; a merging or
// cancelling batch is never failed; a success it is told about is honoured
// or recorded as a divergence, never turned into a failure, except on a
// cancelling batch, where it is parked as the real controller refuses it.
// A transition or finish whose fan-out could not finish because a member's
// status message ID would be too long is parked before anything is written.
//
//	batch now              desired failed                 told merge succeeded
//	creating, created,     transition to failed           park: no merge happened
//	speculating
//	merging                wait; park after grace         transition to succeeded
//	cancelling             wait; park after grace         park: the cancel stands
//	failed                 finish fan-out                 finish, divergent
//	succeeded              finish, divergent              finish
//	cancelled              finish, divergent              finish, divergent
//	missing                settle (not found)             settle (not found)
//
// A stuck-queue record (desired mend.OutcomeWake) settles at once whatever
// the batch's state: it repairs nothing and only owes the wake-up.
func Decide(in Input) Decision {
	if in.Desired == mend.OutcomeWake {
		// A stuck-queue record (package stuck): nothing to settle, whatever
		// the batch it names is now; the wake-up names the smallest live
		// batch when it is sent.
		return Decision{Action: ActSettle, Reason: "queue found stuck (live batches, nothing in flight to wake its planner): nothing to settle; wake-up owed"}
	}
	if in.Desired != mend.OutcomeFailed && in.Desired != mend.OutcomeSucceeded {
		return Decision{Action: ActPark, Reason: fmt.Sprintf("no desired outcome (%q): the dead letter named no repair", in.Desired)}
	}
	if in.Batch == nil {
		return Decision{Action: ActSettle, Reason: "batch not found: nothing to repair"}
	}
	told := in.Desired == mend.OutcomeSucceeded
	switch s := in.Batch.State; s {
	case mend.BatchCreating, mend.BatchCreated, mend.BatchSpeculating:
		if told {
			return Decision{Action: ActPark, Reason: fmt.Sprintf("told the merge succeeded but the batch is %s: no merge ran; an operator must check trunk", s)}
		}
		return memberIDsFit(in.Batch, Decision{Action: ActTransition, To: mend.BatchFailed, Outcome: mend.BatchFailed, Reason: fmt.Sprintf("batch %s dead-lettered: fail it", s)})
	case mend.BatchMerging, mend.BatchCancelling:
		if told && s == mend.BatchCancelling {
			// The real primary controller refuses exactly this: a racing
			// terminal merge result must not override the cancel.
			return Decision{Action: ActPark, Reason: "told the merge succeeded but the batch is cancelling: the submit queue does not let a racing merge result override a cancel; an operator must check trunk and settle the batch"}
		}
		if told {
			return memberIDsFit(in.Batch, Decision{Action: ActTransition, To: mend.BatchSucceeded, Outcome: mend.BatchSucceeded, Reason: "told the merge succeeded: honour it"})
		}
		if in.Waited >= in.Grace {
			return Decision{Action: ActPark, Reason: fmt.Sprintf("batch still %s after %s: a merge may have landed; an operator must settle it", s, in.Grace)}
		}
		return Decision{Action: ActWait, Reason: fmt.Sprintf("batch %s: a merge may be in flight; not failing it", s)}
	case mend.BatchFailed:
		return memberIDsFit(in.Batch, Decision{Action: ActFinish, Outcome: s, Divergent: told,
			Reason: reasonSettled(s, told)})
	case mend.BatchSucceeded:
		return memberIDsFit(in.Batch, Decision{Action: ActFinish, Outcome: s, Divergent: !told, Reason: reasonSettled(s, told)})
	case mend.BatchCancelled:
		return memberIDsFit(in.Batch, Decision{Action: ActFinish, Outcome: s, Divergent: true, Reason: reasonSettled(s, told)})
	default:
		return Decision{Action: ActPark, Reason: fmt.Sprintf("batch in unknown state %q", s)}
	}
}

// memberStatus is the status a member request of a batch settled as s
// ends in, as the submit queue's conclude maps it.
func memberStatus(s mend.BatchState) string {
	switch s {
	case mend.BatchSucceeded:
		return "landed"
	case mend.BatchFailed:
		return "error"
	case mend.BatchCancelled:
		return "cancelled"
	}
	return ""
}

// StatusMessageID is the ID of the status message the fan-out publishes
// for a member request of a batch settled as s: "<request>/<status>", the
// submit queue's own RequestLog ID.
func StatusMessageID(request string, s mend.BatchState) string {
	return request + "/" + memberStatus(s)
}

// memberIDsFit returns d, or a park when the fan-out d leads to could not
// finish: a member's status message ID (StatusMessageID) would be longer
// than a message ID can be (mend.MaxIdentityChars characters,
// mend.MaxIdentityBytes bytes). Parking before the first write leaves the
// batch as it is for an operator, instead of failing it and then retrying a
// publish that can never succeed.
func memberIDsFit(b *mend.Batch, d Decision) Decision {
	for _, r := range b.Requests {
		id := StatusMessageID(r, d.Outcome)
		if n := utf8.RuneCountInString(id); n > mend.MaxIdentityChars || len(id) > mend.MaxIdentityBytes {
			return Decision{Action: ActPark, Reason: fmt.Sprintf("member request %q of batch %q: its status message ID would be %d characters (%d bytes); message IDs hold at most %d characters (%d bytes), so the fan-out could not finish; the batch is left %s for an operator",
				clipID(r), b.ID, n, len(id), mend.MaxIdentityChars, mend.MaxIdentityBytes, b.State)}
		}
	}
	return d
}

// clipID shortens an ID for a reason line.
func clipID(s string) string {
	if utf8.RuneCountInString(s) <= 40 {
		return s
	}
	r := []rune(s)
	return string(r[:20]) + "…" + string(r[len(r)-12:])
}

func reasonSettled(s mend.BatchState, told bool) string {
	asked := "failed"
	if told {
		asked = "succeeded"
	}
	if string(s) == asked {
		return fmt.Sprintf("batch already %s: finish its fan-out", s)
	}
	return fmt.Sprintf("batch already %s, dead letter says %s: never overwrite; finish fan-out with the real outcome", s, asked)
}

// Backoff returns the delay before attempt n (0-based) is retried: base
// doubled per attempt up to max, with equal jitter (half fixed, half random)
// so that records failing together do not retry together.
func Backoff(n int, base, max time.Duration) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half)
}

package mend

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// RecordID identifies one reconciliation record: 128 random bits minted when
// the record is created and never changed. If a record is pruned and its
// source identity recorded again, the new record gets a new ID, so an old ID
// can always be told apart from the current one.
type RecordID [16]byte

// NewRecordID returns a fresh random RecordID.
func NewRecordID() RecordID {
	var id RecordID
	// crypto/rand.Read never returns an error on supported platforms.
	_, _ = rand.Read(id[:])
	return id
}

// ParseRecordID parses the 32-character lowercase hex form produced by String.
func ParseRecordID(s string) (RecordID, error) {
	var id RecordID
	if len(s) != 2*len(id) {
		return id, &ValidationError{Field: "record_id", Reason: fmt.Sprintf("must be %d hex characters, got %d", 2*len(id), len(s))}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, &ValidationError{Field: "record_id", Reason: "must be hex: " + err.Error()}
	}
	return id, nil
}

// String returns the stable text form: 32 lowercase hex characters.
func (id RecordID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero value (never minted).
func (id RecordID) IsZero() bool { return id == RecordID{} }

// MarshalText encodes id in its text form, so JSON shows the hex string.
func (id RecordID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the text form.
func (id *RecordID) UnmarshalText(b []byte) error {
	v, err := ParseRecordID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// NewOpID returns a random operation ID for a mutating call. Callers keep it
// until the call's outcome is known, so that after an ambiguous failure they
// can look the operation up instead of guessing.
func NewOpID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// MaxOpIDBytes bounds an op ID; longer ones are rejected as invalid.
const MaxOpIDBytes = 64

// ValidateOpID checks an operation ID: non-empty printable ASCII of at most
// MaxOpIDBytes bytes.
func ValidateOpID(op string) error {
	if op == "" {
		return &ValidationError{Field: "op_id", Reason: "must not be empty (use mend.NewOpID)"}
	}
	if len(op) > MaxOpIDBytes {
		return &ValidationError{Field: "op_id", Reason: fmt.Sprintf("is %d bytes; at most %d are allowed", len(op), MaxOpIDBytes)}
	}
	for i := 0; i < len(op); i++ {
		if op[i] < 0x21 || op[i] > 0x7e {
			return &ValidationError{Field: "op_id", Reason: "must be printable ASCII without spaces"}
		}
	}
	return nil
}

// State is where a record stands in its repair. This is mend's one drawing
// of the record state machine; the package docs of mend and planner refer
// to it. Every arrow is one event.
//
//	RecordCreate ──▶ pending   (or parked, when intake cannot decode a target)
//
//	pending ──settled (transition / finish / batch not found)──▶ settled
//	pending ──waiting (a merge may be in flight)───────────────▶ waiting
//	waiting ──settled (the batch moved on, or merge succeeded)─▶ settled
//	settled ──woken (wake-up sent) or done (no live batch)─────▶ done
//	pending, waiting, settled ──parked─────────────────────────▶ parked
//	    pending, settled: after MaxAttempts failed attempts, or a question
//	    only an operator can answer (contradiction, spelling variant);
//	    waiting: once the grace period is over, also when reads fail
//	parked ──retried (mend retry)──────────────────────────────▶ pending
//	parked ──resolved (mend resolve: an operator closed it)────▶ done
//
// A failed attempt (attempt_failed, wake_failed) or another wait keeps the
// state and reschedules with backoff. done is final; done records are
// pruned after the retention period.
type State string

// The states of a record.
const (
	// StatePending: recorded; the batch outcome is not settled yet.
	StatePending State = "pending"
	// StateWaiting: blocked on a merge that may be in flight; retried with
	// backoff and parked after a grace period.
	StateWaiting State = "waiting"
	// StateSettled: the outcome is settled; a wake-up is owed.
	StateSettled State = "settled"
	// StateDone: settled and the wake-up went out (or none was needed).
	StateDone State = "done"
	// StateParked: needs an operator; the reason is recorded.
	StateParked State = "parked"
)

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	switch s {
	case StatePending, StateWaiting, StateSettled, StateDone, StateParked:
		return true
	}
	return false
}

// Due reports whether records in this state are scheduled for another attempt.
// Done and parked records are not; their next-attempt time is cleared.
func (s State) Due() bool {
	return s == StatePending || s == StateWaiting || s == StateSettled
}

// EventKind names what an event did to its record.
type EventKind string

// The kinds of event. Every state transition is exactly one event; an event
// may also keep the state and only record an attempt.
const (
	EventCreated       EventKind = "created"        // intake recorded the dead letter
	EventAttemptFailed EventKind = "attempt_failed" // an attempt failed; retried with backoff
	EventWaiting       EventKind = "waiting"        // merge may be in flight; waiting
	EventSettled       EventKind = "settled"        // outcome settled; wake-up owed
	EventWakeIntent    EventKind = "wake_intent"    // one wake-up for several records is about to be published
	EventWakeFailed    EventKind = "wake_failed"    // publishing the wake-up failed
	EventWoken         EventKind = "woken"          // wake-up published; done
	EventDone          EventKind = "done"           // finished without a wake-up
	EventParked        EventKind = "parked"         // handed to an operator
	EventRetried       EventKind = "retried"        // an operator put a parked record back
	EventResolved      EventKind = "resolved"       // an operator closed the record by hand; done
)

// Outcome is the batch outcome a repair drives towards or observed.
type Outcome string

// The outcomes.
const (
	OutcomeNone      Outcome = ""          // not decided (e.g. undecodable payload)
	OutcomeFailed    Outcome = "failed"    // the dead letter means the batch failed
	OutcomeSucceeded Outcome = "succeeded" // the dead letter says the merge succeeded
)

// Subject is one structured failure subject copied from a DLQ delivery, such
// as {Kind: "batch", ID: "b-17"}.
type Subject struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// Snapshot is what the intake copies out of a DLQ delivery. DLQ rows are
// garbage-collected later, so a repair must never need to read them again.
type Snapshot struct {
	Payload []byte
	// OriginalTopic is the topic the message was dead-lettered from (the DLQ
	// row's original_topic, e.g. "speculate" for a row on speculate_dlq).
	OriginalTopic string
	FailureCount  int
	LastError     string
	FailedAt      time.Time // zero if the delivery did not say
	Subjects      []Subject
}

// Target is what a record repairs, decoded from the payload by topic.
type Target struct {
	BatchID string  // empty when the payload could not be decoded
	Desired Outcome // what the dead letter asks for
}

// Record is one reconciliation record: the immutable facts captured at intake
// and the mutable projection of its event history.
type Record struct {
	ID       RecordID
	Source   SourceID
	Snapshot Snapshot
	Target   Target

	State         State
	Version       int64      // starts at 1; +1 per event; equals the last event's Seq
	Attempts      int        // attempts since the last state change that reset them
	NextAttemptAt *time.Time // nil unless State.Due()
	LastError     string     // last failure or park reason
	Epoch         int64      // planner epoch of the last write (0: unfenced)
	CreatedAt     time.Time
	UpdatedAt     time.Time
	StateSince    time.Time // when State last changed
	// StateAge is how long the record had been in State when it was read,
	// by the database clock (so callers never compare their own clock with
	// the database's).
	StateAge time.Duration
}

// Event is one entry of a record's append-only history.
type Event struct {
	RecordID  RecordID
	Seq       int64 // the record version this event produced
	Queue     string
	Kind      EventKind
	Epoch     int64  // planner epoch; 0 for unfenced writes such as intake
	Actor     string // who wrote it, e.g. "intake", "planner/host-1"
	OpID      string
	Data      json.RawMessage // JSON object; compare semantically
	CreatedAt time.Time
}

// CreateParams describes a record to create if its source identity is new.
type CreateParams struct {
	Source   SourceID
	Snapshot Snapshot
	Target   Target
	// State is the initial state: StatePending (the zero value means
	// pending) or StateParked for a delivery that cannot be repaired
	// automatically (Reason says why).
	State  State
	Reason string
	OpID   string // see NewOpID; required
	Actor  string // who recorded it, e.g. "intake"; required
}

// CreateResult is what a batch create did with one CreateParams.
type CreateResult struct {
	Record  Record // the stored record, when Err is nil
	Created bool   // this call created it; false: it existed (or an earlier item of the batch named the same source)
	// Err is this item's own failure (a *ValidationError, ErrIdentityMismatch),
	// decided without affecting the other items.
	Err error
}

// AppendParams describes one event to append to a record as a compare-and-set
// on its version, and the projection values the event leaves behind.
type AppendParams struct {
	// Source and RecordID name the record. Source scopes the write to its
	// queue and lets a pruned-and-recreated record be told apart.
	Source   SourceID
	RecordID RecordID
	// Version is the version the caller read; the event gets Seq Version+1.
	Version int64

	// Fence, when set, makes the append a fenced write: it lands only if
	// this term is still the queue's current lease (holder, epoch and not
	// expired by the database clock) when the transaction runs, and fails
	// with ErrFenced otherwise. The event's epoch is then Fence.Epoch.
	Fence *Term

	Kind  EventKind
	Actor string
	OpID  string          // see NewOpID; unique per queue
	Epoch int64           // planner epoch of the writer; 0 for unfenced writes
	Data  json.RawMessage // a JSON object; nil means {}

	// The projection after the event.
	State     State
	Attempts  int
	LastError string
	// RetryIn schedules the next attempt at the database's NOW(6)+RetryIn
	// when State is due (pending, waiting, settled); ignored otherwise.
	RetryIn time.Duration
}

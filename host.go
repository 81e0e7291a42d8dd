package mend

import (
	"fmt"
	"time"
)

// BatchState is a host batch's state, as the submit queue names it.
type BatchState string

// The batch states of the host. Terminal: succeeded, failed, cancelled.
// Live: created, speculating, merging, cancelling.
const (
	BatchCreating    BatchState = "creating"
	BatchCreated     BatchState = "created"
	BatchSpeculating BatchState = "speculating"
	BatchMerging     BatchState = "merging"
	BatchSucceeded   BatchState = "succeeded"
	BatchFailed      BatchState = "failed"
	BatchCancelling  BatchState = "cancelling"
	BatchCancelled   BatchState = "cancelled"
)

// LiveBatchStates lists the live states in a fixed order.
var LiveBatchStates = []BatchState{BatchCreated, BatchSpeculating, BatchMerging, BatchCancelling}

// Live reports whether the queue's planner still has work to do on a batch
// in this state.
func (s BatchState) Live() bool {
	switch s {
	case BatchCreated, BatchSpeculating, BatchMerging, BatchCancelling:
		return true
	}
	return false
}

// Terminal reports whether the batch's fate is decided.
func (s BatchState) Terminal() bool {
	return s == BatchSucceeded || s == BatchFailed || s == BatchCancelled
}

// Batch is a host batch as mend sees it.
type Batch struct {
	Queue string
	ID    string
	State BatchState
	// Version is the batch's compare-and-set version: every state change
	// names the version it moves from. It is int64 here, but a host may
	// store less: uber/submitqueue's batch.version is an INT, so its
	// adapter refuses versions above 2^31-1.
	Version  int64
	Requests []string // member request IDs, in the host's stored order
}

// FinishParams is one batch of a batched fan-out (the planner's optional
// BatchesMany port): the batch as read, in a terminal state; the cause its
// member requests are finished with, the dead letter's snapshot; and Moved,
// set when the caller has just made it terminal itself, so its membership
// row is already written.
type FinishParams struct {
	Batch Batch
	Cause Snapshot
	Moved bool
}

// WakeUp is a message to the queue's planner topic whose only job is to make
// the planner run. On uber/submitqueue it is a speculate message with
// payload {"id": BatchID, "queue": Queue} on partition Queue, and flat
// string metadata naming the record and the epoch.
type WakeUp struct {
	Queue string
	// MessageID is the host's dedupe key: deterministic per (record,
	// record version), never reused over a record's life, at most 255
	// characters and independent of the batch ID's length.
	MessageID string
	BatchID   string // the batch the wake-up names: the queue's smallest live batch
	Epoch     int64  // the planner epoch that sent it
	RecordID  RecordID
}

// Term is one lease term on a queue: a holder and the epoch it was granted.
// Every fenced write names the term it acts under; a write whose term is no
// longer current is refused with ErrFenced.
type Term struct {
	Queue  string
	Holder string
	Epoch  int64
}

func (t Term) String() string {
	return fmt.Sprintf("queue=%q holder=%q epoch=%d", t.Queue, t.Holder, t.Epoch)
}

// HeldError says a queue's lease is held by someone else, and until when by
// the database clock. It matches ErrLeaseHeld.
type HeldError struct {
	Queue     string
	Holder    string
	Epoch     int64
	ExpiresAt time.Time     // database clock, UTC
	Remaining time.Duration // ExpiresAt - NOW(6), computed by the database
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("mend: lease on queue %q held by %q (epoch %d) for %s more", e.Queue, e.Holder, e.Epoch, e.Remaining.Round(time.Millisecond))
}

// Unwrap lets errors.Is(err, ErrLeaseHeld) match.
func (e *HeldError) Unwrap() error { return ErrLeaseHeld }

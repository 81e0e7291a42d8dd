// Package mend is the vocabulary of mend, which makes a submit queue's
// dead-letter handling converge.
//
// # Overview
//
// A submit queue lands changes through MySQL-backed message consumers. When a
// message exhausts its retries it is dead-lettered, and the dead-letter
// consumer must settle the affected batch and then wake the queue's planner.
// mend records every dead letter durably as a reconciliation record, keyed by
// the queue and the message's exact source identity (SourceID), and finishes
// the repair under a fenced, single planner per queue, so a lost wake-up is
// always re-sent and a merge outcome is never overwritten.
//
// This package holds only types and errors, and imports nothing but the
// standard library: SourceID and its canonical encoding, RecordID, Record,
// Event, the record State machine, batch states of the host, lease terms,
// and the error sentinels with their classifier.
//
// # State model
//
// A record moves pending → settled → done, with the side states waiting and
// parked; the one drawing of every edge is on State. Every transition is one
// Event; a record's Version equals the Seq of its last event.
//
// # Failure handling
//
// Callers branch on Classify: retryable errors (ErrConflict, ErrBusy,
// ErrUnavailable, ErrLeaseHeld) may be repeated; ErrAmbiguous needs the
// operation looked up by its op ID first; ErrFenced and ErrLeaseLost mean
// stop acting on the queue and never retry; everything else is permanent.
// Bad input is a *ValidationError matching ErrInvalid, returned before any
// I/O.
package mend

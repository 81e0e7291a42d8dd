// Package planner finishes the repair of a queue's reconciliation records,
// one queue at a time, under that queue's lease.
//
// # Overview
//
// Decide is the repair decision table: a pure function from the desired
// outcome and the batch as the host reports it to an action. Planner.Run
// applies it to every due record of the queue: it settles the batch outcome
// through the host's Batches port, then publishes a wake-up through the Waker
// port so the queue's own planner looks at the next batch, then marks the
// record done. Every write to a record is fenced with the lease's term.
//
// # State model
//
//	pending ─┬─ transition / finish / not found ──▶ settled ──┬─ wake sent ──────▶ done
//	         ├─ merge may be in flight ──▶ waiting            ├─ no live batch ──▶ done
//	         └─ contradiction / poison ──▶ parked             └─ publish failed ─▶ settled (re-send later,
//	waiting ── grace over ──▶ parked                                               new message ID)
//
// The wake-up's message ID is WakeMessageID(record, version):
// "mend/wake/<record>/v<version>". It is deterministic, so a send repeated
// at the same record version coalesces in the message queue's dedupe, and
// new for every attempt and after every operator retry, because each of
// them appends an event and the version never repeats: a deliberate re-send
// is never swallowed by an earlier publish that landed without an answer.
// The target is the queue's smallest live batch ID in byte order, a stable
// choice that lets a genuinely broken queue drain one batch per pass.
//
// # Failure handling
//
// A batch is never moved out of succeeded, cancelled or failed, and a
// merging or cancelling batch is never failed (a merge may have landed): the
// record waits with backoff and is parked after Config.Grace. A success the
// dead letter reports is honoured. The fan-out is given the record's
// snapshot as its cause, so the host's users see the dead letter's error on
// each member request.
//
// Identities are byte-exact. When the host finds the batch (or a member
// request) only under another spelling, because its collation is case-
// insensitive or pads spaces, the port answers *mend.SpellingError; the
// record is parked with a reason naming both spellings, never settled as
// "not found", since the batch may well exist and need repair. A host error or failed publish is an
// attempt_failed or wake_failed event with jittered backoff; after
// Config.MaxAttempts the record is parked with the reason, so a poison record
// never blocks its queue. ErrFenced or a lost lease stops the run at once and
// is never retried; a record whose version moved is simply re-read on the
// next pass. Host actions are idempotent (batch CAS, idempotent fan-out,
// dedupe by message ID), so a run abandoned between a host action and its
// event is safely repeated by the next holder.
package planner

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
// The wake-up's message ID is WakeMessageID(record, attempt): deterministic,
// so a redelivered send coalesces in the message queue's dedupe, and new per
// attempt, so a deliberate re-send after a failure is never swallowed. The
// target is the queue's smallest live batch ID, a stable choice that lets a
// genuinely broken queue drain one batch per pass.
//
// # Failure handling
//
// A batch is never moved out of succeeded, cancelled or failed, and a
// merging or cancelling batch is never failed (a merge may have landed): the
// record waits with backoff and is parked after Config.Grace. A success the
// dead letter reports is honoured. A host error or failed publish is an
// attempt_failed or wake_failed event with jittered backoff; after
// Config.MaxAttempts the record is parked with the reason, so a poison record
// never blocks its queue. ErrFenced or a lost lease stops the run at once and
// is never retried; a record whose version moved is simply re-read on the
// next pass. Host actions are idempotent (batch CAS, idempotent fan-out,
// dedupe by message ID), so a run abandoned between a host action and its
// event is safely repeated by the next holder.
package planner

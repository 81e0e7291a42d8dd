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
// # Settle together, wake once
//
// A run reads up to RunLimit due records (RunFollow, the reconciler's run
// of a queue whose previous run stopped at that limit and so woke it, up to
// FollowLimit) and settles each of them first,
// each with its own host calls, decision and fenced events, exactly as it
// would alone. The records that then owe a wake-up (settled now, or settled
// by an earlier run whose wake-up failed or was cut off) share one: one
// live-batch read and one publish per read of due records, instead of one
// per record, so a queue with a hundred dead letters is woken a handful of
// times, not a hundred.
//
//	settle r1 … settle rn ──▶ live batch? ─no──▶ each: done
//	                             │yes
//	                             ▼
//	      intent on the anchor (an event; its version names the message)
//	                             ▼
//	      publish one wake-up ──fail──▶ each: wake_failed (backoff) or parked
//	                             ▼
//	      every record: woken (one fenced transaction)
//
// The host calls are shared too when the Batches port has BatchesMany
// (package host's does) and a run has more than one record to settle: one
// read of all their batches, Decide per record, one transition call for
// those to move, one fan-out call for those to finish, then each record's
// own fenced event (settled, waiting, parked, attempt_failed) exactly as
// settle writes it after the same host calls. An item's error is that
// record's alone: a transition conflict sends that record through settle,
// which reads its batch again and decides again; a spelling parks it; any
// other error is its failed attempt. The settled events of the records
// whose host calls succeeded are then written in one fenced transaction
// when the Store has RecordAppendMany (storage's does): each is the event
// settle would write alone, a compare-and-set on its record's own version,
// so a record that moved under the run fails alone; a lost term fails them
// all, as it would each. (storage sends them as one UPDATE and one INSERT
// for all the records when every record hits, and record by record only
// after a miss.) Without BatchesMany, or for a single record, each
// record is settled alone as before.
//
// One owed record is woken as it always was: the message ID is
// WakeMessageID(record, settled version) and no intent is written, because
// the settled event already fixes the ID. For several, the anchor is the
// first owed record, and its wake_intent event, appended before the
// publish, moves it to a version nobody has used: the message ID is
// WakeMessageID(anchor, that version). Every record is then marked woken
// in one fenced transaction (Store's optional RecordAppendMany: one packet
// and COMMIT), so the anchor's intent never outlives a record it woke
// unmarked; a store without it marks them one by one, the anchor last.
// The intent lists the records it covers, each at the version it was
// owed at (data.covers: "<record>/v<version>"). A run that finds an owed
// record already settled whose last event is a wake_intent covering every
// record the run owes, each at the version it is owed at now, makes it the anchor again and
// re-sends the same message ID, which the message queue's dedupe coalesces
// if the first publish landed; a lone such record gives the same ID
// through the one-record rule. An intent that does not cover some owed
// record (one settled after the cut, by this run or another) is never
// re-sent: its publish may have landed before that record's batch was
// settled, and a re-send the dedupe swallows would leave no wake-up after
// it; nor is one covering a record only by its ID, at an older version (a
// record parked, retried and settled again since: TestCoversNameVersions).
// The run writes a new intent instead, and so a new ID
// (TestRecordSettledAfterTheCutGetsItsOwnWake). A failed publish records wake_failed on every record,
// each moving its version, so the next wake-up's ID is new.
//
// # State model
//
// The record states and every edge between them are drawn once, on
// mend.State. The planner moves pending and waiting records to settled (or
// waiting, or parked) and settled records to done.
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
// A stale planner is harmless. A planner whose term was replaced may not
// know it until its next fenced write is refused, and in between it may
// call the host. That is safe because of one invariant, checked by
// TestStaleTermIsFenced and TestDecisionDependsOnlyOnOutcomeStateAndVersion:
// the planner's host writes depend only on the record's desired outcome and
// the batch's state and version as read, never on its term, its clock or
// its history. A transition is a compare-and-set from the version read, so
// it either repeats exactly what a current planner would do with that
// batch, or is refused because the batch moved; a fan-out and a wake-up are
// idempotent. The lease is checked again right before the wake-up publish,
// and the reconciler cancels the run's context when the lease is lost.
//
// Wake-ups are at-least-once, never exactly once: a crash or lost term
// between a publish that landed and its woken events leaves the records
// settled, and the next run re-sends, under the same message ID when the
// anchor's intent is still its last event and covers every record owed
// (coalesced by the queue's dedupe), else under a new one (the version moved). The host's planner treats a second wake-up as a no-op look at
// the queue.
//
// A run stops after Config.MaxHostErrors host errors in a row
// (ErrHostFailing), so a failing host cannot hold a whole queue's worth of
// calls; the reconciler also bounds each run with a deadline. A record
// waiting on a merge is parked once Config.Grace is over, also when the
// batch read itself keeps failing.
//
// A batch is never moved out of succeeded, cancelled or failed, and a
// merging or cancelling batch is never failed (a merge may have landed): the
// record waits with backoff and is parked after Config.Grace. A success the
// dead letter reports is honoured, except for a cancelling batch: the real
// controller never lets a racing merge result override a cancel, so the
// record is parked for an operator. A batch whose fan-out could not finish
// (a member's status message ID "<request>/<status>" over 255 characters)
// is parked at once, before anything is written. The fan-out is given the record's
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

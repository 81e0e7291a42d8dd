// Package stuck finds queues that are stuck without a dead letter to show
// for it, and records the wake-up they are owed.
//
// # Overview
//
// mend's reconciler is driven by dead letters: a record per dead-lettered
// message. A queue whose dead letter is gone is invisible to it: the real
// speculate_dlq consumer acks a dead letter on its second delivery after
// a failed retrigger, and the host's GC deletes the row seconds later, so a
// queue stuck before mend was adopted leaves nothing to import. This scan
// is level-triggered instead, as a Kubernetes controller is: it reads the
// host's state, not its events, and wakes any queue that has work its
// planner should see and nothing that will wake the planner.
//
// A queue is stuck when, in two scans at least Config.Bound apart by the
// host database's clock (the host's rows have no timestamps):
//
//   - it has live batches (created, speculating, merging, cancelling) as
//     the host's own planner lists them;
//   - nothing is in flight for it (host.DB.StuckScan): no message a consumer
//     group has yet to acknowledge on speculate or on a topic whose consumer
//     leads to a speculate message (dependency-analysis, the request
//     pipeline, a merge at the merge stage, runway or the merge signal, a
//     build or its poll loop, a cancel, or the dead letters of any of them);
//   - no mend record of the queue is due (mend's own planner would wake it);
//   - and nothing moved in between: the same live batches at the same
//     versions, and the same marker (the highest offset stored or
//     acknowledged on the queue's partitions).
//
// Scan then creates a record with a synthetic source identity, (queue,
// mend.StuckTopic, queue, "stuck/<fingerprint>"), desired outcome
// mend.OutcomeWake, targeting the smallest live batch. The planner finishes
// it like any record, under the queue's fence: it settles it without a host
// call and publishes the same wake-up every repair sends (topic speculate,
// partition the queue, payload {"id": <smallest live batch in byte order>,
// "queue": <queue>}, message ID mend/wake/<record>/v<version>, string-map
// metadata). The record's events (created by stuck-scan, settled with the
// reason, woken with the message ID) are the queue's event log; mend
// status, inspect and the console show it like any record.
//
// # State model
//
// Per queue, in memory, what the first quiet scan saw:
//
//	        busy / state or marker changed / no live batch
//	   ┌──────────────────────────────────────────────────┐
//	   ▼                                                  │
//	(unseen) ──quiet──▶ quiet since t ──quiet, now ≥ t+Bound──▶ record
//	                                                          │
//	            created: Woken; it existed: Recorded ◀────────┘
//
// The wake-up the record leads to is in flight until the host's consumer
// acknowledges it, so the queue is busy, then seen quiet afresh: the bound
// restarts and the queue is woken once, not once per scan. The record's
// identity is the queue's live state, so the same state is woken once
// whatever the number of scans or replicas (create-if-absent: the first
// writer wins); a queue that is still stuck in the same state after its
// wake-up was consumed is reported Recorded, not woken again, until a
// batch moves.
//
// # Failure handling
//
// A scan's errors are returned; nothing is half-written (a record is
// created in one transaction, or not). A detector that restarts forgets
// its observations and waits the bound again. Messages in flight whose
// queue cannot be read (build, buildsignal and cancel rows whose payload
// names none) count against every queue, so none is woken while they are
// there; dead letters naming none are left out (the host's DLQ controller
// cannot resolve them and never wakes a queue for them). A wake-up that turns out spurious, because something the scan
// cannot see would have woken the queue, is harmless: the real speculate
// consumer treats every message as a dirty signal and re-plans the whole
// queue (docs/architecture.md, "The stuck-queue scan").
package stuck

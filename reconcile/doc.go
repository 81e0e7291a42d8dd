// Package reconcile is mend's periodic reconciler.
//
// # Overview
//
// Every Interval a pass lists the queues with records due by the database
// clock (through an index whose range holds due records only), takes each
// queue's lease without waiting, runs the planner, and releases the lease.
// At most Concurrency queues are repaired at once. A planner run takes at
// most planner.Config.RunLimit records (20 by default); a queue with more
// due goes to the back of the pass's line (round robin), so in a storm of
// dead letters over many queues every queue gets its first repair, and so
// its wake-up, before any queue is drained. The pass ends when every
// listed queue has nothing due. Many
// replicas may run: the fence keeps one planner per queue, and a replica that
// finds a lease held skips the queue. RunOnce runs a single pass, for cron.
// Done records are pruned after Retention (14 days by default).
//
// # State model
//
//	Start ──▶ [pass ──▶ wait Interval]* ──Stop──▶ stopped
//	pass: QueuesDue ──▶ per queue: TryAcquire ──▶ planner.Run ──▶ Release
//	                                  │                └─ More: back of the line
//	                                  └─ held: skip (the holder finishes)
//
// # Failure handling
//
// A queue whose run fails is logged and due again on the next pass, so a lost
// wake-up is re-sent within one interval after it became due. When a lease is
// lost mid-run the planner's context is cancelled and its writes are fenced.
// Stop stops taking queues, cancels runs in flight (each record's writes are
// atomic, so abandoning is clean) and releases every lease before returning.
package reconcile

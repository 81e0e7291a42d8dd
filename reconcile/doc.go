// Package reconcile is mend's periodic reconciler.
//
// # Overview
//
// Every Interval a pass lists the queues with records due by the database
// clock (through an index whose range holds due records only), takes each
// queue's lease without waiting, runs the planner, and releases the lease.
// At most Concurrency queues are repaired at once by one replica, and
// about ClusterConcurrency by all of them (see Replicas). A pass takes each listed
// queue once: a planner run takes at most planner.Config.RunLimit records
// (20 by default), and the pass ends when every listed queue has had its
// run. A queue whose run stopped at the limit is counted in PassStats.More,
// and while that count is non-zero the next pass starts at once instead of
// after Interval; it lists the due queues afresh. So in a storm of dead
// letters over many queues every queue gets its first repair, and so its
// wake-up, before any queue is drained, and a pass never grows with a hot
// queue's inflow: work that falls due during a pass (a re-send whose backoff
// ended, a queue QueueLimit left out) is listed by the next one.
//
// A queue whose last run on this replica stopped at the limit has been woken
// by that run, so its next run is a follow-up (FollowRunner; the planner's
// RunFollow, up to planner.Config.FollowLimit records, 100 by default): the
// rest of a storm's records on it are settled in a few large runs, each
// paying the lease, the due read, the host's batch statements and the
// publish once, instead of one run per RunLimit records. A queue whose run
// took all it found goes back to plain runs, so new work on it, and every
// queue's first run, stays short. The replica keeps this mark only for the
// queues its latest pass listed. Beside other replicas a pass runs its own
// part of the queues first (see Replicas) and reaches another replica's
// part only after it, when the owner has run those queues in its own pass:
// those runs are follow-ups too.
//
// # Bound
//
// A pass lasts at most ceil(QueueLimit/share) runs of at most RunLimit
// records each (FollowLimit for follow-up runs), where the share is Concurrency or, with other replicas
// working, ceil(ClusterConcurrency/working replicas) (those replicas take
// their part of the same list, so the queues a pass finds held or drained
// cost it a probe, not a run), every run cut off at QueueTimeout. Passes start
// every Interval, or at once after a pass with More. QueuesDue lists the
// queues whose oldest due record is oldest, and a run takes a queue's
// oldest records, so work is served roughly in the order it fell due: a
// record due at t is listed by the first pass that starts after t once
// fewer than QueueLimit queues hold records due before it, and each pass
// takes up to QueueLimit×RunLimit of those older records (more, with
// follow-up runs). While at most
// QueueLimit queues are due, a lost wake-up is re-sent within one Interval
// plus one pass after it fell due. Drain runs passes until one ends
// without More, for cron (mend run --once).
//
// Many replicas may run: the fence keeps one planner per queue, and a replica that
// finds a lease held skips the queue. From ProbeAfter (1 s) into a pass, a
// replica asks again whether a listed queue still has a record due before
// taking its lease (Store's optional DueProber), and skips it (PassStats.Drained)
// when another replica drained it meanwhile: otherwise every replica's long
// pass ends in empty runs that each take and release a lease (in the
// full-size storm, a third of four replicas' runs were empty without it). RunOnce runs a single pass, for cron.
//
// # Replicas
//
// Replicas share one budget of planner runs in flight, ClusterConcurrency
// (8 by default), so that running more of them for availability does not
// multiply the load a storm puts on the database: on a 2-core machine,
// four replicas running four queues each settled the 100,000 dead-letter
// storm about 10% slower than two, and as fast as two once they ran two
// each. A pass with more than one queue to run holds one of ReplicaSlots
// (16) slot leases, ReplicaSlotName(j), through the same fence as the
// queues (so with their TTL and keepalive), counts the live slots with the
// Store's optional LeaseCounter (one statement, again every second while
// the pass hands out queues) and runs at most ceil(ClusterConcurrency /
// working replicas) at once, never more than Concurrency nor fewer than
// one. The loop keeps its slot from one such pass to the next and gives it
// back after a pass with at most one queue, and on Stop; RunOnce gives it
// back at its end. A replica that finds every slot held counts itself
// without one.
//
// The same count orders the pass: with w replicas working and this one the
// r-th live slot, the queues whose name hashes to r modulo w come first
// (each part shuffled), so the replicas start on different queues and
// every listed queue gets its first run after about one run per queue in
// all, however many replicas there are; a replica that is done with its
// part helps with the others'. Without it, each replica walked the whole
// list in its own random order and ran a second time, records still due,
// queues another had just run while others waited for their first (the
// last of 1,000 queues got its first run after about 1,900 runs with two
// replicas and 3,300 with four). The count spreads load and never decides what is safe (the
// queue leases do): while replicas start or stop the total may briefly
// differ from the budget, and a failed count keeps the last share.
// Done records are pruned after Retention (14 days by default).
//
// # State model
//
//	Start ──▶ [pass ──▶ wait Interval]* ──Stop──▶ stopped
//	pass: QueuesDue ──▶ per queue, once: [still due?] ──▶ TryAcquire ──▶ planner.Run ──▶ Release
//	                                        │                └─ More: counted; next pass at once
//	                                        └─ held: skip (the holder finishes)
//
// # Failure handling
//
// A queue whose run fails is logged and due again on the next pass, so a lost
// wake-up is re-sent within one interval after it became due. When a lease is
// lost mid-run the planner's context is cancelled and its writes are fenced.
// Stop stops taking queues, cancels runs in flight (each record's writes are
// atomic, so abandoning is clean) and releases every lease before returning.
package reconcile

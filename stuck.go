package mend

import "time"

// OutcomeWake is the desired outcome of a stuck-queue record: there is no
// batch to settle, only a wake-up owed. The stuck-queue scan (package
// stuck) records one when a queue has live batches and nothing that will
// wake its planner; the planner settles it without touching the host and
// wakes the queue exactly as it wakes one after a repair.
const OutcomeWake Outcome = "wake"

// StuckTopic is the topic of a stuck-queue record's source identity. No
// host topic has this name: the identity is synthetic, (queue, StuckTopic,
// queue, "stuck/<fingerprint>"), one per queue and distinct state of its
// live batches, so every replica that finds the same queue stuck in the
// same state names the same record, and a state is woken once.
const StuckTopic = "mend/stuck"

// HostScan is what the stuck-queue scan reads from the host in one pass:
// every queue with live batches, what (if anything) is in flight for it,
// and the database clock when it was read.
type HostScan struct {
	// At is the host database's clock (NOW(6)) at the start of the scan:
	// the host's rows have no timestamps, so "quiet for longer than the
	// bound" is measured between two scans by this clock.
	At     time.Time
	Queues []QueueScan
	// Unattributed lists messages in flight whose queue could not be read
	// (a payload without one; dead letters excepted): the scan counts them
	// as in flight for every queue, so none is woken while they are there.
	Unattributed []string
}

// QueueScan is one queue of a HostScan.
type QueueScan struct {
	Queue string
	// Live are the queue's live batches as the host's own planner lists
	// them (membership rows of the live states, hydrated, byte-equal),
	// smallest ID first in byte order.
	Live []Batch
	// InFlight names the messages that will lead to a run of the queue's
	// planner ("speculate/q@17"): empty when nothing will wake it.
	InFlight []string
	// Marker moves whenever messages of the queue are published or
	// consumed (the highest offset stored or acknowledged on its
	// partitions): a queue whose marker moved between two scans was not
	// quiet in between, even if both scans found nothing in flight.
	Marker uint64
}

// Package dlq is mend's intake for dead-letter consumers.
//
// # Overview
//
// A DLQ consumer hands each delivery to Intake.Record, built from the host's
// dead-letter row with Row.Delivery (mend import reads the same rows from the
// queue database and uses the same conversion, so both record a row under the
// same identity). The intake copies what a repair needs out of the delivery
// (DLQ rows are garbage-collected later), decodes the payload as its original
// topic's format (Decode: strict, byte-exact JSON), files the record under
// the queue the row names (RecordQueue), resolves a buildsignal's build to
// its batch (Builds), and creates the reconciliation record if it is absent.
// Once Record returns, the obligation is durable in MySQL and the DLQ message
// can be acknowledged. If a Repairer is configured, Record then tries to
// finish the repair inline under the queue's lease, without waiting for it.
//
// In a storm (a broker or database outage dead-letters thousands of
// messages at once), Intake.RecordMany records many deliveries in one
// transaction, a few round trips per several hundred, with the same
// guarantees per delivery and a result per delivery: a bad one gets its own
// error and never costs the others. mend import records each page of rows
// with it. A store without the batch method (ManyStore) is used one
// delivery at a time.
//
// # State model
//
//	delivery ──batch topic, decoded──────────────▶ record pending (due now)
//	         ──buildsignal, build found──────────▶ record pending
//	         ──unknown topic / bad payload / no queue /
//	           unknown build────────────────────▶ record parked, with the reason
//	         ──request topic / log / runway's
//	           merge-conflict-check, runway-merge▶ record parked, recorded for the
//	                                                audit (mend.TopicKind): never
//	                                                counted as parked
//	         ──same identity again───────────────▶ the existing record, unchanged
//
// # Failure handling
//
// An identity that cannot be stored exactly or a payload over the cap (the
// host's 65,535-byte BLOB) is a *mend.ValidationError before anything
// reaches MySQL: do not acknowledge. A build lookup that fails (as opposed
// to finding no build) fails Record too, so the delivery is redelivered.
// An ambiguous create is resolved by creating again (it is idempotent); so
// is an ambiguous batch. RecordMany puts per-delivery failures in each
// result's Err and returns an error only when the batch as a whole failed
// (acknowledge nothing of it then). A
// failed inline repair never fails Record: the record is durable and the
// periodic reconciler finishes it.
package dlq

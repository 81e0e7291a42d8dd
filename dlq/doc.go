// Package dlq is mend's intake for dead-letter consumers.
//
// # Overview
//
// A DLQ consumer hands each delivery to Intake.Record. The intake copies
// what a repair needs out of the delivery (DLQ rows are garbage-collected
// later), decodes the target batch from the payload by topic (Decode; the
// _dlq suffix is accepted), and creates the reconciliation record if it is
// absent. Once Record returns, the obligation is durable in MySQL and the DLQ
// message can be acknowledged. If a Repairer is configured, Record then tries
// to finish the repair inline under the queue's lease, without waiting for it.
//
// # State model
//
//	delivery ──decode ok──▶ record pending (due now)
//	         ──unknown topic / bad payload──▶ record parked, with the reason
//	         ──same identity again──▶ the existing record, unchanged
//
// # Failure handling
//
// An identity that cannot be stored exactly or a payload over the cap is a
// *mend.ValidationError before anything reaches MySQL: do not acknowledge.
// An ambiguous create is resolved by creating again (it is idempotent). A
// failed inline repair never fails Record: the record is durable and the
// periodic reconciler finishes it.
package dlq

package planner

import (
	"context"

	"github.com/mendq/mend"
)

// Batches is the host's batch store as the planner needs it. Package host
// implements it over uber/submitqueue's real tables; a host with other
// tables implements it itself.
//
// Identities are byte-exact. A host whose collation matches a row spelled
// differently from the one asked for (other case, trailing spaces) must
// answer with a *mend.SpellingError, which matches mend.ErrNotFound; the
// planner parks such a record for an operator instead of settling it as
// not found.
type Batches interface {
	// BatchGet returns the batch's current state, version and members.
	// Returns mend.ErrNotFound if the queue has no such batch and a
	// *mend.SpellingError if only a differently spelled one exists.
	BatchGet(ctx context.Context, queue, batchID string) (mend.Batch, error)

	// BatchTransition moves the batch to state `to` as a compare-and-set from
	// the version the caller observed and returns the batch as it now is.
	// Returns mend.ErrConflict if the version moved (re-read and decide
	// again), mend.ErrNotFound if there is no such batch (never
	// ErrConflict), a *mend.SpellingError if only a differently spelled one
	// exists, and mend.ErrInvalid if the batch is terminal or the version
	// cannot be stored.
	BatchTransition(ctx context.Context, queue, batchID string, fromVersion int64, to mend.BatchState) (mend.Batch, error)

	// BatchFinish drives every member request of a batch in a terminal state
	// to the matching terminal request state (succeeded: landed; failed:
	// error; cancelled: cancelled) and tells the host's users why, with
	// cause, the dead letter's snapshot (its last error and failure
	// context). It is idempotent: requests already terminal are left
	// alone, so calling it again is safe.
	// Returns mend.ErrNotFound if there is no such batch, a
	// *mend.SpellingError if the batch or a member is spelled differently
	// (the other members are still finished), mend.ErrInvalid if the batch
	// is not terminal and mend.ErrConflict if a member kept moving.
	BatchFinish(ctx context.Context, queue, batchID string, cause mend.Snapshot) error

	// LiveBatches returns up to limit IDs of the queue's live batches
	// (created, speculating, merging, cancelling), smallest ID first by byte
	// order. An empty result means nothing is left to wake the queue for.
	LiveBatches(ctx context.Context, queue string, limit int) ([]string, error)
}

// BatchesAsRead is implemented by a Batches that can act on a batch as the
// planner has just read it, sparing the host the read that BatchTransition
// and BatchFinish otherwise begin with. The planner uses it when its
// Batches has it; package host does.
type BatchesAsRead interface {
	// BatchTransitionFrom is BatchTransition from b, the batch as BatchGet
	// returned it: the compare-and-set expects b's state and version, and
	// its errors are BatchTransition's.
	BatchTransitionFrom(ctx context.Context, b mend.Batch, to mend.BatchState) (mend.Batch, error)
	// BatchFinishFrom is BatchFinish of b, a terminal batch as BatchGet or
	// BatchTransitionFrom returned it; a terminal batch never changes, so
	// the read still holds. moved says BatchTransitionFrom has just made it
	// terminal and written its membership row, which BatchFinish would
	// otherwise write again. Its errors are BatchFinish's.
	BatchFinishFrom(ctx context.Context, b mend.Batch, cause mend.Snapshot, moved bool) error
}

// Waker publishes wake-ups to the queue's planner topic.
type Waker interface {
	// Wake publishes w. It is idempotent by w.MessageID: publishing an ID
	// the message queue still holds for the queue is a no-op that returns
	// nil. Any error means the wake-up may not have been published; the
	// planner records the failure and re-sends later under a new message ID.
	Wake(ctx context.Context, w mend.WakeUp) error
}

// BatchesMany is implemented by a Batches that can act on several batches
// of one queue with a number of statements that does not grow with them.
// A run that has more than one record to settle then reads all their
// batches at once, transitions all that need it at once and finishes all
// their fan-outs at once, and writes each record's own events after (see
// doc.go, "Settle together, wake once"); without it, each record is
// settled alone. Package host implements it.
//
// Each method returns one result per item, in order, and its errors for
// an item are those of the one-batch method it stands for; one item's
// error (a conflict, a spelling, a failed statement) never stops the
// others.
type BatchesMany interface {
	// BatchGetMany is BatchGet of every ID, all in queue.
	BatchGetMany(ctx context.Context, queue string, ids []string) ([]mend.Batch, []error)
	// BatchTransitionMany is BatchesAsRead.BatchTransitionFrom of bs[i] to
	// to[i] for every i, the batches all in one queue. An item whose
	// compare-and-set did not land is mend.ErrConflict: the caller reads
	// that batch again and decides again, for it alone.
	BatchTransitionMany(ctx context.Context, bs []mend.Batch, to []mend.BatchState) ([]mend.Batch, []error)
	// BatchFinishMany is BatchesAsRead.BatchFinishFrom of every item, the
	// batches all in one queue.
	BatchFinishMany(ctx context.Context, fs []mend.FinishParams) []error
}

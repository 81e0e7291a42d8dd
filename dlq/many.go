package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/mendq/mend"
)

// ManyStore is a Store that can also create many records in one
// transaction. *storage.DB implements it. RecordMany uses it when the
// intake's store has it, and RecordCreate one delivery at a time otherwise.
type ManyStore interface {
	Store
	// RecordCreateMany creates the records of ps that do not exist yet and
	// returns one result per item, in order: the stored record and whether
	// this call created it, or the item's own error (mend.ErrInvalid,
	// mend.ErrIdentityMismatch). Items naming the same source identity are
	// recorded once. The error result is for the whole batch: it failed
	// (mend.ErrBusy, mend.ErrUnavailable) or its outcome is unknown
	// (mend.ErrAmbiguous; creating the batch again is safe).
	RecordCreateMany(ctx context.Context, ps []mend.CreateParams) ([]mend.CreateResult, error)
}

// ManyResult is what RecordMany did with one delivery.
type ManyResult struct {
	Result
	// Err is this delivery's own failure: a *mend.ValidationError (bad
	// identity, payload over MaxPayload, an op ID already used), a build
	// lookup that could not be made now, or mend.ErrIdentityMismatch. The
	// delivery is not recorded; the others are not affected.
	Err error
}

// RecordMany is Record for many deliveries at once, for a storm of dead
// letters or an import: every delivery is decoded and checked as Record
// does, then all the good ones are recorded in one transaction when the
// store is a ManyStore (a few round trips per several hundred deliveries),
// one by one otherwise. It returns one result per delivery, in order, each
// with Record's guarantees: the first writer's record is kept, each record
// has one created event, identities are compared byte for byte. Deliveries
// naming the same source identity are recorded once; the first of them
// reports Created.
//
// A delivery whose result has Err set was not recorded and may be
// acknowledged only as Record's errors allow (a *mend.ValidationError
// never records). Every other delivery is durable when RecordMany returns
// a nil error, and its DLQ message may be acknowledged.
//
// The error is for the whole call: the store failed (nothing of the batch
// is known to be durable; do not acknowledge; recording again is safe) or
// ctx ended. Then the results are nil.
//
// With a Repairer, each queue that got a due record is repaired inline
// once, after the batch is durable; its error is in the RepairErr of that
// queue's results.
func (in *Intake) RecordMany(ctx context.Context, ds []Delivery) ([]ManyResult, error) {
	results := make([]ManyResult, len(ds))
	var ps []mend.CreateParams
	var at []int // index in ds of each entry of ps
	for i, d := range ds {
		if err := d.validate(); err != nil {
			results[i].Err = err
			continue
		}
		if len(d.Payload) > in.cfg.MaxPayload {
			results[i].Err = &mend.ValidationError{Field: "payload", Reason: fmt.Sprintf("is %d bytes; the intake accepts at most %d (the host's payload column holds at most %d)", len(d.Payload), in.cfg.MaxPayload, MaxHostPayload)}
			continue
		}
		p, err := in.params(ctx, d)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			results[i].Err = err
			continue
		}
		if d.Source.Queue != "" && d.Source.Queue != p.Source.Queue {
			in.log.WarnContext(ctx, "delivery's queue differs from the queue its row names; recording under the row's", "given_queue", d.Source.Queue,
				"queue", p.Source.Queue, "topic", d.Source.Topic, "message_id", d.Source.MessageID)
		}
		ps = append(ps, p)
		at = append(at, i)
	}
	if len(ps) > 0 {
		created, err := in.createMany(ctx, ps)
		if err != nil {
			return nil, err
		}
		logged := in.log.Enabled(ctx, slog.LevelInfo) // a line per delivery: build none when discarded
		for j, r := range created {
			i := at[j]
			if r.Err != nil {
				results[i].Err = fmt.Errorf("dlq: record %s: %w", ps[j].Source, r.Err)
				continue
			}
			results[i].Record, results[i].Created = r.Record, r.Created
			if !logged {
				continue
			}
			in.log.InfoContext(ctx, "dead letter recorded", "queue", r.Record.Source.Queue, "topic", r.Record.Source.Topic,
				"message_id", r.Record.Source.MessageID, "record_id", r.Record.ID.String(), "created", r.Created, "state", string(r.Record.State))
		}
	}
	if in.cfg.Repairer != nil {
		in.repairQueues(ctx, results)
	}
	return results, nil
}

// createMany records ps through the store's batch method if it has one. An
// ambiguous batch is created again with new op IDs, as create does for one
// record: creating is idempotent, so the second try returns the records
// either way.
func (in *Intake) createMany(ctx context.Context, ps []mend.CreateParams) ([]mend.CreateResult, error) {
	many, ok := in.store.(ManyStore)
	if !ok {
		out := make([]mend.CreateResult, len(ps))
		for i, p := range ps {
			rec, created, err := in.create(ctx, p)
			if err != nil && !errors.Is(err, mend.ErrInvalid) && !errors.Is(err, mend.ErrIdentityMismatch) {
				return nil, err
			}
			out[i] = mend.CreateResult{Record: rec, Created: created, Err: err}
		}
		return out, nil
	}
	var err error
	for range createAttemptsLimit {
		for i := range ps {
			ps[i].OpID = mend.NewOpID()
		}
		var out []mend.CreateResult
		out, err = many.RecordCreateMany(ctx, ps)
		if !errors.Is(err, mend.ErrAmbiguous) {
			if err != nil {
				return nil, fmt.Errorf("dlq: record %d dead letters: %w", len(ps), err)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("dlq: record %d dead letters: %w", len(ps), err)
}

// repairQueues asks the Repairer once per queue that got a due record.
func (in *Intake) repairQueues(ctx context.Context, results []ManyResult) {
	errs := map[string]error{}
	var order []string
	for _, r := range results {
		if r.Err != nil || !r.Record.State.Due() {
			continue
		}
		q := r.Record.Source.Queue
		if _, seen := errs[q]; !seen {
			errs[q] = nil
			order = append(order, q)
		}
	}
	for _, q := range order {
		if err := in.cfg.Repairer.TryRepair(ctx, q); err != nil && !errors.Is(err, mend.ErrLeaseHeld) {
			errs[q] = err
			in.log.WarnContext(ctx, "inline repair failed; the reconciler will finish it", "queue", q, "err", err)
		}
	}
	for i := range results {
		if results[i].Err == nil {
			results[i].RepairErr = errs[results[i].Record.Source.Queue]
		}
	}
}

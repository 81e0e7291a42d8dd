package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// appendManyMax bounds the appends of one RecordAppendMany packet.
const appendManyMax = 100

// sqlRecordAppendManyName labels the packet in the processlist; the
// statements are RecordAppend's (or RecordAppendFenced's), once per record.
const sqlRecordAppendManyName = `-- name: RecordAppendMany
START TRANSACTION;
`

// RecordAppendMany appends one event to each of several records of one
// queue in one transaction, each as RecordAppend would (a compare-and-set
// on its own version, its event only if its projection moved), in one
// packet plus COMMIT: with ps fenced (every Fence set, the same term), the
// lease row is read LOCK IN SHARE MODE once and every UPDATE checks the
// term again. It returns one error per item: nil, or what RecordAppend
// would return for that record alone (ErrConflict, ErrNotFound,
// ErrStaleRecord); the items that hit are written, the others not.
//
// The error result is for the call as a whole, and then nothing was
// written: a *mend.ValidationError for bad input (items of several queues
// or terms, an op ID used twice), an error matching mend.ErrFenced if the
// term is not current, or a store error; a *mend.AmbiguousError (naming
// the first item's op ID) if the commit's outcome is unknown.
func (d *DB) RecordAppendMany(ctx context.Context, ps []AppendParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	if len(ps) > appendManyMax {
		return nil, &mend.ValidationError{Field: "appends", Reason: fmt.Sprintf("%d in one call; at most %d", len(ps), appendManyMax)}
	}
	ops := map[string]bool{}
	for i := range ps {
		if err := validateAppend(&ps[i]); err != nil {
			return nil, err
		}
		p, first := ps[i], ps[0]
		switch {
		case p.Source.Queue != first.Source.Queue:
			return nil, &mend.ValidationError{Field: "appends", Reason: "all records must be in one queue"}
		case (p.Fence == nil) != (first.Fence == nil) || (p.Fence != nil && *p.Fence != *first.Fence):
			return nil, &mend.ValidationError{Field: "fence", Reason: "all appends must carry the same term, or none"}
		case ops[p.OpID]:
			return nil, opIDUsed(p.OpID, p.Source.Queue)
		}
		ops[p.OpID] = true
	}
	fence := ps[0].Fence
	var q strings.Builder
	q.WriteString(sqlRecordAppendManyName)
	var args []any
	if fence != nil {
		q.WriteString(sqlLeaseCheckStmt + ";\n")
		args = append(args, fence.Queue)
	}
	for _, p := range ps {
		q.WriteString(appendAdvance)
		args = append(args, string(p.State), string(p.State), p.Attempts, p.LastError, p.Epoch,
			p.State.Due(), p.RetryIn.Microseconds(), p.RecordID[:], p.Source.Queue, p.Version)
		if fence != nil {
			q.WriteString(` AND EXISTS (SELECT 1 FROM mend_leases WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6))`)
			args = append(args, fence.Queue, fence.Holder, fence.Epoch)
		}
		q.WriteString(";\n" + appendEvent + ";\n")
		args = append(args, appendEventArgs(p)...)
	}
	query := strings.TrimSuffix(q.String(), ";\n")
	var results []error
	err := d.withBatchTx(ctx, "RecordAppendMany", ps[0].OpID, func(ctx context.Context, tx *batchTx) error {
		results = make([]error, len(ps))
		changed := make([]struct {
			N int64 `db:"changed"`
		}, len(ps))
		var (
			lease leaseCheckRow
			found bool
			sets  []func(*sqlx.Rows) error
		)
		if fence != nil {
			sets = append(sets, scanOptional(&lease, &found))
		}
		for i := range changed {
			sets = append(sets, scanOne(&changed[i]))
		}
		err := tx.query(ctx, query, args, sets...)
		if mysqlErrNumber(err) == errDupEntry {
			return &mend.ValidationError{Field: "op_id", Reason: fmt.Sprintf("an op id of the batch was already used in queue %q; use new op ids", ps[0].Source.Queue)}
		}
		if err != nil {
			return fmt.Errorf("append many: %w", err)
		}
		if fence != nil {
			if err := lease.check(*fence, found); err != nil {
				return err
			}
		}
		for i, c := range changed {
			if c.N == 1 {
				continue
			}
			err := probeMiss(ctx, tx.conn, ps[i])
			if fence != nil && errors.Is(err, errVersionMatched) {
				// At the expected version, under a term current at the
				// lease read: it ran out during the packet.
				return fmt.Errorf("%w: term of %q at epoch %d on queue %q expired by the database clock during the write",
					mend.ErrFenced, fence.Holder, fence.Epoch, fence.Queue)
			}
			results[i] = err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: append %d events in queue %q: %w", len(ps), ps[0].Source.Queue, err)
	}
	return results, nil
}

package host

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mendq/mend"
)

// RequestState is a host request's state.
type RequestState string

// The request states of the host. Terminal: landed, error, cancelled. From
// batched on, the request's batch owns its fate.
const (
	RequestStarted    RequestState = "started"
	RequestValidated  RequestState = "validated"
	RequestBatched    RequestState = "batched"
	RequestProcessing RequestState = "processing"
	RequestLanded     RequestState = "landed"
	RequestError      RequestState = "error"
	RequestCancelled  RequestState = "cancelled"
	RequestCancelling RequestState = "cancelling"
)

// Terminal reports whether the request's fate is decided.
func (s RequestState) Terminal() bool {
	return s == RequestLanded || s == RequestError || s == RequestCancelled
}

func (s RequestState) valid() bool {
	switch s {
	case RequestStarted, RequestValidated, RequestBatched, RequestProcessing,
		RequestLanded, RequestError, RequestCancelled, RequestCancelling:
		return true
	}
	return false
}

// requestOutcome maps a terminal batch state to its member requests' state.
func requestOutcome(s mend.BatchState) (RequestState, bool) {
	switch s {
	case mend.BatchSucceeded:
		return RequestLanded, true
	case mend.BatchFailed:
		return RequestError, true
	case mend.BatchCancelled:
		return RequestCancelled, true
	}
	return "", false
}

func validBatchState(s mend.BatchState) bool {
	return s.Live() || s.Terminal() || s == mend.BatchCreating
}

func validateBatchKey(queue, batchID string) error {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return err
	}
	return mend.ValidateIdentity("batch_id", batchID, true)
}

func decodeRequests(raw []byte) ([]string, error) {
	var ids []string
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("host: sq_batches.requests is not a JSON array of strings: %w", err)
	}
	return ids, nil
}

// queryRower is what *sql.DB and *sql.Tx share for single-row reads.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const sqlBatchGet = `-- name: BatchGet
SELECT state, version, requests FROM sq_batches WHERE queue = ? AND id = ?`

const sqlBatchGetForUpdate = sqlBatchGet + ` FOR UPDATE`

const sqlBatchGetShared = sqlBatchGet + ` LOCK IN SHARE MODE`

func readBatch(ctx context.Context, q queryRower, query, queue, batchID string) (mend.Batch, error) {
	b := mend.Batch{Queue: queue, ID: batchID}
	var raw []byte
	err := q.QueryRowContext(ctx, query, queue, batchID).Scan(&b.State, &b.Version, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return mend.Batch{}, fmt.Errorf("%w: batch %q in queue %q", mend.ErrNotFound, batchID, queue)
	}
	if err != nil {
		return mend.Batch{}, err
	}
	if b.Requests, err = decodeRequests(raw); err != nil {
		return mend.Batch{}, err
	}
	return b, nil
}

// BatchGet returns the batch's current state, version and member request IDs.
// Returns mend.ErrNotFound if the queue has no such batch and a
// *mend.ValidationError for an unstorable queue or batch ID.
func (d *DB) BatchGet(ctx context.Context, queue, batchID string) (mend.Batch, error) {
	if err := validateBatchKey(queue, batchID); err != nil {
		return mend.Batch{}, err
	}
	b, err := readBatch(ctx, d.app, sqlBatchGet, queue, batchID)
	if err != nil {
		return mend.Batch{}, fmt.Errorf("host: get batch: %w", translate(err))
	}
	return b, nil
}

const sqlBatchCAS = `-- name: BatchTransition
UPDATE sq_batches SET state = ?, version = version + 1, updated_at = NOW(6)
WHERE queue = ? AND id = ? AND version = ?`

const sqlMembershipDelete = `-- name: MembershipDelete
DELETE FROM sq_batch_membership WHERE queue = ? AND state = ? AND batch_id = ?`

const sqlMembershipInsert = `-- name: MembershipInsert
INSERT INTO sq_batch_membership (queue, state, batch_id) VALUES (?, ?, ?)`

// BatchTransition moves the batch to state to as a compare-and-set from
// fromVersion, moving its row of the membership index in the same
// transaction, and returns the batch as it now is (version fromVersion+1).
// Returns mend.ErrConflict if the version moved, mend.ErrNotFound if there is
// no such batch, mend.ErrInvalid if the batch is terminal (a terminal batch
// never changes state again) and a *mend.ValidationError for bad input.
func (d *DB) BatchTransition(ctx context.Context, queue, batchID string, fromVersion int64, to mend.BatchState) (mend.Batch, error) {
	if err := validateBatchKey(queue, batchID); err != nil {
		return mend.Batch{}, err
	}
	if !validBatchState(to) {
		return mend.Batch{}, &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a batch state", to)}
	}
	if fromVersion < 1 {
		return mend.Batch{}, &mend.ValidationError{Field: "version", Reason: fmt.Sprintf("is %d; batch versions start at 1", fromVersion)}
	}
	var out mend.Batch
	err := d.withTx(ctx, d.app, "BatchTransition", func(ctx context.Context, tx *sql.Tx) error {
		// Lock the row first: the old state names the membership row to
		// move, and the lock keeps it from moving until COMMIT.
		b, err := readBatch(ctx, tx, sqlBatchGetForUpdate, queue, batchID)
		if err != nil {
			return err
		}
		if b.Version != fromVersion {
			return fmt.Errorf("%w: batch %q is at version %d, not %d", mend.ErrConflict, batchID, b.Version, fromVersion)
		}
		if b.State.Terminal() {
			return fmt.Errorf("%w: batch %q is %s, a terminal state", mend.ErrInvalid, batchID, b.State)
		}
		res, err := tx.ExecContext(ctx, sqlBatchCAS, to, queue, batchID, fromVersion)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			// Unreachable while the row lock holds; kept so a broken lock
			// can never turn into a blind write.
			return errors.Join(fmt.Errorf("%w: batch %q moved under its row lock", mend.ErrConflict, batchID), err)
		}
		if err := moveMembership(ctx, tx, queue, batchID, b.State, to); err != nil {
			return err
		}
		b.State, b.Version = to, fromVersion+1
		out = b
		return nil
	})
	if err != nil {
		return mend.Batch{}, fmt.Errorf("host: transition batch to %s: %w", to, err)
	}
	return out, nil
}

func moveMembership(ctx context.Context, tx *sql.Tx, queue, batchID string, from, to mend.BatchState) error {
	res, err := tx.ExecContext(ctx, sqlMembershipDelete, queue, from, batchID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.Join(fmt.Errorf("host: membership index has no row (%q, %s, %q): the index and sq_batches disagree", queue, from, batchID), err)
	}
	_, err = tx.ExecContext(ctx, sqlMembershipInsert, queue, to, batchID)
	return err
}

const sqlRequestsOfBatch = `-- name: RequestsOfBatch
SELECT id, state, version FROM sq_requests WHERE queue = ? AND batch_id = ? ORDER BY id FOR UPDATE`

const sqlRequestCAS = `-- name: RequestFinish
UPDATE sq_requests SET state = ?, version = version + 1, updated_at = NOW(6)
WHERE queue = ? AND id = ? AND version = ?`

// BatchFinish drives every non-terminal member request of a terminal batch to
// the matching terminal state (succeeded: landed; failed: error; cancelled:
// cancelled), each as a version compare-and-set, in one transaction. Requests
// already terminal, and requests listed by the batch that now belong to
// another batch, are left alone, so calling it again changes nothing.
// Returns mend.ErrNotFound if there is no such batch, mend.ErrInvalid if the
// batch is not terminal and a *mend.ValidationError for bad input.
func (d *DB) BatchFinish(ctx context.Context, queue, batchID string) error {
	if err := validateBatchKey(queue, batchID); err != nil {
		return err
	}
	err := d.withTx(ctx, d.app, "BatchFinish", func(ctx context.Context, tx *sql.Tx) error {
		// A shared lock: the batch cannot change while its outcome fans out.
		b, err := readBatch(ctx, tx, sqlBatchGetShared, queue, batchID)
		if err != nil {
			return err
		}
		target, ok := requestOutcome(b.State)
		if !ok {
			return fmt.Errorf("%w: batch %q is %s, not terminal", mend.ErrInvalid, batchID, b.State)
		}
		type req struct {
			id      string
			state   RequestState
			version int64
		}
		var todo []req
		rows, err := tx.QueryContext(ctx, sqlRequestsOfBatch, queue, batchID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r req
			if err := rows.Scan(&r.id, &r.state, &r.version); err != nil {
				return errors.Join(err, rows.Close())
			}
			if !r.state.Terminal() && slices.Contains(b.Requests, r.id) {
				todo = append(todo, r)
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, r := range todo {
			res, err := tx.ExecContext(ctx, sqlRequestCAS, target, queue, r.id, r.version)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return errors.Join(fmt.Errorf("%w: request %q moved from version %d", mend.ErrConflict, r.id, r.version), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("host: finish batch: %w", err)
	}
	return nil
}

// liveStates are the live batch states in the order the LiveBatches query
// binds them.
var liveStates = mend.LiveBatchStates

// sqlLiveBatches takes the smallest IDs of each live state through the
// membership index (one range scan per state, each stopping after limit
// rows) and merges them. One UNION part per state in liveStates.
var sqlLiveBatches = "-- name: LiveBatches\n" + strings.Repeat(
	"(SELECT batch_id FROM sq_batch_membership WHERE queue = ? AND state = ? ORDER BY batch_id LIMIT ?)\nUNION ALL\n",
	len(liveStates)-1) +
	"(SELECT batch_id FROM sq_batch_membership WHERE queue = ? AND state = ? ORDER BY batch_id LIMIT ?)\n" +
	"ORDER BY batch_id LIMIT ?"

// LiveBatchesMax bounds LiveBatches' limit.
const LiveBatchesMax = 10000

// LiveBatches returns up to limit IDs of the queue's live batches (created,
// speculating, merging, cancelling), smallest ID first by byte order, read
// from the membership index. An empty result means no batch is live.
// Returns a *mend.ValidationError for a bad queue or a limit outside
// 1..LiveBatchesMax.
func (d *DB) LiveBatches(ctx context.Context, queue string, limit int) ([]string, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	if limit < 1 || limit > LiveBatchesMax {
		return nil, &mend.ValidationError{Field: "limit", Reason: fmt.Sprintf("is %d; must be between 1 and %d", limit, LiveBatchesMax)}
	}
	args := make([]any, 0, 3*len(liveStates)+1)
	for _, s := range liveStates {
		args = append(args, queue, s, limit)
	}
	args = append(args, limit)
	rows, err := d.app.QueryContext(ctx, sqlLiveBatches, args...)
	if err != nil {
		return nil, fmt.Errorf("host: live batches: %w", translate(err))
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("host: live batches: %w", translate(err))
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: live batches: %w", translate(err))
	}
	return ids, nil
}

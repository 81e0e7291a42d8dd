package host

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mendq/mend"
)

// Request is a host request row, sq_requests.
type Request struct {
	Queue   string
	ID      string
	BatchID string // the batch that owns the request; empty before batching
	State   RequestState
	Version int64 // starts at 1; +1 per state change
}

const sqlSeedBatch = `-- name: SeedBatch
INSERT INTO sq_batches (queue, id, state, version, requests, created_at, updated_at)
VALUES (?, ?, ?, 1, ?, NOW(6), NOW(6))`

const sqlSeedRequest = `-- name: SeedRequest
INSERT INTO sq_requests (queue, id, batch_id, state, version, created_at, updated_at)
VALUES (?, ?, ?, ?, 1, NOW(6), NOW(6))`

// SeedBatch creates a batch at version 1 in the given state, its membership
// index row and its member requests, in one transaction: the setup step of
// tests, the demo and the end-to-end scenarios. Member requests start in
// state batched if the batch is creating or created and processing otherwise,
// terminal batches included (a batch whose fan-out has not run yet); use
// SetRequestState for anything else.
// Returns mend.ErrConflict if the batch or one of the requests exists, and a
// *mend.ValidationError for bad identities, a duplicate request ID or an
// unknown state.
func (d *DB) SeedBatch(ctx context.Context, queue, id string, state mend.BatchState, requestIDs ...string) error {
	if err := validateBatchKey(queue, id); err != nil {
		return err
	}
	if !validBatchState(state) {
		return &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a batch state", state)}
	}
	seen := make(map[string]bool, len(requestIDs))
	for _, r := range requestIDs {
		if err := mend.ValidateIdentity("request_id", r, true); err != nil {
			return err
		}
		if seen[r] {
			return &mend.ValidationError{Field: "request_id", Reason: fmt.Sprintf("%q is listed twice", r)}
		}
		seen[r] = true
	}
	members, err := json.Marshal(append([]string{}, requestIDs...))
	if err != nil {
		return fmt.Errorf("host: seed batch: %w", err)
	}
	reqState := RequestProcessing
	if state == mend.BatchCreating || state == mend.BatchCreated {
		reqState = RequestBatched
	}
	err = d.withTx(ctx, d.app, "SeedBatch", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlSeedBatch, queue, id, state, string(members)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlMembershipInsert, queue, state, id); err != nil {
			return err
		}
		for _, r := range requestIDs {
			if _, err := tx.ExecContext(ctx, sqlSeedRequest, queue, r, id, reqState); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("host: seed batch %q: %w", id, err)
	}
	return nil
}

const sqlSetRequestState = `-- name: SetRequestState
UPDATE sq_requests SET state = ?, version = version + 1, updated_at = NOW(6) WHERE queue = ? AND id = ?`

// SetRequestState overwrites a request's state, unconditionally, bumping its
// version: a test and demo helper for states SeedBatch does not produce
// (e.g. a request cancelled on its own before its batch finished).
// Returns mend.ErrNotFound if there is no such request.
func (d *DB) SetRequestState(ctx context.Context, queue, requestID string, state RequestState) error {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return err
	}
	if err := mend.ValidateIdentity("request_id", requestID, true); err != nil {
		return err
	}
	if !state.valid() {
		return &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a request state", state)}
	}
	res, err := d.app.ExecContext(ctx, sqlSetRequestState, state, queue, requestID)
	if err != nil {
		return fmt.Errorf("host: set request state: %w", translate(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.Join(fmt.Errorf("host: set request state: %w: request %q in queue %q", mend.ErrNotFound, requestID, queue), err)
	}
	return nil
}

const sqlRequestGet = `-- name: RequestGet
SELECT batch_id, state, version FROM sq_requests WHERE queue = ? AND id = ?`

// Request returns one request. Returns mend.ErrNotFound if there is none.
func (d *DB) Request(ctx context.Context, queue, requestID string) (Request, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return Request{}, err
	}
	if err := mend.ValidateIdentity("request_id", requestID, true); err != nil {
		return Request{}, err
	}
	r := Request{Queue: queue, ID: requestID}
	err := d.app.QueryRowContext(ctx, sqlRequestGet, queue, requestID).Scan(&r.BatchID, &r.State, &r.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return Request{}, fmt.Errorf("host: get request: %w: request %q in queue %q", mend.ErrNotFound, requestID, queue)
	}
	if err != nil {
		return Request{}, fmt.Errorf("host: get request: %w", translate(err))
	}
	return r, nil
}

const sqlRequestsList = `-- name: Requests
SELECT id, state, version FROM sq_requests WHERE queue = ? AND batch_id = ? ORDER BY id`

// Requests returns the requests a batch owns, smallest ID first. A batch
// without requests, or no such batch, gives an empty slice.
func (d *DB) Requests(ctx context.Context, queue, batchID string) ([]Request, error) {
	if err := validateBatchKey(queue, batchID); err != nil {
		return nil, err
	}
	rows, err := d.app.QueryContext(ctx, sqlRequestsList, queue, batchID)
	if err != nil {
		return nil, fmt.Errorf("host: requests: %w", translate(err))
	}
	defer rows.Close()
	out := []Request{}
	for rows.Next() {
		r := Request{Queue: queue, BatchID: batchID}
		if err := rows.Scan(&r.ID, &r.State, &r.Version); err != nil {
			return nil, fmt.Errorf("host: requests: %w", translate(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: requests: %w", translate(err))
	}
	return out, nil
}

// sqlMembershipMissing lists batches without the membership row of their
// current state.
const sqlMembershipMissing = `-- name: MembershipMissing
SELECT b.id, b.state FROM sq_batches b
LEFT JOIN sq_batch_membership m ON m.queue = b.queue AND m.state = b.state AND m.batch_id = b.id
WHERE b.queue = ? AND m.batch_id IS NULL ORDER BY b.id`

// sqlMembershipStray lists membership rows that do not match a batch's
// current state (stale, duplicate or orphaned rows).
const sqlMembershipStray = `-- name: MembershipStray
SELECT m.batch_id, m.state FROM sq_batch_membership m
LEFT JOIN sq_batches b ON b.queue = m.queue AND b.id = m.batch_id AND b.state = m.state
WHERE m.queue = ? AND b.id IS NULL ORDER BY m.batch_id`

// CheckMembership verifies that the queue's membership index holds exactly
// one row per batch, naming the batch's current state. It returns nil if so
// and otherwise an error listing every disagreement: the invariant tests and
// the end-to-end scenarios assert after they run.
func (d *DB) CheckMembership(ctx context.Context, queue string) error {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return err
	}
	var problems []string
	for _, q := range []struct{ query, what string }{
		{sqlMembershipMissing, "batch %q is %s but the index has no such row"},
		{sqlMembershipStray, "index row (%q, %s) matches no batch in that state"},
	} {
		rows, err := d.app.QueryContext(ctx, q.query, queue)
		if err != nil {
			return fmt.Errorf("host: check membership: %w", translate(err))
		}
		for rows.Next() {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				return errors.Join(fmt.Errorf("host: check membership: %w", translate(err)), rows.Close())
			}
			problems = append(problems, fmt.Sprintf(q.what, id, state))
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return fmt.Errorf("host: check membership: %w", translate(err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("host: membership index of queue %q disagrees with sq_batches: %s", queue, strings.Join(problems, "; "))
	}
	return nil
}

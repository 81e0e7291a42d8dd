package sqtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// World is a submit queue's two databases as tests and the demo drive them:
// the application database (batches, requests, builds) and the queue
// database (messages, DLQ rows). They may be one database.
//
// Its writes follow the real system's protocols (fact sheet §3-§5) so that
// what mend finds is what it would find in production: a batch row and its
// advisory membership row written separately, requests at version 1, a
// publish that names all twelve message columns, a move to the DLQ that
// copies the row under topic <T>_dlq.
type World struct {
	App   *sql.DB
	Queue *sql.DB
	// NowMS is the message store's clock, in epoch milliseconds; nil means
	// the wall clock.
	NowMS func() int64
}

func (w World) now() int64 {
	if w.NowMS != nil {
		return w.NowMS()
	}
	return time.Now().UnixMilli()
}

// Batch is a row of table batch.
type Batch struct {
	Queue, ID    string
	Contains     []string
	Dependencies []string
	State        string
	Version      int32
}

// Request is a row of table request.
type Request struct {
	Queue, ID    string
	LandStrategy string
	State        string
	Version      int32
}

// SeedBatch inserts a batch at version 1 with its members and, unless the
// state is creating, the membership row of that state, the way enrolment
// leaves a batch: each member request at state batched and version 1, with
// its request_batch row. Use Transition, SetRequestState and the raw
// databases for anything else.
func (w World) SeedBatch(ctx context.Context, queue, id, state string, requests ...string) error {
	contains, err := json.Marshal(append([]string{}, requests...))
	if err != nil {
		return err
	}
	if _, err := w.App.ExecContext(ctx, "INSERT INTO batch (queue, id, contains, dependencies, state, version) VALUES (?, ?, ?, '[]', ?, 1)",
		queue, id, string(contains), state); err != nil {
		return fmt.Errorf("sqtest: seed batch %q: %w", id, err)
	}
	if state != "creating" {
		if err := w.AddMembership(ctx, queue, state, id); err != nil {
			return err
		}
	}
	for _, r := range requests {
		if _, err := w.App.ExecContext(ctx, "INSERT INTO request (queue, id, change_uri, land_strategy, state, version) VALUES (?, ?, ?, 'rebase', 'batched', 1)",
			queue, r, `{"uri":"change://`+r+`"}`); err != nil {
			return fmt.Errorf("sqtest: seed request %q: %w", r, err)
		}
		if _, err := w.App.ExecContext(ctx, "INSERT INTO request_batch (queue, request_id, batch_id, version) VALUES (?, ?, ?, 1)", queue, r, id); err != nil {
			return fmt.Errorf("sqtest: seed request_batch %q: %w", r, err)
		}
	}
	return nil
}

// AddMembership inserts a queue_batch_state row (a duplicate is ignored, as
// the real Transition's INSERT IGNORE does).
func (w World) AddMembership(ctx context.Context, queue, state, batchID string) error {
	if _, err := w.App.ExecContext(ctx, "INSERT IGNORE INTO queue_batch_state (queue, state, batch_id) VALUES (?, ?, ?)", queue, state, batchID); err != nil {
		return fmt.Errorf("sqtest: membership %q/%s: %w", batchID, state, err)
	}
	return nil
}

// DropMembership deletes a queue_batch_state row, if any.
func (w World) DropMembership(ctx context.Context, queue, state, batchID string) error {
	if _, err := w.App.ExecContext(ctx, "DELETE FROM queue_batch_state WHERE queue = ? AND state = ? AND batch_id = ?", queue, state, batchID); err != nil {
		return fmt.Errorf("sqtest: drop membership %q/%s: %w", batchID, state, err)
	}
	return nil
}

// Transition moves a batch the way the real system does (core/batch
// transition.go): CAS on the version, then INSERT IGNORE the new membership
// row, then delete the old one. It reports false if the CAS matched nothing.
func (w World) Transition(ctx context.Context, queue, id string, from int32, oldState, newState string) (bool, error) {
	res, err := w.App.ExecContext(ctx, "UPDATE batch SET state = ?, version = ? WHERE queue = ? AND id = ? AND version = ?",
		newState, from+1, queue, id, from)
	if err != nil {
		return false, fmt.Errorf("sqtest: transition %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return false, nil
	}
	if err := w.AddMembership(ctx, queue, newState, id); err != nil {
		return true, err
	}
	if oldState != newState {
		return true, w.DropMembership(ctx, queue, oldState, id)
	}
	return true, nil
}

// SetRequestState overwrites a request's state and bumps its version.
func (w World) SetRequestState(ctx context.Context, queue, id, state string) error {
	res, err := w.App.ExecContext(ctx, "UPDATE request SET state = ?, version = version + 1 WHERE queue = ? AND id = ?", state, queue, id)
	if err != nil {
		return fmt.Errorf("sqtest: set request %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("sqtest: set request %q: no such request", id)
	}
	return nil
}

// SeedBuild inserts a build row mapping a runner build ID to its batch.
func (w World) SeedBuild(ctx context.Context, queue, buildID, batchID string) error {
	if _, err := w.App.ExecContext(ctx, "INSERT INTO build (queue, id, batch_id, path_id, attempt, status) VALUES (?, ?, ?, 'path-1', 1, 'running')",
		queue, buildID, batchID); err != nil {
		return fmt.Errorf("sqtest: seed build %q: %w", buildID, err)
	}
	return nil
}

// ErrNoRow is returned by the readers when the row does not exist.
var ErrNoRow = errors.New("sqtest: no such row")

// Batch reads a batch. The server's collation decides the match, as in the
// real system; compare the returned ID with what you asked for.
func (w World) Batch(ctx context.Context, queue, id string) (Batch, error) {
	b := Batch{}
	var contains, deps []byte
	err := w.App.QueryRowContext(ctx, "SELECT queue, id, contains, dependencies, state, version FROM batch WHERE queue = ? AND id = ?", queue, id).
		Scan(&b.Queue, &b.ID, &contains, &deps, &b.State, &b.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return Batch{}, fmt.Errorf("%w: batch %q in %q", ErrNoRow, id, queue)
	}
	if err != nil {
		return Batch{}, fmt.Errorf("sqtest: read batch %q: %w", id, err)
	}
	if err := json.Unmarshal(contains, &b.Contains); err != nil {
		return Batch{}, fmt.Errorf("sqtest: batch %q contains: %w", id, err)
	}
	if err := json.Unmarshal(deps, &b.Dependencies); err != nil {
		return Batch{}, fmt.Errorf("sqtest: batch %q dependencies: %w", id, err)
	}
	return b, nil
}

// Request reads a request.
func (w World) Request(ctx context.Context, queue, id string) (Request, error) {
	r := Request{}
	err := w.App.QueryRowContext(ctx, "SELECT queue, id, land_strategy, state, version FROM request WHERE queue = ? AND id = ?", queue, id).
		Scan(&r.Queue, &r.ID, &r.LandStrategy, &r.State, &r.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return Request{}, fmt.Errorf("%w: request %q in %q", ErrNoRow, id, queue)
	}
	if err != nil {
		return Request{}, fmt.Errorf("sqtest: read request %q: %w", id, err)
	}
	return r, nil
}

// Membership lists the queue's queue_batch_state rows as "state/batch_id",
// sorted by bytes.
func (w World) Membership(ctx context.Context, queue string) ([]string, error) {
	rows, err := w.App.QueryContext(ctx, "SELECT state, batch_id FROM queue_batch_state WHERE queue = ?", queue)
	if err != nil {
		return nil, fmt.Errorf("sqtest: membership: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s, id string
		if err := rows.Scan(&s, &id); err != nil {
			return nil, err
		}
		out = append(out, s+"/"+id)
	}
	slices.Sort(out)
	return out, rows.Err()
}

// PadSpace asks the server how the application table's collation compares
// trailing spaces: true for a PAD SPACE collation (MariaDB's default
// utf8mb4_general_ci: 'a' = 'a '), false for NO PAD (MySQL 8's default
// utf8mb4_0900_ai_ci). Tests use it to expect what the engine actually
// returns for a trailing-space spelling, rather than branching on the
// product name. table is one of the app tables (batch, request, build).
func (w World) PadSpace(ctx context.Context, table string) (bool, error) {
	var coll string
	err := w.App.QueryRowContext(ctx, `SELECT TABLE_COLLATION FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table).Scan(&coll)
	if err != nil {
		return false, fmt.Errorf("sqtest: collation of %s: %w", table, err)
	}
	if !collationName.MatchString(coll) {
		return false, fmt.Errorf("sqtest: collation of %s is %q, not a collation name", table, coll)
	}
	var same bool
	// A collation name cannot be a parameter; it was checked above.
	err = w.App.QueryRowContext(ctx, "SELECT _utf8mb4'a' COLLATE "+coll+" = _utf8mb4'a '").Scan(&same)
	if err != nil {
		return false, fmt.Errorf("sqtest: compare under %s: %w", coll, err)
	}
	return same, nil
}

var collationName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

package host

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mendq/mend"
)

// maxVersion is the largest version the host can store: batch.version and
// request.version are INT columns.
const maxVersion = math.MaxInt32

func validBatchState(s mend.BatchState) bool {
	return s.Live() || s.Terminal() || s == mend.BatchCreating
}

func validateBatchKey(queue, batchID string) error {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return err
	}
	return mend.ValidateIdentity("batch_id", batchID, true)
}

// sameBytes checks that a row the server's collation matched is the row
// asked for, byte for byte. The application tables compare case- and
// accent-insensitively with PAD SPACE, so "Q/batch/1" finds "q/batch/1" and
// "x" finds "x "; to mend, whose identities are byte-exact, that row is not
// the one asked for.
func sameBytes(field, asked, stored string) error {
	if asked != stored {
		return &mend.SpellingError{Field: field, Asked: asked, Stored: stored}
	}
	return nil
}

const sqlBatchGet = `-- name: BatchGet
SELECT queue, id, contains, state, version FROM batch WHERE queue = ? AND id = ?`

// readBatch reads a batch by its primary key and checks that the row found
// is spelled exactly as asked.
func (d *DB) readBatch(ctx context.Context, queue, batchID string) (mend.Batch, error) {
	var (
		b        mend.Batch
		contains []byte
	)
	err := d.app.QueryRowContext(ctx, sqlBatchGet, queue, batchID).Scan(&b.Queue, &b.ID, &contains, &b.State, &b.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return mend.Batch{}, fmt.Errorf("%w: batch %q in queue %q", mend.ErrNotFound, batchID, queue)
	}
	if err != nil {
		return mend.Batch{}, translate(err)
	}
	if err := sameBytes("batch_id", batchID, b.ID); err != nil {
		return mend.Batch{}, err
	}
	if err := sameBytes("queue", queue, b.Queue); err != nil {
		return mend.Batch{}, err
	}
	return decodeBatch(b, contains)
}

// decodeBatch checks a batch row's version and decodes its members.
func decodeBatch(b mend.Batch, contains []byte) (mend.Batch, error) {
	if b.Version < 1 || b.Version > maxVersion {
		return mend.Batch{}, fmt.Errorf("host: batch %q has version %d, outside the host's 1..%d", b.ID, b.Version, maxVersion)
	}
	if err := json.Unmarshal(contains, &b.Requests); err != nil {
		return mend.Batch{}, fmt.Errorf("host: batch %q: contains is not a JSON array of request IDs: %w", b.ID, err)
	}
	return b, nil
}

// BatchGet returns the batch's current state, version and member request
// IDs (batch.contains, in stored order).
//
// Returns mend.ErrNotFound if the queue has no such batch; a
// *mend.SpellingError (which matches mend.ErrNotFound) if the host's
// collation matched a row spelled differently (other case, trailing
// spaces); a *mend.ValidationError for an unstorable queue or batch ID.
func (d *DB) BatchGet(ctx context.Context, queue, batchID string) (mend.Batch, error) {
	if err := validateBatchKey(queue, batchID); err != nil {
		return mend.Batch{}, err
	}
	b, err := d.readBatch(ctx, queue, batchID)
	if err != nil {
		return mend.Batch{}, fmt.Errorf("host: get batch: %w", err)
	}
	return b, nil
}

// sqlBatchCAS is step 1 of the real Transition with an absolute version.
// It also names the state the caller saw at that version: a version is
// only ever bumped together with the state, so the pair pins the row
// exactly, and a batch read as terminal never gets here.
const sqlBatchCAS = `-- name: BatchTransition
UPDATE batch SET state = ?, version = ? WHERE queue = ? AND id = ? AND version = ? AND state = ?`

// sqlMembershipEnsure is step 2 of the real Transition and the whole of
// its EnsureRecord. INSERT IGNORE is what the real system runs here, and
// it is kept on purpose: membership rows are advisory, a duplicate is the
// normal case, and every value was validated to fit before it is sent
// (mend's rule against INSERT IGNORE is for its own tables, where it would
// hide truncation of identities it owns).
const sqlMembershipEnsure = `-- name: MembershipEnsure
INSERT IGNORE INTO queue_batch_state (queue, state, batch_id) VALUES (?, ?, ?)`

// sqlMembershipDelete is step 3 of the real Transition. Deleting nothing is
// fine: the row may never have been written.
const sqlMembershipDelete = `-- name: MembershipDelete
DELETE FROM queue_batch_state WHERE queue = ? AND state = ? AND batch_id = ?`

// BatchTransition moves the batch to state to as a compare-and-set from
// fromVersion, the way the submit queue itself does, in three autocommit
// statements: the CAS on batch (version = fromVersion+1, absolute), then
// the membership row of the new state (a duplicate is fine), then, if the
// state changed, the deletion of the old state's membership row (a missing
// one is fine). It returns the batch as it now is.
//
// A crash between the steps leaves the membership rows stale or missing,
// exactly as the host's own transitions can; batch.state stays the
// authority, LiveBatches filters on it, and BatchFinish re-creates the
// terminal state's row.
//
// Returns mend.ErrConflict if the version moved (re-read and decide again);
// mend.ErrNotFound if there is no such batch (never ErrConflict); a
// *mend.SpellingError if the row found is spelled differently;
// mend.ErrInvalid if the batch is terminal (a terminal batch never changes
// state again); a *mend.ValidationError for bad input, including a
// fromVersion whose successor the host's INT column cannot hold.
func (d *DB) BatchTransition(ctx context.Context, queue, batchID string, fromVersion int64, to mend.BatchState) (mend.Batch, error) {
	if err := validateBatchKey(queue, batchID); err != nil {
		return mend.Batch{}, err
	}
	if !validBatchState(to) {
		return mend.Batch{}, &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a batch state", to)}
	}
	if fromVersion < 1 || fromVersion >= maxVersion {
		return mend.Batch{}, &mend.ValidationError{Field: "version", Reason: fmt.Sprintf("is %d; must be between 1 and %d so that the next version fits the host's INT column", fromVersion, maxVersion-1)}
	}
	wrap := func(err error) error { return fmt.Errorf("host: transition batch %q to %s: %w", batchID, to, err) }

	// The old state names the membership row to delete, and a terminal
	// batch must be refused; the real protocol's caller has read the batch
	// for the same reasons. BatchTransitionFrom spares this read.
	b, err := d.readBatch(ctx, queue, batchID)
	if err != nil {
		return mend.Batch{}, wrap(err)
	}
	if err := checkFrom(b, fromVersion); err != nil {
		return mend.Batch{}, wrap(err)
	}
	if err := checkMemberIDs(b.Requests, to); err != nil {
		return mend.Batch{}, wrap(err)
	}
	b, err = d.transition(ctx, b, to)
	if err != nil {
		return mend.Batch{}, wrap(err)
	}
	return b, nil
}

// BatchTransitionFrom is BatchTransition from b, the batch as BatchGet
// returned it, without reading it again: the compare-and-set names b's
// version and state, which pin the row exactly (a version is only ever
// bumped together with the state), so a batch that moved since is a
// conflict, as it would be after a fresh read. It implements
// planner.BatchesAsRead; the errors are BatchTransition's.
func (d *DB) BatchTransitionFrom(ctx context.Context, b mend.Batch, to mend.BatchState) (mend.Batch, error) {
	if err := checkTransition(b, to); err != nil {
		return mend.Batch{}, err
	}
	moved, err := d.transition(ctx, b, to)
	if err != nil {
		return mend.Batch{}, fmt.Errorf("host: transition batch %q to %s: %w", b.ID, to, err)
	}
	return moved, nil
}

// transition runs the three steps of the real Transition from b, a live
// batch as read, to state to.
func (d *DB) transition(ctx context.Context, b mend.Batch, to mend.BatchState) (mend.Batch, error) {
	from, fromVersion := b.State, b.Version
	res, err := d.exec(ctx, d.app, "BatchTransition", sqlBatchCAS, to, fromVersion+1, b.Queue, b.ID, fromVersion, from)
	if err != nil {
		return mend.Batch{}, err
	}
	// Counting changed rows is enough: the version always changes.
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		// Tell a vanished row from a moved one by reading again: a missing
		// row is never a conflict.
		now, rerr := d.readBatch(ctx, b.Queue, b.ID)
		if rerr != nil {
			return mend.Batch{}, errors.Join(rerr, err)
		}
		if cerr := checkFrom(now, fromVersion); cerr != nil {
			return mend.Batch{}, cerr
		}
		return mend.Batch{}, errors.Join(fmt.Errorf("%w: batch changed under the compare-and-set (%d rows changed)", mend.ErrConflict, n), err)
	}
	if _, err := d.exec(ctx, d.app, "MembershipEnsure", sqlMembershipEnsure, b.Queue, to, b.ID); err != nil {
		return mend.Batch{}, fmt.Errorf("batch moved, membership row of %s not written: %w", to, err)
	}
	if from != to {
		if _, err := d.exec(ctx, d.app, "MembershipDelete", sqlMembershipDelete, b.Queue, from, b.ID); err != nil {
			return mend.Batch{}, fmt.Errorf("batch moved, membership row of %s not deleted: %w", from, err)
		}
	}
	b.State, b.Version = to, fromVersion+1
	return b, nil
}

// checkFrom says why a batch read at b cannot move from fromVersion.
func checkFrom(b mend.Batch, fromVersion int64) error {
	switch {
	case b.Version != fromVersion:
		return fmt.Errorf("%w: batch is at version %d, not %d", mend.ErrConflict, b.Version, fromVersion)
	case b.State.Terminal():
		return fmt.Errorf("%w: batch is %s, a terminal state", mend.ErrInvalid, b.State)
	}
	return nil
}

// LiveBatchesMax bounds LiveBatches' limit.
const LiveBatchesMax = 10000

// requestChunk is how many member requests one fan-out statement reads and
// moves, of one batch or of several.
const requestChunk = 256

// sqlLiveBatches is the real ListByStates in one statement: the membership
// rows of the live states, each joined with its batch by primary key. The
// join is the collation's; the adapter compares the bytes.
const sqlLiveBatches = `-- name: LiveBatches
SELECT m.queue, m.state, m.batch_id, b.queue AS batch_queue, b.id, b.state AS batch_state
FROM queue_batch_state m LEFT JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id
WHERE m.queue = ? AND m.state IN (?, ?, ?, ?)`

// LiveBatches returns up to limit IDs of the queue's live batches (created,
// speculating, merging, cancelling), smallest first in byte order, as the
// real ListByStates finds them: the membership rows of the live states,
// deduplicated, each batch hydrated by primary key and kept only if its own
// batch.state is live and its stored queue and ID are byte-equal to the
// membership row's. Stale rows are skipped, so limit live batches are
// returned whenever that many exist. A live batch without a membership row
// is invisible here, as it is to the host's own planner.
//
// A membership row naming no batch (dangling) is reported to
// Options.OnDangling and the log and skipped; unlike the real ListByStates
// it does not fail the call. A row whose batch the collation matched under
// another spelling is logged and skipped. The order is decided in Go, never
// by the server's collation, which is neither byte order nor stable across
// MySQL and MariaDB.
//
// Cost: one statement, reading the queue's live-state membership rows (the
// same rows the host's planner reads on every run) joined with their
// batches by primary key.
//
// Returns a *mend.ValidationError for a bad queue or a limit outside
// 1..LiveBatchesMax.
func (d *DB) LiveBatches(ctx context.Context, queue string, limit int) ([]string, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return nil, err
	}
	if limit < 1 || limit > LiveBatchesMax {
		return nil, &mend.ValidationError{Field: "limit", Reason: fmt.Sprintf("is %d; must be between 1 and %d", limit, LiveBatchesMax)}
	}
	args := []any{queue}
	for _, s := range mend.LiveBatchStates {
		args = append(args, string(s))
	}
	rows, err := d.app.QueryContext(ctx, sqlLiveBatches, args...)
	if err != nil {
		return nil, fmt.Errorf("host: live batches: %w", translate(err))
	}
	defer rows.Close()
	type member struct {
		states   []string
		found    bool // a batch row byte-equal to the membership row
		live     bool
		variants []string // batch rows the collation matched under another spelling
	}
	members := map[string]*member{}
	for rows.Next() {
		var q, state, id string
		var bq, bid, bstate sql.NullString
		if err := rows.Scan(&q, &state, &id, &bq, &bid, &bstate); err != nil {
			return nil, fmt.Errorf("host: live batches: %w", translate(err))
		}
		if q != queue {
			continue // another queue, to mend's byte-exact eyes
		}
		m := members[id]
		if m == nil {
			m = &member{}
			members[id] = m
		}
		m.states = append(m.states, state)
		switch {
		case !bid.Valid:
		case bq.String == queue && bid.String == id:
			m.found, m.live = true, mend.BatchState(bstate.String).Live()
		default:
			m.variants = append(m.variants, bq.String+"/"+bid.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: live batches: %w", translate(err))
	}
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids) // Go compares strings by bytes
	live := []string{}
	for _, id := range ids {
		m := members[id]
		switch {
		case m.found && m.live:
			if live = append(live, id); len(live) == limit {
				return live, nil
			}
		case m.found:
			// a stale membership row: the batch moved on
		case len(m.variants) > 0:
			d.log.WarnContext(ctx, "membership row names a batch spelled differently; skipped",
				"queue", queue, "batch_id", id, "stored", m.variants, "states", m.states)
		default:
			for _, s := range m.states {
				d.log.WarnContext(ctx, "membership row names no batch; skipped", "queue", queue, "batch_id", id, "state", s)
				if d.onDangling != nil {
					d.onDangling(queue, id, s)
				}
			}
		}
	}
	return live, nil
}

const sqlBuildGet = `-- name: BuildBatch
SELECT queue, id, batch_id FROM build WHERE queue = ? AND id = ?`

// BuildBatch returns the ID of the batch a runner build belongs to, from
// the host's build table: how a buildsignal dead letter, which names only
// the build, is traced to its batch.
//
// Returns mend.ErrNotFound if the queue has no such build; a
// *mend.SpellingError if the row found is spelled differently; a
// *mend.ValidationError for an unstorable queue or build ID.
func (d *DB) BuildBatch(ctx context.Context, queue, buildID string) (string, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return "", err
	}
	if err := mend.ValidateIdentity("build_id", buildID, true); err != nil {
		return "", err
	}
	var q, id, batchID string
	err := d.app.QueryRowContext(ctx, sqlBuildGet, queue, buildID).Scan(&q, &id, &batchID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", fmt.Errorf("host: build batch: %w: build %q in queue %q", mend.ErrNotFound, buildID, queue)
	case err != nil:
		return "", fmt.Errorf("host: build batch: %w", translate(err))
	}
	if err := errors.Join(sameBytes("build_id", buildID, id), sameBytes("queue", queue, q)); err != nil {
		return "", fmt.Errorf("host: build batch: %w", err)
	}
	return batchID, nil
}

// batchChunk is how many batches one statement of the batched path
// (BatchGetMany, BatchTransitionMany, BatchFinishMany) names at most, so a
// very large run still sends bounded statements.
const batchChunk = 256

// sqlBatchGetMany reads batches by primary key; the caller appends one
// placeholder per ID and the closing parenthesis.
const sqlBatchGetMany = `-- name: BatchGetMany
SELECT queue, id, contains, state, version FROM batch WHERE queue = ? AND id IN (`

// BatchGetMany is BatchGet of every ID in ids, all in queue, with one
// statement (per batchChunk IDs). It returns one batch and one error per
// ID, in order; errs[i] is what BatchGet would return for ids[i]. A row
// the collation matched under another spelling sends that ID alone through
// BatchGet's read, which names both spellings. It implements
// planner.BatchesMany.
func (d *DB) BatchGetMany(ctx context.Context, queue string, ids []string) ([]mend.Batch, []error) {
	out, errs := make([]mend.Batch, len(ids)), make([]error, len(ids))
	var valid []string
	seen := map[string]bool{}
	for i, id := range ids {
		if err := validateBatchKey(queue, id); err != nil {
			errs[i] = err
		} else if !seen[id] {
			seen[id] = true
			valid = append(valid, id)
		}
	}
	found, failed := map[string]mend.Batch{}, map[string]error{}
	for chunk := range slices.Chunk(valid, batchChunk) {
		d.readBatches(ctx, queue, chunk, found, failed)
	}
	for i, id := range ids {
		switch {
		case errs[i] != nil:
		case failed[id] != nil:
			errs[i] = fmt.Errorf("host: get batch: %w", failed[id])
		default:
			out[i] = found[id]
		}
	}
	return out, errs
}

// readBatches reads the batches ids of queue with one statement into found
// (the rows spelled exactly as asked) and failed (every other ID, with
// readBatch's error for it).
func (d *DB) readBatches(ctx context.Context, queue string, ids []string, found map[string]mend.Batch, failed map[string]error) {
	fail := func(err error) {
		for _, id := range ids {
			failed[id] = err
		}
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, queue)
	asked := make(map[string]bool, len(ids))
	for _, id := range ids {
		args = append(args, id)
		asked[id] = true
	}
	rows, err := d.app.QueryContext(ctx, sqlBatchGetMany+strings.Repeat("?, ", len(ids)-1)+"?)", args...)
	if err != nil {
		fail(translate(err))
		return
	}
	defer rows.Close()
	odd := false // a row the collation matched for an ID spelled otherwise
	for rows.Next() {
		var (
			b        mend.Batch
			contains []byte
		)
		if err := rows.Scan(&b.Queue, &b.ID, &contains, &b.State, &b.Version); err != nil {
			fail(translate(err))
			return
		}
		if b.Queue != queue || !asked[b.ID] {
			odd = true
			continue
		}
		if got, err := decodeBatch(b, contains); err != nil {
			failed[b.ID] = err
		} else {
			found[b.ID] = got
		}
	}
	if err := rows.Err(); err != nil {
		fail(translate(err))
		return
	}
	for _, id := range ids {
		_, ok := found[id]
		switch {
		case ok || failed[id] != nil:
		case odd:
			// Which ID the odd row answers to, and its spelling, is for
			// the one-batch read to say.
			if b, err := d.readBatch(ctx, queue, id); err != nil {
				failed[id] = err
			} else {
				found[id] = b
			}
		default:
			failed[id] = fmt.Errorf("%w: batch %q in queue %q", mend.ErrNotFound, id, queue)
		}
	}
}

// sqlBatchCASMany is step 1 of the real Transition for several batches in
// one statement: the caller appends "WHEN ? THEN ?" per batch (its ID and
// new state), sqlBatchCASManyWhere, and one "(id = ? AND version = ? AND
// state = ?)" per batch joined by OR and the closing parenthesis. With
// every version pinned, version + 1 is the real absolute version.
const sqlBatchCASMany = `-- name: BatchTransitionMany
UPDATE batch SET state = CASE id `

const sqlBatchCASManyWhere = ` END, version = version + 1 WHERE queue = ? AND (`

// sqlMembershipEnsureRow and sqlMembershipDeleteRow extend
// sqlMembershipEnsure and sqlMembershipDeleteMany by one batch.
const (
	sqlMembershipEnsureRow  = `, (?, ?, ?)`
	sqlMembershipDeleteMany = `-- name: MembershipDeleteMany
DELETE FROM queue_batch_state WHERE queue = ? AND (`
)

// BatchTransitionMany is BatchTransitionFrom of bs[i] to to[i] for every
// i, the batches all of one queue, in three statements per batchChunk
// batches whatever their number: the compare-and-set of all of them (each
// pinned to its own version and state), the membership rows of the new
// states (one INSERT IGNORE), the deletion of the old states' rows (one
// DELETE); the real Transition's three steps in its order, for each batch.
//
// It returns one batch and one error per item, in order: the batch as it
// now is, or BatchTransitionFrom's error for it. When the compare-and-set
// changed fewer rows than it named, the batches are read again with one
// statement and each is judged alone: one at the version and state the
// compare-and-set gives was moved (by this call or by a writer that did
// the very same thing), one elsewhere is mend.ErrConflict, a vanished one
// mend.ErrNotFound. A conflict on one batch never holds back the others.
// A batch named twice is moved once; its later items are mend.ErrConflict,
// so the caller reads it again and decides. It implements
// planner.BatchesMany.
func (d *DB) BatchTransitionMany(ctx context.Context, bs []mend.Batch, to []mend.BatchState) ([]mend.Batch, []error) {
	out, errs := make([]mend.Batch, len(bs)), make([]error, len(bs))
	if len(to) != len(bs) {
		for i := range errs {
			errs[i] = &mend.ValidationError{Field: "transitions", Reason: fmt.Sprintf("%d batches, %d states", len(bs), len(to))}
		}
		return out, errs
	}
	var valid []int
	seen := map[string]bool{}
	for i, b := range bs {
		wrap := func(err error) error { return fmt.Errorf("host: transition batch %q to %s: %w", b.ID, to[i], err) }
		switch {
		case b.Queue != bs[0].Queue:
			errs[i] = &mend.ValidationError{Field: "transitions", Reason: "all batches must be in one queue"}
		case seen[b.ID]:
			errs[i] = wrap(fmt.Errorf("%w: batch named twice in one call; the first item moves it", mend.ErrConflict))
		default:
			errs[i] = checkTransition(b, to[i])
		}
		if errs[i] != nil {
			continue
		}
		seen[b.ID] = true
		valid = append(valid, i)
	}
	for chunk := range slices.Chunk(valid, batchChunk) {
		d.transitionChunk(ctx, bs, to, chunk, out, errs)
	}
	return out, errs
}

// checkTransition is BatchTransitionFrom's check of its input.
func checkTransition(b mend.Batch, to mend.BatchState) error {
	if err := validateBatchKey(b.Queue, b.ID); err != nil {
		return err
	}
	if !validBatchState(to) {
		return &mend.ValidationError{Field: "state", Reason: fmt.Sprintf("%q is not a batch state", to)}
	}
	if b.Version < 1 || b.Version >= maxVersion {
		return &mend.ValidationError{Field: "version", Reason: fmt.Sprintf("is %d; must be between 1 and %d so that the next version fits the host's INT column", b.Version, maxVersion-1)}
	}
	wrap := func(err error) error { return fmt.Errorf("host: transition batch %q to %s: %w", b.ID, to, err) }
	if err := checkFrom(b, b.Version); err != nil {
		return wrap(err)
	}
	if err := checkMemberIDs(b.Requests, to); err != nil {
		return wrap(err)
	}
	return nil
}

// transitionChunk moves the items idx of bs, validated and distinct.
func (d *DB) transitionChunk(ctx context.Context, bs []mend.Batch, to []mend.BatchState, idx []int, out []mend.Batch, errs []error) {
	queue := bs[idx[0]].Queue
	wrap := func(i int, err error) error {
		return fmt.Errorf("host: transition batch %q to %s: %w", bs[i].ID, to[i], err)
	}
	var q strings.Builder
	q.WriteString(sqlBatchCASMany)
	args := make([]any, 0, 5*len(idx)+1)
	for _, i := range idx {
		q.WriteString("WHEN ? THEN ? ")
		args = append(args, bs[i].ID, to[i])
	}
	q.WriteString(sqlBatchCASManyWhere)
	args = append(args, queue)
	for n, i := range idx {
		if n > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(id = ? AND version = ? AND state = ?)")
		args = append(args, bs[i].ID, bs[i].Version, bs[i].State)
	}
	q.WriteString(")")
	res, err := d.exec(ctx, d.app, "BatchTransitionMany", q.String(), args...)
	if err != nil {
		for _, i := range idx {
			errs[i] = wrap(i, err)
		}
		return
	}
	var moved []int
	if n, err := res.RowsAffected(); err == nil && (n == int64(len(idx)) || d.trustRowCount) {
		moved = idx
	} else {
		// Some did not move: read them all again and judge each alone.
		ids := make([]string, len(idx))
		for n, i := range idx {
			ids[n] = bs[i].ID
		}
		found, failed := map[string]mend.Batch{}, map[string]error{}
		d.readBatches(ctx, queue, ids, found, failed)
		for _, i := range idx {
			now, ok := found[bs[i].ID]
			switch {
			case !ok:
				errs[i] = wrap(i, failed[bs[i].ID])
			case now.Version == bs[i].Version+1 && now.State == to[i]:
				moved = append(moved, i)
			default:
				errs[i] = wrap(i, fmt.Errorf("%w: batch is %s at version %d, not %s at %d", mend.ErrConflict, now.State, now.Version, bs[i].State, bs[i].Version))
			}
		}
	}
	if len(moved) == 0 {
		return
	}
	ensure := make([]any, 0, 3*len(moved))
	var del []any
	for _, i := range moved {
		ensure = append(ensure, queue, to[i], bs[i].ID)
		if bs[i].State != to[i] {
			del = append(del, bs[i].State, bs[i].ID)
		}
	}
	_, err = d.exec(ctx, d.app, "MembershipEnsure", sqlMembershipEnsure+strings.Repeat(sqlMembershipEnsureRow, len(moved)-1), ensure...)
	if err != nil {
		err = fmt.Errorf("batch moved, membership rows of the new states not written: %w", err)
	} else if len(del) > 0 {
		conds := strings.Repeat(" OR (state = ? AND batch_id = ?)", len(del)/2)[4:]
		if _, err = d.exec(ctx, d.app, "MembershipDelete", sqlMembershipDeleteMany+conds+")", append([]any{queue}, del...)...); err != nil {
			err = fmt.Errorf("batch moved, membership rows of the old states not deleted: %w", err)
		}
	}
	for _, i := range moved {
		if err != nil {
			errs[i] = wrap(i, err)
			continue
		}
		b := bs[i]
		b.State, b.Version = to[i], b.Version+1
		out[i] = b
	}
}

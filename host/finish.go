package host

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// The terminal request states of the host. A request's other states
// (started, validated, batched, processing, cancelling) are all non-terminal
// to the fan-out, whatever their name.
const (
	RequestLanded    = "landed"
	RequestError     = "error"
	RequestCancelled = "cancelled"
)

// LogTopic is the topic the gateway consumes RequestLog entries from.
const LogTopic = "log"

// requestRetries bounds how often a request whose version moved under the
// fan-out's compare-and-set is read and tried again.
const requestRetries = 5

func requestTerminal(s string) bool {
	return s == RequestLanded || s == RequestError || s == RequestCancelled
}

// requestTarget maps a terminal batch state to its member requests' state,
// as the real Conclude does.
func requestTarget(s mend.BatchState) (string, bool) {
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

// requestLog is the RequestLog payload the gateway's materializer reads,
// key for key as the real TerminateRequest writes it.
type requestLog struct {
	RequestID      string            `json:"request_id"`
	Queue          string            `json:"queue"`
	TimestampMS    int64             `json:"timestamp_ms"`
	Type           string            `json:"type"`
	Status         string            `json:"status"`
	Event          string            `json:"event"`
	RequestVersion int64             `json:"request_version"`
	LastError      string            `json:"last_error"`
	Metadata       map[string]string `json:"metadata"`
}

// logMetadata is the RequestLog metadata of the real DLQ path, built from
// what the intake copied out of the dead letter: dlq.original_topic,
// dlq.failure_count, dlq.failed_at (epoch ms) and dlq.subject.<type> (the
// subjects' IDs of that type, comma-joined), each only when known, plus
// mend.repaired_by. All values are strings, as the gateway reads them.
func logMetadata(cause mend.Snapshot) map[string]string {
	m := map[string]string{"mend.repaired_by": "mend"}
	if cause.OriginalTopic != "" {
		m["dlq.original_topic"] = cause.OriginalTopic
	}
	if cause.FailureCount > 0 {
		m["dlq.failure_count"] = strconv.Itoa(cause.FailureCount)
	}
	if !cause.FailedAt.IsZero() {
		m["dlq.failed_at"] = strconv.FormatInt(cause.FailedAt.UnixMilli(), 10)
	}
	for _, s := range cause.Subjects {
		if s.Kind == "" {
			continue
		}
		k := "dlq.subject." + s.Kind
		if prev, ok := m[k]; ok {
			m[k] = prev + "," + s.ID
		} else {
			m[k] = s.ID
		}
	}
	return m
}

// BatchFinish finishes the fan-out of a terminal batch to its member
// requests, as the real TerminateRequest does on the DLQ path, and says
// why with cause, the dead letter's snapshot.
//
// First it re-creates the membership row of the batch's current state
// (the real EnsureRecord: INSERT IGNORE, never a delete), in case the
// transition that made the batch terminal stopped after its CAS. Then, for
// each request ID in batch.contains, in stored order:
//
//   - no such request: skipped;
//   - already in the target state (succeeded: landed, failed: error,
//     cancelled: cancelled): no write, but its RequestLog is published
//     again;
//   - in another terminal state: nothing at all;
//   - otherwise: a compare-and-set to the target state at version+1 (a
//     moved version is read again and retried, a bounded number of times),
//     then its RequestLog.
//
// A RequestLog goes to topic "log", partition key the request ID, message
// ID "<request>/<status>", no message metadata, with the request's new (or
// current) version, last_error cause.LastError for a failed batch and the
// DLQ metadata of logMetadata. Publishing it again is safe by the
// gateway's winner rule: a versioned terminal status beats unversioned
// ones and the higher request_version wins, so a republished entry at the
// current version can never demote a newer status; and the store's dedupe
// makes a second publish of the same ID a no-op. Calling BatchFinish again
// therefore changes nothing.
//
// The members are read together, moved with one compare-and-set statement
// and their RequestLog entries published with one insert (see fanOut); the
// effect is that of the real one-request-at-a-time loop.
//
// A request row the host's collation matched under another spelling is
// skipped, never written, and reported: the other members are finished and
// the call then returns a *mend.SpellingError naming both spellings.
//
// Returns mend.ErrNotFound if there is no such batch; a *mend.SpellingError
// if the batch or a member row is spelled differently; mend.ErrInvalid if
// the batch is not terminal; mend.ErrConflict if a request kept moving; a
// *mend.ValidationError for bad input.
func (d *DB) BatchFinish(ctx context.Context, queue, batchID string, cause mend.Snapshot) error {
	if err := validateBatchKey(queue, batchID); err != nil {
		return err
	}
	b, err := d.readBatch(ctx, queue, batchID)
	if err != nil {
		return fmt.Errorf("host: finish batch %q: %w", batchID, err)
	}
	return d.finish(ctx, b, cause, true)
}

// BatchFinishFrom is BatchFinish of b, a terminal batch as BatchGet or
// BatchTransitionFrom returned it, without reading it again: a terminal
// batch never changes state or members. moved says BatchTransitionFrom has
// just written the membership row of b.State, so the EnsureRecord step is
// left out. It implements planner.BatchesAsRead; the errors are
// BatchFinish's.
func (d *DB) BatchFinishFrom(ctx context.Context, b mend.Batch, cause mend.Snapshot, moved bool) error {
	if err := validateBatchKey(b.Queue, b.ID); err != nil {
		return err
	}
	return d.finish(ctx, b, cause, !moved)
}

func (d *DB) finish(ctx context.Context, b mend.Batch, cause mend.Snapshot, ensure bool) error {
	return d.BatchFinishMany(ctx, []mend.FinishParams{{Batch: b, Cause: cause, Moved: !ensure}})[0]
}

// BatchFinishMany is BatchFinishFrom of every item, the batches all of one
// queue, with a number of statements that does not grow with the items
// (per batchChunk of them, and for members per requestChunk): one INSERT
// IGNORE of the membership rows of the batches not Moved (the real
// EnsureRecord), then for all their member requests together one read, one
// compare-and-set per target state and one insert of every RequestLog. It
// returns one error per item, in order: BatchFinishFrom's for it. A failed
// statement fails the items it served; a member whose compare-and-set did
// not land, or that the collation matched under another spelling, is read
// and decided again alone (finishRequest), and so is a request that is a
// member of two of the batches, after the first has finished it, as the
// real one-batch-at-a-time fan-out would find it. It implements
// planner.BatchesMany.
func (d *DB) BatchFinishMany(ctx context.Context, fs []mend.FinishParams) []error {
	errs := make([]error, len(fs))
	var valid []int
	for i, p := range fs {
		b := p.Batch
		_, terminal := requestTarget(b.State)
		switch {
		case b.Queue != fs[0].Batch.Queue:
			errs[i] = &mend.ValidationError{Field: "finishes", Reason: "all batches must be in one queue"}
		case !terminal:
			errs[i] = fmt.Errorf("%w: batch is %s, not terminal", mend.ErrInvalid, b.State)
		default:
			errs[i] = errors.Join(validateBatchKey(b.Queue, b.ID), checkMemberIDs(b.Requests, b.State))
		}
		if errs[i] == nil {
			valid = append(valid, i)
		}
	}
	for chunk := range slices.Chunk(valid, batchChunk) {
		var ensure []any
		for _, i := range chunk {
			if b := fs[i].Batch; !fs[i].Moved {
				ensure = append(ensure, b.Queue, b.State, b.ID)
			}
		}
		if len(ensure) > 0 {
			q := sqlMembershipEnsure + strings.Repeat(sqlMembershipEnsureRow, len(ensure)/3-1)
			if _, err := d.exec(ctx, d.app, "EnsureRecord", q, ensure...); err != nil {
				// As alone: a batch whose row could not be ensured is not
				// fanned out; the batches just moved are.
				for _, i := range chunk {
					if !fs[i].Moved {
						errs[i] = fmt.Errorf("ensure membership row: %w", err)
					}
				}
			}
		}
		var work []member
		for _, i := range chunk {
			b := fs[i].Batch
			if errs[i] != nil {
				continue
			}
			target, _ := requestTarget(b.State)
			f := &fanout{queue: b.Queue, target: target, meta: logMetadata(fs[i].Cause)}
			if b.State == mend.BatchFailed {
				f.lastError = fs[i].Cause.LastError
			}
			for _, rid := range b.Requests {
				work = append(work, member{f: f, rid: rid, item: i})
			}
		}
		if err := d.fanOut(ctx, work, errs); err != nil {
			return fill(errs, err) // cut off: the rest was not tried
		}
	}
	for i := range errs {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("host: finish batch %q: %w", fs[i].Batch.ID, errs[i])
		}
	}
	return errs
}

// fill sets every nil error of errs to err.
func fill(errs []error, err error) []error {
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return errs
}

// checkMemberIDs checks, before the first write of a transition to s or a
// fan-out of a batch settled as s, every ID the fan-out would publish for
// members: each request ID (the RequestLog's partition key) and its
// RequestLog message ID "<request>/<status>" must fit the host's
// VARCHAR(255) columns. A member that does not would leave the batch moved
// and its fan-out unfinishable, so nothing is written; the planner's
// decision parks such a record at once. Non-terminal s checks nothing.
func checkMemberIDs(requests []string, s mend.BatchState) error {
	target, ok := requestTarget(s)
	if !ok {
		return nil
	}
	for _, rid := range requests {
		if err := mend.ValidateIdentity("request_id", rid, true); err != nil {
			return err
		}
		if err := mend.ValidateIdentity("RequestLog message ID of request "+strconv.Quote(clipForError(rid)), rid+"/"+target, true); err != nil {
			return err
		}
	}
	return nil
}

// clipForError shortens an ID for an error message.
func clipForError(s string) string {
	if utf8.RuneCountInString(s) <= 40 {
		return s
	}
	r := []rune(s)
	return string(r[:20]) + "…" + string(r[len(r)-12:])
}

// fanout is what every member request of one batch is finished with.
type fanout struct {
	queue, target, lastError string
	meta                     map[string]string
}

// sqlRequestsGet reads member requests by primary key; the caller appends
// one placeholder per ID and the closing parenthesis.
const sqlRequestsGet = `-- name: RequestsGet
SELECT queue, id, state, version FROM request WHERE queue = ? AND id IN (`

// sqlRequestsCAS is the compare-and-set of several requests in one
// statement; the caller appends one "(id = ? AND version = ?)" per request,
// joined by OR, and the closing parenthesis. With every version pinned,
// version + 1 is the real absolute version.
const sqlRequestsCAS = `-- name: RequestsFinish
UPDATE request SET state = ?, version = version + 1 WHERE queue = ? AND (`

const sqlRequestGet = `-- name: RequestGet
SELECT queue, id, state, version FROM request WHERE queue = ? AND id = ?`

// sqlRequestCAS is the real TerminateRequest's compare-and-set with an
// absolute version. change_uri and land_strategy are left as they are.
const sqlRequestCAS = `-- name: RequestFinish
UPDATE request SET state = ?, version = ? WHERE queue = ? AND id = ? AND version = ?`

// member is one member request of a batch a fan-out finishes: item is the
// batch's index in the caller's errors.
type member struct {
	f    *fanout
	rid  string
	item int
}

// fanOut finishes the member requests work, adding each error to its
// item's. The common case costs three statements per requestChunk
// members, of one batch or of many: one read of all of them, one
// compare-and-set of those to move (per target state), one publish of
// their RequestLog entries. Anything unusual (a row the collation matched
// under another spelling, a compare-and-set that did not move every row it
// named, a request already finished in this call as a member of another
// batch) falls back to finishRequest, one request at a time, which reads
// again and decides. It returns an error only when ctx ended.
func (d *DB) fanOut(ctx context.Context, work []member, errs []error) error {
	add := func(m member, err error) { errs[m.item] = errors.Join(errs[m.item], err) }
	seen := map[string]int{} // request ID: the item that finishes it first
	var fast, again []member
	for _, m := range work {
		if err := mend.ValidateIdentity("request_id", m.rid, true); err != nil {
			add(m, fmt.Errorf("request %q listed in contains: %w", m.rid, err))
			continue
		}
		first, ok := seen[m.rid]
		switch {
		case !ok:
			seen[m.rid] = m.item
			fast = append(fast, m)
		case first != m.item:
			again = append(again, m)
		}
	}
	for chunk := range slices.Chunk(fast, requestChunk) {
		if err := d.fanOutChunk(ctx, chunk, add); err != nil {
			return err
		}
	}
	for _, m := range again {
		if err := d.finishRequest(ctx, *m.f, m.rid); err != nil {
			if ctx.Err() != nil {
				return err
			}
			add(m, err)
		}
	}
	return nil
}

type requestRow struct {
	queue, id, state string
	version          int64
}

// fanOutChunk finishes work, distinct requests of one queue; it returns an
// error only when ctx ended.
func (d *DB) fanOutChunk(ctx context.Context, work []member, add func(member, error)) error {
	queue := work[0].f.queue
	ids := make([]string, len(work))
	for i, m := range work {
		ids[i] = m.rid
	}
	rows, err := d.readRequests(ctx, queue, ids)
	if err != nil {
		for _, m := range work {
			add(m, err)
		}
		return ctx.Err()
	}
	if d.afterMembersRead != nil {
		d.afterMembersRead()
	}
	asked := make(map[string]bool, len(ids))
	for _, rid := range ids {
		asked[rid] = true
	}
	exact := make(map[string]requestRow, len(rows))
	oddRows := false
	for _, r := range rows {
		if r.queue == queue && asked[r.id] {
			exact[r.id] = r
		} else {
			// A row the collation matched for an ID spelled otherwise:
			// which ID it answers to is for the careful path to find out.
			oddRows = true
		}
	}
	var slow []member
	var publish []logEntry
	move := map[string][]member{} // by target state
	var targets []string
	for _, m := range work {
		r, ok := exact[m.rid]
		switch {
		case !ok && oddRows:
			slow = append(slow, m)
		case !ok:
			// as the real fan-out: a missing request is skipped
		case r.state == m.f.target:
			publish = append(publish, logEntry{m, r.version})
		case requestTerminal(r.state):
			// another outcome is already final; never overwrite it
		case r.version < 1 || r.version >= maxVersion:
			slow = append(slow, m) // reports the version it cannot move
		default:
			if move[m.f.target] == nil {
				targets = append(targets, m.f.target)
			}
			move[m.f.target] = append(move[m.f.target], m)
		}
	}
	for _, target := range targets {
		ms := move[target]
		args := []any{target, queue}
		conds := make([]string, len(ms))
		for i, m := range ms {
			conds[i] = "(id = ? AND version = ?)"
			args = append(args, m.rid, exact[m.rid].version)
		}
		res, err := d.exec(ctx, d.app, "RequestsFinish", sqlRequestsCAS+strings.Join(conds, " OR ")+")", args...)
		if err != nil {
			for _, m := range ms {
				add(m, fmt.Errorf("finish requests: %w", err))
			}
			continue
		}
		if n, err := res.RowsAffected(); err == nil && n == int64(len(ms)) {
			for _, m := range ms {
				publish = append(publish, logEntry{m, exact[m.rid].version + 1})
			}
		} else {
			// Some moved under us: each is read again and decided alone.
			slow = append(slow, ms...)
		}
	}
	if len(publish) > 0 {
		if err := d.publishLogs(ctx, publish); err != nil {
			for _, e := range publish {
				add(e.m, err)
			}
		}
	}
	for _, m := range slow {
		if err := d.finishRequest(ctx, *m.f, m.rid); err != nil {
			if ctx.Err() != nil {
				return err
			}
			add(m, err)
		}
	}
	return ctx.Err()
}

// readRequests reads the requests ids of queue, as the collation matches
// them.
func (d *DB) readRequests(ctx context.Context, queue string, ids []string) ([]requestRow, error) {
	args := make([]any, 0, len(ids)+1)
	args = append(args, queue)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := d.app.QueryContext(ctx, sqlRequestsGet+strings.Repeat("?, ", len(ids)-1)+"?)", args...)
	if err != nil {
		return nil, fmt.Errorf("read requests: %w", translate(err))
	}
	defer rows.Close()
	var out []requestRow
	for rows.Next() {
		var r requestRow
		if err := rows.Scan(&r.queue, &r.id, &r.state, &r.version); err != nil {
			return nil, fmt.Errorf("read requests: %w", translate(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read requests: %w", translate(err))
	}
	return out, nil
}

// finishRequest finishes one member request, reading it first.
func (d *DB) finishRequest(ctx context.Context, f fanout, rid string) error {
	if err := mend.ValidateIdentity("request_id", rid, true); err != nil {
		return fmt.Errorf("request %q listed in contains: %w", rid, err)
	}
	for attempt := 0; ; attempt++ {
		var q, id, state string
		var version int64
		err := d.app.QueryRowContext(ctx, sqlRequestGet, f.queue, rid).Scan(&q, &id, &state, &version)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil // as the real fan-out: a missing request is skipped
		case err != nil:
			return fmt.Errorf("read request %q: %w", rid, translate(err))
		}
		if err := errors.Join(sameBytes("request_id", rid, id), sameBytes("queue", f.queue, q)); err != nil {
			d.log.WarnContext(ctx, "request row spelled differently; not finished", "queue", f.queue, "request_id", rid, "stored_request_id", id)
			return err
		}
		switch {
		case state == f.target:
			return d.publishLog(ctx, f, rid, version)
		case requestTerminal(state):
			return nil // another outcome is already final; never overwrite it
		case version < 1 || version >= maxVersion:
			return fmt.Errorf("request %q is at version %d; the host's INT column cannot take its next version", rid, version)
		}
		res, err := d.exec(ctx, d.app, "RequestFinish", sqlRequestCAS, f.target, version+1, f.queue, rid, version)
		if err != nil {
			return fmt.Errorf("finish request %q: %w", rid, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return d.publishLog(ctx, f, rid, version+1)
		}
		if attempt+1 >= requestRetries {
			return fmt.Errorf("%w: request %q kept moving under the fan-out (%d tries)", mend.ErrConflict, rid, requestRetries)
		}
	}
}

// logEntry is a member request whose RequestLog is to be published at
// version.
type logEntry struct {
	m       member
	version int64
}

// publishLog publishes one request's RequestLog entry.
func (d *DB) publishLog(ctx context.Context, f fanout, rid string, version int64) error {
	return d.publishLogs(ctx, []logEntry{{member{f: &f, rid: rid}, version}})
}

// publishLogs publishes the entries' RequestLog messages in one insert. A
// last_error too long for the payload column is cut, marked with "…",
// rather than let one long failure message block the fan-out.
func (d *DB) publishLogs(ctx context.Context, entries []logEntry) error {
	msgs := make([]message, 0, len(entries))
	for _, e := range entries {
		f, rid := e.m.f, e.m.rid
		entry := requestLog{
			RequestID: rid, Queue: f.queue, TimestampMS: d.nowMS(), Type: "status", Status: f.target,
			RequestVersion: e.version, LastError: f.lastError, Metadata: f.meta,
		}
		var payload []byte
		for range 4 {
			var err error
			if payload, err = json.Marshal(entry); err != nil {
				return err
			}
			over := len(payload) - MaxPayloadBytes
			if over <= 0 || entry.LastError == "" {
				break
			}
			entry.LastError = cut(entry.LastError, len(entry.LastError)-over-len("…")) + "…"
		}
		msgs = append(msgs, message{topic: LogTopic, partition: rid, id: rid + "/" + f.target, payload: payload})
	}
	// publishMany refuses a payload that still does not fit.
	if err := d.publishMany(ctx, "RequestLog", msgs); err != nil {
		if len(entries) == 1 {
			return fmt.Errorf("publish log of request %q: %w", entries[0].m.rid, err)
		}
		return fmt.Errorf("publish logs of %d requests: %w", len(entries), err)
	}
	return nil
}

// cut returns the longest prefix of s of at most n bytes that ends on a
// rune boundary.
func cut(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n])
}

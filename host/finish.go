package host

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
	wrap := func(err error) error { return fmt.Errorf("host: finish batch %q: %w", batchID, err) }
	b, err := d.readBatch(ctx, queue, batchID)
	if err != nil {
		return wrap(err)
	}
	target, ok := requestTarget(b.State)
	if !ok {
		return wrap(fmt.Errorf("%w: batch is %s, not terminal", mend.ErrInvalid, b.State))
	}
	if _, err := d.exec(ctx, d.app, "EnsureRecord", sqlMembershipEnsure, queue, b.State, batchID); err != nil {
		return wrap(fmt.Errorf("ensure membership row: %w", err))
	}
	f := fanout{queue: queue, target: target, meta: logMetadata(cause)}
	if b.State == mend.BatchFailed {
		f.lastError = cause.LastError
	}
	var errs []error
	for _, rid := range b.Requests {
		if err := d.finishRequest(ctx, f, rid); err != nil {
			if ctx.Err() != nil {
				return wrap(err)
			}
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return wrap(err)
	}
	return nil
}

// fanout is what every member request of one batch is finished with.
type fanout struct {
	queue, target, lastError string
	meta                     map[string]string
}

const sqlRequestGet = `-- name: RequestGet
SELECT queue, id, state, version FROM request WHERE queue = ? AND id = ?`

// sqlRequestCAS is the real TerminateRequest's compare-and-set with an
// absolute version. change_uri and land_strategy are left as they are.
const sqlRequestCAS = `-- name: RequestFinish
UPDATE request SET state = ?, version = ? WHERE queue = ? AND id = ? AND version = ?`

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

// publishLog publishes the request's RequestLog entry. A last_error too
// long for the payload column is cut, marked with "…", rather than let one
// long failure message block the fan-out.
func (d *DB) publishLog(ctx context.Context, f fanout, rid string, version int64) error {
	entry := requestLog{
		RequestID: rid, Queue: f.queue, TimestampMS: d.nowMS(), Type: "status", Status: f.target,
		RequestVersion: version, LastError: f.lastError, Metadata: f.meta,
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
	// publish refuses a payload that still does not fit.
	if err := d.publish(ctx, "RequestLog", LogTopic, rid, rid+"/"+f.target, payload, nil); err != nil {
		return fmt.Errorf("publish log of request %q: %w", rid, err)
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

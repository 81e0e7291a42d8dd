package bench

// The limit implementations. For each operation the throughput benchmarks
// measure, this file does the same logical effect in the fewest round trips
// a correct implementation needs, so that mend can be judged against what
// its design could reach, not only against a replay of its own statements.
// They are written from the schema (migrations/, internal/sqtest) and the
// protocols (design.md, submitqueue.md), not from storage/ or host/: they
// call none of mend's store or adapter functions. They use the root
// package's vocabulary only where it defines the data itself (the source
// key's encoding, random record and op IDs), so that their rows are the rows
// mend would write.
//
// The device is one COM_QUERY packet per transaction: the connection has
// multiStatements on, and a packet carries SET TRANSACTION, START
// TRANSACTION, the writes, a SELECT that answers the caller, and COMMIT. The
// server runs the statements in order and streams every answer back, so the
// client waits once. Conditions between statements live in session
// variables (SET @n = ROW_COUNT(), then INSERT ... SELECT ... WHERE @n = 1),
// which keeps every decision inside the transaction that acts on it.
//
// The server stops a multi-statement packet at its first failing statement,
// so after an error the transaction may still be open: the caller then
// sends ROLLBACK on the same connection before anything else (a round trip
// only failures pay). Each worker therefore owns its *sql.Conn.

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

// Errors of the limit implementations. They stand for the outcomes mend
// reports with its own sentinels; the tests check them.
var (
	errLimitConflict = errors.New("limit: version moved")
	errLimitNotFound = errors.New("limit: no such record")
	errLimitFenced   = errors.New("limit: term is not the queue's current, unexpired lease")
	// errLimitScope: a case the limit planner does not implement (a batch
	// it would have to wait on or park, a spelling mismatch on the host). The
	// benchmark never reaches them; mend's planner writes one event there,
	// which costs the limit one round trip as it does any append.
	errLimitScope = errors.New("limit: outside what the limit planner implements")
)

// heldError is the limit's answer to an acquire of a lease someone holds.
type heldError struct {
	holder    string
	epoch     int64
	remaining time.Duration
}

func (e *heldError) Error() string {
	return fmt.Sprintf("limit: lease held by %q at epoch %d for %s more", e.holder, e.epoch, e.remaining)
}

const (
	errDeadlock          = 1213
	limitDeadlockRetries = 4
)

func errNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// openLimitPool opens a pool on dsn's database for the limit
// implementations: the session settings mend relies on (UTC, a strict
// sql_mode, client-side interpolation, so a statement with arguments is
// still one packet) plus multiStatements. With w set, every connection is
// dialed through it, so its round trips are counted.
func openLimitPool(tb testing.TB, dsn string, w *wire) *sql.DB {
	tb.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ParseTime, cfg.Loc, cfg.InterpolateParams, cfg.MultiStatements = true, time.UTC, true, true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"
	if w != nil {
		cfg.Net = w.net
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	db := sql.OpenDB(connector)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// limitConn pins one connection of pool for a worker.
func limitConn(tb testing.TB, pool *sql.DB) *sql.Conn {
	tb.Helper()
	c, err := pool.Conn(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// packet sends query (a whole transaction ending in COMMIT) as one
// COM_QUERY, hands the first result set to scan (which may move on to
// later ones with NextResultSet), then reads every remaining answer so that
// COMMIT's own answer is seen: only then has the transaction committed. On
// an error it rolls back on the same connection; a deadlock (which the
// server has already rolled back whole) is sent again, a bounded number of
// times, with jitter.
func packet(ctx context.Context, c *sql.Conn, query string, args []any, scan func(*sql.Rows) error) error {
	for attempt := 0; ; attempt++ {
		err := packetOnce(ctx, c, query, args, scan)
		if err == nil {
			return nil
		}
		if _, rerr := c.ExecContext(ctx, "ROLLBACK"); rerr != nil {
			return errors.Join(err, fmt.Errorf("limit: rollback: %w", rerr))
		}
		if errNumber(err) != errDeadlock || attempt >= limitDeadlockRetries {
			return err
		}
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(5<<attempt)))
		t := time.NewTimer(time.Duration(n.Int64()+1) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

func packetOnce(ctx context.Context, c *sql.Conn, query string, args []any, scan func(*sql.Rows) error) error {
	rows, err := c.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := scan(rows); err != nil {
		return err
	}
	for rows.NextResultSet() {
		for rows.Next() {
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// scanOne scans the single row of the current result set.
func scanOne(rows *sql.Rows, dest ...any) error {
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("limit: the answer row is missing")
	}
	return rows.Scan(dest...)
}

const txBegin = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\nSTART TRANSACTION;\n"

// ---- Intake: create-if-absent with its created event, one round trip.

// The no-op ODKU leaves ROW_COUNT() at 1 for an insert and 0 for a
// duplicate (clientFoundRows is off), so the created event is inserted only
// by the writer that created the row, and the SELECT reads back whichever
// record holds the source identity: the first writer's.
const limitIntakeSQL = txBegin + `INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, original_topic, payload,
	failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome,
	state, version, attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '[]', ?, ?, 'pending', 1, 0, NOW(6), '', 0, NOW(6), NOW(6), NOW(6))
ON DUPLICATE KEY UPDATE record_id = record_id;
SET @created = ROW_COUNT();
INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, created_at)
SELECT ?, 1, ?, 'created', 0, ?, ?, ?, NOW(6) FROM DUAL WHERE @created = 1;
SELECT r.*, @created FROM mend_records r WHERE queue = ? AND source_key = ?;
COMMIT`

// limitDelivery is a dead letter of topic speculate_dlq, the benchmark's.
type limitDelivery struct {
	topic, partition, messageID string
	payload                     []byte
	failureCount                int
	lastError                   string
}

// limitRecord is what the limit's intake returns.
type limitRecord struct {
	id      mend.RecordID
	queue   string
	batchID string
	state   string
	version int64
}

// limitIntake records dead letters in one round trip each.
func limitIntake(ctx context.Context, c *sql.Conn, actor string, d limitDelivery) (limitRecord, bool, error) {
	orig, ok := strings.CutSuffix(d.topic, "_dlq")
	if !ok || orig != "speculate" {
		return limitRecord{}, false, fmt.Errorf("%w: topic %q", errLimitScope, d.topic)
	}
	var body struct {
		ID    *string `json:"id"`
		Queue *string `json:"queue"`
	}
	if err := json.Unmarshal(d.payload, &body); err != nil || body.ID == nil || body.Queue == nil || *body.ID == "" || *body.Queue == "" {
		return limitRecord{}, false, fmt.Errorf("%w: payload %q is not a BatchID", errLimitScope, d.payload)
	}
	src := mend.SourceID{Queue: *body.Queue, Topic: d.topic, Partition: d.partition, MessageID: d.messageID}
	if err := src.Validate(); err != nil {
		return limitRecord{}, false, err
	}
	key := src.Key()
	id := mend.NewRecordID()
	data, _ := json.Marshal(map[string]string{"state": "pending", "batch_id": *body.ID, "desired": "failed"})
	args := []any{id[:], src.Queue, key[:], src.Topic, src.Partition, src.MessageID, orig, d.payload,
		d.failureCount, d.lastError, *body.ID, "failed",
		id[:], src.Queue, actor, mend.NewOpID(), string(data),
		src.Queue, key[:]}
	// The whole row comes back, as a caller of the intake gets the record;
	// the fields the caller checks are picked out by name.
	var (
		rec     limitRecord
		row     = map[string][]byte{}
		created int64
	)
	err := packet(ctx, c, limitIntakeSQL, args, func(rows *sql.Rows) error {
		cols, err := rows.Columns()
		if err != nil {
			return err
		}
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := scanOne(rows, ptrs...); err != nil {
			return err
		}
		for i, col := range cols {
			row[col] = bytes.Clone(vals[i])
		}
		created, err = strconv.ParseInt(string(row["@created"]), 10, 64)
		return err
	})
	if err != nil {
		return limitRecord{}, false, err
	}
	rid, queue, topic, part, msg, batch := row["record_id"], row["queue"], row["topic"], row["partition_key"], row["message_id"], row["batch_id"]
	rec.state = string(row["state"])
	if rec.version, err = strconv.ParseInt(string(row["version"]), 10, 64); err != nil {
		return limitRecord{}, false, err
	}
	// The unique key matched by hash; the row must be the identity asked for.
	if string(queue) != src.Queue || string(topic) != src.Topic || string(part) != src.Partition || string(msg) != src.MessageID || len(rid) != len(rec.id) {
		return limitRecord{}, false, fmt.Errorf("limit: stored identity differs from %s", src)
	}
	copy(rec.id[:], rid)
	if created == 1 && rec.id != id {
		return limitRecord{}, false, fmt.Errorf("limit: created %s but read back %s", id, rec.id)
	}
	rec.queue, rec.batchID = string(queue), string(batch)
	return rec, created == 1, nil
}

// ---- Append: a versioned compare-and-set with its event(s), one round trip.

// limitEvent is one event an append writes.
type limitEvent struct {
	kind string
	data string // a JSON object
}

// limitAppendArgs is a change to a record read at version, writing events
// (one per version step) and leaving the projection as given.
type limitAppendArgs struct {
	queue     string
	id        mend.RecordID
	version   int64  // the version read; the CAS expects it
	prevState string // the state read at that version
	state     string
	attempts  int
	lastError string
	due       bool
	retryIn   time.Duration
	epoch     int64
	term      *mend.Term // nil: unfenced
	actor     string
	events    []limitEvent
}

// appendSQL builds the packet of an append with n events. The fenced form
// joins the queue's lease row into the UPDATE: a multi-table UPDATE reads
// the tables it does not change with shared locks (InnoDB does so at every
// isolation level for UPDATE ... JOIN), so while the term is current the
// lease row stays share-locked until COMMIT and a takeover's exclusive lock
// waits behind it, as with mend's LOCK IN SHARE MODE read. A stale term
// matches no row and changes nothing. The answer row says whether the CAS
// hit and, when it did not, why: the version now (NULL: no such record)
// and whether the term is current, read in the same packet.
//
// The SET list of a multi-table UPDATE has no guaranteed order, so nothing
// in it reads a column another assignment writes: the version is set
// absolutely and whether the state changed is decided by the caller, who
// read the state at the version the CAS pins.
func appendSQL(fenced bool, n int) string {
	var b strings.Builder
	b.WriteString(txBegin)
	if fenced {
		b.WriteString("UPDATE mend_records r JOIN mend_leases l ON l.queue = r.queue SET\n")
	} else {
		b.WriteString("UPDATE mend_records r SET\n")
	}
	b.WriteString(`	r.version = ?, r.state = ?, r.state_since = IF(?, NOW(6), r.state_since), r.attempts = ?, r.last_error = ?, r.epoch = ?,
	r.next_attempt_at = IF(?, NOW(6) + INTERVAL ? MICROSECOND, NULL), r.updated_at = NOW(6)
WHERE r.record_id = ? AND r.queue = ? AND r.version = ?`)
	if fenced {
		b.WriteString("\n\tAND l.queue = ? AND l.holder = ? AND l.epoch = ? AND l.expires_at > NOW(6)")
	}
	b.WriteString(";\nSET @n = ROW_COUNT();\nINSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, created_at)\n")
	for i := range n {
		if i > 0 {
			b.WriteString("UNION ALL\n")
		}
		b.WriteString("SELECT ?, ?, ?, ?, ?, ?, ?, ?, NOW(6) FROM DUAL WHERE @n = 1\n")
	}
	b.WriteString(";\nSELECT @n, (SELECT version FROM mend_records WHERE record_id = ? AND queue = ?)")
	if fenced {
		b.WriteString(",\n\t(SELECT COUNT(*) FROM mend_leases WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6))")
	} else {
		b.WriteString(", 1")
	}
	b.WriteString(";\nCOMMIT")
	return b.String()
}

var appendSQLs = map[[2]int]string{}

func init() {
	for _, fenced := range []bool{false, true} {
		for n := 1; n <= 3; n++ {
			f := 0
			if fenced {
				f = 1
			}
			appendSQLs[[2]int{f, n}] = appendSQL(fenced, n)
		}
	}
}

// limitAppend applies a and returns the new version.
func limitAppend(ctx context.Context, c *sql.Conn, a limitAppendArgs) (int64, error) {
	n := len(a.events)
	if n < 1 || n > 3 {
		return 0, fmt.Errorf("limit: %d events; 1 to 3 are built", n)
	}
	f := 0
	epoch := a.epoch
	if a.term != nil {
		f, epoch = 1, a.term.Epoch
	}
	next := a.version + int64(n)
	args := []any{next, a.state, a.state != a.prevState, a.attempts, a.lastError, epoch, a.due, a.retryIn.Microseconds(),
		a.id[:], a.queue, a.version}
	if a.term != nil {
		args = append(args, a.queue, a.term.Holder, a.term.Epoch)
	}
	for i, ev := range a.events {
		args = append(args, a.id[:], a.version+int64(i)+1, a.queue, ev.kind, epoch, a.actor, mend.NewOpID(), ev.data)
	}
	args = append(args, a.id[:], a.queue)
	if a.term != nil {
		args = append(args, a.queue, a.term.Holder, a.term.Epoch)
	}
	var (
		hit  int64
		now  sql.NullInt64
		live int64
	)
	err := packet(ctx, c, appendSQLs[[2]int{f, n}], args, func(rows *sql.Rows) error { return scanOne(rows, &hit, &now, &live) })
	switch {
	case err != nil:
		return 0, err
	case hit == 1:
		return next, nil
	case live == 0:
		return 0, errLimitFenced
	case !now.Valid:
		return 0, errLimitNotFound
	}
	return 0, fmt.Errorf("%w: at %d, not %d", errLimitConflict, now.Int64, a.version)
}

// ---- Lease acquire, one round trip.

// The row is made to exist and locked exclusively by the no-op upsert (on a
// duplicate InnoDB takes the row's exclusive lock), so the rest decides
// under the lock, behind any fenced transaction of the current term. The
// clock is read once, after the lock is granted, and every comparison uses
// it: a term judged expired for closing its history is the term replaced.
// The history of the replaced term is closed at its own expiry, the term
// taken with the epoch bumped, and the new term opened in history only if
// the take happened. The answer row is the lease as it now is.
const limitAcquireSQL = txBegin + `INSERT INTO mend_leases (queue, holder, epoch, acquired_at, renewed_at, expires_at, transitions)
VALUES (?, '', 0, NOW(6), NOW(6), NOW(6), 0)
ON DUPLICATE KEY UPDATE queue = queue;
SET @now = NOW(6);
UPDATE mend_lease_history h JOIN mend_leases l ON h.queue = l.queue AND h.epoch = l.epoch
SET h.ended_at = l.expires_at, h.ended_how = 'expired'
WHERE l.queue = ? AND h.ended_at IS NULL AND l.expires_at <= @now;
UPDATE mend_leases SET holder = ?, epoch = epoch + 1, acquired_at = @now, renewed_at = @now,
	expires_at = @now + INTERVAL ? MICROSECOND, transitions = transitions + 1
WHERE queue = ? AND (epoch = 0 OR expires_at <= @now);
SET @n = ROW_COUNT();
INSERT INTO mend_lease_history (queue, epoch, holder, acquired_at)
SELECT queue, epoch, holder, acquired_at FROM mend_leases WHERE queue = ? AND @n = 1;
SELECT @n, holder, epoch, TIMESTAMPDIFF(MICROSECOND, @now, expires_at) FROM mend_leases WHERE queue = ?;
COMMIT`

// limitAcquire takes queue's lease for holder and returns the new term, or
// a *heldError.
func limitAcquire(ctx context.Context, c *sql.Conn, queue, holder string, ttl time.Duration) (mend.Term, error) {
	var (
		n           int64
		cur         []byte
		epoch, left int64
	)
	err := packet(ctx, c, limitAcquireSQL, []any{queue, queue, holder, ttl.Microseconds(), queue, queue, queue},
		func(rows *sql.Rows) error { return scanOne(rows, &n, &cur, &epoch, &left) })
	if err != nil {
		return mend.Term{}, err
	}
	if n != 1 {
		return mend.Term{}, &heldError{holder: string(cur), epoch: epoch, remaining: time.Duration(left) * time.Microsecond}
	}
	return mend.Term{Queue: queue, Holder: holder, Epoch: epoch}, nil
}

// ---- Planner repair on the submit queue's real tables: three round trips
// per record (one per database), plus the due read every 100 records.

// limitDueSQL reads due records through the (queue, next_attempt_at) index,
// oldest due first, as any planner must.
const limitDueSQL = `SELECT record_id, message_id, original_topic, failure_count, failure_error, failed_at, failure_subjects,
	batch_id, desired_outcome, state, version, attempts
FROM mend_records WHERE queue = ? AND next_attempt_at <= NOW(6)
ORDER BY next_attempt_at, record_id LIMIT 20`

// limitHostSQL is the whole host side of a repair in one transaction on
// the application database: read the batch, decide the transition from its
// state and the desired outcome (the decision table of design.md), move the
// batch with a compare-and-set on the version read, write the membership
// row of the new state and delete the old one, finish the fan-out (every
// member still non-terminal moves to the target state at version+1; one in
// the target state stays; one in another terminal state is never touched),
// then answer with the outcome, the queue's smallest live batch in byte
// order, batch.contains, and the members as they now are (for their
// RequestLog entries).
//
// The host's tables use a case-insensitive, PAD SPACE collation; mend's
// identities are byte-exact. Every match by key is therefore checked again
// on the bytes: a batch found only under another spelling acts on nothing
// (@exact = 0), and a request found under another spelling is neither
// written nor published. Strings computed in the packet are given the
// host's collation ({{coll}}, read from information_schema once) so that
// they compare with the host's columns through their indexes, on MySQL 8
// and MariaDB alike.
//
// Two shapes keep the server's work per repair small, measured on MariaDB
// 10.11 (each statement of the first draft timed with SHOW PROFILES):
//   - The members are named from contains by position into variables and
//     read and written with a primary-key IN list: a JSON_TABLE join costs
//     four times as much. A batch with more than {{k}} members is finished by
//     the JSON_TABLE statements that follow, which the server skips as an
//     impossible WHERE for smaller batches.
//   - The wake target is the byte-smallest live-state membership row (MIN,
//     no sort: a filesort on 1020-byte keys cost more than the rest of the
//     packet), confirmed live by its batch row. When that row is stale or
//     dangling (@candidate set, @live NULL) the caller looks at all rows, a
//     second round trip only such queues pay.
const limitHostSQL = txBegin + `SET @st = NULL, @ver = NULL, @contains = NULL, @exact = 0;
SELECT state, version, contains, CAST(queue AS BINARY) = CAST(? AS BINARY) AND CAST(id AS BINARY) = CAST(? AS BINARY)
INTO @st, @ver, @contains, @exact
FROM batch WHERE queue = ? AND id = ?;
SET @to = CASE
	WHEN @exact = 1 AND ? = 'failed' AND @st IN ('creating', 'created', 'speculating') THEN 'failed'
	WHEN @exact = 1 AND ? = 'succeeded' AND @st IN ('merging', 'cancelling') THEN 'succeeded'
	END COLLATE {{coll}};
UPDATE batch SET state = @to, version = @ver + 1
WHERE queue = ? AND id = ? AND @to IS NOT NULL AND version = @ver AND state = @st AND @ver < 2147483647;
SET @moved = ROW_COUNT();
SET @final = CASE
	WHEN @exact <> 1 OR ? NOT IN ('failed', 'succeeded') THEN NULL
	WHEN @to IS NULL THEN @st
	WHEN @moved = 1 THEN @to
	END;
SET @target = CASE @final WHEN 'failed' THEN 'error' WHEN 'succeeded' THEN 'landed' WHEN 'cancelled' THEN 'cancelled' END COLLATE {{coll}};
INSERT IGNORE INTO queue_batch_state (queue, state, batch_id) SELECT ?, @final, ? FROM DUAL WHERE @target IS NOT NULL;
DELETE FROM queue_batch_state WHERE queue = ? AND state = @st AND batch_id = ? AND @moved = 1 AND @st <> @to;
SET {{members}};
UPDATE request SET state = @target, version = version + 1
WHERE queue = ? AND id IN ({{list}}) AND @target IS NOT NULL
	AND CAST(queue AS BINARY) = CAST(? AS BINARY) AND CAST(id AS BINARY) IN ({{binlist}})
	AND state NOT IN ('landed', 'error', 'cancelled') AND version BETWEEN 1 AND 2147483646;
UPDATE JSON_TABLE(@contains, '$[*]' COLUMNS (rid VARCHAR(255) CHARACTER SET utf8mb4 PATH '$')) j
STRAIGHT_JOIN request r ON r.queue = ? AND r.id = (j.rid COLLATE {{coll}})
SET r.state = @target, r.version = r.version + 1
WHERE @target IS NOT NULL AND JSON_LENGTH(@contains) > {{k}}
	AND CAST(r.id AS BINARY) = CAST(j.rid AS BINARY) AND CAST(r.queue AS BINARY) = CAST(? AS BINARY)
	AND r.state NOT IN ('landed', 'error', 'cancelled') AND r.version BETWEEN 1 AND 2147483646;
SET @candidate = NULL, @live = NULL;
SELECT MIN(CAST(batch_id AS BINARY)) INTO @candidate FROM queue_batch_state
WHERE queue = ? AND CAST(queue AS BINARY) = CAST(? AS BINARY) AND state IN ('created', 'speculating', 'merging', 'cancelling');
SELECT CAST(id AS BINARY) INTO @live FROM batch
WHERE queue = ? AND id = (CONVERT(@candidate USING utf8mb4) COLLATE {{coll}}) AND CAST(id AS BINARY) = @candidate
	AND CAST(queue AS BINARY) = CAST(? AS BINARY) AND state IN ('created', 'speculating', 'merging', 'cancelling');
SELECT @st, @exact, @moved, @target, @live, @candidate IS NOT NULL, @contains;
SELECT CAST(id AS BINARY), state, version FROM request
WHERE queue = ? AND id IN ({{list}}) AND @target IS NOT NULL AND CAST(queue AS BINARY) = CAST(? AS BINARY)
UNION ALL
SELECT CAST(r.id AS BINARY), r.state, r.version
FROM JSON_TABLE(@contains, '$[*]' COLUMNS (rid VARCHAR(255) CHARACTER SET utf8mb4 PATH '$')) j
STRAIGHT_JOIN request r ON r.queue = ? AND r.id = (j.rid COLLATE {{coll}})
WHERE @target IS NOT NULL AND JSON_LENGTH(@contains) > {{k}} AND CAST(r.queue AS BINARY) = CAST(? AS BINARY);
COMMIT`

// limitMembersByPosition is how many members limitHostSQL names from
// contains by position; submit queue batches are usually smaller.
const limitMembersByPosition = 8

// hostSQL fills limitHostSQL's templates for the host's collation.
func hostSQL(coll string) string {
	var sets, list, binlist []string
	for i := range limitMembersByPosition {
		v := "@m" + strconv.Itoa(i)
		sets = append(sets, fmt.Sprintf("%s = JSON_UNQUOTE(JSON_EXTRACT(@contains, '$[%d]')) COLLATE {{coll}}", v, i))
		list = append(list, v)
		binlist = append(binlist, "CAST("+v+" AS BINARY)")
	}
	r := strings.NewReplacer("{{members}}", strings.Join(sets, ",\n\t"), "{{list}}", strings.Join(list, ", "),
		"{{binlist}}", strings.Join(binlist, ", "), "{{k}}", strconv.Itoa(limitMembersByPosition))
	return strings.ReplaceAll(r.Replace(limitHostSQL), "{{coll}}", coll)
}

// limitLiveAllSQL is the second look: every live-state membership row of
// the queue, hydrated and filtered, smallest live batch in byte order.
const limitLiveAllSQL = `SELECT CAST(b.id AS BINARY)
FROM queue_batch_state m JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id
WHERE m.queue = ? AND CAST(m.queue AS BINARY) = CAST(? AS BINARY) AND m.state IN ('created', 'speculating', 'merging', 'cancelling')
	AND CAST(b.id AS BINARY) = CAST(m.batch_id AS BINARY) AND CAST(b.queue AS BINARY) = CAST(? AS BINARY)
	AND b.state IN ('created', 'speculating', 'merging', 'cancelling')
ORDER BY 1 LIMIT 1`

// limitPublishSQL publishes messages as the host's message store does:
// every column named, the DLQ fields at their normal values, a duplicate
// (topic, partition_key, id) a no-op that keeps the first row. Several rows
// go in one statement: each row is its own idempotent publish.
const limitPublishSQL = `INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES `
const limitPublishRow = "(?, ?, ?, ?, ?, ?, ?, 0, 0, '', '', NULL)"
const limitPublishTail = ` ON DUPLICATE KEY UPDATE topic = topic`

var collName = regexp.MustCompile(`^[a-z0-9_]+$`)

// hostCollation reads the collation of the host's application tables (the
// server's default on the real DDL), which limitHostSQL coerces its
// computed strings to.
func hostCollation(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT collation_name FROM information_schema.columns
		WHERE table_schema = DATABASE() AND ((table_name = 'batch' AND column_name IN ('queue', 'id', 'state'))
			OR (table_name = 'request' AND column_name IN ('queue', 'id', 'state')) OR table_name = 'queue_batch_state')`)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var colls []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return "", err
		}
		colls = append(colls, c)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if len(colls) != 1 || !collName.MatchString(colls[0]) {
		return "", fmt.Errorf("limit: host tables use collations %q; the limit planner expects one", colls)
	}
	return colls[0], nil
}

// limitPlanner repairs a queue's due records in the fewest round trips, and
// wakes the queue once per read as mend does (see repairAll): the due read
// (one per 20 records, mend's RunLimit), a host packet per record, one queue
// packet for the read's RequestLogs and its one wake-up, and a record
// packet per record. It was written per record, one packet to each of
// the three databases a repair touches, which a deployment may put on
// different servers (mend's, the host's application and queue databases),
// so no transaction can span them: the host packet (batch outcome, fan-out
// and the wake target), the queue packet (every RequestLog and the wake-up
// in one INSERT), and the record packet (the settled and woken events in
// one fenced CAS). The order is what makes it safe. The host packet comes
// first because the wake target depends on the batch having left the live
// states; the record is finished only after the wake-up is durable, so a
// crash in between leaves the record due and the next run repeats the
// repair: the host packet then finds the batch settled and changes nothing,
// the publishes coalesce by message ID (the wake-up's ID is a function of
// the record's version, which did not move), and the record packet commits.
type limitPlanner struct {
	mendC, appC, queueC *sql.Conn
	actor               string
	hostSQL             string
	nowMS               func() int64
}

func newLimitPlanner(mendC, appC, queueC *sql.Conn, coll, actor string) *limitPlanner {
	return &limitPlanner{mendC: mendC, appC: appC, queueC: queueC, actor: actor,
		hostSQL: hostSQL(coll), nowMS: func() int64 { return time.Now().UnixMilli() }}
}

type limitDue struct {
	id                      mend.RecordID
	messageID, origTopic    string
	failureCount            int
	failureError            string
	failedAt                sql.NullTime
	subjects                []byte
	batchID, desired, state string
	version                 int64
	attempts                int
}

// run repairs term.Queue until nothing is due and returns how many records
// it finished with a wake-up.
func (p *limitPlanner) run(ctx context.Context, term mend.Term) (woken int, err error) {
	for {
		recs, err := p.due(ctx, term.Queue)
		if err != nil || len(recs) == 0 {
			return woken, err
		}
		w, err := p.repairAll(ctx, term, recs)
		woken += w
		if err != nil {
			return woken, err
		}
	}
}

func (p *limitPlanner) due(ctx context.Context, queue string) ([]limitDue, error) {
	rows, err := p.mendC.QueryContext(ctx, limitDueSQL, queue)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []limitDue
	for rows.Next() {
		var r limitDue
		var id, msg, orig, ferr, batch []byte
		if err := rows.Scan(&id, &msg, &orig, &r.failureCount, &ferr, &r.failedAt, &r.subjects, &batch, &r.desired, &r.state, &r.version, &r.attempts); err != nil {
			return nil, err
		}
		copy(r.id[:], id)
		r.messageID, r.origTopic, r.failureError, r.batchID = string(msg), string(orig), string(ferr), string(batch)
		out = append(out, r)
	}
	return out, rows.Err()
}

// hostOutcome is the host packet's answer.
type hostOutcome struct {
	state     sql.NullString // the batch's state as read; NULL: no such batch
	exact     int64
	moved     int64
	target    sql.NullString // the members' target state; NULL: no fan-out
	wake      []byte         // the smallest live batch; nil: none found in the packet
	candidate bool           // a live-state membership row exists
	contains  []byte         // batch.contains
	members   map[string]hostMember
}

type hostMember struct {
	state   string
	version int64
}

func (p *limitPlanner) host(ctx context.Context, queue string, r limitDue) (hostOutcome, error) {
	args := []any{queue, r.batchID, queue, r.batchID, // read
		r.desired, r.desired, // @to
		queue, r.batchID, // CAS
		r.desired,        // @final
		queue, r.batchID, // membership insert
		queue, r.batchID, // membership delete
		queue, queue, // fan-out by position
		queue, queue, // fan-out of large batches
		queue, queue, queue, queue, // wake target
		queue, queue, queue, queue, // members
	}
	var out hostOutcome
	err := packet(ctx, p.appC, p.hostSQL, args, func(rows *sql.Rows) error {
		out = hostOutcome{members: map[string]hostMember{}}
		var candidate int64
		if err := scanOne(rows, &out.state, &out.exact, &out.moved, &out.target, &out.wake, &candidate, &out.contains); err != nil {
			return err
		}
		out.candidate = candidate == 1
		if !rows.NextResultSet() {
			return errors.New("limit: the members' answer is missing")
		}
		for rows.Next() {
			var id []byte
			var m hostMember
			if err := rows.Scan(&id, &m.state, &m.version); err != nil {
				return err
			}
			out.members[string(id)] = m
		}
		return rows.Err()
	})
	return out, err
}

// settledRecord is one record after its host packet: its settled event,
// the RequestLogs its fan-out owes, and the queue's wake target the packet
// saw.
type settledRecord struct {
	r       limitDue
	settled limitEvent
	msgs    []limitMessage
	wake    []byte
}

// repairAll settles each record's batch (one host packet each), then
// publishes every RequestLog and one wake-up for them all in one packet,
// and finishes each record in one fenced packet: a single record's
// wake-up is named by the record at its settled version, as mend names it;
// several share one named by the first record at the version of its wake
// intent, which its packet carries with its settled and woken events. It
// returns how many records were woken.
func (p *limitPlanner) repairAll(ctx context.Context, term mend.Term, recs []limitDue) (int, error) {
	queue := term.Queue
	var done []settledRecord
	var msgs []limitMessage
	for _, r := range recs {
		s, err := p.settle(ctx, term, r)
		if err != nil {
			return 0, fmt.Errorf("limit: record %s: %w", r.id, err)
		}
		done = append(done, s)
		msgs = append(msgs, s.msgs...)
	}
	// The last host packet saw the queue after every transition.
	wake := done[len(done)-1].wake
	anchor := done[0].r
	msgID := "mend/wake/" + anchor.id.String() + "/v" + strconv.FormatInt(anchor.version+1, 10)
	if len(done) > 1 {
		msgID = "mend/wake/" + anchor.id.String() + "/v" + strconv.FormatInt(anchor.version+2, 10)
	}
	if wake != nil {
		payload, _ := json.Marshal(map[string]string{"id": string(wake), "queue": queue})
		meta, _ := json.Marshal(map[string]string{"mend.epoch": strconv.FormatInt(term.Epoch, 10), "mend.record_id": anchor.id.String()})
		msgs = append(msgs, limitMessage{topic: "speculate", partition: queue, id: msgID, payload: payload, meta: string(meta)})
	}
	if err := p.publish(ctx, msgs); err != nil {
		return 0, err
	}
	woken := 0
	for i, s := range done {
		events := []limitEvent{s.settled}
		attempts := 0
		switch {
		case wake == nil:
			events = append(events, limitEvent{kind: "done", data: `{"reason":"no live batch: nothing to wake"}`})
		case len(done) == 1:
			attempts = 1
			data, _ := json.Marshal(map[string]any{"batch_id": string(wake), "message_id": msgID, "attempt": 1})
			events = append(events, limitEvent{kind: "woken", data: string(data)})
		default:
			attempts = 1
			if i == 0 {
				covers := make([]string, len(done))
				for n, d := range done {
					covers[n] = d.r.id.String()
				}
				data, _ := json.Marshal(map[string]any{"batch_id": string(wake), "message_id": msgID, "records": len(done), "covers": covers})
				events = append(events, limitEvent{kind: "wake_intent", data: string(data)})
			}
			data, _ := json.Marshal(map[string]any{"batch_id": string(wake), "message_id": msgID, "attempt": 1, "records": len(done)})
			events = append(events, limitEvent{kind: "woken", data: string(data)})
		}
		if _, err := limitAppend(ctx, p.mendC, limitAppendArgs{queue: queue, id: s.r.id, version: s.r.version, prevState: s.r.state,
			state: "done", attempts: attempts, term: &term, actor: p.actor, events: events}); err != nil {
			return woken, fmt.Errorf("limit: record %s: %w", s.r.id, err)
		}
		if wake != nil {
			woken++
		}
	}
	return woken, nil
}

// settle settles one pending record's batch with its host packet.
func (p *limitPlanner) settle(ctx context.Context, term mend.Term, r limitDue) (settledRecord, error) {
	if r.state != "pending" {
		return settledRecord{}, fmt.Errorf("%w: record is %s", errLimitScope, r.state)
	}
	queue := term.Queue
	var out hostOutcome
	for attempt := 0; ; attempt++ {
		var err error
		if out, err = p.host(ctx, queue, r); err != nil {
			return settledRecord{}, err
		}
		// A transition was decided but the CAS missed: the batch moved
		// between the read and the CAS. Decide again on a fresh read.
		conflict := out.state.Valid && out.exact == 1 && out.moved == 0 && decideTo(r.desired, out.state.String) != ""
		if !conflict {
			break
		}
		if attempt == 2 {
			return settledRecord{}, errLimitConflict
		}
	}
	settled := map[string]any{"batch_id": r.batchID}
	switch {
	case !out.state.Valid:
		settled["action"], settled["reason"] = "settle", "batch not found: nothing to repair"
	case out.exact != 1:
		return settledRecord{}, fmt.Errorf("%w: batch %q is stored under another spelling", errLimitScope, r.batchID)
	case !out.target.Valid:
		return settledRecord{}, fmt.Errorf("%w: batch is %s, desired %s: wait or park", errLimitScope, out.state.String, r.desired)
	default:
		outcome := map[string]string{"error": "failed", "landed": "succeeded", "cancelled": "cancelled"}[out.target.String]
		settled["outcome"] = outcome
		if out.moved == 1 {
			settled["action"] = "transition"
		} else {
			settled["action"] = "finish"
		}
		if outcome != r.desired {
			settled["divergent"] = true
		}
	}
	var msgs []limitMessage
	if out.target.Valid {
		var asked []string
		if err := json.Unmarshal(out.contains, &asked); err != nil {
			return settledRecord{}, fmt.Errorf("limit: batch %q: contains: %w", r.batchID, err)
		}
		seen := map[string]bool{}
		for _, rid := range asked {
			seen[rid] = true
		}
		for id := range out.members {
			if !seen[id] {
				// The collation matched a member under another spelling.
				return settledRecord{}, fmt.Errorf("%w: a member of %q is stored as %q", errLimitScope, r.batchID, id)
			}
		}
		published := map[string]bool{}
		for _, rid := range asked {
			m, ok := out.members[rid]
			// A member that does not exist is skipped, as the host's fan-out
			// does; one in another terminal state is never overwritten and
			// gets no RequestLog; a member listed twice is published once
			// (a second publish of the same ID would be a no-op).
			if !ok || m.state != out.target.String || published[rid] {
				continue
			}
			published[rid] = true
			msg, err := p.requestLog(queue, r, rid, out.target.String, m.version)
			if err != nil {
				return settledRecord{}, err
			}
			msgs = append(msgs, msg)
		}
	}
	wake := out.wake
	if wake == nil && out.candidate {
		// The smallest row was stale or dangling: look at all of them (a
		// round trip only such queues pay).
		err := p.appC.QueryRowContext(ctx, limitLiveAllSQL, queue, queue, queue).Scan(&wake)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return settledRecord{}, err
		}
	}
	settledData, _ := json.Marshal(settled)
	return settledRecord{r: r, settled: limitEvent{kind: "settled", data: string(settledData)}, msgs: msgs, wake: wake}, nil
}

// decideTo is the transition the decision table asks for, "" for none.
func decideTo(desired, state string) string {
	switch {
	case desired == "failed" && (state == "creating" || state == "created" || state == "speculating"):
		return "failed"
	case desired == "succeeded" && (state == "merging" || state == "cancelling"):
		return "succeeded"
	}
	return ""
}

type limitMessage struct {
	topic, partition, id string
	payload              []byte
	meta                 any // JSON text, or nil for NULL
}

// requestLog is the RequestLog entry the gateway reads for a member that
// reached its target state: status, the request's version, the failure's
// text when the batch failed, and the dead letter's context as string
// metadata.
func (p *limitPlanner) requestLog(queue string, r limitDue, rid, status string, version int64) (limitMessage, error) {
	meta := map[string]string{"mend.repaired_by": "mend"}
	if r.origTopic != "" {
		meta["dlq.original_topic"] = r.origTopic
	}
	if r.failureCount > 0 {
		meta["dlq.failure_count"] = strconv.Itoa(r.failureCount)
	}
	if r.failedAt.Valid {
		meta["dlq.failed_at"] = strconv.FormatInt(r.failedAt.Time.UnixMilli(), 10)
	}
	var subjects []struct{ Kind, ID string }
	if err := json.Unmarshal(r.subjects, &subjects); err != nil {
		return limitMessage{}, fmt.Errorf("limit: failure_subjects: %w", err)
	}
	kinds := map[string][]string{}
	for _, s := range subjects {
		if s.Kind != "" {
			kinds[s.Kind] = append(kinds[s.Kind], s.ID)
		}
	}
	for k, ids := range kinds {
		meta["dlq.subject."+k] = strings.Join(ids, ",")
	}
	lastErr := ""
	if status == "error" {
		lastErr = r.failureError
	}
	payload, err := json.Marshal(struct {
		RequestID      string            `json:"request_id"`
		Queue          string            `json:"queue"`
		TimestampMS    int64             `json:"timestamp_ms"`
		Type           string            `json:"type"`
		Status         string            `json:"status"`
		Event          string            `json:"event"`
		RequestVersion int64             `json:"request_version"`
		LastError      string            `json:"last_error"`
		Metadata       map[string]string `json:"metadata"`
	}{rid, queue, p.nowMS(), "status", status, "", version, lastErr, meta})
	if err != nil {
		return limitMessage{}, err
	}
	if len(payload) > 65535 {
		return limitMessage{}, fmt.Errorf("%w: RequestLog of %d bytes", errLimitScope, len(payload))
	}
	return limitMessage{topic: "log", partition: rid, id: rid + "/" + status, payload: payload}, nil
}

func (p *limitPlanner) publish(ctx context.Context, msgs []limitMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	now := p.nowMS()
	var b strings.Builder
	b.WriteString(limitPublishSQL)
	args := make([]any, 0, 7*len(msgs))
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(limitPublishRow)
		args = append(args, m.topic, m.id, m.payload, m.meta, m.partition, now, now)
	}
	b.WriteString(limitPublishTail)
	_, err := p.queueC.ExecContext(ctx, b.String(), args...)
	return err
}

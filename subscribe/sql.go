package subscribe

// This file holds the statements a pass sends to the host's queue
// database: the real queue's own consumer-group protocol (join, fetch,
// advance) plus read-only discovery, settle and horizon queries. The
// open-transaction view (its read, freshness proof and monitor fallback)
// is opentrx.go; the settle window's bound from the server, window.go; the
// operator's reads (Lag, Held) and the leave (Remove), operator.go. They
// need exactly the grants the host's own consumers hold: SELECT on
// queue_messages; SELECT, INSERT, UPDATE and DELETE on queue_offsets; the
// open-transaction view also PROCESS, and runs without it as the window
// alone.
// `offset` is quoted everywhere: it is a reserved word on MariaDB.

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqlx"
)

// Open connects to the host's queue database (a go-sql-driver DSN naming
// it), with the settings mend's other pools use, and checks that it
// answers. The DSN never appears in an error.
func Open(ctx context.Context, queueDSN string) (*sql.DB, error) {
	// The session rules of every mend pool (mysqlx.Config, Resolve): DSN
	// settings that would change them are refused; autocommit, READ
	// COMMITTED (a dead letter whose move rolls back is never read), no
	// sql_select_limit (every partition is joined), utf8mb4, strict mode
	// and UTC are forced, whatever the server's globals; no
	// multi-statements. A hung server cannot hold a
	// page forever: the I/O is bounded like the host adapter's.
	db, err := mysqlx.Open(ctx, queueDSN, mysqlx.Pool{Field: "queue_dsn", IOTimeout: ioTimeout}, 2*ConcurrencyDefault)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return db, nil
}

// ioTimeout bounds each read and write on the queue database's connections.
const ioTimeout = time.Minute

// The real subscriber's join: a new group row starts at offset 0, which
// holds the host's GC of the partition back until the group advances.
const sqlJoin = "-- name: SubscribeJoin\n" +
	"INSERT IGNORE INTO queue_offsets (consumer_group, topic, partition_key, offset_acked, updated_at) VALUES (?, ?, ?, 0, ?)"

// sqlJoinMore adds a partition to SubscribeJoin.
const sqlJoinMore = ", (?, ?, ?, 0, ?)"

// The real subscriber's leave, for every partition of the group at once.
const sqlLeave = "-- name: SubscribeLeave\n" +
	"DELETE FROM queue_offsets WHERE consumer_group = ?"

// The group's own rows: its partitions and their watermarks (a range of
// the primary key).
const sqlOwn = "-- name: SubscribeOwn\n" +
	"SELECT topic, partition_key, offset_acked FROM queue_offsets WHERE consumer_group = ?"

// Partitions other groups have joined: the register-ahead source.
const sqlOthers = "-- name: SubscribeOthers\n" +
	"SELECT DISTINCT topic, partition_key FROM queue_offsets WHERE consumer_group <> ?"

// Discovery reads the (topic, partition_key, offset) index: the topics
// with a loose index scan (cost: the number of topics), a DLQ topic's
// partitions with a covering range over that topic's entries (cost: its
// dead letters not yet collected). Neither reads the other topics' rows.
const sqlTopics = "-- name: SubscribeTopics\n" +
	"SELECT DISTINCT topic FROM queue_messages"

const sqlPartitions = "-- name: SubscribePartitions\n" +
	"SELECT DISTINCT partition_key FROM queue_messages WHERE topic = ?"

// The real FetchByOffset shape (without published_at and metadata, which a
// record does not keep), one branch per partition: a read covers several
// partitions in one round trip, each branch exactly the real subscriber's
// page query (a range of the (topic, partition_key, offset) index in offset
// order). The first column tags the branch; the page limit is formatted
// into the text.
const (
	sqlFetchName   = "-- name: SubscribeFetch\n"
	sqlFetchBranch = "SELECT %d AS k, `offset`, topic, partition_key, id, payload, failed_at, failure_count, last_error, original_topic, failure_detail\n" +
		"FROM queue_messages WHERE topic = ? AND partition_key = ? AND `offset` > ? ORDER BY `offset` LIMIT %d"
)

// The settle check: which rows each range holds now, as a digest of their
// offsets that does not depend on order (see rowSet): how many, their sum
// and the sum of their CRC32s, from the index alone, one branch per
// partition. Comparing a count alone would take a row deleted (the ctl's
// DeleteMessage or RequeueDLQ) plus one committed late for no change.
const (
	sqlCountName   = "-- name: SubscribeCount\n"
	sqlCountBranch = "SELECT %[1]d AS k, COUNT(*), COALESCE(SUM(`offset`), 0), COALESCE(SUM(CRC32(`offset`)), 0) FROM queue_messages WHERE topic = ? AND partition_key = ? AND `offset` > ? AND `offset` <= ?"
)

// The advance for several partitions in one statement, by primary key:
// each is a compare-and-set from the watermark its range was counted from
// (offset_acked = from) and only forward (from < to, also in the
// statement), in the CASE and the WHERE. One statement is one commit, not
// one per partition. A partition whose watermark another replica moved
// meanwhile is left alone; the next pass reads its watermark again.
const (
	sqlAdvanceMany = "-- name: SubscribeAdvanceMany\n" +
		"UPDATE queue_offsets SET offset_acked = CASE %s ELSE offset_acked END, updated_at = ?\n" +
		"WHERE consumer_group = ? AND (%s)"
	sqlAdvanceWhen  = "WHEN topic = ? AND partition_key = ? AND %s THEN ?"
	sqlAdvanceWhere = "(topic = ? AND partition_key = ? AND %s)"
	// The guards: the compare-and-set; the planted variants' forward-only
	// and none (see planted).
	sqlAdvanceCAS     = "offset_acked = ? AND offset_acked < ?"
	sqlAdvanceForward = "offset_acked < ? AND ? = ?"
	sqlAdvanceNone    = "? = ? AND ? = ?"
)

// manyChunk bounds the partitions one read, count or advance names.
const manyChunk = 100

// The table's highest committed offset (one dive into the primary key),
// and the server's clock in UTC, which the open transactions' start times
// compare with.
const sqlHorizon = "-- name: SubscribeHorizon\n" +
	"SELECT COALESCE(MAX(`offset`), 0), UTC_TIMESTAMP(6) FROM queue_messages"

// partKey names a partition as the server compares it: the queue tables'
// collation pads spaces, so "q" and "q " are one partition (and one
// queue_offsets row).
type partKey struct{ topic, partition string }

func keyOf(topic, partition string) partKey {
	return partKey{topic, strings.TrimRight(partition, " ")}
}

// dlqTopic returns the dead-letter topic a discovered topic name stands
// for. Discovery's DISTINCT returns one spelling of each set of names the
// collation holds equal ("x_dlq" and "x_dlq " on utf8mb4_bin; "x_DLQ" too on
// a case-insensitive one), so the name is normalised here and rows are
// checked byte for byte when read.
func dlqTopic(name string) (string, bool) {
	t := strings.TrimRight(name, " ")
	n := len(dlq.DLQSuffix)
	if len(t) <= n || !strings.EqualFold(t[len(t)-n:], dlq.DLQSuffix) {
		return "", false
	}
	return t[:len(t)-n] + dlq.DLQSuffix, true
}

type ownRow struct {
	key       partKey
	partition string // as stored
	acked     uint64
}

func (s *Subscriber) own(ctx context.Context) ([]ownRow, error) {
	rows, err := s.cfg.DB.QueryContext(ctx, sqlOwn, s.cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("subscribe: read the group's offsets: %w", mysqlx.Translate(err))
	}
	defer rows.Close()
	var out []ownRow
	for rows.Next() {
		var r ownRow
		var topic string
		if err := rows.Scan(&topic, &r.partition, &r.acked); err != nil {
			return nil, fmt.Errorf("subscribe: read the group's offsets: %w", err)
		}
		r.key = keyOf(topic, r.partition)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscribe: read the group's offsets: %w", mysqlx.Translate(err))
	}
	return out, nil
}

type otherRow struct{ topic, partition string }

func (s *Subscriber) others(ctx context.Context) ([]otherRow, error) {
	rows, err := s.cfg.DB.QueryContext(ctx, sqlOthers, s.cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("subscribe: read other groups' partitions: %w", mysqlx.Translate(err))
	}
	defer rows.Close()
	var out []otherRow
	for rows.Next() {
		var o otherRow
		if err := rows.Scan(&o.topic, &o.partition); err != nil {
			return nil, fmt.Errorf("subscribe: read other groups' partitions: %w", err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscribe: read other groups' partitions: %w", mysqlx.Translate(err))
	}
	return out, nil
}

// joinMany joins the partitions ks (spelled as spell), joinChunk per
// statement: the real join's INSERT IGNORE with one row per partition, so
// registering ahead a thousand partitions is two commits, not a thousand.
func (s *Subscriber) joinMany(ctx context.Context, ks []partKey, spell []string) error {
	for from := 0; from < len(ks); from += joinChunk {
		n := min(joinChunk, len(ks)-from)
		q := sqlJoin + strings.Repeat(sqlJoinMore, n-1)
		args := make([]any, 0, 4*n)
		now := s.nowMS()
		for i := from; i < from+n; i++ {
			args = append(args, s.cfg.Group, ks[i].topic, spell[i], now)
		}
		if _, err := s.cfg.DB.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("subscribe: join %d partitions (%s/%q, ...): %w", n, ks[from].topic, spell[from], mysqlx.Translate(err))
		}
	}
	return nil
}

// joinChunk bounds the partitions one join statement names.
const joinChunk = 500

// span is a range of one partition: (after, upTo], or for a read the rows
// after after, at most limit of them.
type span struct {
	topic, partition string
	after, upTo      uint64
	limit            int
}

// advanceMany carries out advances in one statement (see
// SubscribeAdvanceMany). It returns how many partitions moved.
func (s *Subscriber) advanceMany(ctx context.Context, advs []advance) (int64, error) {
	whens := make([]string, len(advs))
	wheres := make([]string, len(advs))
	args := make([]any, 0, 9*len(advs)+2)
	guardArgs := make([][]any, len(advs))
	for i, a := range advs {
		guard, g := advanceGuard(a)
		whens[i], wheres[i] = fmt.Sprintf(sqlAdvanceWhen, guard), fmt.Sprintf(sqlAdvanceWhere, guard)
		guardArgs[i] = g
		args = append(append(append(args, a.topic, a.partition), g...), a.to)
	}
	args = append(args, s.nowMS(), s.cfg.Group)
	for i, a := range advs {
		args = append(append(args, a.topic, a.partition), guardArgs[i]...)
	}
	q := fmt.Sprintf(sqlAdvanceMany, strings.Join(whens, " "), strings.Join(wheres, " OR "))
	res, err := s.cfg.DB.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("subscribe: advance %d partitions (%s/%q to %d, ...): %w", len(advs), advs[0].topic, advs[0].partition, advs[0].to, mysqlx.Translate(err))
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// advanceGuard is the condition a's UPDATE moves the watermark under, and
// its arguments: the same rule as advance.allowed.
func advanceGuard(a advance) (string, []any) {
	switch {
	case planted.noForwardGuard:
		return sqlAdvanceNone, []any{0, 0, 0, 0}
	case !a.cas:
		return sqlAdvanceForward, []any{a.to, 0, 0}
	case planted.casAtLeast:
		return "offset_acked >= ? AND offset_acked < ?", []any{a.from, a.to}
	default:
		return sqlAdvanceCAS, []any{a.from, a.to}
	}
}

// union joins one branch per span (format with the branch index and, for
// reads, the limit) with UNION ALL; a single branch is sent bare.
func union(name, branch string, spans []span, args func(span) []any) (string, []any) {
	var q strings.Builder
	q.WriteString(name)
	var all []any
	for i, sp := range spans {
		b := fmt.Sprintf(branch, i, sp.limit)
		if len(spans) > 1 {
			if i > 0 {
				q.WriteString("\nUNION ALL ")
			}
			b = "(" + b + ")"
		}
		q.WriteString(b)
		all = append(all, args(sp)...)
	}
	return q.String(), all
}

func (s *Subscriber) nowMS() int64 { return s.cfg.NowFunc().UnixMilli() }

func queryStrings(ctx context.Context, db *sql.DB, what, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %s: %w", what, mysqlx.Translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("subscribe: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscribe: %s: %w", what, mysqlx.Translate(err))
	}
	return out, nil
}

// page is one FetchByOffset page.
type page struct {
	rows    []dlq.Row // the rows whose topic is byte for byte the partition's
	dropped int       // rows the server matched only through its collation
	n       int       // rows the server returned
	last    uint64    // offset of the last row the server returned
	all     rowSet    // the offsets of every row the server returned
}

// read is the page as the ledger takes it.
func (p page) read(from uint64) pageRead {
	kept := make([]uint64, len(p.rows))
	for i, r := range p.rows {
		kept[i] = r.Offset
	}
	return pageRead{from: from, kept: kept, dropped: p.dropped, all: p.all, last: p.last}
}

// fetchMany reads a page of each span, one per partition, in one
// statement: pages[i] is spans[i]'s, its rows in offset order.
func (s *Subscriber) fetchMany(ctx context.Context, spans []span) ([]page, error) {
	q, args := union(sqlFetchName, sqlFetchBranch, spans, func(sp span) []any { return []any{sp.topic, sp.partition, sp.after} })
	rows, err := s.cfg.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("subscribe: read %d partitions (%s/%q after %d, ...): %w", len(spans), spans[0].topic, spans[0].partition, spans[0].after, mysqlx.Translate(err))
	}
	defer rows.Close()
	pages := make([]page, len(spans))
	for i, sp := range spans {
		pages[i].last = sp.after
	}
	for rows.Next() {
		var k int
		var r dlq.Row
		if err := rows.Scan(&k, &r.Offset, &r.Topic, &r.PartitionKey, &r.ID, &r.Payload, &r.FailedAtMS,
			&r.FailureCount, &r.LastError, &r.OriginalTopic, &r.FailureDetail); err != nil {
			return nil, fmt.Errorf("subscribe: read %d partitions: %w", len(spans), err)
		}
		if k < 0 || k >= len(spans) {
			return nil, fmt.Errorf("subscribe: read %d partitions: a row tagged %d", len(spans), k)
		}
		p := &pages[k]
		p.n++
		p.last = max(p.last, r.Offset)
		p.all.add(r.Offset)
		if r.Topic != spans[k].topic {
			p.dropped++ // "x_dlq " or "x_DLQ": no MoveToDLQ writes those
			continue
		}
		p.rows = append(p.rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscribe: read %d partitions: %w", len(spans), mysqlx.Translate(err))
	}
	for i := range pages {
		// Each branch is sent in offset order; UNION ALL does not promise
		// to keep it, so it is restored here.
		slices.SortFunc(pages[i].rows, func(a, b dlq.Row) int { return cmp.Compare(a.Offset, b.Offset) })
	}
	return pages, nil
}

// countMany returns the set of rows each span's range holds now.
func (s *Subscriber) countMany(ctx context.Context, spans []span) ([]rowSet, error) {
	q, args := union(sqlCountName, sqlCountBranch, spans, func(sp span) []any { return []any{sp.topic, sp.partition, sp.after, sp.upTo} })
	rows, err := s.cfg.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("subscribe: count %d partitions (%s/%q, ...): %w", len(spans), spans[0].topic, spans[0].partition, mysqlx.Translate(err))
	}
	defer rows.Close()
	out := make([]rowSet, len(spans))
	seen := 0
	for rows.Next() {
		var k, n int
		var sum, crc uint64
		if err := rows.Scan(&k, &n, &sum, &crc); err != nil {
			return nil, fmt.Errorf("subscribe: count %d partitions: %w", len(spans), err)
		}
		if k < 0 || k >= len(spans) {
			return nil, fmt.Errorf("subscribe: count %d partitions: a row tagged %d", len(spans), k)
		}
		out[k] = rowSet{rows: n, sum: sum, crc: crc}
		seen++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscribe: count %d partitions: %w", len(spans), mysqlx.Translate(err))
	}
	if seen != len(spans) {
		return nil, fmt.Errorf("subscribe: count %d partitions: %d answers", len(spans), seen)
	}
	return out, nil
}

func (s *Subscriber) horizon(ctx context.Context) (uint64, time.Time, error) {
	var h uint64
	var at time.Time
	if err := s.cfg.DB.QueryRowContext(ctx, sqlHorizon).Scan(&h, &at); err != nil {
		return 0, time.Time{}, fmt.Errorf("subscribe: read the highest offset: %w", mysqlx.Translate(err))
	}
	return h, at.UTC(), nil
}

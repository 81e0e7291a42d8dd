package subscribe

// This file holds every statement the subscription sends to the host's
// queue database: the real queue's own consumer-group protocol (join,
// fetch, advance, leave) plus read-only discovery, settle and lag queries.
// They need exactly the grants the host's own consumers hold: SELECT on
// queue_messages; SELECT, INSERT, UPDATE and DELETE on queue_offsets; the
// open-transactions read (SubscribeOpenTrx, and on MySQL its fallback
// SubscribeOpenStatus in status.go) also PROCESS, and runs
// without it as the window alone.
// `offset` is quoted everywhere: it is a reserved word on MariaDB.

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mendq/mend"
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

// Rows above the group's watermarks, per topic: what the group holds the
// host's GC back on, and the lowest offset among them. It reads only the
// (topic, partition_key, offset) index, never the rows: a backlog of
// 100,000 costs a covering scan of 100,000 entries, not 100,000 row
// lookups (about a quarter of the time).
const sqlLag = "-- name: SubscribeLag\n" +
	"SELECT o.topic, COUNT(DISTINCT o.partition_key), COUNT(m.`offset`), COALESCE(MIN(m.`offset`), 0)\n" +
	"FROM queue_offsets o LEFT JOIN queue_messages m\n" +
	"  ON m.topic = o.topic AND m.partition_key = o.partition_key AND m.`offset` > o.offset_acked\n" +
	"WHERE o.consumer_group = ?\n" +
	"GROUP BY o.topic ORDER BY o.topic"

// The failed_at of the earliest row above the watermarks of each topic,
// by primary key.
const sqlLagOldest = "-- name: SubscribeLagOldest\n" +
	"SELECT `offset`, failed_at FROM queue_messages WHERE `offset` IN (%s)"

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

// The server's open transactions that may hold an offset of
// queue_messages uncommitted, read just after each horizon sample (see
// the package doc, "Open transactions"): how many InnoDB transactions
// that are not read-only are open in sessions whose current database is
// the queue's, and when the oldest of them began, by the server's clock in
// UTC (trx_started is in the server's system time zone, whole seconds).
// information_schema.innodb_trx and SHOW PROCESSLIST show every session's
// only to a user with PROCESS, on MySQL and MariaDB alike. Neither says which
// table a transaction locked, so a long writer on another table of the
// queue's database holds the watermarks too. MySQL's
// performance_schema.data_locks would (SELECT on it alone), but gives no
// start time and is empty while performance_schema is off; MariaDB has
// none, and its innodb_locks lists only locks waited for, not the IX lock
// every insert holds.
//
// InnoDB fills innodb_trx from a cache it refreshes only once nobody has
// read it for 0.1 s, so a view can be older than the statement reading
// it. The read therefore runs in a transaction of its own, begun inside
// InnoDB first (sqlOpenTouch), and counts itself: a view that does not
// show the reader's own transaction predates the sample and is not used
// (openUnknown: the samples taken since the last usable read wait for the
// next; if none comes within the settle window, because something reads
// innodb_trx more often than every 0.1 s throughout, the window alone
// decides).
const (
	sqlOpenTouch = "-- name: SubscribeOpenTouch\n" +
		"SELECT COUNT(*), DATABASE() FROM (SELECT 1 FROM queue_messages LIMIT 1) AS one"
	// The InnoDB transactions that are not read-only: their sessions, one
	// of them the reader's own, and their starts by the server's clock.
	sqlOpenTrx = "-- name: SubscribeOpenTrx\n" +
		"SELECT t.trx_mysql_thread_id, t.trx_mysql_thread_id = CONNECTION_ID(), CONVERT_TZ(t.trx_started, 'SYSTEM', '+00:00')\n" +
		"FROM information_schema.innodb_trx t WHERE t.trx_is_read_only = 0"
	// Each session's current database. Not information_schema.processlist:
	// MySQL builds that table with the statement text as utf8mb3, every
	// row before any WHERE applies, so while any session runs a statement
	// holding bytes utf8mb3 cannot hold (a binary ID interpolated into it,
	// as mend's own statements carry) the whole read fails with error 3854.
	// SHOW PROCESSLIST sends the text as it is.
	sqlOpenSessions = "-- name: SubscribeOpenSessions\n" +
		"SHOW PROCESSLIST"
)

// OpenGrant is the grant that lets the subscription see the open
// transactions, on MySQL and MariaDB; account is the user's quoted account
// ('mend'@'%'), or empty for a placeholder.
func OpenGrant(account string) string {
	return fmt.Sprintf("GRANT PROCESS ON *.* TO %s", cmp.Or(account, "<mend's queue user>"))
}

// ErrOpenHidden is returned (wrapped, with the server's refusal) when the
// queue database's user may not read the server's open transactions.
var ErrOpenHidden = errors.New("subscribe: the queue database's open transactions are hidden from this user")

// OpenVisible reports whether db's user may read the server's open
// transactions, by reading them (not from SHOW GRANTS, which misses roles
// and wildcard grants): nil if it may, an error wrapping ErrOpenHidden if
// the server refuses, any other error as is. A read whose view came back
// stale (innodb_trx's cache predating it, common on a busy server) was
// allowed, so it answers nil.
func OpenVisible(ctx context.Context, db *sql.DB) error {
	_, err := readOpen(ctx, db)
	return openAllowed(err)
}

// openAllowed is OpenVisible's answer for a read that returned err.
func openAllowed(err error) error {
	if errors.Is(err, errOpenStale) {
		return nil
	}
	return err
}

// refused reports whether err is the server refusing a read for want of
// a privilege, or because the table does not exist on this engine (a
// proxy's restricted view).
func refused(err error) bool {
	switch mysqlx.ErrNumber(err) {
	case 1044, 1142, 1143, 1227, 1146, 1109:
		return true
	}
	return false
}

// errOpenStale is a view of the open transactions older than the read.
var errOpenStale = errors.New("subscribe: the server's view of its open transactions predates the read (innodb_trx's cache)")

// readOpen reads the open transactions (sqlOpenTrx): the oldest one's
// start, zero when none is open.
func readOpen(ctx context.Context, db *sql.DB) (_ time.Time, err error) {
	wrap := func(err error) error {
		if refused(err) {
			return fmt.Errorf("%w: %w", ErrOpenHidden, err)
		}
		return fmt.Errorf("subscribe: read the open transactions: %w", mysqlx.Translate(err))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return time.Time{}, wrap(err)
	}
	defer func() { err = errors.Join(err, tx.Rollback()) }()
	var one int
	var current sql.NullString
	if err := tx.QueryRowContext(ctx, sqlOpenTouch).Scan(&one, &current); err != nil {
		return time.Time{}, wrap(err)
	}
	others, self, err := openFromTrx(ctx, tx)
	if mysqlx.ErrNumber(err) == errCannotConvert {
		// MySQL could not fill innodb_trx (see errCannotConvert): the
		// InnoDB monitor lists the same transactions, live.
		others, err = openFromStatus(ctx, tx)
		self = true
	}
	switch {
	case err != nil:
		return time.Time{}, wrap(err)
	case !self:
		return time.Time{}, errOpenStale
	case len(others) == 0:
		return time.Time{}, nil
	}
	dbs, err := sessionDatabases(ctx, tx)
	if err != nil {
		return time.Time{}, wrap(err)
	}
	var oldest time.Time
	for _, o := range others {
		db, ok := dbs[o.session]
		switch {
		case !ok || !current.Valid || db != current.String:
			continue // another database's, or its session ended since
		case !o.started.Valid:
			// A start time CONVERT_TZ could not convert: older than any sample.
			return time.Unix(0, 0).UTC(), nil
		case oldest.IsZero() || o.started.Time.Before(oldest):
			oldest = o.started.Time
		}
	}
	return oldest.UTC(), nil
}

// openTrx is another session's open transaction: its session and when it
// began by the server's clock in UTC (invalid when it could not be
// converted: older than any sample).
type openTrx struct {
	session int64
	started sql.NullTime
}

// openFromTrx reads the open transactions from innodb_trx (sqlOpenTrx)
// inside the reader's transaction tx: the other sessions', and whether the
// view shows the reader's own (a view that does not predates the read).
func openFromTrx(ctx context.Context, tx *sql.Tx) (others []openTrx, self bool, err error) {
	rows, err := tx.QueryContext(ctx, sqlOpenTrx)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var o openTrx
		var mine int
		if err := rows.Scan(&o.session, &mine, &o.started); err != nil {
			return nil, false, err
		}
		if mine == 1 {
			self = true
		} else {
			others = append(others, o)
		}
	}
	return others, self, rows.Err()
}

// sessionDatabases reads each session's current database from SHOW
// PROCESSLIST (sqlOpenSessions), by column name: MariaDB adds columns.
// A session without one is left out.
func sessionDatabases(ctx context.Context, tx *sql.Tx) (map[int64]string, error) {
	rows, err := tx.QueryContext(ctx, sqlOpenSessions)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	id, db := -1, -1
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "id":
			id = i
		case "db":
			db = i
		}
	}
	if id < 0 || db < 0 {
		return nil, fmt.Errorf("SHOW PROCESSLIST has no Id or db column (columns %v)", cols)
	}
	out := map[int64]string{}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		if vals[db] == nil {
			continue
		}
		n, err := strconv.ParseInt(string(vals[id]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("SHOW PROCESSLIST: session id %q: %w", vals[id], err)
		}
		out[n] = string(vals[db])
	}
	return out, rows.Err()
}

// The server's default lock wait for the sessions of the host's queue
// (MoveToDLQ's among them): how long an INSERT that allocated an offset
// may wait on a lock before it commits or fails.
const sqlLockWait = "-- name: SubscribeLockWait\n" +
	"SELECT @@GLOBAL.innodb_lock_wait_timeout"

// LockWaitTimeout reads the queue database's innodb_lock_wait_timeout:
// the settle window must exceed it (SettleFor), or a MoveToDLQ that waited
// on a lock after allocating its offset can commit below the watermark.
func LockWaitTimeout(ctx context.Context, db *sql.DB) (time.Duration, error) {
	var secs uint64
	if err := db.QueryRowContext(ctx, sqlLockWait).Scan(&secs); err != nil {
		return 0, fmt.Errorf("subscribe: read innodb_lock_wait_timeout: %w", mysqlx.Translate(err))
	}
	return time.Duration(min(secs, 1<<30)) * time.Second, nil
}

// TopicLag is how far a group is behind on one dead-letter topic.
type TopicLag struct {
	Topic      string
	Partitions int // the group's partitions of the topic
	// Rows are the rows above the group's watermarks: dead letters the
	// group has not released yet (not recorded, or recorded within the
	// settle window). The host's GC keeps them.
	Rows int64
	// Oldest is the failed_at of the earliest of them (the lowest offset:
	// the first moved to the DLQ); zero when Rows is 0.
	Oldest time.Time
}

// Age is how long the oldest row has waited, as of now (0 without rows).
func (l TopicLag) Age(now time.Time) time.Duration {
	if l.Oldest.IsZero() {
		return 0
	}
	return max(now.Sub(l.Oldest), 0)
}

// Lag reads group's lag per topic from the host's queue database: one row
// per topic the group has joined. It needs no running subscription (mend
// status and doctor use it).
func Lag(ctx context.Context, db *sql.DB, group string) ([]TopicLag, error) {
	group = groupOr(group)
	rows, err := db.QueryContext(ctx, sqlLag, group)
	if err != nil {
		return nil, fmt.Errorf("subscribe: read the lag of group %q: %w", group, mysqlx.Translate(err))
	}
	defer rows.Close()
	var out []TopicLag
	var first []uint64 // per topic, the lowest offset above the watermarks
	for rows.Next() {
		var l TopicLag
		var offset uint64
		if err := rows.Scan(&l.Topic, &l.Partitions, &l.Rows, &offset); err != nil {
			return nil, fmt.Errorf("subscribe: read the lag of group %q: %w", group, err)
		}
		out, first = append(out, l), append(first, offset)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscribe: read the lag of group %q: %w", group, mysqlx.Translate(err))
	}
	rows.Close()
	var args []any
	for i, l := range out {
		if l.Rows > 0 {
			args = append(args, first[i])
		}
	}
	if len(args) == 0 {
		return out, nil
	}
	failed := map[uint64]uint64{}
	rows, err = db.QueryContext(ctx, fmt.Sprintf(sqlLagOldest, strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")), args...)
	if err != nil {
		return nil, fmt.Errorf("subscribe: read the lag of group %q: %w", group, mysqlx.Translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var offset, at uint64
		if err := rows.Scan(&offset, &at); err != nil {
			return nil, fmt.Errorf("subscribe: read the lag of group %q: %w", group, err)
		}
		failed[offset] = at
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("subscribe: read the lag of group %q: %w", group, mysqlx.Translate(err))
	}
	for i := range out {
		// A row the host's GC removed meanwhile leaves Oldest zero.
		if at := failed[first[i]]; out[i].Rows > 0 && at > 0 && at < 1<<62 {
			out[i].Oldest = time.UnixMilli(int64(at)).UTC()
		}
	}
	return out, nil
}

// Remove deregisters group from every partition: the real subscriber's
// leave. From then on the host's GC collects those partitions as its own
// groups allow, including dead letters the group never recorded. Stop
// every subscription of the group first: a running one joins again. It
// returns how many partitions the group left.
func Remove(ctx context.Context, db *sql.DB, group string) (int64, error) {
	group = groupOr(group)
	if err := mend.ValidateIdentity("group", group, true); err != nil {
		return 0, err
	}
	res, err := db.ExecContext(ctx, sqlLeave, group)
	if err != nil {
		return 0, fmt.Errorf("subscribe: remove group %q: %w", group, mysqlx.Translate(err))
	}
	n, _ := res.RowsAffected()
	return n, nil
}

func groupOr(g string) string {
	if g == "" {
		return GroupDefault
	}
	return g
}

// The lowest row above each of the group's watermarks: the row each
// partition waits on (covering, from the index, as SubscribeLag).
const sqlHeld = "-- name: SubscribeHeld\n" +
	"SELECT o.topic, o.partition_key, o.offset_acked, MIN(m.`offset`)\n" +
	"FROM queue_offsets o JOIN queue_messages m\n" +
	"  ON m.topic = o.topic AND m.partition_key = o.partition_key AND m.`offset` > o.offset_acked\n" +
	"WHERE o.consumer_group = ?\n" +
	"GROUP BY o.topic, o.partition_key, o.offset_acked"

// Those rows, by primary key.
const sqlHeldRows = "-- name: SubscribeHeldRows\n" +
	"SELECT `offset`, id, failed_at, failure_count, last_error FROM queue_messages WHERE `offset` IN (%s)"

// HeldRow is the row a partition's watermark waits on: the lowest above
// it. A partition held longer than the settle window and a few polls is
// one whose recording fails (mend run's log and
// mend_subscribe_failing_row_attempts say why) or that no mend runs for.
type HeldRow struct {
	Topic, Partition string
	Watermark        uint64
	Offset           uint64
	ID               string
	FailedAt         time.Time // when the host moved it to the DLQ
	FailureCount     int
	// LastError is the host's, as MoveToDLQ stored it. It may quote the
	// payload: escape it wherever it is shown.
	LastError string
}

// Held reads, for each partition of group, the row its watermark waits
// on, keeping those the host dead-lettered more than olderThan before now,
// oldest first, at most limit. It needs no running subscription (mend
// status and subscribe use it).
func Held(ctx context.Context, db *sql.DB, group string, olderThan time.Duration, now time.Time, limit int) ([]HeldRow, error) {
	group = groupOr(group)
	fail := func(err error) error {
		return fmt.Errorf("subscribe: read the rows group %q waits on: %w", group, mysqlx.Translate(err))
	}
	rows, err := db.QueryContext(ctx, sqlHeld, group)
	if err != nil {
		return nil, fail(err)
	}
	defer rows.Close()
	var held []HeldRow
	for rows.Next() {
		var h HeldRow
		if err := rows.Scan(&h.Topic, &h.Partition, &h.Watermark, &h.Offset); err != nil {
			return nil, fail(err)
		}
		held = append(held, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fail(err)
	}
	rows.Close()
	byOffset := map[uint64]*HeldRow{}
	for from := 0; from < len(held); from += manyChunk {
		chunk := held[from:min(from+manyChunk, len(held))]
		args := make([]any, len(chunk))
		for i := range chunk {
			args[i] = chunk[i].Offset
			byOffset[chunk[i].Offset] = &chunk[i]
		}
		q := fmt.Sprintf(sqlHeldRows, strings.TrimSuffix(strings.Repeat("?,", len(args)), ","))
		rs, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fail(err)
		}
		for rs.Next() {
			var offset uint64
			var id, lastErr sql.NullString
			var failedAt sql.NullInt64
			var count sql.NullInt64
			if err := rs.Scan(&offset, &id, &failedAt, &count, &lastErr); err != nil {
				rs.Close()
				return nil, fail(err)
			}
			if h := byOffset[offset]; h != nil {
				h.ID, h.LastError, h.FailureCount = id.String, lastErr.String, int(count.Int64)
				if failedAt.Valid && failedAt.Int64 > 0 {
					h.FailedAt = time.UnixMilli(failedAt.Int64).UTC()
				}
			}
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return nil, fail(err)
		}
	}
	out := held[:0]
	for _, h := range held {
		// A row the GC removed meanwhile has no failed_at: skip it.
		if !h.FailedAt.IsZero() && now.Sub(h.FailedAt) > olderThan {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b HeldRow) int {
		return cmp.Or(a.FailedAt.Compare(b.FailedAt), cmp.Compare(a.Offset, b.Offset))
	})
	return out[:min(len(out), max(limit, 0))], nil
}

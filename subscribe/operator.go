package subscribe

// The operator's reads and the leave: Lag, Held and Remove, which need no
// running subscription (mend status, doctor and subscribe call them).

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
)

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

// The number of a group's rows in queue_offsets (a range of the primary
// key; SELECT only).
const sqlGroupRows = "-- name: SubscribeGroupRows\n" +
	"SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = ?"

// GroupRows counts group's rows in the host's queue_offsets (one per
// partition it joined; "" means GroupDefault) with a SELECT alone, so it
// runs under the documented grants, which withhold DELETE: 0 means the
// group holds nothing of the host's GC back and there is nothing to leave.
// Binlog mode's reader asks it before trying to leave the group (Remove).
// Returns the read's error (mend.ErrDenied without SELECT on queue_offsets).
func GroupRows(ctx context.Context, db *sql.DB, group string) (int, error) {
	group = groupOr(group)
	var n int
	if err := db.QueryRowContext(ctx, sqlGroupRows, group).Scan(&n); err != nil {
		return 0, fmt.Errorf("subscribe: count the rows of group %q: %w", group, mysqlx.Translate(err))
	}
	return n, nil
}

// Each of a group's partitions, its watermark and the rows above it.
const sqlGroupPartitions = "-- name: SubscribeGroupPartitions\n" +
	"SELECT o.topic, o.partition_key, o.offset_acked, COUNT(m.`offset`)\n" +
	"FROM queue_offsets o LEFT JOIN queue_messages m\n" +
	"  ON m.topic = o.topic AND m.partition_key = o.partition_key AND m.`offset` > o.offset_acked\n" +
	"WHERE o.consumer_group = ?\n" +
	"GROUP BY o.topic, o.partition_key, o.offset_acked ORDER BY o.topic, o.partition_key"

// GroupPartition is one of a group's rows in queue_offsets and what it
// holds back.
type GroupPartition struct {
	Topic, Partition string
	// Watermark is the row's offset_acked: the host's GC keeps every row
	// of the partition above it while the group stays joined.
	Watermark uint64
	// Behind counts the partition's rows above the watermark now.
	Behind int64
}

// GroupPartitions reads group's rows in the host's queue_offsets ("" means
// GroupDefault), each with its watermark and the rows above it that the
// host's GC keeps for the group, by topic and partition; at most limit
// (all when limit <= 0). SELECT only: mend doctor and mend status show a
// group that binlog mode left behind with it.
func GroupPartitions(ctx context.Context, db *sql.DB, group string, limit int) ([]GroupPartition, error) {
	group = groupOr(group)
	fail := func(err error) error {
		return fmt.Errorf("subscribe: read the partitions of group %q: %w", group, mysqlx.Translate(err))
	}
	rows, err := db.QueryContext(ctx, sqlGroupPartitions, group)
	if err != nil {
		return nil, fail(err)
	}
	defer rows.Close()
	var out []GroupPartition
	for rows.Next() {
		var p GroupPartition
		if err := rows.Scan(&p.Topic, &p.Partition, &p.Watermark, &p.Behind); err != nil {
			return nil, fail(err)
		}
		if limit <= 0 || len(out) < limit {
			out = append(out, p)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fail(err)
	}
	return out, nil
}

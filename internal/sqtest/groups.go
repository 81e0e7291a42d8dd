package sqtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// This file plays the host's own consumer groups and its garbage collector
// on queue_offsets, in the real subscriber's protocol (fact sheet §1,
// "Consumer groups and GC"), so tests can run mend's subscription beside
// them.

// Partitions lists a topic's partitions as the real discovery does:
// SELECT DISTINCT partition_key ... WHERE topic = ?.
func (w World) Partitions(ctx context.Context, topic string) ([]string, error) {
	rows, err := w.Queue.QueryContext(ctx, "SELECT DISTINCT partition_key FROM queue_messages WHERE topic = ? ORDER BY partition_key", topic)
	if err != nil {
		return nil, fmt.Errorf("sqtest: partitions of %s: %w", topic, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Join registers group on a partition as the real subscriber does before
// its first read: INSERT IGNORE at offset 0.
func (w World) Join(ctx context.Context, group, topic, partition string) error {
	if _, err := w.Queue.ExecContext(ctx, "INSERT IGNORE INTO queue_offsets (consumer_group, topic, partition_key, offset_acked, updated_at) VALUES (?, ?, ?, 0, ?)",
		group, topic, partition, w.now()); err != nil {
		return fmt.Errorf("sqtest: join %s to %s/%s: %w", group, topic, partition, err)
	}
	return nil
}

// Acked returns group's watermark on a partition, and whether it has a row.
func (w World) Acked(ctx context.Context, group, topic, partition string) (uint64, bool, error) {
	var off uint64
	err := w.Queue.QueryRowContext(ctx, "SELECT offset_acked FROM queue_offsets WHERE consumer_group = ? AND topic = ? AND partition_key = ?",
		group, topic, partition).Scan(&off)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("sqtest: acked %s %s/%s: %w", group, topic, partition, err)
	}
	return off, true, nil
}

// AckAll is a consumer group that handles every message at once: for each
// partition of topic it joins, reads everything above its watermark and
// advances the watermark (guarded) to the last offset read. It returns the
// messages it acknowledged.
func (w World) AckAll(ctx context.Context, group, topic string) (int, error) {
	parts, err := w.Partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range parts {
		if err := w.Join(ctx, group, topic, p); err != nil {
			return n, err
		}
		acked, _, err := w.Acked(ctx, group, topic, p)
		if err != nil {
			return n, err
		}
		var last uint64
		var k int
		if err := w.Queue.QueryRowContext(ctx, "SELECT COALESCE(MAX(`offset`), 0), COUNT(*) FROM queue_messages WHERE topic = ? AND partition_key = ? AND `offset` > ?",
			topic, p, acked).Scan(&last, &k); err != nil {
			return n, fmt.Errorf("sqtest: ack %s/%s: %w", topic, p, err)
		}
		if k == 0 {
			continue
		}
		if _, err := w.Queue.ExecContext(ctx, "UPDATE queue_offsets SET offset_acked = ?, updated_at = ? WHERE consumer_group = ? AND topic = ? AND partition_key = ? AND offset_acked < ?",
			last, w.now(), group, topic, p, last); err != nil {
			return n, fmt.Errorf("sqtest: ack %s/%s: %w", topic, p, err)
		}
		n += k
	}
	return n, nil
}

// GC runs the real queue's garbage collection over every partition of
// topic that has group rows: it reads COALESCE(MIN(offset_acked), 0) over
// the partition's groups and, when that is not 0, deletes the partition's
// rows at or below it. It returns the rows deleted.
func (w World) GC(ctx context.Context, topic string) (int64, error) {
	rows, err := w.Queue.QueryContext(ctx, "SELECT DISTINCT partition_key FROM queue_offsets WHERE topic = ?", topic)
	if err != nil {
		return 0, fmt.Errorf("sqtest: gc %s: %w", topic, err)
	}
	var parts []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return 0, err
		}
		parts = append(parts, p)
	}
	rows.Close()
	var deleted int64
	for _, p := range parts {
		var low uint64
		if err := w.Queue.QueryRowContext(ctx, "SELECT COALESCE(MIN(offset_acked), 0) FROM queue_offsets WHERE topic = ? AND partition_key = ?", topic, p).Scan(&low); err != nil {
			return deleted, fmt.Errorf("sqtest: gc %s/%s: %w", topic, p, err)
		}
		if low == 0 {
			continue
		}
		res, err := w.Queue.ExecContext(ctx, "DELETE FROM queue_messages WHERE topic = ? AND partition_key = ? AND `offset` <= ?", topic, p, low)
		if err != nil {
			return deleted, fmt.Errorf("sqtest: gc %s/%s: %w", topic, p, err)
		}
		n, _ := res.RowsAffected()
		deleted += n
	}
	return deleted, nil
}

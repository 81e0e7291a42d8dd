package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

const sqlQueuesDue = `-- name: QueuesDue
SELECT ` + freshRead + `queue, MIN(next_attempt_at) AS oldest FROM mend_records
WHERE next_attempt_at <= NOW(6)
GROUP BY queue
ORDER BY oldest, queue
LIMIT ?`

// QueuesDue returns up to limit queues that have records due by the
// database clock, the queue with the longest-overdue record first. It reads
// the (next_attempt_at, queue) index, whose range holds due records only, so
// its cost grows with due work, not with finished records.
func (d *DB) QueuesDue(ctx context.Context, limit int) ([]string, error) {
	if limit < 1 {
		return nil, &mend.ValidationError{Field: "limit", Reason: "must be at least 1"}
	}
	rows, err := d.db.QueryContext(ctx, sqlQueuesDue, limit)
	if err != nil {
		return nil, fmt.Errorf("storage: queues due: %w", translate(err))
	}
	defer rows.Close()
	var queues []string
	for rows.Next() {
		var q []byte
		var oldest time.Time
		if err := rows.Scan(&q, &oldest); err != nil {
			return nil, fmt.Errorf("storage: queues due: %w", translate(err))
		}
		queues = append(queues, string(q))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: queues due: %w", translate(err))
	}
	return queues, nil
}

const sqlQueueHasDue = `-- name: QueueHasDue
SELECT ` + freshRead + `1 FROM mend_records WHERE queue = ? AND next_attempt_at <= NOW(6) LIMIT 1`

// QueueHasDue reports whether queue has a record due by the database
// clock: one probe of the (queue, next_attempt_at) index. The reconciler
// asks it before taking a queue's lease when the queue was listed a while
// ago, since another replica may have drained it meanwhile.
func (d *DB) QueueHasDue(ctx context.Context, queue string) (bool, error) {
	var one int
	err := d.db.QueryRowContext(ctx, sqlQueueHasDue, queue).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("storage: queue %q has due records: %w", queue, translate(err))
	}
	return true, nil
}

const sqlPruneCandidates = `-- name: PruneCandidates
SELECT record_id, queue FROM mend_records
WHERE state = 'done' AND updated_at < NOW(6) - INTERVAL ? MICROSECOND
ORDER BY updated_at
LIMIT ?`

// sqlPruneLock, sqlPruneEvents and sqlPruneRecords take an IN list of
// record IDs; only the number of placeholders is formatted into the text.
// The lock re-checks each candidate's state inside the deleting
// transaction and holds the rows, so no record loses its events unless it
// is itself deleted in the same transaction.
const sqlPruneLock = `-- name: PruneLock
SELECT record_id FROM mend_records WHERE queue = ? AND state = 'done' AND record_id IN (%s) FOR UPDATE`

const sqlPruneEvents = `-- name: PruneEvents
DELETE FROM mend_events WHERE queue = ? AND record_id IN (%s)`

const sqlPruneRecords = `-- name: PruneRecords
DELETE FROM mend_records WHERE queue = ? AND state = 'done' AND record_id IN (%s)`

// PruneDone deletes up to limit records that have been done for longer
// than retention, with their events, one transaction per queue. Parked and
// unfinished records are never pruned: each record's state is checked again
// under a row lock in the deleting transaction, and its events go only with
// it. It returns how many records it
// deleted; call it again while that equals limit.
func (d *DB) PruneDone(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if retention <= 0 || limit < 1 {
		return 0, &mend.ValidationError{Field: "prune", Reason: "retention must be positive and limit at least 1"}
	}
	var cands []struct {
		RecordID []byte `db:"record_id"`
		Queue    []byte `db:"queue"`
	}
	if err := d.db.SelectContext(ctx, &cands, sqlPruneCandidates, retention.Microseconds(), limit); err != nil {
		return 0, fmt.Errorf("storage: prune: %w", translate(err))
	}
	byQueue := map[string][]any{}
	var order []string
	for _, c := range cands {
		q := string(c.Queue)
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], c.RecordID)
	}
	if d.afterPruneSelect != nil {
		d.afterPruneSelect()
	}
	deleted := 0
	for _, q := range order {
		ids := byQueue[q]
		var n int64
		err := d.withTx(ctx, "PruneDone", "", func(ctx context.Context, tx *sqlx.Tx) error {
			marks := placeholders(len(ids))
			var locked [][]byte
			if err := tx.SelectContext(ctx, &locked, fmt.Sprintf(sqlPruneLock, marks), append([]any{q}, ids...)...); err != nil {
				return fmt.Errorf("lock records: %w", err)
			}
			if len(locked) == 0 {
				return nil // all changed state since they were listed
			}
			marks = placeholders(len(locked))
			args := []any{q}
			for _, id := range locked {
				args = append(args, id)
			}
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(sqlPruneEvents, marks), args...); err != nil {
				return fmt.Errorf("delete events: %w", err)
			}
			res, err := tx.ExecContext(ctx, fmt.Sprintf(sqlPruneRecords, marks), args...)
			if err != nil {
				return fmt.Errorf("delete records: %w", err)
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return deleted, fmt.Errorf("storage: prune queue %q: %w", q, err)
		}
		deleted += int(n)
	}
	return deleted, nil
}

package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/mendq/mend"
)

// StuckWakes is one queue's stuck-queue records (package stuck: source
// topic mend.StuckTopic), as mend status shows them.
type StuckWakes struct {
	Queue string
	// Total is how many the queue has (done ones until they are pruned);
	// Open how many are not done yet (the wake-up is still owed).
	Total, Open int64
	// Last is how long ago, by the database clock, the newest was created.
	Last time.Duration
}

// The GROUP BY reads every record, as StatusCounts does: an operator and
// metrics query, never on the repair path.
const sqlStuckWakes = `-- name: StuckWakes
SELECT queue, COUNT(*) AS n, COALESCE(SUM(state <> 'done'), 0) AS open,
	MIN(TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6))) AS last_us
FROM mend_records WHERE topic = ?
GROUP BY queue`

// StuckWakes returns, per queue that has any, its stuck-queue records:
// how many, how many are open, how long ago the newest was created.
func (d *DB) StuckWakes(ctx context.Context) (map[string]StuckWakes, error) {
	rows, err := d.db.QueryContext(ctx, sqlStuckWakes, mend.StuckTopic)
	if err != nil {
		return nil, fmt.Errorf("storage: stuck wakes: %w", translate(err))
	}
	defer rows.Close()
	out := map[string]StuckWakes{}
	for rows.Next() {
		var q []byte
		var w StuckWakes
		var lastUS int64
		if err := rows.Scan(&q, &w.Total, &w.Open, &lastUS); err != nil {
			return nil, fmt.Errorf("storage: stuck wakes: %w", translate(err))
		}
		w.Queue, w.Last = string(q), time.Duration(lastUS)*time.Microsecond
		out[w.Queue] = w
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: stuck wakes: %w", translate(err))
	}
	return out, nil
}

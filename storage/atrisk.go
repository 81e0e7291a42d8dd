package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

// AtRisk is what a destructive operator command (migrate down, a goto to a
// lower version) would take away from running replicas and waiting queues.
type AtRisk struct {
	// Live are the lease terms current by the database clock: a replica is
	// working those queues right now.
	Live []mend.Term
	// Records is every record; Open those not finished (pending, waiting
	// or settled), in OpenQueues queues: dead letters whose repair is
	// still owed.
	Records, Open, OpenQueues int64
}

// Lost reports whether anything is at risk.
func (r AtRisk) Lost() bool { return len(r.Live) > 0 || r.Open > 0 }

// String says what would be lost, for a refusal.
func (r AtRisk) String() string {
	s := fmt.Sprintf("%d live lease(s)", len(r.Live))
	for i, t := range r.Live {
		if i == 3 {
			s += fmt.Sprintf(" and %d more", len(r.Live)-i)
			break
		}
		sep := ": "
		if i > 0 {
			sep = ", "
		}
		s += fmt.Sprintf("%squeue %q held by %q", sep, t.Queue, t.Holder)
	}
	return s + fmt.Sprintf("; %d open record(s) in %d queue(s), of %d record(s)", r.Open, r.OpenQueues, r.Records)
}

const sqlAtRiskLeases = `-- name: AtRiskLeases
SELECT queue, holder, epoch FROM mend_leases WHERE epoch > 0 AND expires_at > NOW(6) ORDER BY queue`

const sqlAtRiskRecords = `-- name: AtRiskRecords
SELECT COUNT(*) AS records,
	COALESCE(SUM(next_attempt_at IS NOT NULL), 0) AS open,
	COUNT(DISTINCT CASE WHEN next_attempt_at IS NOT NULL THEN queue END) AS open_queues
FROM mend_records`

// ReadAtRisk reads what a destructive command would lose, on any
// connection to mend's database. A table that does not exist (the schema is
// partly or wholly reverted already) holds nothing to lose. It only reads.
func ReadAtRisk(ctx context.Context, db *sql.DB) (AtRisk, error) {
	var r AtRisk
	rows, err := db.QueryContext(ctx, sqlAtRiskLeases)
	switch {
	case noSuchTable(err):
	case err != nil:
		return r, fmt.Errorf("storage: read live leases: %w", translate(err))
	default:
		defer rows.Close()
		for rows.Next() {
			var q, h []byte
			var e int64
			if err := rows.Scan(&q, &h, &e); err != nil {
				return r, fmt.Errorf("storage: read live leases: %w", translate(err))
			}
			r.Live = append(r.Live, mend.Term{Queue: string(q), Holder: string(h), Epoch: e})
		}
		if err := rows.Err(); err != nil {
			return r, fmt.Errorf("storage: read live leases: %w", translate(err))
		}
	}
	err = db.QueryRowContext(ctx, sqlAtRiskRecords).Scan(&r.Records, &r.Open, &r.OpenQueues)
	if err != nil && !noSuchTable(err) {
		return r, fmt.Errorf("storage: count records: %w", translate(err))
	}
	return r, nil
}

// noSuchTable reports MySQL error 1146 (table doesn't exist).
func noSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

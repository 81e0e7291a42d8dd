package storage

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mendq/mend"
)

// VerifyRun is one `mend verify` run as mend_verify_runs (migration 0015)
// keeps it: what it covered and what it found.
type VerifyRun struct {
	Queue  string        // --queue; "" for every queue
	Record mend.RecordID // --record; zero for none
	Since  time.Duration // --since; 0 for every record

	Started, Finished time.Time
	Records, Events   int64
	Divergent, Legacy int64
	Rebuilt           int64  // records rewritten by --rebuild --yes
	Error             string // why the run stopped before the end, or ""
	Host              string
	// Age is how long ago it finished, by the database clock (read only).
	Age time.Duration
}

// ErrNoVerifyRuns is VerifyRunLast's answer on a schema before migration
// 0015 (no mend_verify_runs table).
var ErrNoVerifyRuns = errors.New("storage: no mend_verify_runs table (schema before migration 0015): verify runs are not recorded")

const sqlVerifyRunRecord = `-- name: VerifyRunRecord
INSERT INTO mend_verify_runs (run_id, queue, record_id, since_us, started_at, finished_at, records, events, divergent, legacy, rebuilt, error, host)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// The newest run, by the finished_at index.
const sqlVerifyRunLast = `-- name: VerifyRunLast
SELECT queue, record_id, since_us, started_at, finished_at, records, events, divergent, legacy, rebuilt, error, host,
	TIMESTAMPDIFF(MICROSECOND, finished_at, NOW(6)) AS age_us
FROM mend_verify_runs ORDER BY finished_at DESC LIMIT 1`

// VerifyRunRecord stores a run. Error and Host are cut to their columns'
// sizes. Returns ErrNoVerifyRuns on a schema before migration 0015.
func (d *DB) VerifyRunRecord(ctx context.Context, r VerifyRun) error {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	var rec any
	if r.Record != (mend.RecordID{}) {
		rec = r.Record[:]
	}
	_, err := d.db.ExecContext(ctx, sqlVerifyRunRecord, id[:], r.Queue, rec, r.Since.Microseconds(), r.Started.UTC(), r.Finished.UTC(),
		r.Records, r.Events, r.Divergent, r.Legacy, r.Rebuilt, cut(r.Error, 2000), cut(r.Host, 255))
	if noSuchTable(err) {
		return ErrNoVerifyRuns
	}
	if err != nil {
		return fmt.Errorf("storage: record verify run: %w", translate(err))
	}
	return nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// VerifyRunLast returns the newest recorded run, false if none is, and
// ErrNoVerifyRuns on a schema before migration 0015.
func (d *DB) VerifyRunLast(ctx context.Context) (VerifyRun, bool, error) {
	var row struct {
		Queue      []byte    `db:"queue"`
		RecordID   []byte    `db:"record_id"`
		SinceUS    int64     `db:"since_us"`
		StartedAt  time.Time `db:"started_at"`
		FinishedAt time.Time `db:"finished_at"`
		Records    int64     `db:"records"`
		Events     int64     `db:"events"`
		Divergent  int64     `db:"divergent"`
		Legacy     int64     `db:"legacy"`
		Rebuilt    int64     `db:"rebuilt"`
		Error      []byte    `db:"error"`
		Host       []byte    `db:"host"`
		AgeUS      int64     `db:"age_us"`
	}
	err := d.db.GetContext(ctx, &row, sqlVerifyRunLast)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return VerifyRun{}, false, nil
	case noSuchTable(err):
		return VerifyRun{}, false, ErrNoVerifyRuns
	case err != nil:
		return VerifyRun{}, false, fmt.Errorf("storage: last verify run: %w", translate(err))
	}
	r := VerifyRun{Queue: string(row.Queue), Since: time.Duration(row.SinceUS) * time.Microsecond, Started: row.StartedAt.UTC(),
		Finished: row.FinishedAt.UTC(), Records: row.Records, Events: row.Events, Divergent: row.Divergent, Legacy: row.Legacy,
		Rebuilt: row.Rebuilt, Error: string(row.Error), Host: string(row.Host), Age: time.Duration(max(row.AgeUS, 0)) * time.Microsecond}
	copy(r.Record[:], row.RecordID)
	return r, true, nil
}

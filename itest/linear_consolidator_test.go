package itest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// undirectedStore is the real store with one change: its reads are the
// statement mend used before its reads carried the CONSOLIDATOR=disabled
// directive (the same columns, the same key, no directive). Through vtgate
// with the tablets' default consolidator on, identical reads in flight
// together are answered with one result, which can predate a write that
// committed before the later read began.
type undirectedStore struct {
	realStore
	sql *sql.DB
}

const undirectedRead = `SELECT record_id, version FROM mend_records WHERE queue = ? AND source_key = ?`

func (s undirectedStore) Read(ctx context.Context, src mend.SourceID) (mend.RecordID, int64, error) {
	key := src.Key()
	var raw []byte
	var version int64
	err := s.sql.QueryRowContext(ctx, undirectedRead, src.Queue, key[:]).Scan(&raw, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return mend.RecordID{}, 0, fmt.Errorf("%w: no record for %s", mend.ErrNotFound, src)
	}
	if err != nil {
		return mend.RecordID{}, 0, err
	}
	var id mend.RecordID
	copy(id[:], raw)
	return id, version, nil
}

// TestConsolidatorNeedsTheDirective is the negative control of
// TestLinearizableRecordStore through vtgate, where the tablets run with
// their default query consolidator on: the same workload, with reads that
// lack mend's per-statement directive, must be caught as not linearizable.
// It shows both that the cluster really consolidates (so the real store's
// pass there means something) and that the directive is what keeps mend's
// reads fresh.
func TestConsolidatorNeedsTheDirective(t *testing.T) {
	if !mysqltest.Vitess() {
		t.Skipf("the consolidator is vttablet's: runs on the Vitess backend only (%s=vitess)", mysqltest.EnvEngine)
	}
	t.Parallel()
	quietDriver()
	db := mysqltest.NewDB(t, migrations.Up)
	real := openRealStore(t)
	open := func(dsn string) recordStore {
		sqlDB, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = sqlDB.Close() })
		return undirectedStore{realStore: real(dsn).(realStore), sql: sqlDB}
	}
	clients := sized(9, 12)
	routes, faults := linRoutes(t, db, clients, open)
	linMustCatch(t, routes, faults, "consolidated", 400, 4000,
		"reads without the CONSOLIDATOR=disabled directive, through vtgate with the consolidator on,",
		"either the tablets do not consolidate (check scripts/vitess.sh's vtcombo wrapper) or the check cannot see stale reads")
}

package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// The binary's schema range as doctor, /readyz and mend run see it: too
// old names this binary's migrate up; newer by an expand migration keeps
// working (a warning, ready, a pass runs, one log line); newer by a
// contract names what is gone and a binary that knows the schema.
func TestSchemaRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := doctor.SchemaRange()
	if err != nil {
		t.Fatal(err)
	}
	if r.Oldest != storage.SchemaOldest || r.Newest < r.Oldest {
		t.Fatalf("range %s; want %d to the latest migration", r, storage.SchemaOldest)
	}
	next := r.Newest + 1
	// plant moves a migrated schema past this binary: one DDL of a
	// migration this binary does not know, and its version recorded.
	plant := func(t *testing.T, db *mysqltest.DB, ddl string) {
		t.Helper()
		for _, q := range []string{ddl, fmt.Sprintf("UPDATE mend_schema_migrations SET version = %d", next)} {
			if _, err := db.SQL(t).Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	readyz := func(t *testing.T, db *mysqltest.DB) (int, string) {
		t.Helper()
		h := newHTTPHandler(newMetrics(), readiness(db.SQL(t)), &scrubber{})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	for _, tc := range []struct {
		name      string
		setup     func(t *testing.T, db *mysqltest.DB)
		status    doctor.Status
		ready     int
		detail    []string // in doctor's detail and fix, and /readyz's body unless ready
		runs      bool     // mend run --once succeeds
		newerLogs int      // "newer than this binary" warnings in mend run's log
	}{
		{name: "older than the range", status: doctor.Fail, ready: 503,
			setup: func(t *testing.T, db *mysqltest.DB) {
				opsMust(t, "migrate", "up", fmt.Sprint(r.Oldest-1), "--dsn", db.DSN)
			},
			detail: []string{fmt.Sprintf("version %d; this binary runs on schema %s", r.Oldest-1, r), "mend migrate up` with this binary"}},
		{name: "the latest", status: doctor.OK, ready: 200, runs: true,
			setup:  func(t *testing.T, db *mysqltest.DB) { opsMust(t, "migrate", "up", "--dsn", db.DSN) },
			detail: []string{fmt.Sprintf("version %d, clean", r.Newest)}},
		{name: "newer by an expand migration", status: doctor.Warn, ready: 200, runs: true, newerLogs: 1,
			setup: func(t *testing.T, db *mysqltest.DB) {
				opsMust(t, "migrate", "up", "--dsn", db.DSN)
				plant(t, db, "ALTER TABLE mend_events ADD COLUMN note BLOB NULL, ADD COLUMN n INT NOT NULL DEFAULT 0")
			},
			detail: []string{fmt.Sprintf("version %d, newer than this binary", next), "expand-only", fmt.Sprintf("knows schema %d", next)}},
		{name: "a newer migration running (dirty), expand so far", status: doctor.Warn, ready: 200, runs: true, newerLogs: 1,
			setup: func(t *testing.T, db *mysqltest.DB) {
				opsMust(t, "migrate", "up", "--dsn", db.DSN)
				plant(t, db, "ALTER TABLE mend_events ADD COLUMN note BLOB NULL")
				if _, err := db.SQL(t).Exec("UPDATE mend_schema_migrations SET dirty = 1"); err != nil {
					t.Fatal(err)
				}
			},
			detail: []string{fmt.Sprintf("version %d is DIRTY", next), "is running, or failed half way", "mend migrate force"}},
		{name: "newer by a contract that drops a column", status: doctor.Fail, ready: 503,
			setup: func(t *testing.T, db *mysqltest.DB) {
				opsMust(t, "migrate", "up", "--dsn", db.DSN)
				plant(t, db, "ALTER TABLE mend_events DROP COLUMN actor")
			},
			detail: []string{"column mend_events.actor is gone", fmt.Sprintf("run a mend binary that knows schema %d", next)}},
		{name: "newer by a required column", status: doctor.Fail, ready: 503,
			setup: func(t *testing.T, db *mysqltest.DB) {
				opsMust(t, "migrate", "up", "--dsn", db.DSN)
				plant(t, db, "ALTER TABLE mend_records ADD COLUMN owner VARBINARY(64) NOT NULL")
			},
			detail: []string{"mend_records.owner is NOT NULL without a default", fmt.Sprintf("knows schema %d", next)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := mysqltest.NewDB(t, sqtest.Apply)
			// The host's planner reads the wake topic: run refuses one nobody reads.
			if err := (sqtest.World{App: db.SQL(t), Queue: db.SQL(t)}).Join(ctx, "orchestrator", "speculate", "q"); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, db)
			c := doctor.Schema(ctx, db.SQL(t))
			text := c.Detail + " / " + c.Fix
			if c.Status != tc.status {
				t.Errorf("doctor's schema check = %s %q; want %s", c.Status, text, tc.status)
			}
			code, body := readyz(t, db)
			if code != tc.ready {
				t.Errorf("/readyz = %d %q; want %d", code, body, tc.ready)
			}
			for _, want := range tc.detail {
				if !strings.Contains(text, want) {
					t.Errorf("doctor's schema check %q lacks %q", text, want)
				}
				if code != 200 && !strings.Contains(body, want) {
					t.Errorf("/readyz %q lacks %q", body, want)
				}
			}
			res := opsRun(t, nil, "run", "--once", "--dsn", db.DSN, "--host-dsn=same", "--subscribe=false")
			if ran := res.code == exitOK; ran != tc.runs {
				t.Errorf("mend run --once = exit %d, want success %v:\n%s", res.code, tc.runs, res.stderr)
			}
			if n := strings.Count(res.stderr, "newer than this binary; it keeps working"); n != tc.newerLogs {
				t.Errorf("mend run logged the newer schema %d times; want %d:\n%s", n, tc.newerLogs, res.stderr)
			}
		})
	}
}

// Judge on its own, without a server: the boundaries of the range.
func TestJudgeBoundaries(t *testing.T) {
	t.Parallel()
	// The range ends at this binary's latest migration, an expand step (the
	// dirty cases judge it by its declared kind).
	list, err := migrations.Mend.List()
	if err != nil {
		t.Fatal(err)
	}
	last := list[len(list)-1]
	if migrations.Declared(last.Up) != migrations.Expand {
		t.Skipf("migration %d is a contract step; the dirty cases below assume an expand one", last.Version)
	}
	r := migrations.Range{Oldest: last.Version - 1, Newest: last.Version}
	lo, hi := r.Oldest, r.Newest
	var all []migrations.Column
	for table, cols := range migrations.SchemaManifest() {
		for _, c := range cols {
			all = append(all, migrations.Column{Table: table, Name: c})
		}
	}
	for _, tc := range []struct {
		v       uint
		dirty   bool
		ok, new bool
	}{{0, false, false, false}, {lo - 1, false, false, false}, {lo, false, true, false}, {hi, false, true, false},
		// Dirty: lo is the range's oldest, so the schema before it is out
		// of range; hi (an expand step this binary embeds) runs on lo; hi+1
		// is judged by shape, here intact.
		{lo, true, false, false}, {hi, true, true, false}, {hi + 1, true, true, true},
		{hi + 1, false, true, true}, {40, false, true, true}} {
		got := r.Judge(tc.v, tc.dirty, all)
		if got.OK != tc.ok || got.Newer != tc.new {
			t.Errorf("Judge(%d, dirty %v) = ok %v newer %v (%s); want %v %v", tc.v, tc.dirty, got.OK, got.Newer, got.Detail, tc.ok, tc.new)
		}
	}
	if got := r.Judge(hi+1, false, nil); got.OK || !strings.Contains(got.Detail, "table mend_records is gone") {
		t.Errorf("Judge on a schema without mend's tables = %+v; want a refusal naming them", got)
	}
	if got := r.Judge(hi+1, true, nil); got.OK || !strings.Contains(got.Detail, "DIRTY") || !strings.Contains(got.Detail, "table mend_records is gone") {
		t.Errorf("Judge on a dirty newer schema without mend's tables = %+v; want a refusal naming them", got)
	}
}

// Issue 47's planted slip: the "reverting drops tables" check skipped the
// migration at cur (the newest one, on a one-step down), so reverting a
// step that drops a table was reported as dropping none and not refused.
func TestRevertDropsTablesCountsTheCurrentStep(t *testing.T) {
	t.Parallel()
	list := []migrations.Migration{
		{Version: 1, Name: "create_a", Down: "DROP TABLE a"},
		{Version: 2, Name: "add_b", Down: "ALTER TABLE a DROP COLUMN b"},
		{Version: 3, Name: "create_c", Down: "DROP TABLE c"},
		{Version: 4, Name: "create_binlog_positions", Down: "DROP TABLE mend_binlog_positions"},
	}
	for _, tt := range []struct {
		cur, target uint
		want        bool
	}{
		{3, 2, true},  // the newest step alone drops c
		{2, 1, false}, // an expand step
		{2, 0, true},  // through 1
		{3, 3, false}, // nothing reverted
		{4, 3, false}, // the binary-log reader's positions: no records, events or leases
		{4, 2, true},  // through 3
	} {
		if got := migrations.RevertDropsTables(list, tt.cur, tt.target); got != tt.want {
			t.Errorf("RevertDropsTables(%d to %d) = %v; want %v", tt.cur, tt.target, got, tt.want)
		}
	}
	if !migrations.RevertDropsPositions(list, 4, 3) || migrations.RevertDropsPositions(list, 3, 0) {
		t.Error("RevertDropsPositions does not tell the positions' step from the others")
	}
}

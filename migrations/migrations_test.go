package migrations_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// allTables is every table mend's migrations create, sorted.
var allTables = []string{"mend_binlog_positions", "mend_events", "mend_lease_history", "mend_leases", "mend_records", "mend_schema_migrations", "mend_verify_runs"}

func TestSchema(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	conn := db.SQL(t)

	t.Run("identity columns are byte exact", func(t *testing.T) {
		want := map[string]string{
			"mend_records.record_id": "binary", "mend_records.queue": "varbinary", "mend_records.source_key": "binary",
			"mend_records.topic": "varbinary", "mend_records.partition_key": "varbinary", "mend_records.message_id": "varbinary",
			"mend_records.batch_id": "varbinary", "mend_records.original_topic": "varbinary",
			"mend_events.record_id": "binary", "mend_events.queue": "varbinary", "mend_events.op_id": "varbinary",
		}
		for col, typ := range want {
			table, name, _ := strings.Cut(col, ".")
			var got string
			err := conn.QueryRow("SELECT data_type FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?", table, name).Scan(&got)
			if err != nil || got != typ {
				t.Errorf("%s is %q (%v); want %s", col, got, err, typ)
			}
		}
	})

	t.Run("no hash indexes and all InnoDB", func(t *testing.T) {
		var n int
		if err := conn.QueryRow("SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_type <> 'BTREE'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d non-BTREE index columns (%v); a USING HASH long unique key breaks MySQL 8", n, err)
		}
		rows, err := conn.Query("SELECT table_name, engine FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name, engine string
			if err := rows.Scan(&name, &engine); err != nil {
				t.Fatal(err)
			}
			if engine != "InnoDB" {
				t.Errorf("table %s uses %s; want InnoDB", name, engine)
			}
		}
	})
}

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	latest, err := migrations.Mend.Latest()
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		name   string
		run    func(context.Context, string) error
		tables []string
		ver    uint
	}{
		{"up", migrations.Up, allTables, latest},
		{"down", migrations.Down, []string{"mend_schema_migrations"}, 0}, // the version table stays
		{"up again", migrations.Up, allTables, latest},
	} {
		if err := step.run(ctx, db.DSN); err != nil {
			t.Fatalf("step %d %s: %v", i, step.name, err)
		}
		if got := db.Tables(t); !slices.Equal(got, step.tables) {
			t.Fatalf("after %s: tables %v; want %v", step.name, got, step.tables)
		}
		v, dirty, err := migrations.Version(ctx, db.DSN)
		if err != nil || dirty || v != step.ver {
			t.Fatalf("after %s: version %d dirty %v (%v); want %d clean", step.name, v, dirty, err, step.ver)
		}
	}
	// Up on an up-to-date schema is a no-op, not an error.
	if err := migrations.Up(ctx, db.DSN); err != nil {
		t.Fatalf("repeated up: %v", err)
	}
}

func TestConcurrentMigrators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = migrations.Up(ctx, db.DSN) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	latest, _ := migrations.Mend.Latest()
	v, dirty, err := migrations.Version(ctx, db.DSN)
	if err != nil || dirty || v != latest {
		t.Fatalf("version %d dirty %v (%v); want %d clean", v, dirty, err, latest)
	}
}

func TestDirtyIsReportedWithTheFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	if _, err := db.SQL(t).Exec("UPDATE mend_schema_migrations SET dirty = 1"); err != nil {
		t.Fatal(err)
	}
	err := migrations.Up(ctx, db.DSN)
	if err == nil || !strings.Contains(err.Error(), "dirty") || !strings.Contains(err.Error(), "Force") {
		t.Fatalf("Up on a dirty schema = %v; want an error naming the dirty state and the fix", err)
	}
}

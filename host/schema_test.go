package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
)

func TestSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("identity and state columns are VARBINARY", func(t *testing.T) {
		t.Parallel()
		want := map[string]string{
			"sq_batches.queue": "varbinary", "sq_batches.id": "varbinary", "sq_batches.state": "varbinary",
			"sq_batch_membership.queue": "varbinary", "sq_batch_membership.state": "varbinary", "sq_batch_membership.batch_id": "varbinary",
			"sq_requests.queue": "varbinary", "sq_requests.id": "varbinary", "sq_requests.batch_id": "varbinary", "sq_requests.state": "varbinary",
			"sq_messages.topic": "varbinary", "sq_messages.partition_key": "varbinary", "sq_messages.id": "varbinary",
		}
		for col, typ := range want {
			table, name, _ := strings.Cut(col, ".")
			var got string
			var length int
			err := b.sql.QueryRow("SELECT data_type, COALESCE(character_maximum_length, 0) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?", table, name).Scan(&got, &length)
			if err != nil || got != typ {
				t.Errorf("%s is %q (%v); want %s", col, got, err, typ)
			}
			if name != "state" && length != 1020 {
				t.Errorf("%s holds %d bytes; want 1020 (255 utf8mb4 characters)", col, length)
			}
		}
	})

	t.Run("no case-insensitive collation anywhere", func(t *testing.T) {
		t.Parallel()
		rows, err := b.sql.Query("SELECT table_name, column_name, collation_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name LIKE 'sq\\_%' AND collation_name LIKE '%\\_ci'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var table, col, coll string
			if err := rows.Scan(&table, &col, &coll); err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s.%s uses %s", table, col, coll)
		}
	})

	t.Run("BTREE keys only, all InnoDB", func(t *testing.T) {
		t.Parallel()
		var n int
		if err := b.sql.QueryRow("SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_type <> 'BTREE'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d non-BTREE index columns (%v); a USING HASH long unique key breaks MySQL 8", n, err)
		}
		rows, err := b.sql.Query("SELECT table_name, engine FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'")
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

	t.Run("keys", func(t *testing.T) {
		t.Parallel()
		want := map[string]string{
			"sq_batches.PRIMARY":                "queue,id",
			"sq_batch_membership.PRIMARY":       "queue,state,batch_id",
			"sq_requests.PRIMARY":               "queue,id",
			"sq_messages.PRIMARY":               "offset",
			"sq_messages.sq_messages_dedupe":    "topic,partition_key,id",
			"sq_requests.sq_requests_batch":     "queue,batch_id",
			"sq_messages.sq_messages_partition": "topic,partition_key,offset",
		}
		for key, cols := range want {
			table, name, _ := strings.Cut(key, ".")
			var got string
			var nonUnique int
			err := b.sql.QueryRow("SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index), MAX(non_unique) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?", table, name).Scan(&got, &nonUnique)
			if err != nil || got != cols {
				t.Errorf("%s covers %q (%v); want %q", key, got, err, cols)
			}
			if unique := name == "PRIMARY" || name == "sq_messages_dedupe"; unique != (nonUnique == 0) {
				t.Errorf("%s unique = %v; want %v", key, nonUnique == 0, unique)
			}
		}
	})
}

func TestMigrationsUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	latest, err := host.Migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	all := "mend_host_schema_migrations,sq_batch_membership,sq_batches,sq_messages,sq_requests"
	for i, step := range []struct {
		name   string
		run    func(context.Context, string) error
		tables string
		ver    uint
	}{
		{"up", host.Migrations.Up, all, latest},
		{"down", host.Migrations.Down, "mend_host_schema_migrations", 0},
		{"up again", host.Migrations.Up, all, latest},
		{"up when current", host.Migrations.Up, all, latest},
	} {
		if err := step.run(ctx, db.DSN); err != nil {
			t.Fatalf("step %d %s: %v", i, step.name, err)
		}
		if got := strings.Join(db.Tables(t), ","); got != step.tables {
			t.Fatalf("after %s: tables %s; want %s", step.name, got, step.tables)
		}
		v, dirty, err := host.Migrations.Version(ctx, db.DSN)
		if err != nil || dirty || v != step.ver {
			t.Fatalf("after %s: version %d dirty %v (%v); want %d clean", step.name, v, dirty, err, step.ver)
		}
	}
	if latest != 4 {
		t.Fatalf("latest host schema version = %d; want 4", latest)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app, queue := mysqltest.NewDB(t), mysqltest.NewDB(t)
	if err := host.Migrate(ctx, app.DSN, queue.DSN); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*mysqltest.DB{app, queue} {
		if got := len(db.Tables(t)); got != 5 {
			t.Fatalf("%s has %d tables; want 5", db.Name, got)
		}
	}
}

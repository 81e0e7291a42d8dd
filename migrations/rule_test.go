package migrations_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

var update = flag.Bool("update", false, "rewrite manifest.json from the schema the migrations build")

// ruleViolations is what TestMigrationRule reports for a set of files.
func ruleViolations(t *testing.T, set migrations.Set) []string {
	t.Helper()
	list, err := set.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list {
		if migrations.Declared(m.Up) == migrations.Contract {
			continue
		}
		for _, why := range migrations.Breaks(m.Up) {
			out = append(out, m.Name+": "+why)
		}
	}
	return out
}

// Every embedded migration is additive or says it is a contract.
func TestMigrationRule(t *testing.T) {
	t.Parallel()
	if v := ruleViolations(t, migrations.Mend); len(v) > 0 {
		t.Fatalf("migrations break the expand rule without %q on their first line:\n%s", migrations.ContractMarker, strings.Join(v, "\n"))
	}

	// Negative control: the same check on the embedded files plus one
	// planted migration of each non-additive form fails, and passes once
	// the planted file declares itself a contract.
	planted := map[string]string{
		"drop column":       "ALTER TABLE mend_events DROP COLUMN state",
		"rename column":     "ALTER TABLE mend_records RENAME COLUMN batch_id TO batch",
		"narrow column":     "ALTER TABLE mend_records MODIFY COLUMN topic VARBINARY(255) NOT NULL",
		"required column":   "ALTER TABLE mend_records ADD COLUMN owner VARBINARY(64) NOT NULL",
		"unique key":        "ALTER TABLE mend_events ADD UNIQUE KEY mend_events_kind (queue, kind)",
		"drop table":        "DROP TABLE mend_lease_history",
		"rename table":      "RENAME TABLE mend_events TO mend_log",
		"one good one bad":  "ALTER TABLE mend_events ADD COLUMN note BLOB NULL, DROP COLUMN actor",
		"unique index":      "CREATE UNIQUE INDEX mend_records_batch ON mend_records (queue, batch_id)",
		"unknown statement": "TRUNCATE TABLE mend_events",
	}
	for name, sql := range planted {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fsys := fstest.MapFS{}
			list, err := migrations.Mend.List()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range list {
				fsys[file(m.Version, m.Name, "up")] = &fstest.MapFile{Data: []byte(m.Up)}
				fsys[file(m.Version, m.Name, "down")] = &fstest.MapFile{Data: []byte(m.Down)}
			}
			next := list[len(list)-1].Version + 1
			fsys[file(next, "planted", "up")] = &fstest.MapFile{Data: []byte(sql + "\n")}
			fsys[file(next, "planted", "down")] = &fstest.MapFile{Data: []byte("SELECT 1\n")}
			v := ruleViolations(t, migrations.Set{FS: fsys})
			if len(v) != 1 || !strings.HasPrefix(v[0], "planted: ") {
				t.Fatalf("a planted %s without the contract mark: violations %q; want exactly the planted file", name, v)
			}
			fsys[file(next, "planted", "up")] = &fstest.MapFile{Data: []byte(migrations.ContractMarker + "\n" + sql + "\n")}
			if v := ruleViolations(t, migrations.Set{FS: fsys}); len(v) != 0 {
				t.Fatalf("the planted %s declared a contract still fails the rule: %q", name, v)
			}
		})
	}

	t.Run("additive forms pass", func(t *testing.T) {
		t.Parallel()
		for _, sql := range []string{
			"CREATE TABLE mend_notes (id BIGINT NOT NULL, PRIMARY KEY (id)) ENGINE=InnoDB",
			"ALTER TABLE mend_events ADD COLUMN note BLOB NULL",
			"ALTER TABLE mend_events ADD COLUMN n INT NOT NULL DEFAULT 0, ADD COLUMN s VARBINARY(8) NOT NULL DEFAULT 'a,b', ALGORITHM=INSTANT",
			"ALTER TABLE mend_events ADD INDEX mend_events_kind (queue, kind), ALGORITHM=INPLACE, LOCK=NONE",
			"CREATE INDEX mend_events_kind ON mend_events (queue, kind)",
			"CREATE OR REPLACE SQL SECURITY INVOKER VIEW mend_x AS SELECT 1 AS one",
		} {
			if b := migrations.Breaks(sql); len(b) != 0 {
				t.Errorf("%s: %q; want additive", sql, b)
			}
		}
	})
}

func file(v uint, name, dir string) string { return fmt.Sprintf("%04d_%s.%s.sql", v, name, dir) }

// manifest.json is the shape the migrations build, on every engine.
func TestManifest(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	cols, err := storage.ReadSchemaColumns(context.Background(), db.SQL(t))
	if err != nil {
		t.Fatal(err)
	}
	got := migrations.Manifest{}
	for _, c := range cols {
		got[c.Table] = append(got[c.Table], c.Name)
	}
	for _, names := range got {
		slices.Sort(names)
	}
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("manifest.json", append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := migrations.SchemaManifest()
	for table, names := range want {
		if !slices.Equal(got[table], names) {
			t.Errorf("%s: the migrations build columns %v; manifest.json says %v (go test ./migrations -run TestManifest -update)", table, got[table], names)
		}
	}
	for table := range got {
		if _, ok := want[table]; !ok {
			t.Errorf("table %s is not in manifest.json (go test ./migrations -run TestManifest -update)", table)
		}
	}
}

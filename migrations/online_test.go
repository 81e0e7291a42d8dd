package migrations_test

import (
	"database/sql"
	"regexp"
	"strings"
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

var lineComment = regexp.MustCompile(`(?m)--[^\n]*$`)

// onlineForms are the clauses tried on an ALTER TABLE, best first: INSTANT
// changes only metadata; INPLACE with LOCK=NONE rebuilds or builds an index
// while writes go on. An engine that cannot do the statement that way
// refuses it (MySQL 1845/1846, MariaDB 1845/1846) instead of silently
// copying the table, which is the point of asking.
var onlineForms = []string{"ALGORITHM=INSTANT", "ALGORITHM=INPLACE, LOCK=NONE"}

// applyOnline runs one migration script, an ALTER TABLE or CREATE INDEX with
// the first online form the engine accepts. It returns the form used
// ("metadata" for statements that create or drop whole objects, which take
// only a metadata lock and copy nothing), or "" and the last refusal.
func applyOnline(db *sql.DB, script string) (string, error) {
	stmt := strings.TrimSpace(lineComment.ReplaceAllString(script, ""))
	stmt = strings.TrimSpace(strings.TrimSuffix(stmt, ";"))
	upper := strings.ToUpper(stmt)
	var last error
	switch {
	case strings.HasPrefix(upper, "ALTER TABLE "):
		for _, form := range onlineForms {
			if _, err := db.Exec(stmt + ", " + form); err != nil {
				last = err
				continue
			}
			return form, nil
		}
		return "", last
	case strings.HasPrefix(upper, "CREATE INDEX "), strings.HasPrefix(upper, "CREATE UNIQUE INDEX "):
		if _, err := db.Exec(stmt + " ALGORITHM=INPLACE LOCK=NONE"); err != nil {
			return "", err
		}
		return "ALGORITHM=INPLACE LOCK=NONE", nil
	}
	if _, err := db.Exec(stmt); err != nil {
		return "", err
	}
	return "metadata", nil
}

// Every migration, up and down, runs online on this engine: an ALTER with
// ALGORITHM=INSTANT or INPLACE and LOCK=NONE, an index built INPLACE
// without a lock, anything else a CREATE or DROP of a whole object. A
// migration that would copy the table fails here unless its file explains
// why with a "-- mend: not online:" line; such a one is applied as written.
func TestMigrationsRunOnline(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	conn := db.SQL(t)
	list, err := migrations.Mend.List()
	if err != nil {
		t.Fatal(err)
	}
	apply := func(m migrations.Migration, dir, script string) {
		t.Helper()
		form, err := applyOnline(conn, script)
		if err == nil {
			t.Logf("%04d_%s %s: %s", m.Version, m.Name, dir, form)
			return
		}
		if !strings.Contains(script, migrations.OnlineMarker) {
			t.Fatalf("%04d_%s %s does not run online on this engine (%v): make it INSTANT or INPLACE/LOCK=NONE, or say why not with a %q line",
				m.Version, m.Name, dir, err, migrations.OnlineMarker)
		}
		if _, err := conn.Exec(script); err != nil {
			t.Fatalf("%04d_%s %s: %v", m.Version, m.Name, dir, err)
		}
		t.Logf("%04d_%s %s: not online, as its file says", m.Version, m.Name, dir)
	}
	// Up, down and up again, so the rollback path is held to it too.
	for _, m := range list {
		apply(m, "up", m.Up)
		apply(m, "down", m.Down)
		apply(m, "up again", m.Up)
	}

	// Negative control: an ALTER that must copy the table (changing the
	// primary key's column type) is refused in every online form.
	if form, err := applyOnline(conn, "ALTER TABLE mend_leases MODIFY COLUMN epoch DECIMAL(30,0) NOT NULL"); err == nil {
		t.Fatalf("a table-copying ALTER was accepted as %s; the check would pass anything", form)
	}
}

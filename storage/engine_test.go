package storage_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// The engine doctor reports is the one the harness started, and views that
// root created are flagged for a DDL user exactly where the server would
// refuse that user's DROP VIEW: on MySQL (error 1227, SYSTEM_USER), not on
// MariaDB.
func TestEngineAndForeignViewDefiners(t *testing.T) {
	mysqltest.SkipVitess(t, "view definers and account privileges are read from information_schema, which vtgate answers from a tablet's own MySQL account, not the client's")
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up) // the views' definer is the harness's root
	rootDB := db.SQL(t)
	e, err := storage.ReadEngine(ctx, rootDB)
	if err != nil {
		t.Fatal(err)
	}
	if want := db.Server.Flavor() == "mariadb"; e.MariaDB() != want || e.Version == "" {
		t.Fatalf("ReadEngine = %+v; want MariaDB=%v (the harness started %s)", e, want, db.Server.Engine())
	}
	if views, err := storage.ForeignViewDefiners(ctx, rootDB, e); err != nil || len(views) != 0 {
		t.Fatalf("ForeignViewDefiners as root = %v, %v; want none (root created them)", views, err)
	}

	ddl := sqlAs(t, db, "CREATE, ALTER, DROP, INDEX, CREATE VIEW, SHOW VIEW, SELECT, INSERT, UPDATE, DELETE ON %s.*")
	views, err := storage.ForeignViewDefiners(ctx, ddl, e)
	if err != nil {
		t.Fatal(err)
	}
	_, dropErr := ddl.ExecContext(ctx, "DROP VIEW mend_pending_records")
	var me *mysql.MySQLError
	if e.MariaDB() {
		if len(views) != 0 || dropErr != nil {
			t.Fatalf("MariaDB: ForeignViewDefiners = %v, DROP VIEW as the DDL user = %v; want none and success", views, dropErr)
		}
		return
	}
	if len(views) == 0 || !strings.Contains(strings.Join(views, " "), "mend_pending_records") {
		t.Fatalf("MySQL: ForeignViewDefiners as the DDL user = %v; want mend's views, root's", views)
	}
	if !errors.As(dropErr, &me) || me.Number != 1227 {
		t.Fatalf("MySQL: DROP VIEW of root's view as the DDL user = %v; want error 1227 (the finding is real)", dropErr)
	}
}

// sqlAs returns a pool logged in as a new account holding grants on db
// (see mysqltest.DB.User), closed when the test ends.
func sqlAs(t *testing.T, db *mysqltest.DB, grants ...string) *sql.DB {
	t.Helper()
	u, err := sql.Open("mysql", db.User(t, grants...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	return u
}

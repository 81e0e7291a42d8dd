package main

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// Issue 57: doctor's view-definers check warned mend run's user and a
// read-only console user for ever (root created the views, and they never
// will drop them), and told the runtime user, when it did not warn, that it
// "can drop and replace mend's views", which it cannot. Now an account
// without CREATE VIEW and DROP is told the check is the DDL user's; the DDL
// user is warned of root's views as before. MySQL only (MariaDB has no
// definer rule; doctor checks nothing there).
func TestDoctorViewDefinersByAccount(t *testing.T) {
	mysqltest.SkipVitess(t, "account privileges are read from information_schema, which vtgate answers as the tablet's account")
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up) // root creates the views
	if db.Server.Flavor() == "mariadb" {
		t.Skip("MariaDB: no view-definer rule, no check")
	}
	as := func(grants string) *sql.DB {
		t.Helper()
		u, err := sql.Open("mysql", db.User(t, grants))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = u.Close() })
		return u
	}
	for _, c := range []struct {
		name, grants string
		status       doctor.Status
		says         string
	}{
		{"runtime user", "SELECT, INSERT, UPDATE, DELETE ON %s.*", doctor.OK, "not checked for this account"},
		{"read-only console user", "SELECT ON %s.*", doctor.OK, "not checked for this account"},
		{"DDL user", "CREATE, ALTER, DROP, INDEX, CREATE VIEW, SHOW VIEW, SELECT, INSERT, UPDATE, DELETE ON %s.*", doctor.Warn, "views created by another account"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := checkNamed(doctor.Engine(t.Context(), as(c.grants)), "view definers")
			if !ok || got.Status != c.status || !strings.Contains(got.Detail, c.says) {
				t.Errorf("view definers as the %s: %+v; want %s saying %q", c.name, got, c.status, c.says)
			}
			if strings.Contains(got.Detail, "may drop and replace") && c.status == doctor.OK {
				t.Errorf("the %s is told it may drop mend's views: %q", c.name, got.Detail)
			}
		})
	}
}

package mysqltest

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/mendq/mend/internal/mysqlx"
)

// Hostile-global tests change a server's global variables, which every new
// session on that server inherits. On a shared server they would change
// what every other test sees, so SetGlobal works only on a private server
// (StartPrivate): one per test that needs it, its globals restored when the
// test ends.

var globalName = regexp.MustCompile(`^[a-z_]+$`)

// SetGlobal sets the global variable name to value (SQL as written:
// "2", "'READ-UNCOMMITTED'") on srv, which must be a private server, and
// restores the value it had when t ends. Sessions opened afterwards
// inherit it; sessions already open keep theirs. It returns false, setting
// nothing, when the server has no such variable (the other engine's
// name), so a table of variables can cover both engines.
func (s *Server) SetGlobal(t testing.TB, name, value string) bool {
	t.Helper()
	if !s.Private() || s.shared {
		t.Fatalf("mysqltest: SetGlobal(%s) on a shared server would change every other test's sessions: use StartPrivate", name)
	}
	if !globalName.MatchString(name) {
		t.Fatalf("mysqltest: SetGlobal: %q is not a variable name", name)
	}
	root, err := sql.Open("mysql", s.RootDSN())
	if err != nil {
		t.Fatalf("mysqltest: open %s: %v", s.Addr(), err)
	}
	var old sql.NullString
	if err := root.QueryRowContext(t.Context(), "SELECT @@GLOBAL."+name).Scan(&old); err != nil {
		_ = root.Close()
		if mysqlx.ErrNumber(err) == mysqlx.ErrUnknownSystemVariable {
			return false
		}
		t.Fatalf("mysqltest: read global %s: %v", name, err)
	}
	if _, err := root.ExecContext(t.Context(), fmt.Sprintf("SET GLOBAL %s = %s", name, value)); err != nil {
		_ = root.Close()
		t.Fatalf("mysqltest: SET GLOBAL %s = %s: %v", name, value, err)
	}
	t.Cleanup(func() {
		defer root.Close()
		restore := "NULL"
		switch {
		case !old.Valid:
		case plainNumber.MatchString(old.String):
			restore = old.String
		default:
			restore = "'" + strings.ReplaceAll(old.String, "'", "''") + "'"
		}
		if _, err := root.Exec(fmt.Sprintf("SET GLOBAL %s = %s", name, restore)); err != nil {
			t.Errorf("mysqltest: restore global %s to %s: %v", name, restore, err)
		}
	})
	return true
}

var plainNumber = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

package doctor

// Doctor's view of mysqlx's session and server checks.

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqlx"
)

// sessionChecks reports, for doctor, whether a session of db holds what
// mend forces through cfg, and what the server's globals mean for mend.
func sessionChecks(ctx context.Context, db *sql.DB, cfg *mysql.Config) []Check {
	out := []Check{sessionCheck(ctx, "session settings", db, cfg)}
	for _, f := range mysqlx.CheckServer(ctx, db) {
		if f.Name == "binlog_format" {
			continue // the topology check reports it (storage.CheckTopology)
		}
		status := OK
		switch f.Level {
		case mysqlx.LevelWarn:
			status = Warn
		case mysqlx.LevelFail:
			status = Fail
		}
		out = append(out, Check{Name: f.Name, Status: status, Detail: f.Detail, Fix: f.Fix})
	}
	return out
}

// HostConfig is the session a doctor probe of a host database gets:
// mend's, as mend run's host pools (mysqlx.Config), so a DSN run would
// refuse is refused here too.
func HostConfig(flagName, dsn string) (*mysql.Config, error) {
	return mysqlx.Config(dsn, mysqlx.Pool{Field: strings.TrimPrefix(flagName, "--")})
}

// sessionCheck reports, as the check named name, whether a session of db
// (a pool opened on cfg, resolved) reads back every variable mend forced
// through cfg, naming them; doctor runs it on every pool mend run opens.
func sessionCheck(ctx context.Context, name string, db *sql.DB, cfg *mysql.Config) Check {
	if err := mysqlx.CheckSession(ctx, db, cfg); err != nil {
		var se *mysqlx.SessionError
		fix := ""
		if errors.As(err, &se) {
			fix = "connect mend to the server directly, or configure the proxy to keep each session's own settings"
		}
		return Check{Name: name, Status: Fail, Detail: err.Error(), Fix: fix}
	}
	vars := slices.Sorted(maps.Keys(cfg.Params))
	return Check{Name: name, Status: OK,
		Detail: "a session as mend run opens it reads back what mend forced: " + strings.Join(vars, ", ")}
}

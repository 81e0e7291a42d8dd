package mysqlx

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Level grades a Finding.
type Level int

// The levels of a Finding. Only LevelFail is a problem to fix before mend
// can be trusted on the server.
const (
	LevelOK Level = iota
	LevelWarn
	LevelFail
)

// Finding is the result of one server check, for mend doctor.
type Finding struct {
	Name   string
	Level  Level
	Detail string
	Fix    string // empty when there is nothing to do
}

// CheckServer reads the server globals that a session cannot override for
// other clients, and reports what they mean for mend: the global
// autocommit (mend forces autocommit=1 on each of its sessions, again on
// every redial, but a client that does not would run every write in an
// implicit transaction nobody commits), the global sql_mode, the time zone
// (mend uses the offset +00:00, which needs no time zone tables) and the
// binary log format (statement-based logging refuses READ COMMITTED
// writes). db is any pool on the server; mend's own is best.
func CheckServer(ctx context.Context, db *sql.DB) []Finding {
	var autocommit, mode, tz, sysTZ string
	var binlog, logBin sql.NullString
	var named sql.NullString
	err := db.QueryRowContext(ctx, `SELECT @@GLOBAL.autocommit, @@GLOBAL.sql_mode, @@GLOBAL.time_zone, @@system_time_zone,
		@@GLOBAL.binlog_format, @@GLOBAL.log_bin, CONVERT_TZ('2000-01-01 00:00:00', '+00:00', 'UTC')`).Scan(&autocommit, &mode, &tz, &sysTZ, &binlog, &logBin, &named)
	if err != nil {
		return []Finding{{Name: "server globals", Level: LevelFail, Detail: "cannot read them: " + err.Error()}}
	}
	var out []Finding
	if autocommit == "1" || strings.EqualFold(autocommit, "ON") {
		out = append(out, Finding{Name: "autocommit", Detail: "on globally; mend also sets it on every session it opens"})
	} else {
		out = append(out, Finding{Name: "autocommit", Level: LevelWarn,
			Detail: "the server's global autocommit is OFF: mend sets autocommit=1 on each of its own sessions (and again on every redial), but any client that does not runs its writes in a transaction nobody commits",
			Fix:    "SET GLOBAL autocommit=1 (and remove autocommit=0 from the server's configuration) unless every client sets its own"})
	}
	if strictMode(mode) {
		out = append(out, Finding{Name: "global sql_mode", Detail: fmt.Sprintf("strict (%s)", mode)})
	} else {
		out = append(out, Finding{Name: "global sql_mode", Level: LevelWarn,
			Detail: fmt.Sprintf("the server's sql_mode %q is not strict: mend sets a strict one on its own sessions, but ad-hoc SQL silently truncates", mode),
			Fix:    "include STRICT_TRANS_TABLES in the server's sql_mode"})
	}
	tables := "loaded"
	if !named.Valid {
		tables = "not loaded (mend does not need them)"
	}
	out = append(out, Finding{Name: "time zone tables", Detail: fmt.Sprintf("mend's sessions use the offset %s; server time_zone %s, system %s; time zone tables %s", SessionTimeZone, tz, sysTZ, tables)})
	logging := logBin.String == "1" || strings.EqualFold(logBin.String, "ON")
	switch f := strings.ToUpper(binlog.String); {
	case f == "STATEMENT" && logging:
		out = append(out, Finding{Name: "binlog_format", Level: LevelFail,
			Detail: "STATEMENT: the server refuses writes under READ COMMITTED (error 1665), which mend's store uses",
			Fix:    "set binlog_format=ROW (or MIXED) on the server"})
	case !logging:
		out = append(out, Finding{Name: "binlog_format", Detail: "binary log off"})
	default:
		out = append(out, Finding{Name: "binlog_format", Detail: cmpOr(f, "unknown") + " (READ COMMITTED writes are logged safely)"})
	}
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

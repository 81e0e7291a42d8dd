package main

// This file holds what mend run and mend doctor share about the sessions
// mend opens, as plain functions: the lease TTL bound both accept, the
// start-up checks of the identities run writes, and doctor's view of
// mysqlx's session and server checks.

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// maxLeaseTTL is the longest --lease-ttl run and doctor accept.
const maxLeaseTTL = 24 * time.Hour

// checkLeaseTTL is the one bound on --lease-ttl, for run and doctor alike:
// at least storage.MinLeaseTTL, so the lock wait mend derives from it (whole
// seconds, at least 1) stays below it.
func checkLeaseTTL(ttl time.Duration) error {
	if ttl < storage.MinLeaseTTL || ttl > maxLeaseTTL {
		return usagef("--lease-ttl must be between %s and %s, got %s", storage.MinLeaseTTL, maxLeaseTTL, ttl)
	}
	return nil
}

// checkRunIdentities validates, before anything is connected, the
// identities mend run writes on every pass: its holder name (in lease rows)
// and its wake-up topic (in the host's queue_messages).
func checkRunIdentities(holder, wakeTopic string) error {
	if err := fence.ValidateHolder(holder); err != nil {
		return usagef("--holder: %v", err)
	}
	if err := host.ValidateWakeTopic(wakeTopic); err != nil {
		return usagef("--wake-topic: %v", err)
	}
	return nil
}

// checkHostDSNs refuses, before anything is connected, host DSNs the
// adapter's pools would refuse (they are stricter than mend's store: no
// multiStatements). Empty DSNs are left to their defaults.
func checkHostDSNs(appDSN, queueDSN string) error {
	for _, d := range []struct{ flag, dsn string }{{"--host-dsn", appDSN}, {"--queue-dsn", queueDSN}} {
		if d.dsn == "" {
			continue
		}
		if _, err := hostDoctorConfig(d.flag, d.dsn); err != nil {
			return usagef("%s: %v", d.flag, err)
		}
	}
	return nil
}

// sessionChecks reports, for doctor, whether a session of db holds what
// mend forces through cfg, and what the server's globals mean for mend.
func sessionChecks(ctx context.Context, db *sql.DB, cfg *mysql.Config) []check {
	out := []check{sessionCheck(ctx, "session settings", db, cfg)}
	for _, f := range mysqlx.CheckServer(ctx, db) {
		if f.Name == "binlog_format" {
			continue // the topology check reports it (storage.CheckTopology)
		}
		status := checkOK
		switch f.Level {
		case mysqlx.LevelWarn:
			status = checkWarn
		case mysqlx.LevelFail:
			status = checkFail
		}
		out = append(out, check{Name: f.Name, Status: status, Detail: f.Detail, Fix: f.Fix})
	}
	return out
}

// hostDoctorConfig is the session a doctor probe of a host database gets:
// mend's, as mend run's host pools (mysqlx.Config), so a DSN run would
// refuse is refused here too.
func hostDoctorConfig(flagName, dsn string) (*mysql.Config, error) {
	return mysqlx.Config(dsn, mysqlx.Pool{Field: strings.TrimPrefix(flagName, "--")})
}

// sessionCheck reports, as the check named name, whether a session of db
// (a pool opened on cfg, resolved) reads back every variable mend forced
// through cfg, naming them; doctor runs it on every pool mend run opens.
func sessionCheck(ctx context.Context, name string, db *sql.DB, cfg *mysql.Config) check {
	if err := mysqlx.CheckSession(ctx, db, cfg); err != nil {
		var se *mysqlx.SessionError
		fix := ""
		if errors.As(err, &se) {
			fix = "connect mend to the server directly, or configure the proxy to keep each session's own settings"
		}
		return check{Name: name, Status: checkFail, Detail: err.Error(), Fix: fix}
	}
	vars := slices.Sorted(maps.Keys(cfg.Params))
	return check{Name: name, Status: checkOK,
		Detail: "a session as mend run opens it reads back what mend forced: " + strings.Join(vars, ", ")}
}

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// hostDSNSame is the --host-dsn value that says the submit queue's tables
// live in mend's own database (--dsn). mend run has no silent default: with
// only MEND_DSN set it once started normally and parked every due record on
// "SELECT command denied ... table batch".
const hostDSNSame = "same"

// preflightTimeout bounds mend run's checks of itself before it starts.
const preflightTimeout = 30 * time.Second

// givenSettle is the settle window run was given, 0 for the default.
func givenSettle(c subscribeConfig) time.Duration {
	if c.SettleGiven {
		return c.Settle
	}
	return 0
}

// errPreflight marks a refusal to start: a doctor check failed.
var errPreflight = errors.New("refusing to start")

// preflight runs doctor's checks (they only read) against what mend run
// would use: mend's schema version and grants, and the host's tables and
// grants. Each failed check is logged; the error names the first, as doctor
// prints it, so the last line of a refused start says what to fix.
func preflight(ctx context.Context, c runConfig, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	checks, target := diagnose(ctx, c.DSN, c.LeaseTTL)
	checks = append(checks, diagnoseHost(ctx, c.HostDSN, c.QueueDSN)...)
	checks = append(checks, diagnoseWakeTopic(ctx, c.QueueDSN, c.WakeTopic, wakeTopicIgnore(c.Sub.Group), c.WakeTopicUnjoined))
	if c.Sub.On {
		checks = append(checks, diagnoseSubscription(ctx, c.QueueDSN, c.Sub.Group, subscribeLagWarn, givenSettle(c.Sub))...)
	}
	var failed []check
	for _, ch := range checks {
		if ch.Status == checkFail {
			failed = append(failed, ch)
			log.Error("doctor check failed", "check", ch.Name, "detail", ch.Detail, "fix", ch.Fix)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	first := failed[0]
	line := fmt.Sprintf("%s %s: %s", checkFail, first.Name, first.Detail)
	if first.Fix != "" {
		line += " (fix: " + first.Fix + ")"
	}
	more := ""
	if len(failed) > 1 {
		more = fmt.Sprintf(" and %d more", len(failed)-1)
	}
	return fmt.Errorf("%w: doctor check failed on %s: %s%s; mend doctor with the same flags lists them all", errPreflight, target, line, more)
}

// pool is a database readiness pings, with the flag it came from.
type pool struct {
	flag string
	db   *sql.DB
}

// openHostPools opens one small pool per distinct host DSN, for /readyz:
// the host adapter's own pools are its business, but a replica whose host
// database is unreachable is as useless as one whose mend database is.
func openHostPools(ctx context.Context, c runConfig) ([]pool, error) {
	var out []pool
	seen := map[string]bool{}
	for _, d := range []struct{ flag, dsn string }{{"--host-dsn", c.HostDSN}, {"--queue-dsn", c.QueueDSN}} {
		if seen[d.dsn] || d.dsn == c.DSN {
			continue
		}
		seen[d.dsn] = true
		cfg, err := hostDoctorConfig(d.flag, d.dsn) // mend's session, as every pool
		if err != nil {
			return out, fmt.Errorf("%s: %w", d.flag, err)
		}
		db, err := openConfig(ctx, cfg)
		if err != nil {
			return out, fmt.Errorf("%s: %w", d.flag, err)
		}
		db.SetMaxOpenConns(1)
		out = append(out, pool{flag: d.flag, db: db})
	}
	return out, nil
}

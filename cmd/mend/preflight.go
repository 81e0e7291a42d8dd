package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/mendq/mend/client"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqlx"
)

// hostDSNSame is the --host-dsn value that says the submit queue's tables
// live in mend's own database (--dsn). mend run has no silent default: with
// only MEND_DSN set it once started normally and parked every due record on
// "SELECT command denied ... table batch".
const hostDSNSame = "same"

// givenSettle is the settle window run was given, 0 for the default.
func givenSettle(c subscribeConfig) time.Duration {
	if c.SettleGiven {
		return c.Settle
	}
	return 0
}

// preflight runs doctor's checks (they only read) against what mend run
// would use: mend's schema version and grants, and the host's tables and
// grants, its wake topic and the subscription. See doctor.Preflight.
func preflight(ctx context.Context, c runConfig, log *slog.Logger) error {
	return doctor.Preflight(ctx, runCheckParams(c, log))
}

// runCheckParams are the checks' view of a run's configuration: the
// front door's (client.CheckParams), the subscription's included.
func runCheckParams(c runConfig, log *slog.Logger) doctor.Params {
	return client.CheckParams(clientConfig(c, log))
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
		cfg, err := doctor.HostConfig(d.flag, d.dsn) // mend's session, as every pool
		if err != nil {
			return out, fmt.Errorf("%s: %w", d.flag, err)
		}
		db, err := mysqlx.OpenConfig(ctx, cfg)
		if err != nil {
			return out, fmt.Errorf("%s: %w", d.flag, err)
		}
		db.SetMaxOpenConns(1)
		out = append(out, pool{flag: d.flag, db: db})
	}
	return out, nil
}

package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/migrations"
)

// schemaError is a verdict this binary cannot run on, as one line.
func schemaError(v migrations.Verdict) error {
	if v.Fix == "" {
		return fmt.Errorf("%s", v.Detail)
	}
	return fmt.Errorf("%s (fix: %s)", v.Detail, v.Fix)
}

// schemaWatchEvery bounds how often a running replica looks at the schema
// version again: a migration applied while it runs is noticed within it.
const schemaWatchEvery = 30 * time.Second

// startSchemaWatch looks at the schema once now, then in the background
// (see schemaWatch) until the returned stop is called.
func startSchemaWatch(ctx context.Context, db *sql.DB, interval time.Duration, log *slog.Logger) (stop func()) {
	w := &schemaWatch{db: db, log: log, saidOK: true}
	w.check(ctx)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := min(max(interval, time.Second), schemaWatchEvery)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.check(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// schemaWatch logs, once per version, when mend's schema moves under a
// running replica to one newer than this binary (expand-only: a warning,
// it keeps working) or to one it cannot run (an error with the fix; its
// passes will fail and /readyz says not ready).
type schemaWatch struct {
	db     *sql.DB
	log    *slog.Logger
	said   uint // the version last judged
	saidOK bool
}

func (w *schemaWatch) check(ctx context.Context) {
	v, err := doctor.JudgeSchema(ctx, w.db)
	if err != nil || (v.Version == w.said && v.OK == w.saidOK) {
		return // an unreachable database is the passes' and /readyz's to report
	}
	switch {
	case !v.OK:
		w.log.Error("mend's schema is one this binary cannot run on", "schema_version", v.Version, "detail", v.Detail, "fix", v.Fix)
	case v.Newer:
		w.log.Warn("mend's schema is newer than this binary; it keeps working", "schema_version", v.Version, "detail", v.Detail, "fix", v.Fix)
	case v.Dirty:
		w.log.Warn("mend's schema is dirty (a migration running or failed half way); it keeps working", "schema_version", v.Version, "detail", v.Detail, "fix", v.Fix)
	case w.said != 0:
		w.log.Info("mend's schema version changed", "schema_version", v.Version, "detail", v.Detail)
	}
	w.said, w.saidOK = v.Version, v.OK
}

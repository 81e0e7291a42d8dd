package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// The "Smaller" items of issue 19, each a case that failed on the old main.
func TestIssue19SmallerItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("record: the _dlq suffix is optional and names one identity", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		base := []string{"record", "--dsn", db.DSN, "--queue", "q", "--partition", "q", "--message-id", "m", "--payload", speculatePayload}
		opsMust(t, append(base, "--topic", "speculate_dlq")...)
		if r := opsMust(t, append(base, "--topic", "speculate")...); !strings.Contains(r.stdout, "already recorded") {
			t.Fatalf("record --topic speculate after speculate_dlq = %s; want the same record", r.stdout)
		}
	})
	t.Run("record: --queue must be the payload's queue", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		r := opsRun(t, nil, "record", "--dsn", db.DSN, "--queue", "other", "--topic", "speculate_dlq", "--partition", "q", "--message-id", "m", "--payload", speculatePayload)
		if r.code != exitUsage || !strings.Contains(r.stderr, `payload names queue "q"`) {
			t.Fatalf("record --queue other for q's payload = exit %d %q; want 2", r.code, r.stderr)
		}
	})
	t.Run("inspect: --partition defaults to the queue, --topic takes the base name", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...)
		if r := opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q", "--topic", "speculate", "--message-id", "m"); !strings.Contains(r.stdout, "history:") {
			t.Fatalf("inspect by message = %s", r.stdout)
		}
	})
	t.Run("import: an unknown --topic is a usage error", func(t *testing.T) {
		t.Parallel()
		r := opsRun(t, nil, "import", "--dsn", "u@tcp(127.0.0.1:1)/m", "--queue-dsn", "u@tcp(127.0.0.1:1)/q", "--topic", "bogus")
		if r.code != exitUsage || !strings.Contains(r.stderr, "bogus_dlq") {
			t.Fatalf("import --topic bogus = exit %d %q; want 2", r.code, r.stderr)
		}
	})
	t.Run("import: --log-format json writes only JSON", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		b.deadLetter(t, "buildsignal", "build-1", "build-1", `{"id":"build-1","queue":"q"}`)
		code, _, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--log-format", "json")
		for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
			if !json.Valid([]byte(line)) {
				t.Errorf("stderr line is not JSON: %q", line)
			}
		}
		if code != exitOK || !strings.Contains(errOut, "no --host-dsn") {
			t.Fatalf("exit %d, stderr %s", code, errOut)
		}
	})
	t.Run("demo does not read MEND_DSN", func(t *testing.T) {
		t.Parallel()
		asked := map[string]bool{}
		a := a0()
		a.getenv = func(k string) string { asked[k] = true; return "" }
		for cmd, f := range a.newRoot().Commands() {
			_ = cmd
			if ff := a.flagsOf[f]; ff != nil && f.Name() == "demo" {
				if err := ff.applyEnv(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if asked["MEND_DSN"] {
			t.Fatal("mend demo reads MEND_DSN: an exported production DSN would get throwaway databases")
		}
	})
	t.Run("a wrong password is said in words", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		cfg, _ := mysql.ParseDSN(db.DSN)
		cfg.Passwd = "wr0ng-pw"
		r := opsRun(t, nil, "status", "--dsn", cfg.FormatDSN())
		if r.code != exitFailure || !strings.Contains(r.stderr, "access denied: the user or password in the DSN is wrong") || strings.Contains(r.stderr, "wr0ng-pw") {
			t.Fatalf("status with a wrong password = exit %d %q", r.code, r.stderr)
		}
	})
	t.Run("run --once interrupted exits 1, and a shared --holder is warned about", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
		store, err := storage.Open(ctx, db.DSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if _, err := store.LeaseAcquire(ctx, "elsewhere", "dup-holder", time.Hour); err != nil {
			t.Fatal(err)
		}
		c := runConfig{DSN: db.DSN, HostDSN: db.DSN, QueueDSN: db.DSN, Once: true, Interval: reconcile.IntervalDefault,
			LeaseTTL: fence.TTLDefault, Concurrency: 1, Holder: "dup-holder", Retention: reconcile.RetentionDefault,
			MaxAttempts: planner.MaxAttemptsDefault, Grace: planner.GraceDefault, WakeTopic: host.WakeTopicDefault}
		if err := c.validate(); err != nil {
			t.Fatal(err)
		}
		// The signal arrives as the run starts: the logger cancels ctx
		// when it sees the start line.
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		var buf bytes.Buffer
		log := slog.New(&cancelOn{Handler: slog.NewTextHandler(&buf, nil), msg: "mend run starting", cancel: cancel})
		err = serve(runCtx, c, log, &scrubber{})
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("run --once interrupted = %v; want an error (exit 1), not success", err)
		}
		if !strings.Contains(buf.String(), "another process holds live leases under this --holder") {
			t.Fatalf("no warning about the shared holder:\n%s", buf.String())
		}
	})
	t.Run("a continuous run logs pass done", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
		c := runConfig{DSN: db.DSN, HostDSN: db.DSN, QueueDSN: db.DSN, Interval: reconcile.IntervalDefault,
			LeaseTTL: fence.TTLDefault, Concurrency: 1, Holder: "h", Retention: reconcile.RetentionDefault,
			MaxAttempts: planner.MaxAttemptsDefault, Grace: planner.GraceDefault, WakeTopic: host.WakeTopicDefault}
		if err := c.validate(); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var buf bytes.Buffer
		log := slog.New(&cancelOn{Handler: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), msg: "pass done", cancel: cancel})
		if err := serve(runCtx, c, log, &scrubber{}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "pass done") || !strings.Contains(buf.String(), "took=") {
			t.Fatalf("a continuous run logged no pass:\n%s", buf.String())
		}
	})
	t.Run("status shows the oldest open record as the metric does", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...)
		if _, err := db.SQL(t).Exec("UPDATE mend_records SET created_at = created_at - INTERVAL 1 HOUR, next_attempt_at = NOW(6) + INTERVAL 5 MINUTE"); err != nil {
			t.Fatal(err)
		}
		r := opsMust(t, "status", "--dsn", db.DSN)
		if !strings.Contains(r.stdout, "OLDEST OPEN") || !strings.Contains(r.stdout, "1h0m0s") {
			t.Fatalf("status with a record in backoff for an hour =\n%s; want OLDEST OPEN 1h", r.stdout)
		}
		var st []queueStatusJSON
		if err := json.Unmarshal([]byte(opsMust(t, "status", "--dsn", db.DSN, "--json").stdout), &st); err != nil || len(st) != 1 || st[0].OldestOpenSeconds < 3500 {
			t.Fatalf("status --json = %+v, %v; want oldest_open_seconds about 3600", st, err)
		}
	})
	t.Run("migrate up on a dirty schema gives migrate version's hint", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		if _, err := db.SQL(t).Exec("UPDATE mend_schema_migrations SET dirty = 1"); err != nil {
			t.Fatal(err)
		}
		up, version := opsRun(t, nil, "migrate", "up", "--dsn", db.DSN), opsRun(t, nil, "migrate", "version", "--dsn", db.DSN)
		for _, hint := range []string{"mend migrate force", "docs/operations.md"} {
			if !strings.Contains(version.stdout+version.stderr, hint) || !strings.Contains(up.stderr, hint) {
				t.Errorf("hint %q: migrate version said %q %q, migrate up %q", hint, version.stdout, version.stderr, up.stderr)
			}
		}
	})
}

// cancelOn cancels when a record with message msg is handled.
type cancelOn struct {
	slog.Handler
	msg    string
	cancel context.CancelFunc
}

func (h *cancelOn) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		defer h.cancel()
	}
	return h.Handler.Handle(ctx, r)
}

func (h *cancelOn) WithAttrs(as []slog.Attr) slog.Handler {
	return &cancelOn{Handler: h.Handler.WithAttrs(as), msg: h.msg, cancel: h.cancel}
}

func (h *cancelOn) WithGroup(g string) slog.Handler {
	return &cancelOn{Handler: h.Handler.WithGroup(g), msg: h.msg, cancel: h.cancel}
}

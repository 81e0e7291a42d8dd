package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/reconcile"
)

// Issue 19: JSON logs gave ttl in nanoseconds beside lease_ttl "15s".
func TestDurationsOneUnitPerFormat(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		newLogger(&buf, format, 0, &scrubber{}).Info("m", "ttl", 15*time.Second)
		if !strings.Contains(buf.String(), "15s") || strings.Contains(buf.String(), "15000000000") {
			t.Errorf("%s: %s; want ttl as 15s", format, buf.String())
		}
		if format == "json" {
			var m map[string]any
			if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["ttl"] != "15s" {
				t.Errorf("json ttl = %v, %v", m["ttl"], err)
			}
		}
	}
}

// Issue 19: after a server restart the driver logged 105 lines; now a
// burst per window, the rest counted on the next line let through.
func TestDriverLinesRateLimited(t *testing.T) {
	t.Parallel()
	l := &lineLimiter{burst: 5, window: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	printed := 0
	for i := range 105 {
		if ok, _ := l.allow(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			printed++
		}
	}
	if printed != 5 {
		t.Fatalf("%d of 105 lines in one window printed; want 5", printed)
	}
	ok, suppressed := l.allow(t0.Add(11 * time.Second))
	if !ok || suppressed != 100 {
		t.Fatalf("next window: allow = %v, suppressed %d; want true, 100", ok, suppressed)
	}
}

// Issue 19: the pass summary said done=0 when three records finished
// (woken, so the planner counted them as woken only).
func TestPassSummaryCountsFinishedRecords(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var ps reconcile.PassStats
	ps.Queues, ps.Records.Woken, ps.Records.Done = 1, 3, 1
	logPass(slog.New(slog.NewTextHandler(&buf, nil)), ps, time.Second)
	if !strings.Contains(buf.String(), " done=4 ") || !strings.Contains(buf.String(), "done_without_wake=1") {
		t.Fatalf("pass summary = %s; want done=4 (3 woken + 1 with nothing to wake)", buf.String())
	}
}

// A pass that shared the cluster budget says its share and among how many
// working replicas; one that did not count them says neither.
func TestPassSummarySaysTheShare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ps   reconcile.PassStats
		want bool
	}{
		{reconcile.PassStats{Queues: 6, Concurrency: 2, Replicas: 4}, true},
		{reconcile.PassStats{Queues: 1, Concurrency: 4}, false},
	} {
		var buf bytes.Buffer
		logPass(slog.New(slog.NewTextHandler(&buf, nil)), c.ps, time.Second)
		got := strings.Contains(buf.String(), " share=2 working_replicas=4 ")
		if got != c.want || (!c.want && strings.Contains(buf.String(), "share=")) {
			t.Fatalf("pass summary = %s; want share shown: %v", buf.String(), c.want)
		}
	}
}

// Issue 47's planted slips: a DSN read from --dsn-file was not added to
// the log scrubber, and a password rotated into the file was never added.
// The first shows through mend run's refusal, which names the database
// (here spelled as the password); the second by connecting after a
// rotation (the pool re-reads the file before it dials, refused or not).
func TestDSNFileSecretsAreScrubbed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "dsn")
	write := func(dsn string) {
		t.Helper()
		if err := os.WriteFile(file+".new", []byte(dsn+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	const first, rotated = "FirstSecret47", "RotatedSecret47"
	// A port nothing listens on: every connect is refused after its dial.
	write("u47:" + first + "@tcp(127.0.0.1:1)/" + first)

	var out, errOut bytes.Buffer
	Main(context.Background(), []string{"run", "--once", "--dsn-file", file, "--host-dsn", "same"}, &out, &errOut, func(string) string { return "" })
	if all := out.String() + errOut.String(); strings.Contains(all, first) || !strings.Contains(all, redacted) {
		t.Errorf("mend run --dsn-file printed the file's password (or scrubbed nothing):\n%s", all)
	}

	a := a0()
	f := a.newCommand("x", "", "", withDSN|withLog)
	f.addDBSecurityFlags()
	if err := f.Parse([]string{"--dsn-file", file}); err != nil {
		t.Fatal(err)
	}
	if err := f.applyEnv(); err != nil {
		t.Fatal(err)
	}
	if err := f.applyDBSecurity(); err != nil {
		t.Fatal(err)
	}
	write("u47:" + rotated + "@tcp(127.0.0.1:1)/" + first)
	cfg, err := mysqlx.Config(f.str("dsn"), mysqlx.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := sql.OpenDB(conn)
	defer pool.Close()
	_ = pool.PingContext(context.Background()) // refused; the file was re-read first
	if got := a.scrub.clean("password " + rotated); strings.Contains(got, rotated) {
		t.Errorf("after a rotation the scrubber leaves the new password: %q", got)
	}
}

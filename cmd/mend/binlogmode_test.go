package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// binlogWorld is a wake world with the host's planner reading speculate
// and batch 1 dead-lettered.
func binlogWorld(t *testing.T) *wakeWorld {
	t.Helper()
	return seedBinlogWorld(t, newWakeWorld(t))
}

// seedBinlogWorld seeds binlogWorld's batches and dead letter into x.
func seedBinlogWorld(t *testing.T, x *wakeWorld) *wakeWorld {
	t.Helper()
	ctx := context.Background()
	for _, seed := range []func() error{
		func() error { return x.w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
		func() error { return x.w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/2") },
		func() error { return x.w.Join(ctx, "orchestrator", "speculate", "q") },
		func() error {
			return x.w.Publish(ctx, "speculate", "q", "q/batch/1", []byte(`{"id":"q/batch/1","queue":"q"}`), nil)
		},
		func() error {
			return x.w.MoveToDLQ(ctx, "speculate", "q", "q/batch/1", sqtest.Failure{Count: 3, LastError: "speculation crashed"})
		},
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// doctorChecks runs mend doctor --json and returns its checks by name.
func doctorChecksCode(t *testing.T, args ...string) (map[string]doctor.Check, int) {
	t.Helper()
	r := opsRun(t, nil, append([]string{"doctor", "--json"}, args...)...)
	var out struct {
		Checks []doctor.Check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("doctor --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	m := map[string]doctor.Check{}
	for _, c := range out.Checks {
		m[c.Name] = c
	}
	return m, r.code
}

// TestDoctorBinlog: doctor's binlog checks on the test servers (binary log
// on, ROW, FULL images, root), each failure with its fix: mend's server ID
// equal to the server's, a user without REPLICATION SLAVE, and a saved
// position the server has purged (FAIL for doctor, a warning for run's
// preflight, which recovers it).
func TestDoctorBinlog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := binlogWorld(t)
	base := []string{"--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN}

	checks, code := doctorChecksCode(t, base...)
	if c := checks["subscribe mode"]; c.Status != doctor.OK || !strings.HasPrefix(c.Detail, "binlog (auto)") {
		t.Errorf("subscribe mode %+v; want binlog chosen by auto", c)
	}
	for _, name := range []string{"binlog log_bin", "binlog format", "binlog row image", "binlog REPLICATION CLIENT",
		"binlog REPLICATION SLAVE", "binlog server id", "binlog position table", "binlog position"} {
		if c, ok := checks[name]; !ok || c.Status != doctor.OK {
			t.Errorf("check %q = %+v (present %v); want ok", name, c, ok)
		}
	}
	if c := checks["binlog row metadata"]; c.Status == doctor.Warn && !strings.Contains(c.Fix, "binlog_row_metadata=FULL") {
		t.Errorf("row metadata warning without its fix: %+v", c)
	}
	if _, ok := checks["subscription lag"]; ok {
		t.Error("binlog mode's doctor checked the consumer group's lag; it joins none")
	}
	if code != exitOK {
		t.Errorf("doctor exit %d; want 0", code)
	}

	var serverID uint32
	if err := x.queueDB.SQL(t).QueryRowContext(ctx, "SELECT @@global.server_id").Scan(&serverID); err != nil {
		t.Fatal(err)
	}
	checks, code = doctorChecksCode(t, append(base, "--subscribe-mode", "binlog", "--binlog-server-id", strconv.FormatUint(uint64(serverID), 10))...)
	if c := checks["binlog server id"]; c.Status != doctor.Fail || !strings.Contains(c.Fix, "--binlog-server-id") || code == exitOK {
		t.Errorf("server id %+v, exit %d; want FAIL naming --binlog-server-id", c, code)
	}
	// auto with the same clash runs offsets, saying why.
	checks, _ = doctorChecksCode(t, append(base, "--binlog-server-id", strconv.FormatUint(uint64(serverID), 10))...)
	if c := checks["subscribe mode"]; !strings.HasPrefix(c.Detail, "offsets (auto): binlog mode cannot run here (") || !strings.Contains(c.Detail, "server_id") {
		t.Errorf("subscribe mode %+v; want offsets, naming the server id", c)
	}

	noSlave := x.queueDB.User(t, "SELECT, INSERT, UPDATE ON %s.*", "REPLICATION CLIENT ON *.*")
	checks, code = doctorChecksCode(t, "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", noSlave, "--subscribe-mode", "binlog")
	if c := checks["binlog REPLICATION SLAVE"]; c.Status != doctor.Fail || !strings.Contains(c.Fix, "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO") || code == exitOK {
		t.Errorf("REPLICATION SLAVE %+v, exit %d; want FAIL with the GRANT", c, code)
	}

	// mend's user may read but not save the position.
	readOnly := x.mendDB.User(t, "SELECT ON %s.*")
	checks, _ = doctorChecksCode(t, "--dsn", readOnly, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe-mode", "binlog")
	if c := checks["binlog position table"]; c.Status != doctor.Fail || !strings.Contains(c.Fix, "GRANT INSERT, UPDATE ON `"+x.mendDB.Name+"`.`mend_binlog_positions`") {
		t.Errorf("position table as a read-only user: %+v; want FAIL with the GRANT", c)
	}

	// A position saved on this server in a file it no longer has.
	srv, err := binlog.Probe(ctx, x.queueDB.SQL(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.mendDB.SQL(t).ExecContext(ctx, `INSERT INTO mend_binlog_positions (name, flavor, server_uuid, binlog_file, binlog_pos, gtid_set, updated_at)
		VALUES (?, ?, ?, 'gone-bin.000001', 4, '', NOW(6))`, binlog.LeaseName(x.queueDB.Name), srv.Flavor, srv.Identity); err != nil {
		t.Fatal(err)
	}
	checks, code = doctorChecksCode(t, base...)
	c := checks["binlog position"]
	if c.Status != doctor.Fail || code == exitOK ||
		!strings.Contains(c.Detail, "mend was down past binlog_expire_logs_seconds; dead letters collected meanwhile are lost; run re-imports what the tables hold") {
		t.Errorf("purged position %+v, exit %d; want FAIL saying what was lost", c, code)
	}
	if mode := checks["subscribe mode"]; !strings.HasPrefix(mode.Detail, "binlog (auto)") {
		t.Errorf("subscribe mode %+v; a purged position is the reader's to recover, auto still reads the binary log", mode)
	}
	p := client.CheckParams(client.Config{DSN: x.mendDB.DSN, HostDSN: x.appDB.DSN, QueueDSN: x.queueDB.DSN, Subscription: &client.Subscription{}})
	if err := doctor.Preflight(ctx, p); err != nil {
		t.Errorf("preflight with a purged position: %v; want it to start (run recovers the position)", err)
	}
}

// TestRunBinlogMode: mend run --queue-dsn where binlog mode's prerequisites
// hold logs that it reads the binary log and why, records the dead letter
// the tables hold (a first start imports them), repairs it, joins no
// consumer group, and exports the mode and the reader's metrics. --once
// beside the position it saved reads the binary log to its end, joining no
// group either.
func TestRunBinlogMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := binlogWorld(t)
	m := startMendRun(t, ctx, "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN)
	done, stderr, wait, scrape := m.done, m.stderr, m.wait, m.scrape
	wait("the mode's log line", func() bool {
		return regexp.MustCompile(`msg="subscribe mode: binlog" .*mode=binlog why="auto: every prerequisite`).MatchString(stderr.String())
	})
	store, err := storage.Open(ctx, x.mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	src := mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"}
	wait("the dead letter recorded and repaired", func() bool {
		r, err := store.RecordGet(ctx, src)
		return err == nil && r.State == mend.StateDone
	})
	var page string
	wait("the reader's metrics", func() bool {
		page = scrape()
		// At least once: from the tables' import, and again from the stream
		// when its insert is in the log file the reader starts from.
		return regexp.MustCompile(`\nmend_binlog_recorded_total [1-9]`).MatchString(page) && strings.Contains(page, "\nmend_binlog_lag_seconds ")
	})
	for _, want := range []string{`mend_subscribe_mode{mode="binlog"} 1`, `mend_subscribe_mode{mode="offsets"} 0`,
		`mend_binlog_resets_total{reason="first_start"} 1`, `mend_binlog_resets_total{reason="purged"} 0`,
		"\nmend_binlog_position_purged 0\n", "\nmend_binlog_retention_seconds ", "\nmend_binlog_position_age_seconds ",
		"\nmend_binlog_statement_inserts_total 0\n", `mend_binlog_failures_total{reason="moved"} 0`} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var n int
	if err := x.queueDB.SQL(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d queue_offsets rows of group mend (%v); binlog mode joins no consumer group", n, err)
	}
	// mend status shows the mode, the reader's role, position and lag.
	wait("the position saved", func() bool {
		_, err := store.BinlogPositionGet(ctx, binlog.LeaseName(x.queueDB.Name))
		return err == nil
	})
	st := opsMust(t, "status", "--dsn", x.mendDB.DSN)
	if !strings.Contains(st.stdout, "Subscribe mode: binlog") || !strings.Contains(st.stdout, "reading: ") ||
		!regexp.MustCompile(`(?m)^"`+regexp.QuoteMeta(x.queueDB.Name)+`"\s+reading: \S+ \(epoch 1, for [^)]+\)\s+"mend-bin\.\d+:\d+`).MatchString(st.stdout) {
		t.Errorf("status shows no binlog reader:\n%s", st.stdout)
	}
	var js struct {
		Subscription struct {
			Mode   string             `json:"mode"`
			Binlog []binlogReaderView `json:"binlog"`
		} `json:"subscription"`
	}
	st = opsMust(t, "status", "--dsn", x.mendDB.DSN, "--queue-dsn", x.queueDB.DSN, "--json")
	if err := json.Unmarshal([]byte(st.stdout), &js); err != nil || js.Subscription.Mode != "binlog" || len(js.Subscription.Binlog) != 1 ||
		js.Subscription.Binlog[0].Role != "reading" || js.Subscription.Binlog[0].File == "" || js.Subscription.Binlog[0].ResetReason != binlog.ResetFirstStart {
		t.Errorf("status --json: %+v (%v); want the binlog reader, reading, its file and first-start reset\n%s", js, err, st.stdout)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("mend run exit %d after the signal:\n%s", code, stderr.String())
	}
	if st := opsMust(t, "status", "--dsn", x.mendDB.DSN); !regexp.MustCompile(`(?m)^"` + regexp.QuoteMeta(x.queueDB.Name) + `"\s+no reader( for \S+)?\s`).MatchString(st.stdout) {
		t.Errorf("status after the stop shows a reader:\n%s", st.stdout)
	}

	// Beside the saved position, --once reads the binary log (auto is
	// sticky) and joins no consumer group.
	once := []string{"run", "--once", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe-settle", "1s"}
	r := opsRun(t, nil, once...)
	if r.code != exitOK || !regexp.MustCompile(`msg="subscribe mode: binlog" .*mode=binlog why="auto with --once: the source has a saved binary-log position`).MatchString(r.stderr) ||
		!strings.Contains(r.stderr, "binlog caught up") {
		t.Errorf("run --once beside the saved position: exit %d; want binlog mode, read to the log's end:\n%s", r.code, r.stderr)
	}
	if err := x.queueDB.SQL(t).QueryRowContext(context.Background(), "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d queue_offsets rows of group mend (%v) after run --once beside a saved position; want none", n, err)
	}
	r = opsRun(t, nil, append(once, "--subscribe-mode", "bin")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--subscribe-mode must be binlog, offsets or auto") {
		t.Errorf("run --subscribe-mode bin: exit %d; want a usage error:\n%s", r.code, r.stderr)
	}
}

// TestRunBinlogRefused: binlog mode asked for on a queue database user
// without REPLICATION SLAVE is refused before anything starts, with the
// GRANT that fixes it.
func TestRunBinlogRefused(t *testing.T) {
	t.Parallel()
	x := binlogWorld(t)
	noSlave := x.queueDB.User(t, "SELECT, INSERT, UPDATE ON %s.*", "REPLICATION CLIENT ON *.*")
	r := opsRun(t, nil, "run", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", noSlave, "--subscribe-mode", "binlog")
	if r.code == exitOK || !strings.Contains(r.stderr, "binlog REPLICATION SLAVE") || !strings.Contains(r.stderr, "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO") {
		t.Errorf("exit %d; want refused on REPLICATION SLAVE with the GRANT:\n%s", r.code, r.stderr)
	}
}

// The reader's hooks drive the counters: a purge pages (the gauge stays 1)
// and counts under reason purged; rows recorded count, parked ones not.
func TestBinlogMetricsHooks(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	h := m.binlogHooks()
	m.binlogMetrics().setMode(doctor.ModeOffsets, nil)
	h.OnReset(binlog.ResetFirstStart, false)
	h.OnReset(fmt.Sprintf("%s: the server no longer has b.000001", binlog.ResetPurged), true)
	h.OnReset(binlog.ResetFailover+": …", false)
	h.OnRecorded(make([]dlq.Row, 3), 1)
	for _, tt := range []struct {
		name, label string
		want        float64
	}{
		{"mend_binlog_resets_total", "first_start", 1},
		{"mend_binlog_resets_total", "purged", 1},
		{"mend_binlog_resets_total", "failover", 1},
		{"mend_binlog_resets_total", "flavor", 0},
		{"mend_binlog_position_purged", "", 1},
		{"mend_binlog_recorded_total", "", 2},
		{"mend_subscribe_mode", "offsets", 1},
		{"mend_subscribe_mode", "binlog", 0},
	} {
		if got, ok := gathered(t, m, tt.name, tt.label); !ok || got != tt.want {
			t.Errorf("%s{%s} = %v (present %v); want %v", tt.name, tt.label, got, ok, tt.want)
		}
	}
	// Outside binlog mode the reader's gauges are absent.
	for _, name := range []string{"mend_binlog_lag_seconds", "mend_binlog_position_age_seconds"} {
		if _, ok := gathered(t, m, name, ""); ok {
			t.Errorf("%s without a reader; want it absent", name)
		}
	}
}

// gathered is the value of the series of name whose one label (if any)
// has value label, from m's registry.
func gathered(t *testing.T, m *metrics, name, label string) (float64, bool) {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) > 0 && s.GetLabel()[0].GetValue() != label {
				continue
			}
			switch {
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue(), true
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// Every reset reason the reader gives maps to its label; a purge is
// "purged" whatever its words.
func TestResetLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reason string
		purged bool
		want   string
	}{
		{binlog.ResetFirstStart, false, "first_start"},
		{binlog.ResetPurged + ": the server no longer has b.000001", true, "purged"},
		{"anything", true, "purged"},
		{binlog.ResetFailover + ": the position is b.000003:4 on u1", false, "failover"},
		{binlog.ResetFlavor + ": saved on mysql", false, "flavor"},
		{"something new", false, "other"},
	} {
		if got := resetLabel(tt.reason, tt.purged); got != tt.want {
			t.Errorf("resetLabel(%q, %v) = %q; want %q", tt.reason, tt.purged, got, tt.want)
		}
	}
}

// TestRunBinlogPurged: mend run finds its saved position purged from the
// server's binary log (mend was down past the retention): it starts
// (doctor fails on it, run's preflight warns), says so in an error line,
// imports what the tables hold, and /metrics says the position was purged
// (MendBinlogPositionPurged pages on it) and counts the reset as purged.
func TestRunBinlogPurged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := binlogWorld(t)
	srv, err := binlog.Probe(ctx, x.queueDB.SQL(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.mendDB.SQL(t).ExecContext(ctx, `INSERT INTO mend_binlog_positions (name, flavor, server_uuid, binlog_file, binlog_pos, gtid_set, updated_at)
		VALUES (?, ?, ?, 'gone-bin.000001', 4, '', NOW(6))`, binlog.LeaseName(x.queueDB.Name), srv.Flavor, srv.Identity); err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"run", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN,
			"--interval", "100ms", "--metrics-addr", "127.0.0.1:0"}, io.Discard, &stderr, func(string) string { return "" })
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for !cond() {
			select {
			case code := <-done:
				t.Fatalf("mend run exited %d while waiting for %s:\n%s", code, what, stderr.String())
			case <-deadline:
				t.Fatalf("still waiting for %s:\n%s", what, stderr.String())
			case <-tick.C:
			}
		}
	}
	addrRE := regexp.MustCompile(`msg="serving metrics" .*?addr=(\S+)`)
	var addr string
	wait("metrics", func() bool {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	wait("the purge said", func() bool {
		return strings.Contains(stderr.String(), `level=ERROR msg="binlog reader: the saved position is gone from the server's binary log`)
	})
	store, err := storage.Open(ctx, x.mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	wait("the dead letter imported from the tables", func() bool {
		_, err := store.RecordGet(ctx, mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"})
		return err == nil
	})
	var page string
	wait("the purge in /metrics", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		return strings.Contains(page, "\nmend_binlog_position_purged 1\n")
	})
	if !strings.Contains(page, `mend_binlog_resets_total{reason="purged"} 1`) || !strings.Contains(page, `mend_binlog_resets_total{reason="first_start"} 0`) {
		t.Errorf("/metrics does not count one purged reset:\n%s", page)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("mend run exit %d after the signal:\n%s", code, stderr.String())
	}
}

// A user granted before migration 0019 (SELECT on every mend table but
// mend_binlog_positions) still gets mend status, with a line saying why
// binlog mode's readers are not shown; --json stays the queues alone.
func TestStatusWithoutPositionGrant(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	var grants []string
	for _, table := range db.Tables(t) {
		if table != "mend_binlog_positions" {
			grants = append(grants, "SELECT ON %s.`"+table+"`")
		}
	}
	user := db.User(t, grants...)
	r := opsMust(t, "status", "--dsn", user)
	if !strings.Contains(r.stdout, "binlog mode's readers not shown: ") || !strings.Contains(r.stdout, "mend_binlog_positions") {
		t.Errorf("status as a user without SELECT on mend_binlog_positions:\n%s", r.stdout)
	}
	if r := opsMust(t, "status", "--dsn", user, "--json"); strings.Contains(r.stdout, "binlog") {
		t.Errorf("status --json: %s", r.stdout)
	}
}

// mendRun is a mend run of the test's, in this process: its exit code, its
// log, its metrics address.
type mendRun struct {
	t      *testing.T
	done   chan int
	stderr *lockedBuffer
	addr   string
	tick   *time.Ticker
}

// startMendRun runs mend run with args (and a 100 ms interval, metrics on
// a free loopback port) until ctx ends, and waits until it serves metrics.
func startMendRun(t *testing.T, ctx context.Context, args ...string) *mendRun {
	t.Helper()
	m := &mendRun{t: t, done: make(chan int, 1), stderr: &lockedBuffer{}, tick: time.NewTicker(50 * time.Millisecond)}
	t.Cleanup(m.tick.Stop)
	go func() {
		m.done <- Main(ctx, append(append([]string{"run"}, args...), "--interval", "100ms", "--metrics-addr", "127.0.0.1:0"),
			io.Discard, m.stderr, func(string) string { return "" })
	}()
	addrRE := regexp.MustCompile(`msg="serving metrics" .*?addr=(\S+)`)
	m.wait("metrics", func() bool {
		if x := addrRE.FindStringSubmatch(m.stderr.String()); x != nil {
			m.addr = x[1]
		}
		return m.addr != ""
	})
	return m
}

// wait polls cond, failing the test if mend run exits first or a minute
// passes (a hang: nothing is timed by it).
func (m *mendRun) wait(what string, cond func() bool) {
	m.t.Helper()
	deadline := time.After(60 * time.Second)
	for !cond() {
		select {
		case code := <-m.done:
			m.t.Fatalf("mend run exited %d while waiting for %s:\n%s", code, what, m.stderr.String())
		case <-deadline:
			m.t.Fatalf("still waiting for %s:\n%s", what, m.stderr.String())
		case <-m.tick.C:
		}
	}
}

// scrape reads mend run's /metrics.
func (m *mendRun) scrape() string {
	m.t.Helper()
	resp, err := http.Get("http://" + m.addr + "/metrics")
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		m.t.Fatal(err)
	}
	return string(b)
}

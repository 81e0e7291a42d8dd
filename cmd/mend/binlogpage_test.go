package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/internal/testserver"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// ruleFile is the shipped rule file, parsed.
type ruleFile struct {
	Groups []struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile("../../deploy/prometheus/mend-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// rule is the alert rule named name.
func (rf ruleFile) rule(t *testing.T, name string) map[string]any {
	t.Helper()
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r["alert"] == name {
				return r
			}
		}
	}
	t.Fatalf("no rule %s", name)
	return nil
}

// MendBinlogNotReading's thresholds are the ones mend status and the
// console judge a reader by (notReadingSaved, notReadingFor): the two say
// "would page" about the same readers. The saved age alone decides, which
// holds because a reader that reads writes its position at least every
// binlog.RefreshIntervalDefault, well under the threshold.
func TestBinlogNotReadingRule(t *testing.T) {
	t.Parallel()
	if 4*binlog.RefreshIntervalDefault > notReadingSaved {
		t.Errorf("a reader refreshes its position every %v: too close to the rule's %v", binlog.RefreshIntervalDefault, notReadingSaved)
	}
	r := readRules(t).rule(t, "MendBinlogNotReading")
	expr, _ := r["expr"].(string)
	if strings.Contains(expr, "mend_binlog_reader_term_seconds") {
		t.Errorf("MendBinlogNotReading excuses a long term: a reader wedged while it holds its lease would never page:\n%s", expr)
	}
	for _, want := range []string{
		fmt.Sprintf("max by (source) (mend_binlog_position_saved_age_seconds) > %d", int(notReadingSaved.Seconds())),
		`mend_subscribe_mode{mode="binlog"}`,
	} {
		if !strings.Contains(expr, want) {
			t.Errorf("MendBinlogNotReading's expr lacks %q:\n%s", want, expr)
		}
	}
	if f, _ := r["for"].(string); f != fmt.Sprintf("%dm", int(notReadingFor.Minutes())) {
		t.Errorf("MendBinlogNotReading's for is %q; want %v", f, notReadingFor)
	}
	if sev := r["labels"].(map[string]any)["severity"]; sev != "page" {
		t.Errorf("MendBinlogNotReading's severity is %v; want page", sev)
	}
}

// The age of the saved position, by role: 0 after a heartbeat while
// reading, the longer of the lag and the time since the last save
// otherwise; while retrying it grows from the last save whatever the last
// term saw; a standby or a stopped reader exports none.
func TestPositionAge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	savedAt := now.Add(-90 * time.Second)
	for _, tt := range []struct {
		name string
		st   binlog.Status
		want time.Duration
		ok   bool
	}{
		{"reading, caught up", binlog.Status{Role: binlog.RoleReader, CaughtUp: true}, 0, true},
		{"reading, behind", binlog.Status{Role: binlog.RoleReader, Lag: 5 * time.Minute}, 5 * time.Minute, true},
		{"reading, saved a while ago", binlog.Status{Role: binlog.RoleReader, Lag: time.Second}, 90 * time.Second, true},
		{"retrying after a caught-up term", binlog.Status{Role: binlog.RoleRetrying, CaughtUp: true}, 90 * time.Second, true},
		{"retrying, lag of the last term", binlog.Status{Role: binlog.RoleRetrying, Lag: time.Hour}, 90 * time.Second, true},
		{"standby", binlog.Status{Role: binlog.RoleStandby}, 0, false},
		{"stopped", binlog.Status{Role: binlog.RoleStopped}, 0, false},
	} {
		got, ok := positionAge(tt.st, savedAt, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: positionAge = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// Every failure reason's counter exists at 0 before the first failure, and
// a failed term counts under binlog.FailureReason's label.
func TestBinlogFailuresCounted(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	h := m.binlogHooks()
	for _, r := range binlog.FailureReasons {
		if got, ok := gathered(t, m, "mend_binlog_failures_total", r); !ok || got != 0 {
			t.Errorf("mend_binlog_failures_total{reason=%q} = %v (present %v); want 0", r, got, ok)
		}
	}
	h.OnFailed(&mysql.MySQLError{Number: 1045, Message: "Access denied"})
	h.OnFailed(fmt.Errorf("binlog: %w", binlog.ErrConfig))
	h.OnFailed(fmt.Errorf("binlog: %w", binlog.ErrConfig))
	for reason, want := range map[string]float64{binlog.FailAuth: 1, binlog.FailConfig: 2, binlog.FailConnect: 0} {
		if got, _ := gathered(t, m, "mend_binlog_failures_total", reason); got != want {
			t.Errorf("mend_binlog_failures_total{reason=%q} = %v; want %v", reason, got, want)
		}
	}
	// Without a reader (offsets mode) no state is exported.
	if _, ok := gathered(t, m, "mend_binlog_reader_state", binlog.RoleStopped); ok {
		t.Error("mend_binlog_reader_state without a reader")
	}
}

// gatheredAll is every value of the series of name in reg, by the value of
// label.
func gatheredAll(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			key := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			out[key] = s.GetGauge().GetValue()
		}
	}
	return out
}

// TestBinlogReadersFromDatabase: every replica's view of a binlog source,
// from mend's database alone (the reader's process may be wedged or gone):
// the metrics MendBinlogNotReading pages on, and mend status's section,
// which judges the same condition. A source saved 20 minutes ago with no
// lease is not read, and pages; a reader that reads has saved lately (it
// refreshes its row when caught up); after it, terms that end within
// seconds are failed terms, and the position ages past the threshold:
// not read, paging once that has lasted the rule's 10 minutes; a holder
// whose term lasts but which saves nothing is wedged, and pages too.
func TestBinlogReadersFromDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	name := binlog.LeaseName("queue<db>")
	raw := db.SQL(t)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := raw.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO mend_binlog_positions (name, flavor, server_uuid, binlog_file, binlog_pos, gtid_set, updated_at)
		VALUES (?, 'mariadb', 'server_id=1', 'mariadb-bin.000003', 1234, '', NOW(6) - INTERVAL 20 MINUTE)`, name)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBinlogCollector(ctx, store, slog.New(slog.DiscardHandler)))
	series := func() (live, term, saved float64) {
		t.Helper()
		return gatheredAll(t, reg, "mend_binlog_reader_live", "source")["queue<db>"],
			gatheredAll(t, reg, "mend_binlog_reader_term_seconds", "source")["queue<db>"],
			gatheredAll(t, reg, "mend_binlog_position_saved_age_seconds", "source")["queue<db>"]
	}
	view := func() binlogReaderView {
		t.Helper()
		rs, err := binlogReaders(ctx, store, true)
		if err != nil || len(rs) != 1 {
			t.Fatalf("binlogReaders = %+v, %v; want one", rs, err)
		}
		return rs[0]
	}
	status := func() string {
		t.Helper()
		return opsMust(t, "status", "--dsn", db.DSN).stdout
	}

	// Never leased: nobody reads, for 20 minutes.
	if live, term, saved := series(); live != 0 || term != 0 || saved < 1200 || saved > 1260 {
		t.Errorf("never leased: live %v, term %v, saved age %v; want 0, 0, 20 minutes", live, term, saved)
	}
	if v := view(); v.Role != roleNoReader || !v.NotReading || !v.Pages || v.NoReaderSeconds < 1200 {
		t.Errorf("never leased: %+v; want no reader for 20 minutes, paging", v)
	}
	mustMatch(t, "status, never leased", status(),
		`(?m)^"queue<db>"\s+no reader for 20m\d+s\s+"mariadb-bin\.000003:1234"`,
		`(?m)^"queue<db>": not read for 20m\S*: no replica holds its lease; MendBinlogNotReading pages now`)

	// A replica has read for 4 minutes on a quiet server: caught up, it
	// has written its position again lately.
	term, err := store.LeaseAcquire(ctx, name, "replica-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE mend_leases SET acquired_at = NOW(6) - INTERVAL 4 MINUTE WHERE queue = ?`, name)
	exec(`UPDATE mend_lease_history SET acquired_at = NOW(6) - INTERVAL 4 MINUTE WHERE queue = ? AND epoch = ?`, name, term.Epoch)
	exec(`UPDATE mend_binlog_positions SET updated_at = NOW(6) - INTERVAL 20 SECOND WHERE name = ?`, name)
	if live, tsec, _ := series(); live != 1 || tsec < 240 || tsec > 300 {
		t.Errorf("a reader of 4 minutes: live %v, term %v; want 1, 4 minutes", live, tsec)
	}
	if v := view(); v.Role != roleReading || v.NotReading || v.Pages || v.Holder != "replica-1" {
		t.Errorf("a reader of 4 minutes: %+v; want reading, not paging", v)
	}
	st := status()
	mustMatch(t, "status, reading", st, `(?m)^"queue<db>"\s+reading: "replica-1" \(epoch 1, for 4m\d+s\)\s`)
	if strings.Contains(st, "MendBinlogNotReading") {
		t.Errorf("status says a reading reader would page:\n%s", st)
	}

	// It fails: its term ends, and the next three fail at once.
	if err := store.LeaseRelease(ctx, term); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tm, err := store.LeaseAcquire(ctx, name, "replica-2", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.LeaseRelease(ctx, tm); err != nil {
			t.Fatal(err)
		}
	}
	if live, tsec, _ := series(); live != 0 || tsec != 0 {
		t.Errorf("failing: live %v, term %v; want 0, 0", live, tsec)
	}
	// Its last save six minutes ago: past the threshold, within the for.
	exec(`UPDATE mend_binlog_positions SET updated_at = NOW(6) - INTERVAL 6 MINUTE WHERE name = ?`, name)
	v := view()
	if v.Role != roleNoReader || !v.NotReading || v.Pages || v.FailedTerms != 3 {
		t.Errorf("failing for six minutes: %+v; want not reading, 3 failed terms, not paging yet", v)
	}
	mustMatch(t, "status, failing", status(),
		`(?m)^"queue<db>"\s+no reader for \S+, 3 failed term\(s\) in 10m0s\s`,
		`(?m)^"queue<db>": not read for 6m\S*: its reader fails and retries \(3 failed term\(s\) in 10m0s: .*\); MendBinlogNotReading pages if it lasts 10m0s`)

	// Sixteen minutes: the condition has held for the rule's for: it pages.
	exec(`UPDATE mend_binlog_positions SET updated_at = NOW(6) - INTERVAL 16 MINUTE WHERE name = ?`, name)
	if v := view(); !v.NotReading || !v.Pages {
		t.Errorf("failing for the rule's for: %+v; want paging", v)
	}
	mustMatch(t, "status, paging", status(), `MendBinlogNotReading pages now`)

	// A holder whose term lasts (its process renews the lease) but which
	// saves nothing: its read loop is wedged. It pages as one that is gone.
	if _, err := store.LeaseAcquire(ctx, name, "replica-3", time.Minute); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE mend_leases SET acquired_at = NOW(6) - INTERVAL 30 MINUTE WHERE queue = ?`, name)
	exec(`UPDATE mend_binlog_positions SET updated_at = NOW(6) - INTERVAL 20 MINUTE WHERE name = ?`, name)
	if live, tsec, _ := series(); live != 1 || tsec < 1800 {
		t.Errorf("a wedged holder: live %v, term %v; want 1, 30 minutes", live, tsec)
	}
	if v := view(); v.Role != roleReading || !v.NotReading || !v.Pages {
		t.Errorf("a wedged holder: %+v; want its lease held, not reading, paging", v)
	}
	mustMatch(t, "status, wedged", status(),
		`(?m)^"queue<db>": not read for 20m\S*: "replica-3" holds the reader's lease \(for 30m\S*\) but has not saved its position: .*MendBinlogNotReading pages now`)
}

func mustMatch(t *testing.T, what, got string, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("%s does not match %s:\n%s", what, re, got)
		}
	}
}

// TestBinlogStopPages: a reader that cannot read pages, stopped four
// ways: the queue user's password rotated at the server (every connect
// refused, ERROR 1045), binlog_row_image flipped to MINIMAL (every term's
// probe refuses the server), the queue server restarted with a binary-log
// filter that leaves the queue schema out (local backend), the queue
// server gone (a proxy in front of it cut). In each, mend run reads in binlog mode until the test stops it and
// kills the reader's connection; the reader's process then says so
// (mend_binlog_failures_total by the way's reason, mend_binlog_reader_state
// retrying, the position's age while retrying, no lag), and the series
// every replica reads from mend's database, once the position is old (its
// save moved 20 minutes back: the test cannot wait), fire
// MendBinlogNotReading when promtool evaluates the shipped rule on them
// (and do not on a position saved 20 s ago: the evaluation's negative
// control); mend status says it pages.
func TestBinlogStopPages(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (CI=true): apt-get install prometheus")
		}
		t.Skip("promtool is not installed")
	}
	// killDump ends the queue server's binlog dump connections of user
	// ("" any), so the reader's term ends and the next meets the stop.
	killDump := func(t *testing.T, root *sql.DB, user string) {
		t.Helper()
		rows, err := root.QueryContext(t.Context(), "SELECT ID, USER FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			var u string
			if err := rows.Scan(&id, &u); err != nil {
				t.Fatal(err)
			}
			if user == "" || u == user {
				ids = append(ids, id)
			}
		}
		if err := rows.Err(); err != nil || len(ids) == 0 {
			t.Fatalf("the reader's dump connection: %v %v", ids, err)
		}
		for _, id := range ids {
			if _, err := root.ExecContext(t.Context(), "KILL "+strconv.FormatInt(id, 10)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tt := range []struct {
		name, reason string
		// world returns the world, the queue DSN mend run reads, and
		// what stops it reading.
		world func(t *testing.T) (*wakeWorld, string, func())
	}{
		{"password rotated", binlog.FailAuth, func(t *testing.T) (*wakeWorld, string, func()) {
			x := binlogWorld(t)
			dsn := x.queueDB.User(t, "SELECT, INSERT, UPDATE, DELETE ON %s.*", "REPLICATION SLAVE, REPLICATION CLIENT ON *.*")
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			return x, dsn, func() {
				root := x.queueDB.SQL(t)
				if _, err := root.ExecContext(t.Context(), "ALTER USER '"+cfg.User+"'@'%' IDENTIFIED BY 'rotated-elsewhere'"); err != nil {
					t.Fatal(err)
				}
				killDump(t, root, cfg.User)
			}
		}},
		{"row image flipped", binlog.FailSetting, func(t *testing.T) (*wakeWorld, string, func()) {
			srv := mysqltest.StartPrivate(t)
			x := &wakeWorld{mendDB: mysqltest.NewDB(t, migrations.Up), appDB: mysqltest.NewDB(t, onDSN(sqtest.CreateApp)),
				queueDB: mysqltest.NewDBOn(t, srv, onDSN(sqtest.CreateQueue))}
			x.w = sqtest.World{App: x.appDB.SQL(t), Queue: x.queueDB.SQL(t)}
			seedBinlogWorld(t, x)
			return x, x.queueDB.DSN, func() {
				srv.SetGlobal(t, "binlog_row_image", "'MINIMAL'")
				killDump(t, x.queueDB.SQL(t), "")
			}
		}},
		{"log filtered", binlog.FailSetting, func(t *testing.T) (*wakeWorld, string, func()) {
			srv := mysqltest.StartPrivate(t)
			if srv.Backend() != testserver.BackendLocal {
				t.Skip("restarting the queue server with --binlog-do-db needs a local server process (MEND_TEST_BACKEND=local; CI's local job runs it)")
			}
			x := &wakeWorld{mendDB: mysqltest.NewDB(t, migrations.Up), appDB: mysqltest.NewDB(t, onDSN(sqtest.CreateApp)),
				queueDB: mysqltest.NewDBOn(t, srv, onDSN(sqtest.CreateQueue))}
			x.w = sqtest.World{App: x.appDB.SQL(t), Queue: x.queueDB.SQL(t)}
			seedBinlogWorld(t, x)
			return x, x.queueDB.DSN, func() {
				// The operator restarts the queue server with a filter that
				// leaves the queue schema out: the reader's stream breaks,
				// and every later term finds the filter.
				if err := srv.RestartWith(t.Context(), "--binlog-do-db=some_other_schema"); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"queue server gone", binlog.FailConnect, func(t *testing.T) (*wakeWorld, string, func()) {
			x := binlogWorld(t)
			px := mysqltest.NewProxy(t, x.queueDB.Server.Addr())
			return x, x.queueDB.DSNVia(px.Addr()), px.Cut
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x, queueDSN, stop := tt.world(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			m := startMendRun(t, ctx, "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", queueDSN)
			done, stderr, wait, scrape := m.done, m.stderr, m.wait, m.scrape
			store, err := storage.Open(ctx, x.mendDB.DSN, storage.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			name := binlog.LeaseName(x.queueDB.Name)
			wait("the position saved", func() bool { _, err := store.BinlogPositionGet(ctx, name); return err == nil })
			page := scrape()
			for _, want := range []string{`mend_binlog_reader_state{state="reader"} 1`, `mend_binlog_reader_state{state="retrying"} 0`,
				`mend_binlog_failures_total{reason="` + tt.reason + `"} 0`, `mend_binlog_reader_live{source="` + x.queueDB.Name + `"} 1`} {
				if !strings.Contains(page, want) {
					t.Errorf("reading: /metrics lacks %q", want)
				}
			}

			stop()
			failedRE := regexp.MustCompile(`mend_binlog_failures_total\{reason="` + tt.reason + `"\} [1-9]`)
			ageRE := regexp.MustCompile(`\nmend_binlog_position_age_seconds \S+\n`)
			wait("the reader retrying after "+tt.reason+" failures, its age exported", func() bool {
				page = scrape()
				return failedRE.MatchString(page) && strings.Contains(page, `mend_binlog_reader_state{state="retrying"} 1`) && ageRE.MatchString(page)
			})
			if strings.Contains(page, "\nmend_binlog_lag_seconds ") {
				t.Error("a retrying reader exports the lag of its last term")
			}

			// The position cannot move while every term fails; the test
			// moves its save back rather than wait.
			if _, err := x.mendDB.SQL(t).ExecContext(ctx, "UPDATE mend_binlog_positions SET updated_at = NOW(6) - INTERVAL 20 MINUTE WHERE name = ?", name); err != nil {
				t.Fatal(err)
			}
			src := regexp.QuoteMeta(x.queueDB.Name)
			var savedAge, termAge string
			wait("the old position in /metrics", func() bool {
				page = scrape()
				s := regexp.MustCompile(`\nmend_binlog_position_saved_age_seconds\{source="` + src + `"\} (\S+)\n`).FindStringSubmatch(page)
				tm := regexp.MustCompile(`\nmend_binlog_reader_term_seconds\{source="` + src + `"\} (\S+)\n`).FindStringSubmatch(page)
				if s == nil || tm == nil {
					return false
				}
				savedAge, termAge = s[1], tm[1]
				v, _ := strconv.ParseFloat(savedAge, 64)
				return v >= 1200
			})
			if fired, out := notReadingFires(t, promtool, x.queueDB.Name, savedAge, termAge); !fired {
				t.Errorf("MendBinlogNotReading does not fire on saved age %s, term %s:\n%s", savedAge, termAge, out)
			}
			if fired, _ := notReadingFires(t, promtool, x.queueDB.Name, "20", termAge); fired {
				t.Errorf("MendBinlogNotReading fires on a position saved 20 s ago (term %s)", termAge)
			}
			mustMatch(t, "status", opsMust(t, "status", "--dsn", x.mendDB.DSN).stdout,
				`(?m)^"`+src+`": not read for 20m\S*: .*MendBinlogNotReading pages now`)
			cancel()
			if code := <-done; code != exitOK {
				t.Errorf("mend run exit %d after the signal:\n%s", code, stderr.String())
			}
		})
	}
}

// notReadingFires evaluates the shipped MendBinlogNotReading with promtool
// on a replica in binlog mode that scrapes, for 15 minutes, the given
// saved age and term of source: whether it fires at the end, and what
// promtool said.
func notReadingFires(t *testing.T, promtool, source, savedAge, term string) (bool, string) {
	t.Helper()
	rf := readRules(t)
	r := rf.rule(t, "MendBinlogNotReading")
	delete(r, "annotations") // their text is the rule file's tests'
	rules, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "mend", "rules": []any{r}}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	q := strconv.Quote(source)
	test := fmt.Sprintf(`rule_files: [rules.yml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'mend_binlog_position_saved_age_seconds{instance="a",source=%[1]s}'
    values: '%[2]sx15'
  - series: 'mend_binlog_reader_term_seconds{instance="a",source=%[1]s}'
    values: '%[3]sx15'
  - series: 'mend_subscribe_mode{instance="a",mode="binlog"}'
    values: '1x15'
  alert_rule_test:
  - eval_time: 15m
    alertname: MendBinlogNotReading
    exp_alerts:
    - exp_labels: {severity: page, source: %[1]s}
`, q, savedAge, term)
	if err := os.WriteFile(filepath.Join(dir, "test.yml"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "test.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
}

package itest

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// cliResult is one run of the binary.
type cliResult struct {
	code           int
	stdout, stderr string
}

// cli runs the mend binary built for this test.
type cli struct {
	bin string
}

// buildMend compiles cmd/mend into a temporary directory.
func buildMend(t *testing.T) *cli {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mend")
	cmd := exec.Command(gobin, "build", "-o", bin, "github.com/mendq/mend/cmd/mend")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/mend: %v\n%s", err, out)
	}
	return &cli{bin: bin}
}

// baseEnv is a clean environment: no MEND_* variable leaks in from the
// developer's shell.
func baseEnv(extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}
	return append(env, extra...)
}

func (c *cli) runEnv(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = baseEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("run mend %v: %v", args, err)
	}
	return res
}

func (c *cli) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	return c.runEnv(t, nil, args...)
}

// mustRun runs the binary and fails the test unless it exits 0.
func (c *cli) mustRun(t *testing.T, args ...string) cliResult {
	t.Helper()
	res := c.run(t, args...)
	if res.code != 0 {
		t.Fatalf("mend %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	}
	return res
}

func hostMigrate(ctx context.Context, dsn string) error { return host.Migrate(ctx, dsn, "") }

// cliBundle is a database with both schemas, the host adapter on it, and
// the binary.
type cliBundle struct {
	*cli
	db   *mysqltest.DB
	host *host.DB
}

func TestCLI(t *testing.T) {
	t.Parallel()
	c := buildMend(t)
	ctx := context.Background()
	setup := func(t *testing.T) *cliBundle {
		t.Helper()
		db := mysqltest.NewDB(t, migrations.Up, hostMigrate)
		h, err := host.Open(ctx, db.DSN, "", host.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		if err := h.SeedBatch(ctx, "q", "batch-1", mend.BatchSpeculating, "r1", "r2"); err != nil {
			t.Fatal(err)
		}
		if err := h.SeedBatch(ctx, "q", "batch-2", mend.BatchCreated, "r3"); err != nil {
			t.Fatal(err)
		}
		return &cliBundle{cli: c, db: db, host: h}
	}
	// record creates a record by hand and returns its ID.
	record := func(t *testing.T, b *cliBundle, msgID, payload string) (string, string) {
		t.Helper()
		res := b.mustRun(t, "record", "--dsn", b.db.DSN, "--queue", "q", "--topic", "speculate_dlq", "--partition", "q",
			"--message-id", msgID, "--payload", payload, "--failure-count", "5", "--last-error", "boom", "--json")
		var out struct {
			Created bool `json:"created"`
			Record  struct {
				ID    string `json:"record_id"`
				State string `json:"state"`
			} `json:"record"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || !out.Created {
			t.Fatalf("record --json = %s (%v); want a created record", res.stdout, err)
		}
		return out.Record.ID, out.Record.State
	}

	t.Run("migrate up down up", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		version := func() (int, bool) {
			t.Helper()
			var v struct {
				Version int  `json:"version"`
				Latest  int  `json:"latest"`
				Dirty   bool `json:"dirty"`
			}
			res := c.mustRun(t, "migrate", "version", "--dsn", db.DSN, "--json")
			if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
				t.Fatalf("migrate version --json = %q: %v", res.stdout, err)
			}
			return v.Version, v.Dirty || v.Latest < 7
		}
		latest, _ := migrations.Mend.Latest()
		res := c.mustRun(t, "migrate", "up", "--dsn", db.DSN)
		if !strings.Contains(res.stdout, fmt.Sprintf("version %d of %d, clean", latest, latest)) {
			t.Fatalf("migrate up said %q", res.stdout)
		}
		if v, bad := version(); v != int(latest) || bad {
			t.Fatalf("after up: version %d (bad %v); want %d", v, bad, latest)
		}
		if res := c.run(t, "migrate", "down", "--dsn", db.DSN); res.code != 2 || !strings.Contains(res.stderr, "--yes") {
			t.Fatalf("migrate down without --yes = exit %d %q; want 2 naming --yes", res.code, res.stderr)
		}
		c.mustRun(t, "migrate", "down", "--yes", "--dsn", db.DSN)
		if v, _ := version(); v != 0 {
			t.Fatalf("after down: version %d; want 0", v)
		}
		c.mustRun(t, "migrate", "--dsn", db.DSN, "up") // flags before the action work too
		if v, bad := version(); v != int(latest) || bad {
			t.Fatalf("after up again: version %d (bad %v); want %d", v, bad, latest)
		}
		var views int
		if err := db.SQL(t).QueryRow("SELECT COUNT(*) FROM information_schema.views WHERE table_schema = DATABASE() AND table_name LIKE 'mend\\_%'").Scan(&views); err != nil || views != 3 {
			t.Fatalf("%d mend views (%v); want 3", views, err)
		}
	})

	t.Run("a dirty schema is refused with the fix, and force clears it", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		latest, _ := migrations.Mend.Latest()
		if _, err := db.SQL(t).Exec("UPDATE mend_schema_migrations SET dirty = 1"); err != nil {
			t.Fatal(err)
		}
		res := c.run(t, "migrate", "up", "--dsn", db.DSN)
		if res.code != 1 || !strings.Contains(res.stderr, "dirty") || !strings.Contains(res.stderr, "mend migrate force") {
			t.Fatalf("migrate up on a dirty schema = exit %d %q; want 1 naming the dirty state and mend migrate force", res.code, res.stderr)
		}
		if res := c.run(t, "migrate", "force", "--dsn", db.DSN); res.code != 2 {
			t.Fatalf("migrate force without a version = exit %d; want 2", res.code)
		}
		res = c.mustRun(t, "migrate", "force", fmt.Sprint(latest), "--dsn", db.DSN)
		if !strings.Contains(res.stdout, fmt.Sprintf("version %d of %d, clean", latest, latest)) {
			t.Fatalf("migrate force said %q", res.stdout)
		}
		c.mustRun(t, "migrate", "up", "--dsn", db.DSN)
	})

	t.Run("record then run once then status shows done", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, state := record(t, b, "m1", `{"batch_id":"batch-1"}`)
		if state != "pending" {
			t.Fatalf("new record is %s; want pending", state)
		}
		res := b.mustRun(t, "run", "--once", "--dsn", b.db.DSN, "--log-format", "json")
		if !strings.Contains(res.stderr, `"msg":"pass done"`) || !strings.Contains(res.stderr, `"component":"mend"`) {
			t.Fatalf("run --once logs = %s; want a JSON pass summary with component=mend", res.stderr)
		}
		res = b.mustRun(t, "status", "--dsn", b.db.DSN, "--json")
		var st []struct {
			Queue  string           `json:"queue"`
			Counts map[string]int64 `json:"counts"`
			Due    int64            `json:"due"`
			Lease  *struct {
				Epoch int64 `json:"epoch"`
				Held  bool  `json:"held"`
			} `json:"lease"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &st); err != nil {
			t.Fatalf("status --json = %q: %v", res.stdout, err)
		}
		if len(st) != 1 || st[0].Queue != "q" || st[0].Counts["done"] != 1 || st[0].Due != 0 ||
			st[0].Lease == nil || st[0].Lease.Epoch != 1 || st[0].Lease.Held {
			t.Fatalf("status = %s; want q with 1 done record and a released lease at epoch 1", res.stdout)
		}
		text := b.mustRun(t, "status", "--dsn", b.db.DSN).stdout
		if !strings.Contains(text, "QUEUE") || !regexp.MustCompile(`(?m)^q\s+0\s+0\s+0\s+0\s+1\s+0\s+-\s+free`).MatchString(text) {
			t.Fatalf("status table = %q; want q with one done record and a free lease", text)
		}
		msgs, err := b.host.Messages(context.Background(), "speculate", "q")
		if err != nil || len(msgs) != 1 || msgs[0].ID != "mend/wake/"+id+"/1" {
			t.Fatalf("wake-ups = %+v (%v); want one for record %s", msgs, err, id)
		}
	})

	t.Run("inspect json shows the full history", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, _ := record(t, b, "m1", `{"batch_id":"batch-1"}`)
		b.mustRun(t, "run", "--once", "--dsn", b.db.DSN)
		res := b.mustRun(t, "inspect", "--record", id, "--dsn", b.db.DSN, "--json")
		var out struct {
			Record struct {
				ID, Queue, State, MessageID, BatchID string
				Version                              int64
			} `json:"record"`
			Events []struct {
				Seq   int64           `json:"seq"`
				Kind  string          `json:"kind"`
				Epoch int64           `json:"epoch"`
				Data  json.RawMessage `json:"data"`
			} `json:"events"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
			t.Fatalf("inspect --json = %q: %v", res.stdout, err)
		}
		var kinds []string
		for i, e := range out.Events {
			if e.Seq != int64(i+1) {
				t.Errorf("event %d has seq %d", i, e.Seq)
			}
			kinds = append(kinds, e.Kind)
		}
		if strings.Join(kinds, ",") != "created,settled,woken" || out.Record.State != "done" || out.Record.Version != 3 {
			t.Fatalf("inspect = record %+v events %v; want done at version 3 after created,settled,woken", out.Record, kinds)
		}
		if out.Events[0].Epoch != 0 || out.Events[2].Epoch != 1 || !strings.Contains(string(out.Events[2].Data), "batch-2") {
			t.Fatalf("events = %+v; want intake at epoch 0 and the wake-up of batch-2 at epoch 1", out.Events)
		}
		// The same record found by its source message, as text.
		text := b.mustRun(t, "inspect", "--dsn", b.db.DSN, "--queue", "q", "--topic", "speculate_dlq", "--partition", "q", "--message-id", "m1").stdout
		if !strings.Contains(text, "record "+id) || !strings.Contains(text, "woken") {
			t.Fatalf("inspect by message = %q; want record %s and its woken event", text, id)
		}
		list := b.mustRun(t, "inspect", "--dsn", b.db.DSN, "--queue", "q").stdout
		if !strings.Contains(list, id) || !strings.Contains(list, "done") {
			t.Fatalf("inspect --queue = %q; want the record listed as done", list)
		}
	})

	t.Run("retry puts a parked record back", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, state := record(t, b, "bad", `not json`)
		if state != "parked" {
			t.Fatalf("undecodable record is %s; want parked", state)
		}
		res := b.mustRun(t, "retry", "--dsn", b.db.DSN, "--record", id, "--reason", "payload fixed upstream")
		if !strings.Contains(res.stdout, "pending again") {
			t.Fatalf("retry said %q", res.stdout)
		}
		res = b.mustRun(t, "inspect", "--dsn", b.db.DSN, "--record", id, "--json")
		if !strings.Contains(res.stdout, `"kind": "retried"`) || !strings.Contains(res.stdout, `"state": "pending"`) {
			t.Fatalf("after retry, inspect = %s; want a retried event and state pending", res.stdout)
		}
		again := b.run(t, "retry", "--dsn", b.db.DSN, "--record", id)
		if again.code != 1 || !strings.Contains(again.stderr, "not parked") || strings.Count(again.stderr, "\n") != 1 {
			t.Fatalf("second retry = exit %d %q; want 1 and one line saying it is not parked", again.code, again.stderr)
		}
	})

	t.Run("doctor passes on a good setup", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := b.run(t, "doctor", "--dsn", b.db.DSN)
		if res.code != 0 || !strings.Contains(res.stdout, "no problems found") {
			t.Fatalf("doctor = exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		for _, name := range []string{"server", "schema", "sql_mode", "identity columns", "time zone", "lock wait timeout", "clientFoundRows"} {
			if !regexp.MustCompile(`(?m)^\s+ok\s+` + regexp.QuoteMeta(name)).MatchString(res.stdout) {
				t.Errorf("doctor output has no ok line for %s:\n%s", name, res.stdout)
			}
		}
	})

	t.Run("doctor fails on a bad setup", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cases := []struct {
			name, dsn, want string
		}{
			{"non-strict sql_mode", b.db.DSN + "&sql_mode=%27NO_ENGINE_SUBSTITUTION%27", "sql_mode"},
			{"lock wait timeout over the lease TTL", b.db.DSN + "&innodb_lock_wait_timeout=60", "lock wait timeout"},
			{"clientFoundRows", b.db.DSN + "&clientFoundRows=true", "clientFoundRows"},
		}
		for _, tc := range cases {
			res := b.run(t, "doctor", "--dsn", tc.dsn)
			if res.code != 1 || !regexp.MustCompile(`(?m)^\s+FAIL\s+`+regexp.QuoteMeta(tc.want)).MatchString(res.stdout) ||
				!strings.Contains(res.stdout, "fix:") || !strings.Contains(res.stderr, "problem") {
				t.Errorf("%s: doctor = exit %d\n%s%s; want exit 1 with a FAIL %s line and a fix", tc.name, res.code, res.stdout, res.stderr, tc.want)
			}
		}
		// A dirty schema.
		if _, err := b.db.SQL(t).Exec("UPDATE mend_schema_migrations SET dirty = 1"); err != nil {
			t.Fatal(err)
		}
		res := b.run(t, "doctor", "--dsn", b.db.DSN, "--json")
		var out struct {
			Checks []struct{ Name, Status, Detail string } `json:"checks"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || res.code != 1 {
			t.Fatalf("doctor --json on a dirty schema = exit %d %q (%v)", res.code, res.stdout, err)
		}
		found := false
		for _, ch := range out.Checks {
			found = found || (ch.Name == "schema" && ch.Status == "FAIL" && strings.Contains(ch.Detail, "DIRTY"))
		}
		if !found {
			t.Fatalf("doctor --json = %s; want a failed schema check naming DIRTY", res.stdout)
		}
	})

	t.Run("bad usage exits 2 with one line", func(t *testing.T) {
		t.Parallel()
		dsn := "root@tcp(127.0.0.1:1)/mend"
		cases := []struct {
			args []string
			env  []string
			want string
		}{
			{[]string{"bogus"}, nil, "unknown command"},
			{[]string{"status", "--bogus"}, nil, "flag provided but not defined"},
			{[]string{"status"}, nil, "--dsn is required"},
			{[]string{"status", "--dsn", "root@tcp(127.0.0.1:1)/"}, nil, "names no database"},
			{[]string{"status", "--dsn", dsn, "extra"}, nil, "unexpected argument"},
			{[]string{"migrate", "sideways", "--dsn", dsn}, nil, "unknown action"},
			{[]string{"inspect", "--dsn", dsn}, nil, "name what to inspect"},
			{[]string{"retry", "--dsn", dsn, "--record", "zz"}, nil, "record_id"},
			{[]string{"record", "--dsn", dsn, "--queue", "q"}, nil, "--topic is required"},
			{[]string{"run", "--dsn", dsn, "--interval", "1ms"}, nil, "--interval"},
			{[]string{"run", "--dsn", dsn, "--log-format", "xml"}, nil, "--log-format"},
			{[]string{"run", "--dsn", dsn + "?clientFoundRows=true"}, nil, "clientFoundRows"},
			{[]string{"run"}, []string{"MEND_DSN=" + dsn, "MEND_CONCURRENCY=many"}, "MEND_CONCURRENCY"},
		}
		for _, tc := range cases {
			res := c.runEnv(t, tc.env, tc.args...)
			lines := strings.Split(strings.TrimSuffix(res.stderr, "\n"), "\n")
			if res.code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "mend") || !strings.Contains(lines[0], tc.want) {
				t.Errorf("mend %v = exit %d, stderr %q; want exit 2 and one line containing %q", tc.args, res.code, res.stderr, tc.want)
			}
		}
		// The flag wins over its environment twin.
		res := c.runEnv(t, []string{"MEND_DSN=" + dsn}, "status", "--dsn", "root@tcp(127.0.0.1:1)/")
		if res.code != 2 || !strings.Contains(res.stderr, "names no database") {
			t.Errorf("--dsn over MEND_DSN: exit %d %q; want the flag's DSN to be used", res.code, res.stderr)
		}
	})

	t.Run("least-privilege users, and no log line contains the DSN password", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const password = "S3cret-pa55word"
		suffix := b.db.Name[len(b.db.Name)-8:]
		root := b.db.SQL(t)
		// The grants of docs/operations.md, on the test's database, which
		// holds both mend's tables and the reference host's.
		users := map[string][]string{
			"mend_ddl_" + suffix: {"CREATE, ALTER, DROP, INDEX, CREATE VIEW, SHOW VIEW, SELECT, INSERT, UPDATE, DELETE ON %s.*"},
			"mend_run_" + suffix: {
				"SELECT, INSERT, UPDATE, DELETE ON %s.mend_records",
				"SELECT, INSERT, DELETE ON %s.mend_events",
				"SELECT, INSERT, UPDATE ON %s.mend_leases",
				"SELECT, INSERT, UPDATE ON %s.mend_lease_history",
				"SELECT ON %s.mend_schema_migrations",
				"SELECT, UPDATE ON %s.sq_batches",
				"SELECT, INSERT, DELETE ON %s.sq_batch_membership",
				"SELECT, UPDATE ON %s.sq_requests",
				"INSERT, UPDATE ON %s.sq_messages",
			},
		}
		dsnFor := map[string]string{}
		for user, grants := range users {
			if _, err := root.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'"); err != nil {
				t.Skipf("cannot create a user on this server: %v", err)
			}
			t.Cleanup(func() { _, _ = root.Exec("DROP USER '" + user + "'@'%'") })
			for _, g := range grants {
				if _, err := root.Exec("GRANT " + fmt.Sprintf(g, b.db.Name) + " TO '" + user + "'@'%'"); err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := mysql.ParseDSN(b.db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			cfg.User, cfg.Passwd = user, password
			dsnFor[user] = cfg.FormatDSN()
		}
		ddl, runner := dsnFor["mend_ddl_"+suffix], dsnFor["mend_run_"+suffix]
		for _, args := range [][]string{{"migrate", "down", "--yes", "--dsn", ddl}, {"migrate", "up", "--dsn", ddl}} {
			if res := b.run(t, args...); res.code != 0 || strings.Contains(res.stdout+res.stderr, password) {
				t.Fatalf("mend %v as the DDL user = exit %d\n%s%s", args[:2], res.code, res.stdout, res.stderr)
			}
		}
		record(t, b, "m1", `{"batch_id":"batch-1"}`)
		// A failing wake-up makes the planner log its error too.
		if err := b.host.FailNextPublish(context.Background(), "speculate", "q"); err != nil {
			t.Fatal(err)
		}
		for _, format := range []string{"text", "json"} {
			res := b.run(t, "run", "--once", "--dsn", runner, "--log-format", format, "--log-level", "debug")
			if res.code != 0 || !strings.Contains(res.stderr, "pass done") {
				t.Fatalf("run --once (%s) as the runtime user = exit %d\n%s", format, res.code, res.stderr)
			}
			if strings.Contains(res.stdout+res.stderr, password) {
				t.Fatalf("the password appears in the %s output:\n%s%s", format, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stderr, "mend_run_"+suffix) {
				t.Fatalf("the %s log does not name the user (a redacted DSN is expected):\n%s", format, res.stderr)
			}
		}
		// The first run settled the batch and failed the wake-up; the re-send
		// waits for its backoff.
		if res := b.mustRun(t, "status", "--dsn", runner, "--json"); !strings.Contains(res.stdout, `"settled": 1`) && !strings.Contains(res.stdout, `"done": 1`) {
			t.Fatalf("status after the runs = %s; want the record settled or done", res.stdout)
		}
		if res := b.run(t, "doctor", "--dsn", runner); res.code != 0 {
			t.Fatalf("doctor as the runtime user = exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		// A wrong password fails with one line that names neither password.
		cfg, _ := mysql.ParseDSN(runner)
		cfg.Passwd = "Wr0ng-" + password
		res := b.run(t, "run", "--once", "--dsn", cfg.FormatDSN())
		if res.code != 1 || strings.Contains(res.stderr, "Wr0ng-") || strings.Contains(res.stderr, password) {
			t.Fatalf("wrong password: exit %d, stderr %q; want exit 1 without the password", res.code, res.stderr)
		}
	})

	t.Run("the queries of docs sql.md run", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, _ := record(t, b, "speculate/batch-1/1", `{"batch_id":"batch-1"}`)
		record(t, b, "parked", `not json`)
		b.mustRun(t, "run", "--once", "--dsn", b.db.DSN)
		doc, err := os.ReadFile("../docs/sql.md")
		if err != nil {
			t.Fatal(err)
		}
		blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
		conn := b.db.SQL(t)
		n := 0
		for _, blk := range blocks {
			for _, stmt := range strings.Split(blk[1], ";") {
				stmt = strings.TrimSpace(regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(stmt, ""))
				if stmt == "" {
					continue
				}
				stmt = strings.ReplaceAll(stmt, "monorepo/main", "q")
				stmt = strings.ReplaceAll(stmt, "3e7a90804741ccea825d8fc381a4a1af", id)
				rows, err := conn.Query(stmt)
				if err != nil {
					t.Errorf("docs/sql.md query fails: %v\n%s", err, stmt)
					continue
				}
				got := 0
				for rows.Next() {
					got++
				}
				if err := errors.Join(rows.Err(), rows.Close()); err != nil {
					t.Errorf("docs/sql.md query fails: %v\n%s", err, stmt)
				}
				if strings.Contains(stmt, "message_id = 'speculate/batch-1/1'") && got != 3 {
					t.Errorf("history of the message has %d rows; want 3 (created, settled, woken)\n%s", got, stmt)
				}
				n++
			}
		}
		if n < 8 {
			t.Fatalf("ran %d queries from docs/sql.md; want all of them (at least 8)", n)
		}
	})

	t.Run("demo repairs the stuck queue and cleans up", func(t *testing.T) {
		t.Parallel()
		srv := mysqltest.SharedServer(t)
		res := c.run(t, "demo", "--dsn", srv.RootDSN())
		if res.code != 0 {
			t.Fatalf("demo = exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		for _, want := range []string{"What breaks", "wake_failed", "epoch 1", "woken", "epoch 2", "OK: batch-2 was woken by message \"mend/wake/"} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("demo output lacks %q:\n%s", want, res.stdout)
			}
		}
		name := regexp.MustCompile(`mend_demo_[0-9a-f]+`).FindString(res.stdout + res.stderr)
		cfg, err := mysql.ParseDSN(srv.RootDSN())
		if err != nil {
			t.Fatal(err)
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE 'mend\\_demo\\_%'").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d demo databases left behind (%v) %s", n, err, name)
		}
	})

	t.Run("run serves metrics and stops cleanly on SIGTERM", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		record(t, b, "m1", `{"batch_id":"batch-1"}`)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, b.bin, "run", "--dsn", b.db.DSN, "--interval", "50ms", "--metrics-addr", "127.0.0.1:0",
			"--holder", "sigterm-test", "--log-format", "json")
		cmd.Env = baseEnv()
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		var all []string
		waitLine := func(substr string) map[string]any {
			t.Helper()
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("mend run ended before logging %q:\n%s", substr, strings.Join(all, "\n"))
					}
					all = append(all, l)
					if strings.Contains(l, substr) {
						var m map[string]any
						_ = json.Unmarshal([]byte(l), &m)
						return m
					}
				case <-ctx.Done():
					t.Fatalf("no log line %q in time:\n%s", substr, strings.Join(all, "\n"))
				}
			}
		}
		addr, _ := waitLine("serving metrics")["addr"].(string)
		get := func(path string) (int, string) {
			t.Helper()
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		if code, _ := get("/healthz"); code != 200 {
			t.Fatalf("/healthz = %d", code)
		}
		if code, body := get("/readyz"); code != 200 {
			t.Fatalf("/readyz = %d %s", code, body)
		}
		waitLine("queue woken")
		_, body := get("/metrics")
		for _, want := range []string{
			`mend_records{queue="q",state="done"} 1`,
			`mend_oldest_due_seconds{queue="q"} 0`,
			`mend_wakeups_total{queue="q",result="sent"} 1`,
			`mend_settles_total{divergent="false",outcome="failed"} 1`,
			`mend_lease_acquisitions_total{queue="q"} 1`,
			`mend_status_up 1`,
			`mend_planner_run_duration_seconds_count`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitLine("stopped cleanly")
		for range lines {
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("mend run after SIGTERM: %v (want exit 0)", err)
		}
		var live int
		if err := b.db.SQL(t).QueryRow("SELECT COUNT(*) FROM mend_lease_status WHERE status = 'held'").Scan(&live); err != nil || live != 0 {
			t.Fatalf("%d leases still held after SIGTERM (%v); want all released", live, err)
		}
	})
}

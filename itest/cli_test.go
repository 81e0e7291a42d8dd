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
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
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

// cliBundle is mend's database, the submit queue's real-shaped tables in a
// database of their own (application and queue tables together), and the
// binary.
type cliBundle struct {
	*cli
	db     *mysqltest.DB // mend's
	hostDB *mysqltest.DB // the submit queue's
	sq     sqtest.World
}

// hostFlags points a command at the submit queue's databases.
func (b *cliBundle) hostFlags() []string {
	return []string{"--host-dsn", b.hostDB.DSN, "--queue-dsn", b.hostDB.DSN}
}

// runArgs is `mend run` against the bundle's databases, then extra.
func (b *cliBundle) runArgs(extra ...string) []string {
	return append(append([]string{"run", "--dsn", b.db.DSN}, b.hostFlags()...), extra...)
}

// cliPayload is the payload of the speculate_dlq row of a batch, as the
// intake in the binary reads it (through the same translation as every
// other itest delivery; see deliveryFromRow).
func cliPayload(msgID, batch string) string {
	return string(deliveryFromRow(sqtest.Message{Topic: "speculate_dlq", PartitionKey: "q", ID: msgID,
		Payload: []byte(batchMsg("q", batch)), OriginalTopic: "speculate"}).Payload)
}

const (
	cliBatch1 = "q/batch/1"
	cliBatch2 = "q/batch/2"
)

func TestCLI(t *testing.T) {
	t.Parallel()
	c := buildMend(t)
	ctx := context.Background()
	setup := func(t *testing.T) *cliBundle {
		t.Helper()
		b := &cliBundle{cli: c, db: mysqltest.NewDB(t, migrations.Up), hostDB: mysqltest.NewHostDB(t, sqtest.Apply)}
		s := b.hostDB.SQL(t)
		b.sq = sqtest.World{App: s, Queue: s}
		if err := b.sq.SeedBatch(ctx, "q", cliBatch1, string(mend.BatchSpeculating), "q/1", "q/2"); err != nil {
			t.Fatal(err)
		}
		if err := b.sq.SeedBatch(ctx, "q", cliBatch2, string(mend.BatchCreated), "q/3"); err != nil {
			t.Fatal(err)
		}
		// The host's planner reads speculate: run checks that it does.
		if err := b.sq.Join(ctx, "orchestrator", "speculate", "q"); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// record creates a record by hand for a dead letter of batch and
	// returns its ID.
	record := func(t *testing.T, b *cliBundle, msgID, batch string) (string, string) {
		t.Helper()
		payload := "not json"
		if batch != "" {
			payload = cliPayload(msgID, batch)
		}
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
		mysqltest.SkipVitess(t, "golang-migrate's down step deletes its version row with DELETE FROM mend_schema_migrations LIMIT 1, which vtgate refuses on a reference table (unsupported opcode: Reference), so mend migrate down does not work through vtgate")
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
		if err := db.SQL(t).QueryRow("SELECT COUNT(*) FROM information_schema.views WHERE table_schema = DATABASE() AND table_name LIKE 'mend\\_%'").Scan(&views); err != nil || views != 4 {
			t.Fatalf("%d mend views (%v); want 4", views, err)
		}
	})

	t.Run("a dirty schema is refused with the fix, and force clears it", func(t *testing.T) {
		t.Parallel()
		mysqltest.SkipVitess(t, "the test dirties the schema with UPDATE mend_schema_migrations, and mend migrate force rewrites that row: vtgate refuses writes to a reference table (VT09001: no primary vindex)")
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
		id, state := record(t, b, cliBatch1, cliBatch1)
		if state != "pending" {
			t.Fatalf("new record is %s; want pending", state)
		}
		res := b.mustRun(t, b.runArgs("--once", "--log-format", "json")...)
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
		if !strings.Contains(text, "QUEUE") || !regexp.MustCompile(`(?m)^q\s+0\s+0\s+0\s+0\s+1\s+0\s+-\s+-\s+free`).MatchString(text) {
			t.Fatalf("status table = %q; want q with one done record, nothing due or open, and a free lease", text)
		}
		// Read as the real speculate consumer would; created and settled
		// make the wake-up's record version 2.
		rid, err := mend.ParseRecordID(id)
		if err != nil {
			t.Fatal(err)
		}
		ups, err := b.sq.ConsumeSpeculate(ctx, "q", true)
		if err != nil || len(ups) != 1 || ups[0].ID != "mend/wake/"+rid.String()+"/v2" || ups[0].Batch.ID != cliBatch2 {
			t.Fatalf("wake-ups = %+v (%v); want one for record %s naming %s", ups, err, id, cliBatch2)
		}
	})

	t.Run("inspect json shows the full history", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, _ := record(t, b, "m1", cliBatch1)
		b.mustRun(t, b.runArgs("--once")...)
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
		if out.Events[0].Epoch != 0 || out.Events[2].Epoch != 1 || !strings.Contains(string(out.Events[2].Data), cliBatch2) {
			t.Fatalf("events = %+v; want intake at epoch 0 and the wake-up of q/batch/2 at epoch 1", out.Events)
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

	t.Run("an undecodable parked record is refused by retry and closed by resolve", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, state := record(t, b, "bad", "")
		if state != "parked" {
			t.Fatalf("undecodable record is %s; want parked", state)
		}
		// A retry could only fail again: it is refused, in one line.
		res := b.run(t, "retry", "--dsn", b.db.DSN, "--record", id, "--reason", "payload fixed upstream")
		if res.code != 1 || !strings.Contains(res.stderr, "names no batch") || strings.Count(res.stderr, "\n") != 1 {
			t.Fatalf("retry of an undecodable record = exit %d %q; want 1 and one line saying it names no batch", res.code, res.stderr)
		}
		res = b.mustRun(t, "resolve", "--dsn", b.db.DSN, "--record", id, "--reason", "replayed by hand", "--actor", "alice")
		if !strings.Contains(res.stdout, "is resolved") {
			t.Fatalf("resolve said %q", res.stdout)
		}
		res = b.mustRun(t, "inspect", "--dsn", b.db.DSN, "--record", id, "--json")
		if !strings.Contains(res.stdout, `"kind": "resolved"`) || !strings.Contains(res.stdout, `"state": "done"`) ||
			!strings.Contains(res.stdout, "alice") || !strings.Contains(res.stdout, "replayed by hand") {
			t.Fatalf("after resolve, inspect = %s; want a resolved event by alice with the reason, and state done", res.stdout)
		}
		again := b.run(t, "resolve", "--dsn", b.db.DSN, "--record", id, "--reason", "twice")
		if again.code != 1 || strings.Count(again.stderr, "\n") != 1 {
			t.Fatalf("second resolve = exit %d %q; want 1 and one line", again.code, again.stderr)
		}
	})

	t.Run("doctor passes on a good setup", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := b.run(t, append([]string{"doctor", "--dsn", b.db.DSN}, b.hostFlags()...)...)
		if res.code != 0 || !strings.Contains(res.stdout, "no problems found") {
			t.Fatalf("doctor = exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		for _, name := range []string{"server", "topology", "schema", "sql_mode", "identity columns", "time zone", "lock wait timeout", "clientFoundRows"} {
			if !regexp.MustCompile(`(?m)^\s+ok\s+` + regexp.QuoteMeta(name)).MatchString(res.stdout) {
				t.Errorf("doctor output has no ok line for %s:\n%s", name, res.stdout)
			}
		}
	})

	t.Run("doctor fails on a bad setup", func(t *testing.T) {
		t.Parallel()
		mysqltest.SkipVitess(t, "the test dirties the schema with UPDATE mend_schema_migrations, a write vtgate refuses on a reference table (VT09001: no primary vindex)")
		b := setup(t)
		cases := []struct {
			name, dsn, want string
		}{
			// mend sets its sessions itself: a DSN that would change them is
			// refused, naming the parameter.
			{"non-strict sql_mode in the DSN", b.db.DSN + "&sql_mode=%27NO_ENGINE_SUBSTITUTION%27", "dsn parameters"},
			{"a lock wait in the DSN", b.db.DSN + "&innodb_lock_wait_timeout=60", "dsn parameters"},
			{"clientFoundRows", b.db.DSN + "&clientFoundRows=true", "clientFoundRows"},
		}
		for _, tc := range cases {
			res := b.run(t, "doctor", "--dsn", tc.dsn)
			if res.code != 1 || !regexp.MustCompile(`(?m)^\s+FAIL\s+`+regexp.QuoteMeta(tc.want)).MatchString(res.stdout) ||
				!strings.Contains(res.stdout, "fix:") || !strings.Contains(res.stderr, "problem") {
				t.Errorf("%s: doctor = exit %d\n%s%s; want exit 1 with a FAIL %s line and a fix", tc.name, res.code, res.stdout, res.stderr, tc.want)
			}
		}
		// A dirty schema this binary cannot trust: the binary's oldest
		// schema marked dirty, so the version before it, out of range, may
		// be all there is. (Dirty at its latest, an expand step, it keeps
		// working with a warning: a migrate up of it may be running.)
		if _, err := b.db.SQL(t).Exec("UPDATE mend_schema_migrations SET version = ?, dirty = 1", storage.SchemaOldest); err != nil {
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
			{[]string{"status", "--bogus"}, nil, "unknown flag: --bogus"},
			{[]string{"status"}, nil, "--dsn is required"},
			{[]string{"status", "--dsn", "root@tcp(127.0.0.1:1)/"}, nil, "names no database"},
			{[]string{"status", "--dsn", dsn, "extra"}, nil, "unexpected argument"},
			{[]string{"migrate", "sideways", "--dsn", dsn}, nil, "unknown action"},
			{[]string{"inspect", "--dsn", dsn}, nil, "name what to inspect"},
			{[]string{"retry", "--dsn", dsn, "--record", "zz"}, nil, "record_id"},
			{[]string{"record", "--dsn", dsn, "--queue", "q"}, nil, "--topic is required"},
			{[]string{"run", "--dsn", dsn, "--host-dsn=same", "--interval", "1ms"}, nil, "--interval"},
			{[]string{"run", "--dsn", dsn, "--log-format", "xml"}, nil, "--log-format"},
			{[]string{"run", "--dsn", dsn + "?clientFoundRows=true"}, nil, "clientFoundRows"},
			{[]string{"run"}, []string{"MEND_DSN=" + dsn}, "--host-dsn is required"},
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
		mysqltest.SkipVitess(t, "accounts and GRANTs are the MySQL server's: vtgate authenticates clients on its own (vttestserver accepts any user) and the tablets run under their own accounts, so the grants under test are never checked through vtgate")
		b := setup(t)
		const password = "S3cret-pa55word"
		suffix := b.db.Name[len(b.db.Name)-8:]
		root := b.db.SQL(t)
		ddlUser, runUser := "mend_ddl_"+suffix, "mend_run_"+suffix
		// The grants of docs/operations.md: mend's tables in mend's
		// database, the submit queue's real tables in the host's. (The full
		// repair as these users, wake-up row included, is
		// cmd/mend's TestLeastPrivilegeUsersRepairFully.)
		grants := []struct{ user, grant, db string }{
			{ddlUser, "CREATE, ALTER, DROP, INDEX, CREATE VIEW, SHOW VIEW, SELECT, INSERT, UPDATE, DELETE ON %s.*", b.db.Name},
			{runUser, "SELECT, INSERT, UPDATE, DELETE ON %s.mend_records", b.db.Name},
			{runUser, "SELECT, INSERT, DELETE ON %s.mend_events", b.db.Name},
			{runUser, "SELECT, INSERT, UPDATE ON %s.mend_leases", b.db.Name},
			{runUser, "SELECT, INSERT, UPDATE ON %s.mend_lease_history", b.db.Name},
			{runUser, "SELECT ON %s.mend_schema_migrations", b.db.Name},
			{runUser, "SELECT, UPDATE ON %s.batch", b.hostDB.Name},
			{runUser, "SELECT, INSERT, DELETE ON %s.queue_batch_state", b.hostDB.Name},
			{runUser, "SELECT, UPDATE ON %s.request", b.hostDB.Name},
			{runUser, "SELECT ON %s.build", b.hostDB.Name},
			// queue_messages needs SELECT, INSERT, UPDATE (a publish is INSERT
			// ... ON DUPLICATE KEY UPDATE topic = topic); INSERT and UPDATE
			// are granted below, after the runs, so that the runs fail a
			// publish and say so.
			{runUser, "SELECT ON %s.queue_messages", b.hostDB.Name},
			// The subscription, as docs/operations.md grants it (no DELETE).
			{runUser, "SELECT, INSERT, UPDATE ON %s.queue_offsets", b.hostDB.Name},
			// The wake topic check on a quiet host (issue 42).
			{runUser, "SELECT ON %s.queue_subscriber_heartbeats", b.hostDB.Name},
		}
		for _, user := range []string{ddlUser, runUser} {
			if _, err := root.Exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'"); err != nil {
				t.Skipf("cannot create a user on this server: %v", err)
			}
			t.Cleanup(func() { _, _ = root.Exec("DROP USER '" + user + "'@'%'") })
		}
		grant := func(user, g, db string) {
			t.Helper()
			if _, err := root.Exec("GRANT " + fmt.Sprintf(g, db) + " TO '" + user + "'@'%'"); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range grants {
			grant(g.user, g.grant, g.db)
		}
		dsnAs := func(user, dsn string) string {
			t.Helper()
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.User, cfg.Passwd = user, password
			return cfg.FormatDSN()
		}
		ddl, runner, runnerHost := dsnAs(ddlUser, b.db.DSN), dsnAs(runUser, b.db.DSN), dsnAs(runUser, b.hostDB.DSN)
		// The schema is the DDL user's from the start, as docs/operations.md
		// says: on MySQL 8.0.16+ views that root created (setup migrated as
		// root) could not be dropped by a user without SYSTEM_USER (1227).
		if err := migrations.Down(ctx, b.db.DSN); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"migrate", "up", "--dsn", ddl}, {"migrate", "down", "--yes", "--dsn", ddl}, {"migrate", "up", "--dsn", ddl}} {
			if res := b.run(t, args...); res.code != 0 || strings.Contains(res.stdout+res.stderr, password) {
				t.Fatalf("mend %v as the DDL user = exit %d\n%s%s", args[:2], res.code, res.stdout, res.stderr)
			}
		}
		record(t, b, "m1", cliBatch1)
		for _, format := range []string{"text", "json"} {
			res := b.run(t, "run", "--once", "--dsn", runner, "--host-dsn", runnerHost, "--queue-dsn", runnerHost,
				"--log-format", format, "--log-level", "debug")
			// Without INSERT on queue_messages yet, run checks itself and
			// refuses to start, naming the grant (it used to start and fail
			// every repair's log publish).
			if res.code != 1 || !strings.Contains(res.stderr, "refusing to start") || !strings.Contains(res.stderr, "queue_messages") || strings.Contains(res.stderr, "pass done") {
				t.Fatalf("run --once (%s) as the runtime user without INSERT on queue_messages = exit %d\n%s; want 1 naming the grant, no pass", format, res.code, res.stderr)
			}
			if strings.Contains(res.stdout+res.stderr, password) {
				t.Fatalf("the password appears in the %s output:\n%s%s", format, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stderr, runUser) {
				t.Fatalf("the %s log does not name the user (a redacted DSN is expected):\n%s", format, res.stderr)
			}
		}
		grant(runUser, "INSERT, UPDATE ON %s.queue_messages", b.hostDB.Name)
		if res := b.run(t, "doctor", "--dsn", runner, "--host-dsn", runnerHost); res.code != 0 {
			t.Fatalf("doctor as the runtime user = exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if res := b.run(t, "run", "--once", "--dsn", runner, "--host-dsn", runnerHost, "--queue-dsn", runnerHost); res.code != 0 || !strings.Contains(res.stderr, "pass done") {
			t.Fatalf("run --once as the fully granted runtime user = exit %d\n%s", res.code, res.stderr)
		}
		if res := b.mustRun(t, "status", "--dsn", runner, "--json"); !strings.Contains(res.stdout, `"q"`) {
			t.Fatalf("status after the runs = %s; want queue q listed", res.stdout)
		}
		// A wrong password fails with one line that names neither password.
		cfg, _ := mysql.ParseDSN(runner)
		cfg.Passwd = "Wr0ng-" + password
		res := b.run(t, "run", "--once", "--dsn", cfg.FormatDSN(), "--host-dsn", runnerHost, "--queue-dsn", runnerHost)
		if res.code != 1 || strings.Contains(res.stderr, "Wr0ng-") || strings.Contains(res.stderr, password) {
			t.Fatalf("wrong password: exit %d, stderr %q; want exit 1 without the password", res.code, res.stderr)
		}
	})

	t.Run("the queries of docs sql.md run", func(t *testing.T) {
		t.Parallel()
		mysqltest.SkipVitess(t, "the queries read mend's views, which vtgate does not route in a sharded keyspace (Vitess views are experimental, --enable-views), and one uses a window function, which vtgate runs on a single shard only (VT12001)")
		b := setup(t)
		id, _ := record(t, b, "speculate/batch-1/1", cliBatch1)
		record(t, b, "parked", "")
		b.mustRun(t, b.runArgs("--once")...)
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
		// What issue 9 asks of the demo: the timeline with the failed and the
		// successful wake-up, a final OK line, and the wake-up row shown as the
		// real consumer reads it.
		for _, want := range []string{"wake_failed", "woken", "mend/wake/"} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("demo output lacks %q:\n%s", want, res.stdout)
			}
		}
		if !regexp.MustCompile(`(?m)^OK: .*woken`).MatchString(res.stdout) {
			t.Errorf("demo output has no final OK line saying the batch was woken:\n%s", res.stdout)
		}
		checkDemoWakeUp(t, res.stdout)
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
		mysqltest.SkipVitess(t, "the test reads mend_lease_status, one of mend's views, which vtgate does not route in a sharded keyspace (Vitess views are experimental, --enable-views)")
		b := setup(t)
		record(t, b, "m1", cliBatch1)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, b.bin, b.runArgs("--interval", "50ms", "--metrics-addr", "127.0.0.1:0",
			"--holder", "sigterm-test", "--log-format", "json")...)
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
		// Nothing is open any more, so the oldest-open gauge has no series
		// for q (0 would read as "an open record just now"), and nothing is
		// overdue.
		if strings.Contains(body, `mend_oldest_open_seconds{queue="q"}`) {
			t.Errorf("/metrics has an oldest-open series for q with nothing open")
		}
		if !strings.Contains(body, `mend_oldest_due_seconds{queue="q"} 0`) || !strings.Contains(body, "mend_ready 1") {
			t.Errorf("/metrics lacks mend_oldest_due_seconds{queue=\"q\"} 0 or mend_ready 1")
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

// checkDemoWakeUp finds the wake-up the demo prints and reads it with the
// consumer-side decoders: at least one JSON object must be a strict
// {"id","queue"} BatchID payload, none may be the retired {"batch_id"}
// payload, and any metadata object (it carries mend.epoch) must be a flat
// string map.
func checkDemoWakeUp(t *testing.T, out string) {
	t.Helper()
	payloads := 0
	for i := range len(out) {
		if out[i] != '{' {
			continue
		}
		var raw json.RawMessage
		if err := json.NewDecoder(strings.NewReader(out[i:])).Decode(&raw); err != nil {
			continue
		}
		obj, err := sqtest.Object(raw)
		if err != nil {
			continue
		}
		if _, old := obj["batch_id"]; old {
			t.Errorf("the demo shows the retired {\"batch_id\"} payload: %s", raw)
		}
		if _, meta := obj[host.MetaEpoch]; meta {
			if _, err := sqtest.Metadata(raw); err != nil {
				t.Errorf("the demo's wake-up metadata %s: %v", raw, err)
			}
		}
		if b, err := sqtest.DecodeBatchID(raw); err == nil && b.ID != "" && b.Queue != "" {
			payloads++
		}
	}
	if payloads == 0 {
		t.Errorf("the demo shows no wake-up payload the real speculate consumer can read ({\"id\",\"queue\"}):\n%s", out)
	}
}

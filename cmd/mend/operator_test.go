package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// opsResult is one run of the command entry point.
type opsResult struct {
	code           int
	stdout, stderr string
}

// opsRun runs the binary's entry point in-process with a clean environment
// (plus env, KEY=VALUE).
func opsRun(t *testing.T, env []string, args ...string) opsResult {
	t.Helper()
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, &out, &errOut, func(k string) string { return vars[k] })
	return opsResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

func opsMust(t *testing.T, args ...string) opsResult {
	t.Helper()
	r := opsRun(t, nil, args...)
	if r.code != exitOK {
		t.Fatalf("mend %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// opsUser creates an account on db's server holding grants (see
// mysqltest.DB.User) and returns db's DSN logged in as it.
func opsUser(t *testing.T, db *mysqltest.DB, grants ...string) string {
	t.Helper()
	return db.User(t, grants...)
}

// The grants of docs/operations.md, on one database holding mend's tables
// and the submit queue's.
var (
	ddlGrants     = []string{"CREATE, ALTER, DROP, INDEX, CREATE VIEW, SHOW VIEW, SELECT, INSERT, UPDATE, DELETE ON %s.*"}
	runtimeGrants = []string{
		"SELECT, INSERT, UPDATE, DELETE ON %s.mend_records",
		"SELECT, INSERT, DELETE ON %s.mend_events",
		"SELECT, INSERT, UPDATE ON %s.mend_leases",
		"SELECT, INSERT, UPDATE ON %s.mend_lease_history",
		"SELECT ON %s.mend_schema_migrations",
		"SELECT, UPDATE ON %s.batch",
		"SELECT, INSERT, DELETE ON %s.queue_batch_state",
		"SELECT, UPDATE ON %s.request",
		"SELECT ON %s.build",
		"SELECT, INSERT, UPDATE ON %s.queue_messages",
		// run and doctor check that a host group reads --wake-topic.
		"SELECT ON %s.queue_offsets",
	}
)

const speculatePayload = `{"id":"q/batch/1","queue":"q"}`

// seedStuckQueue puts batch 1 (dead-lettered) and batch 2 (live, waiting
// for a wake-up) into the host's tables.
func seedStuckQueue(t *testing.T, db *mysqltest.DB) sqtest.World {
	t.Helper()
	ctx := context.Background()
	w := sqtest.World{App: db.SQL(t), Queue: db.SQL(t)}
	if err := w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1"); err != nil {
		t.Fatal(err)
	}
	if err := w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/2"); err != nil {
		t.Fatal(err)
	}
	if err := w.Join(ctx, "orchestrator", "speculate", "q"); err != nil { // the host's planner reads speculate
		t.Fatal(err)
	}
	return w
}

func recordArgs(dsn, msgID, payload string) []string {
	return []string{"record", "--dsn", dsn, "--queue", "q", "--topic", "speculate_dlq", "--partition", "q", "--message-id", msgID, "--payload", payload}
}

var recordIDRE = regexp.MustCompile(`[0-9a-f]{32}`)

// Item 1: with exactly the documented grants, migrate, record, a full
// repair by run --once, and doctor all work, and the wake-up row is on
// queue_messages where the strict speculate consumer accepts it.
func TestLeastPrivilegeUsersRepairFully(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, sqtest.Apply)
	w := seedStuckQueue(t, db)
	ddl := opsUser(t, db, ddlGrants...)
	opsMust(t, "migrate", "up", "--dsn", ddl)
	runtime := opsUser(t, db, runtimeGrants...)
	opsMust(t, recordArgs(runtime, "q/batch/1", speculatePayload)...)
	r := opsMust(t, "run", "--once", "--dsn", runtime, "--host-dsn=same")
	if strings.Contains(r.stderr, "denied") {
		t.Fatalf("run --once logged a refused statement:\n%s", r.stderr)
	}
	wakes, err := w.ConsumeSpeculate(ctx, "q", true)
	if err != nil || len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/2" {
		t.Fatalf("speculate = %+v, %v; want one wake-up for q/batch/2 written by the runtime user", wakes, err)
	}
	if b, _ := w.Batch(ctx, "q", "q/batch/1"); b.State != "failed" {
		t.Errorf("batch 1 = %s; want failed", b.State)
	}
	if r := opsRun(t, nil, "doctor", "--dsn", runtime, "--host-dsn", "same"); r.code != exitOK {
		t.Errorf("doctor as the runtime user = exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Without SELECT on queue_messages the dedupe's ON DUPLICATE KEY
	// UPDATE is refused (the negative control of the grant above).
	short := opsUser(t, db, append(runtimeGrants[:9:9], "INSERT, UPDATE ON %s.queue_messages")...)
	r = opsRun(t, nil, "doctor", "--dsn", short, "--host-dsn", "same")
	if r.code != exitFailure || !strings.Contains(r.stdout, "GRANT SELECT ON") {
		t.Errorf("doctor without SELECT on queue_messages = exit %d; want 1 naming the GRANT\n%s", r.code, r.stdout)
	}
}

// Item 2: doctor fails a read-only user and a database without the host's
// tables, naming what is missing, and writes nothing, not even
// mend_schema_migrations; neither does migrate version.
func TestDoctorChecksWhatRunNeedsAndWritesNothing(t *testing.T) {
	t.Parallel()

	t.Run("a read-only user", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
		ro := opsUser(t, db, "SELECT ON %s.*")
		r := opsRun(t, nil, "doctor", "--dsn", ro)
		if r.code != exitFailure || !strings.Contains(r.stdout, "GRANT INSERT, UPDATE, DELETE ON") || !strings.Contains(r.stdout, "mend_records") {
			t.Fatalf("doctor as a read-only user = exit %d; want 1 with the GRANT for mend's tables\n%s", r.code, r.stdout)
		}
	})

	t.Run("no host tables where run would look", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		r := opsRun(t, nil, "doctor", "--dsn", db.DSN, "--host-dsn", "same")
		if r.code != exitFailure || !strings.Contains(r.stdout, "table batch is missing") {
			t.Fatalf("doctor without host tables = exit %d; want 1 naming the missing batch table\n%s", r.code, r.stdout)
		}
	})

	t.Run("an empty database stays empty", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		if r := opsRun(t, nil, "doctor", "--dsn", db.DSN); r.code != exitFailure || !strings.Contains(r.stdout, "mend migrate up") {
			t.Fatalf("doctor on an empty database = exit %d; want 1 and the fix\n%s", r.code, r.stdout)
		}
		if r := opsRun(t, nil, "migrate", "version", "--dsn", db.DSN); r.code != exitOK || !strings.Contains(r.stdout, "version 0 of") {
			t.Fatalf("migrate version = exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if tables := db.Tables(t); len(tables) != 0 {
			t.Fatalf("doctor and migrate version created %v", tables)
		}
	})
}

// Item 3: a pass whose attempts all failed (the host's batch table went
// away after run checked itself) exits 1 and names the record.
func TestRunOnceFailsWhenAnAttemptFailed(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	out := opsMust(t, recordArgs(db.DSN, "q/batch/1", speculatePayload)...)
	id := recordIDRE.FindString(out.stdout)
	c := runConfig{DSN: db.DSN, HostDSN: db.DSN, QueueDSN: db.DSN, Once: true, Interval: reconcile.IntervalDefault,
		LeaseTTL: fence.TTLDefault, Concurrency: 1, Holder: "t", Retention: reconcile.RetentionDefault,
		MaxAttempts: planner.MaxAttemptsDefault, Grace: planner.GraceDefault, WakeTopic: host.WakeTopicDefault}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	// serve is what runs after the preflight (which would refuse here).
	err := serve(context.Background(), c, slog.New(slog.DiscardHandler), &scrubber{})
	if err == nil || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "read batch") {
		t.Fatalf("run --once with no host tables = %v; want an error naming record %s", err, id)
	}
}

// Issue 19, Why 1: mend run with only MEND_DSN once started and parked every
// due record on "SELECT command denied". Now --host-dsn is required, and
// run checks itself (doctor's checks) before it starts, changing nothing
// when it refuses.
func TestRunChecksItselfBeforeStarting(t *testing.T) {
	t.Parallel()
	t.Run("no silent --host-dsn default", func(t *testing.T) {
		t.Parallel()
		r := opsRun(t, []string{"MEND_DSN=u@tcp(127.0.0.1:1)/mend"}, "run", "--once")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--host-dsn is required") || !strings.Contains(r.stderr, "--host-dsn=same") {
			t.Fatalf("run with only MEND_DSN = exit %d %q; want 2 asking for --host-dsn", r.code, r.stderr)
		}
	})
	t.Run("missing host tables: refuses with the doctor line, attempts nothing", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		out := opsMust(t, recordArgs(db.DSN, "q/batch/1", speculatePayload)...)
		id := recordIDRE.FindString(out.stdout)
		r := opsRun(t, nil, "run", "--once", "--dsn", db.DSN, "--host-dsn=same")
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		last := lines[len(lines)-1]
		if r.code != exitFailure || !strings.Contains(last, "refusing to start") || !strings.Contains(last, "FAIL host app batch") {
			t.Fatalf("run without host tables = exit %d, last line %q; want 1 naming the failed doctor check", r.code, last)
		}
		var attempts int
		if err := db.SQL(t).QueryRow("SELECT attempts FROM mend_records WHERE HEX(record_id) = ?", strings.ToUpper(id)).Scan(&attempts); err != nil || attempts != 0 {
			t.Fatalf("record attempts = %d, %v; want 0: a refused start attempts nothing", attempts, err)
		}
	})
	t.Run("an old schema: refuses naming migrate up", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, sqtest.Apply)
		opsMust(t, "migrate", "up", "2", "--dsn", db.DSN)
		r := opsRun(t, nil, "run", "--once", "--dsn", db.DSN, "--host-dsn=same")
		if r.code != exitFailure || !strings.Contains(r.stderr, "FAIL schema") || !strings.Contains(r.stderr, "mend migrate up") {
			t.Fatalf("run on schema version 2 = exit %d %q; want 1 naming the schema check", r.code, r.stderr)
		}
	})
}

// Item 4: resolve closes a parked record with who and why; retry refuses
// a record with nothing to repair; both select with a dry run first.
func TestResolveAndRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) (*mysqltest.DB, *storage.DB) {
		t.Helper()
		db := mysqltest.NewDB(t, migrations.Up)
		store, err := storage.Open(ctx, db.DSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		return db, store
	}
	parked := func(t *testing.T, dsn, msg string) string {
		t.Helper()
		r := opsMust(t, recordArgs(dsn, msg, "not json")...)
		if !strings.Contains(r.stdout, "state parked") {
			t.Fatalf("undecodable payload recorded as %s", r.stdout)
		}
		return recordIDRE.FindString(r.stdout)
	}

	t.Run("resolve one record", func(t *testing.T) {
		t.Parallel()
		db, store := setup(t)
		id := parked(t, db.DSN, "m1")
		if r := opsRun(t, nil, "resolve", "--dsn", db.DSN, "--record", id); r.code != exitUsage || !strings.Contains(r.stderr, "--reason is required") {
			t.Fatalf("resolve without --reason = exit %d %q", r.code, r.stderr)
		}
		opsMust(t, "resolve", "--dsn", db.DSN, "--record", id, "--actor", "alice", "--reason", "batch failed by hand")
		rid, _ := mend.ParseRecordID(id)
		rec, err := store.RecordFind(ctx, rid)
		if err != nil || rec.State != mend.StateDone {
			t.Fatalf("record = %s, %v; want done", rec.State, err)
		}
		evs, _ := store.RecordHistory(ctx, "q", rid)
		if e := evs[len(evs)-1]; e.Kind != mend.EventResolved || e.Actor != "alice" || !strings.Contains(string(e.Data), "batch failed by hand") {
			t.Fatalf("last event = %+v; want resolved by alice with the reason", e)
		}
		st := opsMust(t, "status", "--dsn", db.DSN, "--json")
		if strings.Contains(st.stdout, `"parked"`) {
			t.Fatalf("status still counts a parked record:\n%s", st.stdout)
		}
	})

	t.Run("retry refuses a record with nothing to repair", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		id := parked(t, db.DSN, "m1")
		r := opsRun(t, nil, "retry", "--dsn", db.DSN, "--record", id)
		if r.code != exitFailure || !strings.Contains(r.stderr, "names no batch to repair") {
			t.Fatalf("retry of an undecodable record = exit %d %q; want 1 and why", r.code, r.stderr)
		}
	})

	t.Run("select with a dry run first", func(t *testing.T) {
		t.Parallel()
		db, store := setup(t)
		parked(t, db.DSN, "m1")
		parked(t, db.DSN, "m2")
		args := []string{"resolve", "--dsn", db.DSN, "--queue", "q", "--reason-contains", "cannot decode", "--reason", "bad producer"}
		r := opsMust(t, args...)
		if !strings.Contains(r.stdout, "would resolve 2 of 2") {
			t.Fatalf("dry run = %s; want the count", r.stdout)
		}
		recs, _ := store.RecordsSelect(ctx, storage.RecordFilter{State: mend.StateParked, Limit: 10})
		if len(recs) != 2 {
			t.Fatalf("the dry run changed records: %d parked left", len(recs))
		}
		opsMust(t, append(args, "--yes")...)
		if recs, _ := store.RecordsSelect(ctx, storage.RecordFilter{State: mend.StateParked, Limit: 10}); len(recs) != 0 {
			t.Fatalf("%d records still parked after resolve --yes", len(recs))
		}
	})
}

// Item 5: record needs the payload and --partition, and a different
// payload on re-record is an error showing both.
func TestRecordKeepsWhatTheOperatorMeant(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	base := []string{"record", "--dsn", db.DSN, "--queue", "q", "--topic", "speculate_dlq", "--message-id", "m"}
	if r := opsRun(t, nil, append(base, "--partition", "q")...); r.code != exitUsage || !strings.Contains(r.stderr, "payload is required") {
		t.Fatalf("record without a payload = exit %d %q", r.code, r.stderr)
	}
	if r := opsRun(t, nil, append(base, "--payload", speculatePayload)...); r.code != exitUsage || !strings.Contains(r.stderr, "--partition is required") {
		t.Fatalf("record without --partition = exit %d %q", r.code, r.stderr)
	}
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(speculatePayload), 0o600); err != nil {
		t.Fatal(err)
	}
	opsMust(t, append(base, "--partition", "q", "--payload-file", file)...)
	if r := opsMust(t, append(base, "--partition", "q", "--payload", speculatePayload)...); !strings.Contains(r.stdout, "already recorded") {
		t.Fatalf("same payload again = %q", r.stdout)
	}
	r := opsRun(t, nil, append(base, "--partition", "q", "--payload", `{"id":"q/batch/9","queue":"q"}`)...)
	if r.code != exitFailure || !strings.Contains(r.stderr, "q/batch/9") || !strings.Contains(r.stderr, "q/batch/1") {
		t.Fatalf("different payload = exit %d %q; want 1 showing both", r.code, r.stderr)
	}
}

// Item 6: readiness needs the schema, not just a ping.
func TestReadinessChecksTheSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		db   *mysqltest.DB
		want int
	}{
		{"migrated", mysqltest.NewDB(t, migrations.Up), 200},
		{"no schema", mysqltest.NewDB(t), 503},
	} {
		h := newHTTPHandler(newMetrics(), readiness(tc.db.SQL(t)), &scrubber{})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != tc.want {
			t.Errorf("%s: /readyz = %d %q; want %d", tc.name, rec.Code, rec.Body.String(), tc.want)
		}
	}
	// Issue 19: a host database that does not answer makes the replica unready.
	db := mysqltest.NewDB(t, migrations.Up)
	down, err := sql.Open("mysql", "u@tcp(127.0.0.1:1)/host?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	for _, tc := range []struct {
		hosts []pool
		want  int
	}{{[]pool{{"--host-dsn", db.SQL(t)}}, 200}, {[]pool{{"--host-dsn", db.SQL(t)}, {"--queue-dsn", down}}, 503}} {
		h := newHTTPHandler(newMetrics(), readiness(db.SQL(t), tc.hosts...), &scrubber{})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != tc.want {
			t.Errorf("host pools %d: /readyz = %d %q; want %d", len(tc.hosts), rec.Code, rec.Body.String(), tc.want)
		}
	}
}

// Item 7: with --log-format json every stderr line is JSON, the driver's
// and the final error's too.
func TestJSONLogsAreAllJSON(t *testing.T) {
	driverLimit.reset()      // not parallel: no other test prints driver lines now
	db := mysqltest.NewDB(t) // no schema: the command fails
	r := opsRun(t, nil, "status", "--dsn", db.DSN, "--log-format", "json")
	driverLog{fallback: &bytes.Buffer{}}.Print("[mysql] packets.go: unexpected EOF")
	if r.code != exitFailure {
		t.Fatalf("status on an empty database = exit %d", r.code)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("stderr line is not JSON: %q", line)
		}
	}
	var buf bytes.Buffer
	driverLogger.Store(newLogger(&buf, "json", 0, &scrubber{}))
	driverLog{fallback: &bytes.Buffer{}}.Print("[mysql] packets.go: unexpected EOF")
	if !json.Valid(bytes.TrimSpace(buf.Bytes())) || !strings.Contains(buf.String(), "unexpected EOF") {
		t.Errorf("driver line = %q; want JSON", buf.String())
	}
}

// Operators expect: version, inspect --state, lease list/history/release,
// migrate steps and refusals, completion, metrics at zero.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("version", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"version"}, {"--version"}} {
			if r := opsMust(t, args...); !strings.HasPrefix(r.stdout, "mend ") || !strings.Contains(r.stdout, "go1") {
				t.Errorf("mend %v = %q", args, r.stdout)
			}
		}
	})

	t.Run("inspect --state across queues", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		for _, q := range []string{"a", "b"} {
			opsMust(t, "record", "--dsn", db.DSN, "--queue", q, "--topic", "speculate_dlq", "--partition", q, "--message-id", "m", "--payload", "junk")
		}
		r := opsMust(t, "inspect", "--dsn", db.DSN, "--state", "parked", "--json")
		var recs []recordJSON
		if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 2 {
			t.Fatalf("inspect --state parked --json = %v, %s", err, r.stdout)
		}
		r = opsMust(t, "inspect", "--dsn", db.DSN, "--state", "parked", "--limit", "1")
		if n := len(recordIDRE.FindAllString(r.stdout, -1)); n != 1 {
			t.Fatalf("--limit 1 listed %d records:\n%s", n, r.stdout)
		}
	})

	t.Run("lease list, history and release", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		store, err := storage.Open(ctx, db.DSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		term, err := store.LeaseAcquire(ctx, "q", "dead-host", 1<<40)
		if err != nil {
			t.Fatal(err)
		}
		if r := opsMust(t, "lease", "list", "--dsn", db.DSN); !strings.Contains(r.stdout, "dead-host") || !strings.Contains(r.stdout, "held") {
			t.Fatalf("lease list = %s", r.stdout)
		}
		if r := opsRun(t, nil, "lease", "release", "--dsn", db.DSN, "--queue", "q", "--epoch", "7"); r.code != exitFailure {
			t.Fatalf("release of another epoch = exit %d %q; want 1", r.code, r.stderr)
		}
		opsMust(t, "lease", "release", "--dsn", db.DSN, "--queue", "q", "--epoch", fmt.Sprint(term.Epoch))
		if err := store.LeaseRenew(ctx, term, 1<<40); err == nil {
			t.Fatal("the released holder could still renew")
		}
		if r := opsMust(t, "lease", "history", "--dsn", db.DSN, "--queue", "q"); !strings.Contains(r.stdout, "operator") {
			t.Fatalf("lease history = %s; want the term ended by the operator", r.stdout)
		}
	})

	t.Run("migrate step by step", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		list, _ := migrations.Mend.List()
		if r := opsMust(t, "migrate", "up", "2", "--dsn", db.DSN); strings.Count(r.stdout, "applied ") != 2 || !strings.Contains(r.stdout, "version 2 of") {
			t.Fatalf("migrate up 2 = %s", r.stdout)
		}
		if r := opsMust(t, "migrate", "up", "--dsn", db.DSN); strings.Count(r.stdout, "applied ") != len(list)-2 {
			t.Fatalf("migrate up = %s", r.stdout)
		}
		if r := opsRun(t, nil, "migrate", "force", "3", "--dsn", db.DSN); r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
			t.Fatalf("force on a clean schema = exit %d %q", r.code, r.stderr)
		}
		if r := opsRun(t, nil, "migrate", "down", "1", "--dsn", db.DSN); r.code != exitUsage {
			t.Fatalf("down without --yes = exit %d", r.code)
		}
		if r := opsMust(t, "migrate", "down", "1", "--yes", "--dsn", db.DSN); !strings.Contains(r.stdout, "reverted ") {
			t.Fatalf("migrate down 1 = %s", r.stdout)
		}
		if r := opsMust(t, "migrate", "goto", "3", "--yes", "--dsn", db.DSN); !strings.Contains(r.stdout, "version 3 of") {
			t.Fatalf("migrate goto 3 = %s", r.stdout)
		}
		if _, err := db.SQL(t).Exec("UPDATE mend_schema_migrations SET dirty = 1"); err != nil {
			t.Fatal(err)
		}
		if r := opsRun(t, nil, "migrate", "version", "--dsn", db.DSN); r.code != exitFailure {
			t.Fatalf("version on a dirty schema = exit %d", r.code)
		}
		opsMust(t, "migrate", "force", "3", "--dsn", db.DSN)
		if r := opsMust(t, "migrate", "sql"); strings.Count(r.stdout, ".up.sql") != len(list) {
			t.Fatalf("migrate sql printed %d migrations", strings.Count(r.stdout, ".up.sql"))
		}
	})

	t.Run("migrate up on a missing database", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		cfg, _ := mysql.ParseDSN(db.DSN)
		cfg.DBName = db.Name + "_new"
		dsn := cfg.FormatDSN()
		if r := opsRun(t, nil, "migrate", "up", "--dsn", dsn); r.code != exitFailure || !strings.Contains(r.stderr, "CREATE DATABASE") {
			t.Fatalf("migrate up on a missing database = exit %d %q", r.code, r.stderr)
		}
		opsMust(t, "migrate", "up", "--create-database", "--dsn", dsn)
		t.Cleanup(func() { _, _ = db.SQL(t).Exec("DROP DATABASE `" + cfg.DBName + "`") })
	})

	t.Run("completion", func(t *testing.T) {
		t.Parallel()
		for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
			if r := opsMust(t, "completion", shell); !strings.Contains(r.stdout, "__complete") {
				t.Errorf("%s completion does not call back into mend: %.200s", shell, r.stdout)
			}
		}
		// What the scripts ask the binary: commands, flags, flag values.
		for _, c := range []struct {
			args []string
			want []string
		}{
			{[]string{"__complete", ""}, []string{"resolve", "lease", "migrate"}},
			{[]string{"__complete", "resolve", "--"}, []string{"--reason-contains", "--state"}},
			{[]string{"__complete", "run", "--"}, []string{"--host-dsn"}},
			{[]string{"__complete", "resolve", "--state", ""}, []string{"parked", "pending", "done"}},
			{[]string{"__complete", "inspect", "--state="}, []string{"parked", "waiting"}},
			{[]string{"__complete", "record", "--topic", ""}, []string{"speculate_dlq", "buildsignal_dlq"}},
			{[]string{"__complete", "import", "--topic", ""}, []string{"speculate_dlq"}},
			{[]string{"__complete", "lease", ""}, []string{"list", "history", "release"}},
			{[]string{"__complete", "migrate", ""}, []string{"up", "down", "goto"}},
		} {
			r := opsMust(t, c.args...)
			for _, w := range c.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("mend %q offers no %q:\n%s", c.args, w, r.stdout)
				}
			}
		}
	})

	t.Run("help for every command", func(t *testing.T) {
		t.Parallel()
		for _, cmd := range a0().newRoot().Commands() {
			name := cmd.Name()
			r1, r2 := opsMust(t, "help", name), opsMust(t, name, "--help")
			if want := "Usage:\n  mend " + name; !strings.Contains(r1.stdout, want) || !strings.Contains(r2.stdout, want) {
				t.Errorf("mend help %s != mend %s --help, or names no command:\n%s", name, name, r1.stdout)
			}
		}
		if r := opsMust(t, "version", "-h"); strings.Contains(r.stdout, "--dsn") {
			t.Errorf("version -h lists --dsn:\n%s", r.stdout)
		}
		for _, v := range []string{"-v", "--version"} {
			if r := opsMust(t, v); !strings.HasPrefix(r.stdout, "mend ") || !strings.Contains(r.stdout, "go1") {
				t.Errorf("mend %s = %q", v, r.stdout)
			}
		}
		if r := opsRun(t, nil, "no-such-command"); r.code != exitUsage {
			t.Errorf("an unknown command exits %d", r.code)
		}
		for _, args := range [][]string{{"help", "no-such-command"}, {"completion", "tcsh"}, {"completion"}} {
			if r := opsRun(t, nil, args...); r.code != exitUsage {
				t.Errorf("mend %v exits %d; want 2", args, r.code)
			}
		}
		// Issue 30: source <(mend completion) once fed the whole help to
		// the shell; now nothing on stdout and one line on stderr.
		if r := opsRun(t, nil, "completion"); r.stdout != "" || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "bash|zsh|fish|powershell") {
			t.Errorf("mend completion = stdout %q, stderr %q; want one usage line on stderr only", r.stdout, r.stderr)
		}
		if r := opsMust(t, "help", "lease", "list"); !strings.Contains(r.stdout, "Usage:\n  mend lease") {
			t.Errorf("mend help lease list = %s", r.stdout)
		}
		if r := opsRun(t, nil, "status", "--no-such-flag"); r.code != exitUsage || !strings.Contains(r.stderr, "no-such-flag") {
			t.Errorf("an unknown flag exits %d: %q", r.code, r.stderr)
		}
	})

	t.Run("every flag has a MEND twin", func(t *testing.T) {
		t.Parallel()
		asked := map[string]bool{}
		a := a0()
		a.getenv = func(k string) string { asked[k] = true; return "" }
		root := a.newRoot()
		for _, cmd := range root.Commands() {
			f := a.flagsOf[cmd]
			if f == nil {
				continue // help, completion: cobra's own
			}
			clear(asked)
			if err := f.applyEnv(); err != nil {
				t.Fatal(err)
			}
			f.VisitAll(func(fl *pflag.Flag) {
				want := fl.Name != "help" && fl.Name != "yes" && fl.Name != "force" && fl.Name != "allow-actions" && (cmd.Name() != "demo" || (fl.Name != "dsn" && fl.Name != "dsn-file"))
				if asked[envName(fl.Name)] != want {
					t.Errorf("mend %s --%s: %s read = %v, want %v", cmd.Name(), fl.Name, envName(fl.Name), !want, want)
				}
				if want && !strings.Contains(fl.Usage, envName(fl.Name)) {
					t.Errorf("mend %s --%s: its help does not name %s", cmd.Name(), fl.Name, envName(fl.Name))
				}
			})
		}
	})

	t.Run("counters exist at zero", func(t *testing.T) {
		t.Parallel()
		m := newMetrics()
		m.touchQueue("q")
		rec := httptest.NewRecorder()
		newHTTPHandler(m, func(context.Context) error { return nil }, &scrubber{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, want := range []string{
			`mend_attempt_failures_total{queue="q",reason="publish_wakeup"} 0`,
			`mend_wakeups_total{queue="q",result="failed"} 0`,
			`mend_planner_runs_total{result="error"} 0`,
			`mend_settles_total{divergent="true",outcome="succeeded"} 0`,
			`mend_build_info{`,
		} {
			if !strings.Contains(rec.Body.String(), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// The oldest-open gauge counts records in backoff, and is absent (not 0)
// for a queue with nothing open.
func TestOldestOpenIncludesBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...)
	if _, err := db.SQL(t).Exec("UPDATE mend_records SET created_at = created_at - INTERVAL 1 HOUR, next_attempt_at = NOW(6) + INTERVAL 5 MINUTE"); err != nil {
		t.Fatal(err)
	}
	got, err := store.OldestOpen(ctx)
	if err != nil || got["q"].Hours() < 0.99 {
		t.Fatalf("OldestOpen = %v, %v; want about an hour for the record in backoff", got, err)
	}
	if _, ok := got["other"]; ok {
		t.Fatal("a queue without records is reported")
	}
}

// failAfter is a stdout whose reader goes away after n bytes.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n -= len(p); f.n < 0 {
		return 0, fmt.Errorf("write |1: broken pipe")
	}
	return len(p), nil
}

// Item 8: when the demo's output closes it stops, removes its database,
// and says so in one line, not with the context errors it caused.
func TestDemoStopsCleanlyWhenItsOutputCloses(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	countDemoDBs := func() int {
		var n int
		if err := db.SQL(t).QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE 'mend\\_demo\\_%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := countDemoDBs()
	var errOut bytes.Buffer
	code := Main(context.Background(), []string{"demo", "--dsn", db.Server.RootDSN()}, &failAfter{n: 200}, &errOut, func(string) string { return "" })
	if code != exitFailure || !strings.Contains(errOut.String(), "output was closed") || strings.Contains(errOut.String(), "context canceled") {
		t.Fatalf("demo with a closed output = exit %d, stderr %q", code, errOut.String())
	}
	if after := countDemoDBs(); after != before {
		t.Fatalf("the demo left %d database(s) behind", after-before)
	}
}

// a0 is an app writing nowhere, with an empty environment.
func a0() *app {
	return &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, scrub: &scrubber{},
		getenv: func(string) string { return "" }, flagsOf: map[*cobra.Command]*flags{}}
}

// Issue 47: built with -buildvcs=false (as GOFLAGS here says) the Go tool
// records no revision, and mend version printed "revision unknown"; make
// build and scripts/image.sh set it with -ldflags -X main.revision.
func TestVersionRevisionFromLdflags(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "mend")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-X main.version=v9.9.9 -X main.revision=feedface", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "mend v9.9.9, revision feedface,") {
		t.Fatalf("mend version = %q, %v; want v9.9.9 and revision feedface", out, err)
	}
}

package sqreal

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
)

// Consumer groups of the real orchestrator (its primary and DLQ consumers).
const (
	GroupOrchestrator = "orchestrator"
	GroupDLQ          = "orchestrator-dlq"
)

// Options configure Start.
type Options struct {
	// Queues are the queue names the gateway accepts (its queues.yaml). At least one.
	Queues []string
	// Profiles, when set, replaces the fake provider's profiles.yaml (the orchestrator's per-queue
	// extensions) with this text.
	Profiles string
	// Orchestrator, when set, is the orchestrator binary to run instead of the tree's (a patched build).
	Orchestrator string
	// OrchestratorEnv is extra environment for the orchestrator (e.g. what a linked-in mend needs).
	OrchestratorEnv []string
}

// Stack is the real queue's three services on databases of their own.
type Stack struct {
	// App and Queue are the application and queue databases.
	App, Queue *mysqltest.DB
	// AppSQL and QueueSQL are connections to them.
	AppSQL, QueueSQL *sql.DB
	// GateDir is the CONSUMER_GATE_DIR every service shares.
	GateDir string
	// Dir holds the configuration and the logs.
	Dir string
	// Gateway, Orchestrator and Runway are the processes.
	Gateway, Orchestrator, Runway *Service
	// Bins are the binaries (land is the gateway's client).
	Bins Bins
	// Tree is the source the binaries came from.
	Tree *Tree

	t testing.TB
}

// RequireMySQL skips t unless the shared test server is MySQL, the only engine the real queue runs on.
func RequireMySQL(t testing.TB) {
	t.Helper()
	srv := mysqltest.SharedServer(t)
	if srv.Flavor() != "mysql" {
		t.Skipf("sqreal: the real submit queue runs only on MySQL (its DDL and SQL use `offset` unquoted, a "+
			"reserved word on MariaDB); this server is %s: run with MEND_TEST_ENGINE=mysql", srv.Engine())
	}
}

// Start builds (or finds) the queue's binaries and starts its gateway, orchestrator and runway on fresh
// databases, stopped at t's cleanup. It skips t on an engine other than MySQL and when no source is there.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	RequireMySQL(t)
	if len(opts.Queues) == 0 {
		t.Fatal("sqreal: Options.Queues is empty")
	}
	tree := Source(t)
	bins := tree.Build(t, "")
	if opts.Orchestrator != "" {
		bins["orchestrator"] = opts.Orchestrator
	}
	s := &Stack{Tree: tree, Bins: bins, Dir: t.TempDir(), t: t}
	s.GateDir = filepath.Join(s.Dir, "consumergate")
	s.App = mysqltest.NewHostDB(t)
	s.Queue = mysqltest.NewHostDB(t)
	s.AppSQL, s.QueueSQL = s.App.SQL(t), s.Queue.SQL(t)
	s.applyDDL(t)
	s.writeConfig(t, opts)

	appDSN, queueDSN := serviceDSN(t, s.App), serviceDSN(t, s.Queue)
	logs := filepath.Join(s.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	s.Gateway = &Service{Name: "gateway", Bin: bins["gateway"], Addr: FreeAddr(t), Log: filepath.Join(logs, "gateway.log")}
	s.Gateway.Env = []string{"PORT=" + s.Gateway.Addr, "MYSQL_DSN=" + appDSN, "QUEUE_MYSQL_DSN=" + queueDSN,
		"HOSTNAME=gateway-dev", "QUEUE_CONFIG_PATH=" + filepath.Join(s.Dir, "queues.yaml"), "CONSUMER_GATE_DIR=" + s.GateDir}
	s.Orchestrator = &Service{Name: "orchestrator", Bin: bins["orchestrator"], Addr: FreeAddr(t), Log: filepath.Join(logs, "orchestrator.log")}
	s.Orchestrator.Env = append([]string{"PORT=" + s.Orchestrator.Addr, "MYSQL_DSN=" + appDSN, "QUEUE_MYSQL_DSN=" + queueDSN,
		"HOSTNAME=orchestrator-dev", "PROFILES_CONFIG_PATH=" + filepath.Join(s.Dir, "profiles.yaml"),
		"CONSUMER_GATE_DIR=" + s.GateDir}, opts.OrchestratorEnv...)
	s.Runway = &Service{Name: "runway", Bin: bins["runway"], Addr: FreeAddr(t), Log: filepath.Join(logs, "runway.log")}
	s.Runway.Env = []string{"PORT=" + s.Runway.Addr, "QUEUE_MYSQL_DSN=" + queueDSN, "HOSTNAME=runway-dev",
		"MERGE_CONFIG_PATH=" + filepath.Join(s.Dir, "merge.yaml"), "CONSUMER_GATE_DIR=" + s.GateDir}

	t.Cleanup(func() {
		for _, svc := range []*Service{s.Gateway, s.Orchestrator, s.Runway} {
			if err := svc.Stop(); err != nil {
				t.Errorf("%v\n%s", err, Tail(svc.Log, 30))
			}
		}
		if t.Failed() {
			for _, svc := range []*Service{s.Gateway, s.Orchestrator, s.Runway} {
				t.Logf("%s", Tail(svc.Log, 60))
			}
		}
	})
	for _, svc := range []*Service{s.Runway, s.Orchestrator, s.Gateway} {
		svc.Start(t)
	}
	// Ready: the orchestrator's primary and DLQ consumers have registered (heartbeats), and the gateway answers.
	s.Eventually(t, time.Minute, "the orchestrator's subscribers to register", func() (bool, string) {
		n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_subscriber_heartbeats WHERE consumer_group IN (?, ?) AND topic IN ('speculate', 'speculate_dlq')",
			GroupOrchestrator, GroupDLQ)
		return n == 2, fmt.Sprintf("%d of 2 heartbeat rows", n)
	})
	if out, code := Run(t, 30*time.Second, nil, bins["land"], "-addr", s.Gateway.Addr, "ping"); code != 0 {
		t.Fatalf("sqreal: land ping: exit %d\n%s", code, out)
	}
	return s
}

// serviceDSN is db's DSN as docker-compose.yml gives the services theirs: user, address, database and
// parseTime=true, nothing else (the queue's go-sql-driver v1.6.0 with interpolateParams=true sends JSON
// arguments as binary strings, which MySQL refuses: error 3144).
func serviceDSN(t testing.TB, db *mysqltest.DB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	auth := cfg.User
	if cfg.Passwd != "" {
		auth += ":" + cfg.Passwd
	}
	return fmt.Sprintf("%s@tcp(%s)/%s?parseTime=true", auth, cfg.Addr, cfg.DBName)
}

// applyDDL applies the queue's schema as its Makefile's local-init-submitqueue-schemas does: storage and
// counter DDL to the application database, queue DDL to the queue database, each file as one script.
func (s *Stack) applyDDL(t testing.TB) {
	t.Helper()
	for _, step := range []struct {
		db   *mysqltest.DB
		dirs []string
	}{
		{s.App, []string{"submitqueue/extension/storage/mysql/schema", "platform/extension/counter/mysql/schema"}},
		{s.Queue, []string{"platform/extension/messagequeue/mysql/schema"}},
	} {
		cfg, err := mysql.ParseDSN(step.db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MultiStatements = true
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range step.dirs {
			files, err := filepath.Glob(filepath.Join(s.Tree.Dir, dir, "*.sql"))
			if err != nil || len(files) == 0 {
				t.Fatalf("sqreal: no DDL in %s (%v)", dir, err)
			}
			sort.Strings(files)
			for _, f := range files {
				body, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.ExecContext(context.Background(), string(body)); err != nil {
					db.Close()
					t.Fatalf("sqreal: apply %s to %s: %v", strings.TrimPrefix(f, s.Tree.Dir+"/"), step.db.Name, err)
				}
			}
		}
		db.Close()
	}
}

// writeConfig writes queues.yaml (the gateway's registry), and the fake provider's profiles.yaml and
// merge.yaml (docker-compose.fake.yml mounts them) into s.Dir.
func (s *Stack) writeConfig(t testing.TB, opts Options) {
	t.Helper()
	var q strings.Builder
	q.WriteString("queues:\n")
	for _, name := range opts.Queues {
		fmt.Fprintf(&q, "  - name: %s\n", name)
	}
	files := map[string]string{"queues.yaml": q.String()}
	fake := filepath.Join(s.Tree.Dir, "service/submitqueue/demo/provider/fake")
	for _, name := range []string{"profiles.yaml", "merge.yaml"} {
		body, err := os.ReadFile(filepath.Join(fake, name))
		if err != nil {
			t.Fatalf("sqreal: the fake provider's %s: %v", name, err)
		}
		files[name] = string(body)
	}
	if opts.Profiles != "" {
		files["profiles.yaml"] = opts.Profiles
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Eventually polls cond every 100 ms until it holds, failing t after timeout with cond's last description.
func (s *Stack) Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sqreal: waited %v for %s: %s", timeout, what, desc)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline, not synchronisation by sleep
	}
}

// QueueInt runs a query returning one integer on the queue database.
func (s *Stack) QueueInt(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n sql.NullInt64
	if err := s.QueueSQL.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("sqreal: %s: %v", query, err)
	}
	return n.Int64
}

// sqidLine is how the land client prints a submitted request's ID.
var sqidLine = regexp.MustCompile(`(?m)^\s*sqid:\s*(\S+)\s*$`)

// Land submits one change (a fake:// URI, optionally with a sq-fake= marker) through the real gateway
// with its land client and returns the request's ID.
func (s *Stack) Land(t testing.TB, queue, uri string) string {
	t.Helper()
	out, code := Run(t, time.Minute, nil, s.Bins["land"], "-addr", s.Gateway.Addr, "land", "-queue", queue, "-uri", uri)
	m := sqidLine.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("sqreal: land -queue %s -uri %s: exit %d\n%s", queue, uri, code, out)
	}
	return m[1]
}

// RequestState returns a request's state in the application database ("" when it does not exist).
func (s *Stack) RequestState(t testing.TB, queue, id string) string {
	t.Helper()
	return s.appString(t, "SELECT state FROM request WHERE queue = ? AND id = ?", queue, id)
}

// BatchState returns a batch's state ("" when it does not exist).
func (s *Stack) BatchState(t testing.TB, queue, id string) string {
	t.Helper()
	return s.appString(t, "SELECT state FROM batch WHERE queue = ? AND id = ?", queue, id)
}

func (s *Stack) appString(t testing.TB, query string, args ...any) string {
	t.Helper()
	var v string
	err := s.AppSQL.QueryRowContext(context.Background(), query, args...).Scan(&v)
	if err == sql.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatalf("sqreal: %s: %v", query, err)
	}
	return v
}

// Snapshot describes a queue's batches and requests, one per line, for comparisons and failure messages.
func (s *Stack) Snapshot(t testing.TB, queue string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		"SELECT CONCAT(id, ' ', state, ' v', version, ' deps ', CAST(dependencies AS CHAR)) FROM batch WHERE queue = ? ORDER BY id",
		"SELECT CONCAT(id, ' ', state, ' v', version) FROM request WHERE queue = ? ORDER BY id",
	} {
		rows, err := s.AppSQL.QueryContext(context.Background(), q, queue)
		if err != nil {
			t.Fatalf("sqreal: %v", err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(line + "\n")
		}
		rows.Close()
	}
	return b.String()
}

// WaitRequests waits until every request of ids is in one of the states want.
func (s *Stack) WaitRequests(t testing.TB, timeout time.Duration, queue string, ids []string, want ...string) {
	t.Helper()
	s.Eventually(t, timeout, fmt.Sprintf("requests %v to be %v", ids, want), func() (bool, string) {
		for _, id := range ids {
			st := s.RequestState(t, queue, id)
			ok := false
			for _, w := range want {
				ok = ok || st == w
			}
			if !ok {
				return false, s.Snapshot(t, queue)
			}
		}
		return true, ""
	})
}

// Pending counts the rows of topic/partition the orchestrator's group has not acknowledged (every row
// above its watermark, all rows when it has none): what will still wake the queue.
func (s *Stack) Pending(t testing.TB, topic, partition string) int64 {
	t.Helper()
	return s.QueueInt(t, `SELECT COUNT(*) FROM queue_messages m WHERE m.topic = ? AND m.partition_key = ?
		AND m.offset > COALESCE((SELECT o.offset_acked FROM queue_offsets o
			WHERE o.consumer_group = ? AND o.topic = m.topic AND o.partition_key = m.partition_key), 0)`,
		topic, partition, GroupOrchestrator)
}

// Heartbeat returns the orchestrator's latest heartbeat_at (ms) for its subscriber to topic.
func (s *Stack) Heartbeat(t testing.TB, group, topic string) int64 {
	t.Helper()
	return s.QueueInt(t, "SELECT MAX(heartbeat_at) FROM queue_subscriber_heartbeats WHERE consumer_group = ? AND topic = ? AND deregistered_at = 0", group, topic)
}

// StaysStuck checks that the queue does not move for heartbeats of the orchestrator's speculate
// subscriber (it beats every lease renewal interval, 10 s): the batches and requests are unchanged and
// nothing is pending on speculate/<queue>. It returns the snapshot it held on.
func (s *Stack) StaysStuck(t testing.TB, queue string, heartbeats int) string {
	t.Helper()
	before := s.Snapshot(t, queue)
	if n := s.Pending(t, "speculate", queue); n != 0 {
		t.Fatalf("sqreal: %d rows are pending on speculate/%s: the queue is not stuck\n%s", n, queue, before)
	}
	last := s.Heartbeat(t, GroupOrchestrator, "speculate")
	seen := 0
	deadline := time.Now().Add(time.Duration(heartbeats+2) * 15 * time.Second)
	for seen < heartbeats {
		if time.Now().After(deadline) {
			t.Fatalf("sqreal: the orchestrator's speculate subscriber beat %d of %d times before %v", seen, heartbeats, deadline)
		}
		if now := s.Snapshot(t, queue); now != before {
			t.Fatalf("sqreal: the queue moved while it should stay stuck:\nbefore:\n%s\nnow:\n%s", before, now)
		}
		if hb := s.Heartbeat(t, GroupOrchestrator, "speculate"); hb > last {
			last, seen = hb, seen+1
		}
		time.Sleep(200 * time.Millisecond) // polling the database state, with the deadline above
	}
	if n := s.Pending(t, "speculate", queue); n != 0 {
		t.Fatalf("sqreal: %d rows appeared on speculate/%s while the queue should stay stuck", n, queue)
	}
	return before
}

// WaitReleased waits until group has no queue_offsets row (and no lease) for topic/partition: the real
// subscriber's idle-lease release, about 2 × its 30 s lease after the partition's last row was collected.
// It returns how long it waited.
func (s *Stack) WaitReleased(t testing.TB, timeout time.Duration, group, topic, partition string) time.Duration {
	t.Helper()
	began := time.Now()
	s.Eventually(t, timeout, fmt.Sprintf("%s to release %s/%s", group, topic, partition), func() (bool, string) {
		o := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = ? AND topic = ? AND partition_key = ?", group, topic, partition)
		l := s.QueueInt(t, "SELECT COUNT(*) FROM queue_partition_leases WHERE consumer_group = ? AND topic = ? AND partition_key = ?", group, topic, partition)
		return o == 0 && l == 0, fmt.Sprintf("%d offsets rows, %d lease rows", o, l)
	})
	return time.Since(began)
}

// CloseGate closes the consumer gate of group on partition (every partition when partition is ""): the
// queue's own CONSUMER_GATE_DIR mechanism; a gated delivery is parked and postponed, not failed.
func (s *Stack) CloseGate(t testing.TB, group, partition, reason string) {
	t.Helper()
	path := s.gatePath(group, partition)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"reason": reason, "closed_at_ms": time.Now().UnixMilli()})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// OpenGate opens the gate CloseGate closed.
func (s *Stack) OpenGate(t testing.TB, group, partition string) {
	t.Helper()
	if err := os.Remove(s.gatePath(group, partition)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

func (s *Stack) gatePath(group, partition string) string {
	name := "all"
	if partition != "" {
		name = "p-" + url.QueryEscape(partition)
	}
	return filepath.Join(s.GateDir, "gates", group, name)
}

// AppInt runs a query returning one integer on the application database.
func (s *Stack) AppInt(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n sql.NullInt64
	if err := s.AppSQL.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("sqreal: %s: %v", query, err)
	}
	return n.Int64
}

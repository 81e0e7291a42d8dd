package realqueue

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqreal"
)

// mendInterval is mend run's --interval here: one pass every 2 s.
const mendInterval = 2 * time.Second

// mendProc is the mend binary beside a stack: its own database (migrated with `mend migrate up`) and
// `mend run` as docs/operations.md deploys it beside an unmodified queue (subscription mode).
type mendProc struct {
	bin string
	db  *mysqltest.DB
	run *sqreal.Service
	// dsns are run's database flags (--dsn, --host-dsn, --queue-dsn, or their -file forms), which
	// doctor is given too.
	dsns []string
}

// newMend is prepareMend then attach: mend's binary and database, and its run beside s (not started).
func newMend(t *testing.T, s *sqreal.Stack, extra ...string) *mendProc {
	t.Helper()
	m := prepareMend(t)
	m.attach(t, s, extra...)
	return m
}

// prepareMend builds cmd/mend into t's temporary directory, makes mend's database and migrates it with
// the binary (mend migrate up).
func prepareMend(t *testing.T) *mendProc {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mend")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/mend")
	cmd.Dir = sqreal.ModuleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/mend: %v\n%s", err, out)
	}
	db := mysqltest.NewDB(t)
	if out, code := sqreal.Run(t, time.Minute, nil, bin, "migrate", "up", "--dsn", db.DSN); code != 0 {
		t.Fatalf("mend migrate up: exit %d\n%s", code, out)
	}
	return &mendProc{bin: bin, db: db}
}

// attach sets up `mend run` beside s with the host's DSNs (and extra flags), stopped at t's cleanup.
func (m *mendProc) attach(t *testing.T, s *sqreal.Stack, extra ...string) {
	t.Helper()
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--subscribe") }) {
		// These tests were written for the offset subscription; the test servers log in ROW with
		// every prerequisite of binlog mode, which auto would pick. Binlog mode has its own tests
		// (binlog_test.go).
		extra = append([]string{"--subscribe-mode", "offsets"}, extra...)
	}
	m.attachWith(t, s, []string{"--dsn", m.db.DSN, "--host-dsn", s.App.DSN, "--queue-dsn", s.Queue.DSN}, extra...)
}

// attachWith sets up `mend run` beside s with the database flags dsns (and extra flags), stopped at
// t's cleanup.
func (m *mendProc) attachWith(t *testing.T, s *sqreal.Stack, dsns []string, extra ...string) {
	t.Helper()
	metrics := freeAddr(t)
	m.dsns = dsns
	args := append([]string{"run"}, dsns...)
	m.run = &sqreal.Service{
		Name: "mend",
		Bin:  m.bin,
		Args: append(append(args, "--interval", mendInterval.String(), "--metrics-addr", metrics), extra...),
		Addr: metrics,
		Log:  filepath.Join(s.Dir, "logs", "mend.log"),
	}
	m.stopAtCleanup(t)
}

// stopAtCleanup stops m's run at t's cleanup, printing its log's tail if t failed.
func (m *mendProc) stopAtCleanup(t *testing.T) {
	t.Cleanup(func() {
		if err := m.run.Stop(); err != nil {
			t.Errorf("%v\n%s", err, sqreal.Tail(m.run.Log, 40))
		}
		if t.Failed() {
			t.Logf("%s", sqreal.Tail(m.run.Log, 80))
		}
	})
}

// withMetricsAddr returns a copy of run's args with --metrics-addr set to addr (a second process beside
// a running one needs its own).
func withMetricsAddr(args []string, addr string) []string {
	out := append([]string{}, args...)
	for i := range out {
		if out[i] == "--metrics-addr" && i+1 < len(out) {
			out[i+1] = addr
		}
	}
	return out
}

// doctor runs `mend doctor` with run's database flags and fails t unless it passes.
func (m *mendProc) doctor(t *testing.T) {
	t.Helper()
	out, code := sqreal.Run(t, time.Minute, nil, m.bin, append([]string{"doctor"}, m.dsns...)...)
	if code != 0 {
		t.Fatalf("mend doctor: exit %d\n%s", code, out)
	}
}

// records counts mend's records of queue, and those done.
func (m *mendProc) records(t *testing.T, queue string) (all, done int64) {
	t.Helper()
	db := m.db.SQL(t)
	err := db.QueryRowContext(context.Background(),
		"SELECT COUNT(*), COALESCE(SUM(state = 'done'), 0) FROM mend_records WHERE queue = ?", queue).Scan(&all, &done)
	if err != nil {
		t.Fatalf("count mend_records: %v", err)
	}
	return all, done
}

// groupRows counts mend's consumer group's queue_offsets rows on topic/partition.
func groupRows(t *testing.T, s *sqreal.Stack, topic, partition string) int64 {
	t.Helper()
	return s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend' AND topic = ? AND partition_key = ?", topic, partition)
}

// wake is one row published to speculate, as the test's observer trigger saw it inserted.
type wake struct {
	Offset     int64
	ID         string
	Partition  string
	Batch      string
	BatchState string // the named batch's state when the row was inserted ("" if it did not exist)
}

// observeSpeculate installs a trigger on the host's queue_messages (a test's own observer: it changes
// nothing the queue reads) that copies every row inserted on speculate, with the named batch's state at
// that moment, into realq_speculate_log in the queue database. Rows the queue's GC deletes stay there.
func observeSpeculate(t *testing.T, s *sqreal.Stack) {
	t.Helper()
	ctx := context.Background()
	stmts := []string{
		`CREATE TABLE realq_speculate_log (
			seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			msg_offset BIGINT UNSIGNED NOT NULL,
			id VARCHAR(255) NOT NULL,
			partition_key VARCHAR(255) NOT NULL,
			batch_id VARCHAR(255) NULL,
			batch_state VARCHAR(255) NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		fmt.Sprintf(`CREATE TRIGGER realq_speculate_observer AFTER INSERT ON queue_messages FOR EACH ROW
		BEGIN
			DECLARE bid VARCHAR(255) DEFAULT NULL;
			IF NEW.topic = 'speculate' THEN
				IF JSON_VALID(CONVERT(NEW.payload USING utf8mb4)) THEN
					SET bid = JSON_UNQUOTE(JSON_EXTRACT(CONVERT(NEW.payload USING utf8mb4), '$.id'));
				END IF;
				INSERT INTO realq_speculate_log (msg_offset, id, partition_key, batch_id, batch_state)
				VALUES (NEW.offset, NEW.id, NEW.partition_key, bid,
					(SELECT b.state FROM %s.batch b
					  WHERE CONVERT(b.queue USING utf8mb4) COLLATE utf8mb4_bin = NEW.partition_key
					    AND CONVERT(b.id USING utf8mb4) COLLATE utf8mb4_bin = bid));
			END IF;
		END`, "`"+s.App.Name+"`"),
	}
	for _, q := range stmts {
		if _, err := s.QueueSQL.ExecContext(ctx, q); err != nil {
			t.Fatalf("install the speculate observer: %v\n%s", err, q)
		}
	}
}

// wakes returns the observed speculate rows of partition whose ID starts with prefix, in offset order.
func wakes(t *testing.T, s *sqreal.Stack, partition, prefix string) []wake {
	t.Helper()
	rows, err := s.QueueSQL.QueryContext(context.Background(),
		"SELECT msg_offset, id, partition_key, COALESCE(batch_id, ''), COALESCE(batch_state, '') FROM realq_speculate_log WHERE partition_key = ? AND id LIKE ? ORDER BY msg_offset",
		partition, strings.ReplaceAll(prefix, "%", `\%`)+"%")
	if err != nil {
		t.Fatalf("read realq_speculate_log: %v", err)
	}
	defer rows.Close()
	var out []wake
	for rows.Next() {
		var w wake
		if err := rows.Scan(&w.Offset, &w.ID, &w.Partition, &w.Batch, &w.BatchState); err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// liveStates are the batch states the queue's speculate consumer acts on (entity.ActiveBatchStates).
var liveStates = map[string]bool{"created": true, "speculating": true, "merging": true, "cancelling": true}

// wokenIDs returns the distinct wake-up message IDs of mend's "woken" events for queue: one per repair
// that woke it (a repair covering several records writes the same ID on each), sorted.
func (m *mendProc) wokenIDs(t *testing.T, queue string) []string {
	t.Helper()
	rows, err := m.db.SQL(t).QueryContext(context.Background(),
		"SELECT DISTINCT JSON_UNQUOTE(JSON_EXTRACT(data, '$.message_id')) FROM mend_events WHERE queue = ? AND kind = 'woken' ORDER BY 1", queue)
	if err != nil {
		t.Fatalf("read mend_events: %v", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// checkMendWakes asserts that the wake-ups mend published on speculate/queue are exactly those its event
// log says its repairs sent (one per repair, none twice, at least one), each naming a batch that was
// live when it was inserted, and each read by the real orchestrator (checkRead). It returns how many.
func checkMendWakes(t *testing.T, s *sqreal.Stack, m *mendProc, queue string) int {
	t.Helper()
	ws := wakes(t, s, queue, "mend/")
	var published []string
	for _, w := range ws {
		published = append(published, w.ID)
		if !liveStates[w.BatchState] {
			t.Errorf("mend's wake-up %s names batch %q, %q when it was published: not live", w.ID, w.Batch, w.BatchState)
		}
	}
	sort.Strings(published)
	repairs := m.wokenIDs(t, queue)
	if len(published) == 0 || strings.Join(published, ",") != strings.Join(repairs, ",") {
		t.Errorf("mend published wake-ups %v on speculate/%s; its repairs woke with %v (want the same, one per repair, at least one)",
			published, queue, repairs)
	}
	checkRead(t, s, published)
	return len(published)
}

// checkRead asserts from the real services' logs that the orchestrator's speculate consumer processed
// each wake-up of ids successfully, and that no service logged an error about any of them or a poll
// failure on speculate (a row it cannot decode fails its whole partition's fetch).
func checkRead(t *testing.T, s *sqreal.Stack, ids []string) {
	t.Helper()
	waitConsumed(t, s, ids)
	checkNoLoggedErrors(t, s, "speculate", ids)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	// The same as the stack's: a loopback port free at the time of the call.
	return sqreal.FreeAddr(t)
}

// stuckRecords counts mend's stuck-queue records of queue (topic mend/stuck: the scan's own source).
func (m *mendProc) stuckRecords(t *testing.T, queue string) int64 {
	t.Helper()
	var n int64
	if err := m.db.SQL(t).QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM mend_records WHERE queue = ? AND topic = 'mend/stuck'", queue).Scan(&n); err != nil {
		t.Fatalf("count stuck-queue records: %v", err)
	}
	return n
}

// passDone is mend run's line at the end of a pass (cmd/mend logPass, text format): at info level when
// the pass ran at least one queue.
var (
	passDone  = regexp.MustCompile(`msg="pass done" .*\bqueues=(\d+)\b.*\bwoken=(\d+)\b.*\btook=(\S+)`)
	passStart = "==== sqreal: start mend"
)

// passSlack is what checkWokeInOnePass allows beyond one pass for a timer that fires late and the
// database's and mend's clocks read at different moments on a loaded machine: passes start at a fixed
// rate (reconcile.Start), so a record due at c is listed by a pass that starts by c + --interval.
const passSlack = 500 * time.Millisecond

// checkWokeInOnePass checks that mend's current run woke queue in the first pass that ran it: in mend's
// log since its last start, the first "pass done" line with queues > 0 has woken > 0; and, by mend's
// database clock, its "woken" event came at most one --interval (2 s) plus that pass's own time (and
// passSlack) after the record's "created" event (so no pass was spent holding the wake-up).
func (m *mendProc) checkWokeInOnePass(t *testing.T, queue string) {
	t.Helper()
	var pass string
	var took time.Duration
	deadline := time.Now().Add(30 * time.Second)
	for pass == "" {
		b, err := os.ReadFile(m.run.Log)
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		log = log[strings.LastIndex(log, passStart):]
		for _, l := range strings.Split(log, "\n") {
			if mm := passDone.FindStringSubmatch(l); mm != nil && mm[1] != "0" {
				if mm[2] == "0" {
					t.Fatalf("mend's first pass that ran a queue after its restart woke nothing:\n%s", l)
				}
				pass = l
				if took, err = time.ParseDuration(mm[3]); err != nil {
					t.Fatalf("took=%s: %v", mm[3], err)
				}
				break
			}
		}
		if pass == "" && time.Now().After(deadline) {
			t.Fatalf("no pass that ran a queue in mend's log since its restart\n%s", sqreal.Tail(m.run.Log, 40))
		}
		time.Sleep(100 * time.Millisecond) // polling the log file, with the deadline above
	}
	var gapUS int64
	if err := m.db.SQL(t).QueryRowContext(context.Background(), `SELECT TIMESTAMPDIFF(MICROSECOND,
			(SELECT MIN(created_at) FROM mend_events WHERE queue = ? AND kind = 'created'),
			(SELECT MIN(created_at) FROM mend_events WHERE queue = ? AND kind = 'woken'))`, queue, queue).Scan(&gapUS); err != nil {
		t.Fatalf("read mend_events: %v", err)
	}
	gap := time.Duration(gapUS) * time.Microsecond
	if bound := mendInterval + took + passSlack; gap > bound {
		t.Errorf("the wake-up came %v after the record (by mend's database clock), want within one pass: --interval %v + the pass's %v (+ %v slack)",
			gap, mendInterval, took, passSlack)
	}
	t.Logf("woken in the first pass that ran %s after the restart, %v after the record was created (one pass: --interval %v + took %v): %s",
		queue, gap.Round(time.Millisecond), mendInterval, took, pass)
}

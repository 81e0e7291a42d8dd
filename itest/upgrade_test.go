package itest

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// EnvUpgradeCache names the directory where TestMixedVersions keeps the
// binaries it builds from older commits, one per commit; default: the
// user's cache directory. Building one takes about half a minute.
const EnvUpgradeCache = "MEND_UPGRADE_CACHE"

// oldCommit is the commit pinned in testdata/old-version.
func oldCommit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "old-version"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line
		}
	}
	t.Fatal("testdata/old-version names no commit")
	return ""
}

// refuseNewer is a file added to an old binary's source for the negative
// control: its mend run exits with an error as soon as mend's schema is
// newer than the migrations it embeds, as a binary with a strict version
// check would (every mend before issue 31 refused to start on one).
const refuseNewer = `package main

import (
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func init() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return
	}
	var dsn string
	for i, a := range os.Args {
		if a == "--dsn" && i+1 < len(os.Args) {
			dsn = os.Args[i+1]
		}
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return
	}
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			var v int
			if db.QueryRow("SELECT version FROM mend_schema_migrations LIMIT 1").Scan(&v) == nil && v > %d {
				fmt.Fprintf(os.Stderr, "refusing: mend's schema %%d is newer than this binary knows (%d)\n", v)
				os.Exit(1)
			}
		}
	}()
}
`

// buildOld returns the mend binary of commit, built once per commit (and
// variant) into the cache directory. strict adds refuseNewer.
func buildOld(t *testing.T, commit string, strict bool) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v (TestMixedVersions builds an older commit from this repository's history)", err)
	}
	if err := exec.Command("git", "-C", strings.TrimSpace(string(root)), "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("commit %s of testdata/old-version is not in this clone: CI needs the full history", commit)
		}
		t.Skipf("commit %s of testdata/old-version is not in this clone (a shallow clone?)", commit)
	}
	cache := os.Getenv(EnvUpgradeCache)
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(dir, "mend-itest")
	}
	name := "mend-" + commit
	if strict {
		name += "-strict"
	}
	bin := filepath.Join(cache, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(root)), commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	if strict {
		ups, err := fs.Glob(os.DirFS(src), "migrations/*.up.sql")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "cmd", "mend", "zz_refuse_newer.go"), fmt.Appendf(nil, refuseNewer, len(ups), len(ups)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := bin + fmt.Sprintf(".%d.tmp", os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, "./cmd/mend")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", commit, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// replica is one mend run process and its JSON log.
type replica struct {
	name     string
	mu       sync.Mutex
	cmd      *exec.Cmd // the current process
	restarts int       // starts retried after a preflight timeout
	old      bool      // the old binary's
	log      []string
	termAt   int // len(log) when stop sent SIGTERM; -1 before
	done     chan struct{}
	err      error
}

func (r *replica) process() *os.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd.Process
}

func (r *replica) kill() { _ = r.process().Kill() }

// logLines returns the replica's log so far.
func (r *replica) logLines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// exited reports whether the process ended, and how.
func (r *replica) exited() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits for the process; an exit other than 0 is
// returned.
func (r *replica) stop(t *testing.T) error {
	t.Helper()
	if ended, err := r.exited(); ended {
		return fmt.Errorf("%s had already exited: %v", r.name, err)
	}
	r.mu.Lock()
	r.termAt = len(r.log)
	r.mu.Unlock()
	_ = r.process().Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		return r.err
	case <-time.After(60 * time.Second):
		r.kill()
		<-r.done
		return fmt.Errorf("%s did not stop within 60s of SIGTERM", r.name)
	}
}

// upgrade is one database pair and the two binaries.
type upgrade struct {
	oldBin, newBin string
	db, hostDB     *mysqltest.DB
	conn           *sql.DB // one pool on mend's database for the whole test
	sq             sqtest.World
	queues         []string

	mu   sync.Mutex
	fed  []fedLetter
	next int

	replicas []*replica
}

type fedLetter struct{ queue, batch string }

// mend runs a one-shot command of bin and returns its output; a non-zero
// exit is an error.
func (u *upgrade) mend(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = baseEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("mend %s: %w\n%s", strings.Join(args[:min(2, len(args))], " "), err, out)
	}
	return string(out), nil
}

// start starts mend run of bin as a replica named name. A start refused
// only because the checks before it ran out of time (a loaded machine) is
// retried, up to three times, as an orchestrator restarts a pod; any other
// exit stands.
func (u *upgrade) start(t *testing.T, bin, name string) *replica {
	t.Helper()
	r := &replica{name: name, done: make(chan struct{}), old: bin == u.oldBin, termAt: -1}
	args := []string{"run", "--dsn", u.db.DSN, "--host-dsn", u.hostDB.DSN, "--queue-dsn", u.hostDB.DSN,
		"--holder", name, "--interval", "200ms", "--log-format", "json",
		"--subscribe-interval", "50ms", "--subscribe-settle", "1s"}
	launch := func() (*exec.Cmd, *bufio.Scanner, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = baseEnv()
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		return cmd, sc, nil
	}
	cmd, sc, err := launch()
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	go func() {
		defer close(r.done)
		for attempt := 1; ; attempt++ {
			timedOut := false
			for sc.Scan() {
				line := sc.Text()
				if strings.Contains(line, "refusing to start") && strings.Contains(line, "context deadline exceeded") {
					timedOut = true
				}
				r.mu.Lock()
				r.log = append(r.log, line)
				r.mu.Unlock()
			}
			r.err = cmd.Wait()
			if r.err == nil || !timedOut || attempt == 3 {
				return
			}
			if cmd, sc, err = launch(); err != nil {
				r.err = err
				return
			}
			r.mu.Lock()
			r.cmd = cmd
			r.restarts++
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if ended, _ := r.exited(); !ended {
			r.kill()
			<-r.done
		}
	})
	u.replicas = append(u.replicas, r)
	return r
}

// feed dead-letters one batch of the next queue in turn, as the submit
// queue's store does: the batch, its speculate message, then the move to
// speculate_dlq.
func (u *upgrade) feed(ctx context.Context) error {
	u.mu.Lock()
	i := u.next
	u.next++
	u.mu.Unlock()
	q := u.queues[i%len(u.queues)]
	batch := fmt.Sprintf("%s/batch/%04d", q, i)
	if err := u.sq.SeedBatch(ctx, q, batch, "speculating", fmt.Sprintf("%s/req/%04d", q, i)); err != nil {
		return err
	}
	if err := u.sq.Publish(ctx, "speculate", q, batch, []byte(batchMsg(q, batch)), nil); err != nil {
		return err
	}
	if err := u.sq.MoveToDLQ(ctx, "speculate", q, batch, sqtest.Failure{Count: 3, LastError: "boom"}); err != nil {
		return err
	}
	u.mu.Lock()
	u.fed = append(u.fed, fedLetter{q, batch})
	u.mu.Unlock()
	return nil
}

// feeder dead-letters a batch every 50 ms until the returned stop is
// called; stop returns the first error.
func (u *upgrade) feeder() (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				errc <- nil
				return
			case <-tick.C:
				if err := u.feed(ctx); err != nil && ctx.Err() == nil {
					errc <- err
					return
				}
			}
		}
	}()
	return func() error { cancel(); return <-errc }
}

// doneCount is how many records are done.
func (u *upgrade) doneCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := u.conn.QueryRow("SELECT COUNT(*) FROM mend_records WHERE state = 'done'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitDone waits until at least n records are done; it gives up after
// 90 s, or at once when every replica started has exited.
func (u *upgrade) waitDone(t *testing.T, n int, what string) error {
	t.Helper()
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	poll := time.NewTicker(100 * time.Millisecond) // polling the database with a deadline
	defer poll.Stop()
	for {
		done := u.doneCount(t)
		if done >= n {
			return nil
		}
		running := 0
		for _, r := range u.replicas {
			if ended, _ := r.exited(); !ended {
				running++
			}
		}
		if running == 0 {
			return fmt.Errorf("%s: %d records done of %d, and no replica runs", what, done, n)
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("%s: only %d records done after 90s; want %d", what, done, n)
		case <-poll.C:
		}
	}
}

// waitSettled waits until every dead letter fed is a done record.
func (u *upgrade) waitSettled(t *testing.T, what string) error {
	t.Helper()
	u.mu.Lock()
	n := len(u.fed)
	u.mu.Unlock()
	return u.waitDone(t, n, what)
}

// check returns what is wrong after a phase: a dead letter without its
// record, a record not woken, a queue whose wake-ups the strict consumer
// refuses or that has none, an event written under an older term after a
// newer one, a term missing from the history, a failed pass in any log, a
// replica that exited on its own.
func (u *upgrade) check(t *testing.T, phase string) []string {
	t.Helper()
	ctx := context.Background()
	db := u.conn
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, phase+": "+fmt.Sprintf(format, args...)) }
	u.mu.Lock()
	fed := append([]fedLetter(nil), u.fed...)
	u.mu.Unlock()
	for _, f := range fed {
		var state string
		err := db.QueryRow("SELECT state FROM mend_records WHERE queue = ? AND topic = 'speculate_dlq' AND message_id = ?", f.queue, f.batch).Scan(&state)
		if err != nil || state != "done" {
			add("dead letter %s: record state %q (%v); want done", f.batch, state, err)
		}
		if b, err := u.sq.Batch(ctx, f.queue, f.batch); err != nil || b.State != "failed" {
			add("batch %s is %q (%v); want failed", f.batch, b.State, err)
		}
	}
	var records int
	if err := db.QueryRow("SELECT COUNT(*) FROM mend_records").Scan(&records); err != nil || records != len(fed) {
		add("%d records (%v) for %d dead letters", records, err, len(fed))
	}
	for _, q := range []struct{ what, sql string }{
		{"records whose last event is not woken", `SELECT COUNT(*) FROM mend_records r JOIN mend_events e ON e.record_id = r.record_id AND e.seq = r.version WHERE e.kind <> 'woken'`},
		{"events of an older term after a newer term's", `SELECT COUNT(*) FROM mend_events a JOIN mend_events b ON b.record_id = a.record_id AND b.seq = a.seq + 1 WHERE b.epoch > 0 AND a.epoch > b.epoch`},
		{"events under a term the lease history lacks", `SELECT COUNT(*) FROM mend_events e LEFT JOIN mend_lease_history h ON h.queue = e.queue AND h.epoch = e.epoch WHERE e.epoch > 0 AND h.epoch IS NULL`},
		{"lease rows behind their history", `SELECT COUNT(*) FROM mend_leases l JOIN mend_lease_history h ON h.queue = l.queue AND h.epoch > l.epoch`},
	} {
		var n int
		if err := db.QueryRow(q.sql).Scan(&n); err != nil || n != 0 {
			add("%d %s (%v)", n, q.what, err)
		}
	}
	for _, q := range u.queues {
		wakes, err := u.sq.ConsumeSpeculate(ctx, q, false)
		if err != nil || len(wakes) == 0 {
			add("queue %s: %d wake-ups, strict consumer: %v", q, len(wakes), err)
		}
	}
	for _, r := range u.replicas {
		r.mu.Lock()
		restarts := r.restarts
		r.mu.Unlock()
		if restarts > 0 {
			t.Logf("%s: replica %s's start was retried %d time(s) after its checks ran out of time", phase, r.name, restarts)
		}
		if ended, err := r.exited(); ended && err != nil {
			add("replica %s exited: %v; last lines:\n%s", r.name, err, lastLines(r.logLines(), 5))
		}
		lines := r.logLines()
		r.mu.Lock()
		termAt := r.termAt
		r.mu.Unlock()
		// The old binary counts a recording cut off by its own SIGTERM as
		// a failed pass (fixed since: TestStopMidRecordingIsNoFailure); a
		// failed pass it logged after the stop, with only "context
		// canceled" failures after the stop to explain it, is that.
		stopCut := false
		if r.old && termAt >= 0 {
			cut, other := false, false
			for _, line := range lines[termAt:] {
				if strings.Contains(line, "recording a partition failed") {
					cut = cut || strings.Contains(line, "context canceled")
					other = other || !strings.Contains(line, "context canceled")
				}
			}
			stopCut = cut && !other
		}
		for i, line := range lines {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				if !strings.HasPrefix(line, "[mysql]") {
					add("replica %s logged a line that is not JSON: %s", r.name, line)
				}
				continue
			}
			failed, _ := m["failed"].(float64)
			attempts, _ := m["attempts_failed"].(float64)
			msg, _ := m["msg"].(string)
			if retried := restarts > 0 && (m["check"] != nil || strings.Contains(msg, "context deadline exceeded")); retried {
				continue // a start refused for a timeout, retried (see start)
			}
			if stopCut && i >= termAt && failed > 0 && m["level"] != "ERROR" && attempts == 0 {
				continue
			}
			if m["level"] == "ERROR" || failed > 0 || attempts > 0 {
				add("replica %s: %s", r.name, line)
			}
		}
	}
	return problems
}

func lastLines(lines []string, n int) string {
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// mixedVersions rehearses an upgrade with oldBin beside newBin and returns
// the problems found. Roll forward: the old binary's replicas work on its
// schema; the new binary's migrate up lands under them; new replicas join;
// the old ones stop. Roll back (with back): the new replicas stop, the new
// binary's migrate down reverts its expand step, an old replica takes over.
// Dead letters arrive all along; after each direction every one is a done,
// woken record, every term fenced, no pass failed, and the new binary's
// verify is clean. Setup failures end the test; the problems are the
// rehearsal's findings.
func mixedVersions(t *testing.T, oldBin, newBin string, back bool) []string {
	t.Helper()
	ctx := context.Background()
	u := &upgrade{oldBin: oldBin, newBin: newBin, db: mysqltest.NewDB(t), hostDB: mysqltest.NewHostDB(t, sqtest.Apply),
		queues: []string{"qa", "qb", "qc"}}
	s := u.hostDB.SQL(t)
	u.sq = sqtest.World{App: s, Queue: s}
	u.conn = u.db.SQL(t)
	for _, q := range u.queues {
		// The batch every wake-up of the queue names: it stays live.
		if err := u.sq.SeedBatch(ctx, q, q+"/live", "created", q+"/live-req"); err != nil {
			t.Fatal(err)
		}
		// The host's planner reads the wake topic, as a running host does:
		// mend run refuses a wake topic no host group has joined (issue 30).
		if err := u.sq.Join(ctx, "orchestrator", "speculate", q); err != nil {
			t.Fatal(err)
		}
	}
	must := func(bin string, args ...string) string {
		t.Helper()
		out, err := u.mend(bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	must(oldBin, "migrate", "up", "--dsn", u.db.DSN)
	began := time.Now()
	var problems []string
	defer func() {
		t.Logf("rehearsal took %s", time.Since(began).Round(time.Second))
		if len(problems) == 0 {
			return
		}
		for _, r := range u.replicas { // context for the problems: every warning
			for _, line := range r.logLines() {
				if strings.Contains(line, `"level":"WARN"`) && !strings.Contains(line, `"component":"mysql"`) {
					t.Logf("%s warned: %s", r.name, line)
				}
			}
		}
	}()
	wait := func(err error) {
		if err != nil {
			problems = append(problems, err.Error())
		}
	}

	// Roll forward.
	old1, old2 := u.start(t, oldBin, "old-1"), u.start(t, oldBin, "old-2")
	stopFeed := u.feeder()
	wait(u.waitDone(t, 6, "old replicas on the old schema"))
	t.Logf("migrate up under the old replicas:\n%s", must(newBin, "migrate", "up", "--dsn", u.db.DSN))
	wait(u.waitDone(t, u.doneCount(t)+6, "old replicas on the new schema"))
	new1, new2 := u.start(t, newBin, "new-1"), u.start(t, newBin, "new-2")
	wait(u.waitDone(t, u.doneCount(t)+6, "old and new replicas together"))
	for _, r := range []*replica{old1, old2} {
		if err := r.stop(t); err != nil {
			problems = append(problems, fmt.Sprintf("stopping %s: %v", r.name, err))
		}
	}
	wait(u.waitDone(t, u.doneCount(t)+6, "new replicas alone"))
	if err := stopFeed(); err != nil {
		t.Fatal(err)
	}
	wait(u.waitSettled(t, "roll forward"))
	problems = append(problems, u.check(t, "roll forward")...)
	if out, err := u.mend(newBin, "verify", "--dsn", u.db.DSN); err != nil {
		problems = append(problems, "roll forward: verify: "+err.Error())
	} else {
		t.Logf("verify after rolling forward: %s", strings.TrimSpace(out))
	}
	if !back {
		for _, r := range []*replica{new1, new2} {
			if err := r.stop(t); err != nil {
				problems = append(problems, fmt.Sprintf("stopping %s: %v", r.name, err))
			}
		}
		return problems
	}

	// Roll back.
	stopFeed = u.feeder()
	for _, r := range []*replica{new1, new2} {
		if err := r.stop(t); err != nil {
			problems = append(problems, fmt.Sprintf("stopping %s: %v", r.name, err))
		}
	}
	t.Logf("migrate down of the expand step:\n%s", must(newBin, "migrate", "down", "1", "--yes", "--dsn", u.db.DSN))
	old3 := u.start(t, oldBin, "old-3")
	wait(u.waitDone(t, u.doneCount(t)+6, "old replica after the rollback"))
	if err := stopFeed(); err != nil {
		t.Fatal(err)
	}
	wait(u.waitSettled(t, "roll back"))
	problems = append(problems, u.check(t, "roll back")...)
	if err := old3.stop(t); err != nil {
		problems = append(problems, fmt.Sprintf("stopping %s: %v", old3.name, err))
	}
	// Forward again, so the new binary verifies what both wrote.
	must(newBin, "migrate", "up", "--dsn", u.db.DSN)
	if out, err := u.mend(newBin, "verify", "--dsn", u.db.DSN); err != nil {
		problems = append(problems, "after the rollback: verify: "+err.Error())
	} else {
		t.Logf("verify after rolling back and forward again: %s", strings.TrimSpace(out))
	}
	return problems
}

// An upgrade across an expand migration with replicas of both versions
// running, forward and back, on one database (issue 31). The old binary is
// the commit in testdata/old-version.
func TestMixedVersions(t *testing.T) {
	t.Parallel()
	mysqltest.SkipVitess(t, "mend migrate down does not work through vtgate (golang-migrate's DELETE ... LIMIT 1 on a reference table)")
	commit := oldCommit(t)
	newBin := buildMend(t).bin

	t.Run("forward and back", func(t *testing.T) {
		t.Parallel()
		oldBin := buildOld(t, commit, false)
		if problems := mixedVersions(t, oldBin, newBin, true); len(problems) > 0 {
			t.Fatalf("mixed versions:\n%s", strings.Join(problems, "\n"))
		}
	})

	// Negative control: an old binary that refuses any newer schema (as
	// every mend did before issue 31) fails the rehearsal.
	t.Run("a binary that refuses a newer schema fails it", func(t *testing.T) {
		t.Parallel()
		oldBin := buildOld(t, commit, true)
		problems := mixedVersions(t, oldBin, newBin, false)
		found := false
		for _, p := range problems {
			if strings.Contains(p, "refusing: mend's schema") {
				found = true
			}
		}
		if !found {
			t.Fatalf("the strict old binary passed the rehearsal; problems: %q", problems)
		}
		t.Logf("caught: %s", problems[0])
	})
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// lockedBuffer is a bytes.Buffer safe for a running mend run to write
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// scrapeGauge reads one series' value from a /metrics page (text format),
// and whether it was there.
func scrapeGauge(page, name, queue string) (float64, bool) {
	prefix := name + `{queue="` + queue + `"} `
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// failingThreshold is MendRepairsFailing's threshold in the shipped rules:
// the test waits for the real number, not a shortened one.
func failingThreshold(t *testing.T) float64 {
	t.Helper()
	rules, err := os.ReadFile("../../deploy/prometheus/mend-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)alert: MendRepairsFailing\s+expr: max by \(queue\) \(mend_oldest_failing_seconds\) > (\d+)\n`).FindSubmatch(rules)
	if m == nil {
		t.Fatal("MendRepairsFailing: no rule on mend_oldest_failing_seconds in deploy/prometheus/mend-alerts.yml")
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// Issue 47: a host grant revoked under a running mend run. Every attempt
// fails ("UPDATE command denied"), the record backs off, so it is not due
// and mend_oldest_due_seconds stays near 0 (MendRepairStuck cannot fire);
// mend_oldest_failing_seconds climbs past MendRepairsFailing's threshold
// while the record is pending with its next attempt in the future, and its
// last error names the GRANT that fixes it. Granted again, the record is
// repaired and the gauge falls to 0. The threshold is the shipped rule's,
// so the test takes a little over a minute.
func TestFailingRepairPages(t *testing.T) {
	t.Parallel()
	threshold := failingThreshold(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	for _, seed := range []func() error{
		func() error { return w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
		func() error { return w.Join(ctx, "orchestrator", "speculate", "q") },
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}
	g := hostGrants()
	delete(g, "queue_messages")       // in queueDB, reached as its owner
	delete(g, "queue_delivery_state") // likewise (the stuck scan reads it)
	u := newHostUser(t, appDB, g)
	root, err := sql.Open("mysql", appDB.Server.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	store, err := storage.Open(ctx, mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		args := []string{"run", "--dsn", mendDB.DSN, "--host-dsn", u.dsn, "--queue-dsn", queueDB.DSN, "--interval", "200ms",
			"--retry-base", "2s", "--retry-max", "4s", "--max-attempts", "1000", "--metrics-addr", "127.0.0.1:0"}
		done <- Main(ctx, args, io.Discard, &stderr, func(string) string { return "" })
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// wait polls cond every tick until it holds, mend run exits, or limit.
	wait := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.After(limit)
		for !cond() {
			select {
			case code := <-done:
				t.Fatalf("mend run exited %d while waiting for %s:\n%s", code, what, stderr.String())
			case <-deadline:
				t.Fatalf("after %s, still waiting for %s:\n%s", limit, what, stderr.String())
			case <-tick.C:
			}
		}
	}
	addrRE := regexp.MustCompile(`msg="serving metrics" .*?addr=(\S+)`)
	var addr string
	wait("mend run to serve metrics", 30*time.Second, func() bool {
		m := addrRE.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	if _, err := root.ExecContext(ctx, fmt.Sprintf("REVOKE UPDATE ON `%s`.`batch` FROM %s", appDB.Name, u.account)); err != nil {
		t.Fatal(err)
	}
	rec, _, err := store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"},
		Snapshot: mend.Snapshot{Payload: []byte(`{"id":"q/batch/1","queue":"q"}`), FailureCount: 3, LastError: "boom", FailedAt: time.Now()},
		Target:   mend.Target{BatchID: "q/batch/1", Desired: mend.OutcomeFailed},
		OpID:     mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}

	var maxDue float64
	var page string
	wait("mend_oldest_failing_seconds to cross the threshold", time.Duration(threshold+60)*time.Second, func() bool {
		page = scrape()
		due, _ := scrapeGauge(page, "mend_oldest_due_seconds", "q")
		maxDue = max(maxDue, due)
		v, _ := scrapeGauge(page, "mend_oldest_failing_seconds", "q")
		return v > threshold
	})
	got, err := store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	// MariaDB names the table's database in its refusal, MySQL does not
	// (then the GRANT is for the DSN's database, and says so).
	user := strings.Trim(strings.Split(u.account, "@")[0], "'")
	grant := regexp.MustCompile("GRANT UPDATE ON (`" + appDB.Name + "`\\.)?`batch` TO '" + user + "'")
	if got.State != mend.StatePending || got.Attempts < 2 || got.NextAttemptAt == nil || !grant.MatchString(got.LastError) {
		t.Errorf("record = %s, %d attempts, next %v, last error %q; want pending, failing, backing off, naming %q",
			got.State, got.Attempts, got.NextAttemptAt, got.LastError, grant)
	}
	var st []queueStatusJSON
	if err := json.Unmarshal([]byte(opsMust(t, "status", "--dsn", mendDB.DSN, "--json").stdout), &st); err != nil || len(st) != 1 ||
		st[0].Failing != 1 || st[0].OldestFailingSecs <= threshold || !grant.MatchString(st[0].FailingLastError) {
		t.Errorf("status --json = %+v, %v; want the one failing record, failing for over %v s, as the gauge, its last error naming the GRANT", st, err, threshold)
	}
	if text := opsMust(t, "status", "--dsn", mendDB.DSN).stdout; !strings.Contains(text, "failing repairs") || !grant.MatchString(text) {
		t.Errorf("status does not list the failing record with its GRANT:\n%s", text)
	}
	if n, _ := scrapeGauge(page, "mend_records_failing", "q"); n != 1 {
		t.Errorf("mend_records_failing{queue=q} = %v; want 1", n)
	}
	// The record backed off all along: the due gauge (MendRepairStuck's)
	// never came near its page, which is why this one exists.
	if maxDue > 5 {
		t.Errorf("mend_oldest_due_seconds{queue=q} reached %v while failing; want it near 0 (the record backs off)", maxDue)
	}
	if !strings.Contains(stderr.String(), "GRANT UPDATE ON") {
		t.Errorf("mend run's log does not name the GRANT:\n%s", stderr.String())
	}

	if _, err := root.ExecContext(ctx, fmt.Sprintf("GRANT UPDATE ON `%s`.`batch` TO %s", appDB.Name, u.account)); err != nil {
		t.Fatal(err)
	}
	wait("the record to be repaired once granted", 60*time.Second, func() bool {
		r, err := store.RecordGetByID(ctx, "q", rec.ID)
		return err == nil && r.State == mend.StateDone
	})
	if v, ok := scrapeGauge(scrape(), "mend_oldest_failing_seconds", "q"); !ok || v != 0 {
		t.Errorf("mend_oldest_failing_seconds{queue=q} = %v (present %v) once repaired; want 0", v, ok)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("mend run exited %d on cancel:\n%s", code, stderr.String())
	}
}

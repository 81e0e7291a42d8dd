package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// The benchmark's world: records across queues (record i in queue
// c<i mod queues>), one in 100 parked, one in 100 due, the rest done, their
// last change spread over the past day (so about 1/24 finished within the
// last hour, which the overview's latency and chart read). Every queue has
// a released lease. One in 1,000 (a tenth of the pending ones) is failing:
// 1 to 7 failed attempts, with an error.
const (
	sqlBenchNumbers = `CREATE TABLE IF NOT EXISTS console_bench_numbers (i INT NOT NULL PRIMARY KEY)`
	sqlBenchDigits  = `INSERT INTO console_bench_numbers (i)
SELECT a.d + 10*b.d + 100*c.d + 1000*d.d + 10000*e.d + 100000*f.d
FROM (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a,
(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b,
(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c,
(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) d,
(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e,
(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) f`
	sqlBenchRecords = `INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, payload,
	failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome,
	state, version, attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since)
SELECT UNHEX(LEFT(SHA2(CONCAT('cb-', n.i), 256), 32)), CONCAT('c', LPAD(n.i MOD ?, 5, '0')), UNHEX(SHA2(CONCAT('cb-', n.i), 256)),
	'speculate_dlq', CONCAT('c', LPAD(n.i MOD ?, 5, '0')), CONCAT('speculate/', n.i), '{"batch_id":"b"}',
	3, 'boom', NOW(6) - INTERVAL (n.i MOD 86400) SECOND - INTERVAL 40 SECOND, '[]', CONCAT('b-', n.i), 'failed',
	CASE n.i MOD 100 WHEN 0 THEN 'parked' WHEN 1 THEN 'pending' ELSE 'done' END, 4, IF(n.i MOD 1000 = 1, 1 + n.i MOD 7, 0),
	CASE n.i MOD 100 WHEN 1 THEN NOW(6) - INTERVAL (n.i MOD 600) SECOND END,
	CASE WHEN n.i MOD 100 = 0 THEN 'wake-up failed 5 times' WHEN n.i MOD 1000 = 1 THEN 'read batch: Error 1142: SELECT command denied' ELSE '' END, 1,
	NOW(6) - INTERVAL (n.i MOD 86400) SECOND - INTERVAL 30 SECOND, NOW(6) - INTERVAL (n.i MOD 86400) SECOND, NOW(6) - INTERVAL (n.i MOD 86400) SECOND
FROM console_bench_numbers n WHERE n.i >= ? AND n.i < ? ORDER BY 1`
	sqlBenchLeases = `INSERT INTO mend_leases (queue, holder, epoch, acquired_at, renewed_at, expires_at, transitions)
SELECT CONCAT('c', LPAD(n.i, 5, '0')), 'old', 1, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR, 2
FROM console_bench_numbers n WHERE n.i < ?`
)

// benchSize is the world's size: MEND_CONSOLE_BENCH_RECORDS (default
// 1,000,000) records across a hundredth as many queues.
func benchSize(b *testing.B) (records, queues int) {
	records = 1_000_000
	if s := os.Getenv("MEND_CONSOLE_BENCH_RECORDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 1_000_000 {
			b.Fatalf("MEND_CONSOLE_BENCH_RECORDS=%q: want 100 to 1000000", s)
		}
		records = n
	}
	return records, records / 100
}

// BenchmarkConsolePages serves the overview (what would page, totals,
// latency, chart, and a page of queues: the first, the second of the stuck
// ones, and one of the rest by name), a record page (its record and
// events), a queue and the parked page at 10,000 queues and 1,000,000
// records (every queue has a due and a parked record, so all 10,000 are
// stuck and ordered; 1,000 records in 10 queues are failing, listed
// first). Target: 200 ms a page, which it asserts for the overview's
// pages (the failing section first, with every failing record counted):
// MEND_CONSOLE_BENCH_TARGET=0 turns the assertion off on a machine too
// loaded to mean anything.
func BenchmarkConsolePages(b *testing.B) {
	ctx := context.Background()
	records, queues := benchSize(b)
	db := mysqltest.NewDB(b, migrations.Up)
	raw := db.SQL(b)
	start := time.Now()
	for _, q := range []string{sqlBenchNumbers, sqlBenchDigits} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			b.Fatalf("seed: %v", err)
		}
	}
	for lo := 0; lo < records; lo += 100_000 {
		if _, err := raw.ExecContext(ctx, sqlBenchRecords, queues, queues, lo, min(lo+100_000, records)); err != nil {
			b.Fatalf("seed records: %v", err)
		}
	}
	if _, err := raw.ExecContext(ctx, sqlBenchLeases, queues); err != nil {
		b.Fatalf("seed leases: %v", err)
	}
	if _, err := raw.ExecContext(ctx, "ANALYZE TABLE mend_records, mend_leases"); err != nil {
		b.Fatal(err)
	}
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	// The record page's record: a real one with a few events.
	rec, _, err := store.RecordCreate(ctx, mend.CreateParams{Source: mend.SourceID{Queue: "c00007", Topic: "speculate_dlq", MessageID: "bench"},
		Snapshot: mend.Snapshot{Payload: []byte(`{"batch_id":"b"}`)}, Target: mend.Target{BatchID: "b", Desired: mend.OutcomeFailed}, OpID: mend.NewOpID(), Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d records in %d queues in %s", records, queues, time.Since(start).Round(time.Second))
	timed := func(name string, fn func() error) {
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		b.Logf("%-22s %s", name, time.Since(t0).Round(100*time.Microsecond))
	}
	var names []string
	timed("ConsoleFailingQueues", func() error { _, err := store.ConsoleFailingQueues(ctx, failingRead, failingShow); return err })
	timed("ConsoleAlerts", func() error { _, err := store.ConsoleAlerts(ctx, alertParams); return err })
	timed("ConsoleTotals", func() error { _, err := store.ConsoleTotals(ctx); return err })
	timed("ConsoleDueQueues", func() error { _, _, err := store.ConsoleDueQueues(ctx, dueQueuesRead); return err })
	timed("ConsoleQueueNames", func() error { names, _, err = store.ConsoleQueueNames(ctx, "", PageSizeDefault); return err })
	timed("ConsoleQueueStatus", func() error { _, _, err := store.ConsoleQueueStatus(ctx, names); return err })
	timed("ConsoleActivity", func() error { _, err := store.ConsoleActivity(ctx, chartMinutes, names); return err })
	timed("ConsoleQueueRecords", func() error {
		_, err := store.ConsoleQueueRecords(ctx, "c00007", "", storage.RecordCursor{}, PageSizeDefault)
		return err
	})
	timed("LeaseHistory", func() error { _, err := store.LeaseHistory(ctx, "c00007", leaseHistoryRows); return err })
	s, err := New(Config{Store: store, Hosts: []string{"example.com"}}) // httptest.NewRequest's Host
	if err != nil {
		b.Fatal(err)
	}
	target := benchTarget(b)
	// The failing section the overview must show: the seed's failing
	// records (i mod 1000 = 1) and their queues.
	failingQueues := map[int]bool{}
	for i := 1; i < records; i += 1000 {
		failingQueues[i%queues] = true
	}
	failingNote := fmt.Sprintf("%d queue(s) with %d record(s) whose repair attempts are failing", len(failingQueues), (records+998)/1000)
	for _, page := range []struct {
		name, path string
		overview   bool
	}{
		{"overview", "/", true},
		{"overview-page2", "/?s=" + strconv.Itoa(PageSizeDefault), true},
		{"overview-byname", "/?after=c09000", true},
		{"record", "/record/" + rec.ID.String(), false},
		{"queue", "/queue?name=c00007", false},
		{"parked", "/parked", false},
	} {
		b.Run(page.name, func(b *testing.B) {
			var body string
			for b.Loop() {
				w := httptest.NewRecorder()
				s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, page.path, nil))
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", page.path, w.Code, w.Body.String())
				}
				body = w.Body.String()
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(per.Microseconds())/1000, "ms/page")
			if !page.overview {
				return
			}
			if !strings.Contains(body, failingNote) || strings.Contains(body, "more are failing") {
				b.Errorf("%s: the failing section does not say %q (or says it read only some): %.2000s", page.path, failingNote, body)
			}
			if target > 0 && per > target {
				b.Errorf("%s: %s a page; the target is %s (MEND_CONSOLE_BENCH_TARGET)", page.path, per.Round(100*time.Microsecond), target)
			}
		})
	}
}

// benchTarget is the overview's time a page the benchmark asserts:
// MEND_CONSOLE_BENCH_TARGET (a duration; 0 asserts nothing), else 200 ms.
func benchTarget(b *testing.B) time.Duration {
	s := os.Getenv("MEND_CONSOLE_BENCH_TARGET")
	if s == "" {
		return 200 * time.Millisecond
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		b.Fatalf("MEND_CONSOLE_BENCH_TARGET=%q: want a duration such as 200ms, or 0", s)
	}
	return d
}

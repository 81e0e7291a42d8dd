package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// migrateSize is BenchmarkMigrateUnderLoad's store: records, events per
// record, and the writers running through the migration. MEND_BENCH_MIGRATE
// = "full" (1,000,000 records, 5 events each: issue 31's size, the
// default), "smoke" (10,000), or key=value pairs (records=, events=,
// writers=).
type migrateSize struct{ Records, Events, Writers int }

func migrateSizeFromEnv(b *testing.B) migrateSize {
	s := migrateSize{Records: 1_000_000, Events: 5, Writers: 4}
	for _, kv := range strings.Split(os.Getenv("MEND_BENCH_MIGRATE"), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "", "full":
		case "smoke":
			s.Records = 10_000
		case "records":
			s.Records = n
		case "events":
			s.Events = n
		case "writers":
			s.Writers = n
		default:
			b.Fatalf("MEND_BENCH_MIGRATE: unknown key %q", k)
		}
	}
	return s
}

// migrateFrom is the schema the benchmark migrates from: the version before
// the latest migration that alters one of the big tables (0013 adds the
// events' projection columns), so the step measured is the one that
// touches 5,000,000 rows if any does.
const migrateFrom = 12

// seedOldStore fills mend_records and mend_events at schema migrateFrom
// with done records, server side (a digits table cross-joined), in chunks
// of 100,000 records so no transaction grows without bound.
func seedOldStore(b *testing.B, db *sql.DB, size migrateSize) {
	b.Helper()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE bench_digits (d INT NOT NULL PRIMARY KEY)",
		"INSERT INTO bench_digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)",
		"CREATE TABLE bench_seq (s INT NOT NULL PRIMARY KEY)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	for i := 1; i <= size.Events; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO bench_seq VALUES (?)", i); err != nil {
			b.Fatal(err)
		}
	}
	const chunk = 100_000
	for from := 0; from < size.Records; from += chunk {
		n := min(chunk, size.Records-from)
		// n = a + 10b + 100c + 1000d + 10000e over five digit columns.
		q := `INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, payload, failure_count,
			failure_error, failed_at, failure_subjects, batch_id, desired_outcome, state, version, attempts, next_attempt_at,
			last_error, epoch, created_at, updated_at, state_since)
		SELECT UNHEX(LPAD(HEX(n), 32, '0')), CONCAT('q', n % 1000), UNHEX(SHA2(n, 256)), 'speculate_dlq', CONCAT('q', n % 1000),
			CONCAT('m', n), '', 3, '', NOW(6), '[]', CONCAT('q', n % 1000, '/batch/', n), 'failed', 'done', ?, 0, NULL,
			'', 1, NOW(6), NOW(6), NOW(6)
		FROM (SELECT ? + a.d + 10*b.d + 100*c.d + 1000*d.d + 10000*e.d AS n
			FROM bench_digits a, bench_digits b, bench_digits c, bench_digits d, bench_digits e) g
		WHERE n < ?`
		if _, err := db.ExecContext(ctx, q, size.Events, from, from+n); err != nil {
			b.Fatalf("seed records: %v", err)
		}
		ev := `INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, created_at)
		SELECT r.record_id, s.s, r.queue, IF(s.s = 1, 'created', 'settled'), IF(s.s = 1, 0, 1), 'bench',
			CONCAT(HEX(r.record_id), '-', s.s), '{}', NOW(6)
		FROM mend_records r CROSS JOIN bench_seq s
		WHERE r.record_id >= UNHEX(LPAD(HEX(?), 32, '0')) AND r.record_id < UNHEX(LPAD(HEX(?), 32, '0'))`
		if _, err := db.ExecContext(ctx, ev, from, from+n); err != nil {
			b.Fatalf("seed events: %v", err)
		}
	}
}

// BenchmarkMigrateUnderLoad: mend migrate up from schema migrateFrom on a
// store of MEND_BENCH_MIGRATE records and events while writers append as a
// binary of the old schema does (a record and its created event per
// transaction, statements naming only the old columns). Reported:
// migrate-ms, the migration's duration; stall-ms, the longest any write
// took that overlapped it (issue 31's target: under 1 s); base-max-ms, the
// longest write in the second before it, for scale; writes-during, the
// writes that committed while it ran.
func BenchmarkMigrateUnderLoad(b *testing.B) {
	size := migrateSizeFromEnv(b)
	b.Run(fmt.Sprintf("records=%d/events=%d/writers=%d", size.Records, size.Records*size.Events, size.Writers), func(b *testing.B) {
		ctx := context.Background()
		for range b.N {
			b.StopTimer()
			db := mysqltest.NewDB(b)
			printServer(b, db)
			if err := migrations.Mend.Step(ctx, db.DSN, migrateFrom); err != nil {
				b.Fatal(err)
			}
			conn := db.SQL(b)
			conn.SetMaxOpenConns(size.Writers + 2)
			seeded := time.Now()
			seedOldStore(b, conn, size)
			b.Logf("mend-bench: migrate: seeded %d records and %d events in %s", size.Records, size.Records*size.Events, time.Since(seeded).Round(time.Second))

			type write struct{ start, end time.Time }
			var mu sync.Mutex
			var writes []write
			var next atomic.Int64
			next.Store(int64(size.Records))
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var werr atomic.Value
			for range size.Writers {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						n := next.Add(1)
						start := time.Now()
						if err := oldWrite(ctx, conn, n); err != nil {
							werr.Store(err)
							return
						}
						mu.Lock()
						writes = append(writes, write{start, time.Now()})
						mu.Unlock()
					}
				})
			}
			wait := func(d time.Duration) { // load runs meanwhile; nothing waits on it
				t := time.NewTimer(d)
				<-t.C
			}
			wait(2 * time.Second)
			b.StartTimer()
			mStart := time.Now()
			err := migrations.Mend.Up(ctx, db.DSN)
			mEnd := time.Now()
			b.StopTimer()
			wait(time.Second)
			close(stop)
			wg.Wait()
			if err != nil {
				b.Fatal(err)
			}
			if e, _ := werr.Load().(error); e != nil {
				b.Fatalf("a writer failed: %v", e)
			}
			var stall, base time.Duration
			during := 0
			for _, w := range writes {
				d := w.end.Sub(w.start)
				switch {
				case w.end.After(mStart) && w.start.Before(mEnd):
					stall = max(stall, d)
					if w.end.Before(mEnd) {
						during++
					}
				case w.end.Before(mStart) && w.end.After(mStart.Add(-time.Second)):
					base = max(base, d)
				}
			}
			durations := make([]time.Duration, 0, len(writes))
			for _, w := range writes {
				durations = append(durations, w.end.Sub(w.start))
			}
			slices.Sort(durations)
			b.ReportMetric(float64(mEnd.Sub(mStart).Milliseconds()), "migrate-ms")
			b.ReportMetric(float64(stall.Microseconds())/1000, "stall-ms")
			b.ReportMetric(float64(base.Microseconds())/1000, "base-max-ms")
			b.ReportMetric(float64(during), "writes-during")
			b.ReportMetric(float64(len(writes)), "writes")
		}
	})
}

// oldWrite is a schema-12 binary's intake: a record and its created event,
// naming only the columns that schema has.
func oldWrite(ctx context.Context, db *sql.DB, n int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, payload,
		failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome, state, version, attempts, next_attempt_at,
		last_error, epoch, created_at, updated_at, state_since)
		VALUES (UNHEX(LPAD(HEX(?), 32, '0')), 'qw', UNHEX(SHA2(?, 256)), 'speculate_dlq', 'qw', CONCAT('w', ?), '', 3, '', NOW(6), '[]',
		CONCAT('qw/batch/', ?), 'failed', 'pending', 1, 0, NOW(6), '', 0, NOW(6), NOW(6), NOW(6))`, n, n, n, n); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, created_at)
		VALUES (UNHEX(LPAD(HEX(?), 32, '0')), 1, 'qw', 'created', 0, 'bench', CONCAT('w', ?), '{}', NOW(6))`, n, n); err != nil {
		return err
	}
	return tx.Commit()
}

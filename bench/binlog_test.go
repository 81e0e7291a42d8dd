package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// binlogSize is what BenchmarkBinlogBacklog adds to the backlog's shape
// (subscribeSize: letters and partitions, the same as the offset mode's).
// MEND_BENCH_BINLOG sets it as key=value pairs: batch (the reader's
// BatchRows), flush_ms (its FlushInterval), live (dead letters of the live
// phase), live_rate (their commits per second) and conc (the reader's
// Concurrency: how many recording transactions of a batch run at once).
type binlogSize struct {
	Batch, FlushMS, Live, LiveRate, Conc int
}

func binlogSizeFromEnv(b *testing.B) binlogSize {
	c := binlogSize{Batch: binlog.BatchRowsDefault, FlushMS: int(binlog.FlushIntervalDefault / time.Millisecond), Live: 2000, LiveRate: 500, Conc: binlog.ConcurrencyDefault}
	for _, kv := range strings.Split(os.Getenv("MEND_BENCH_BINLOG"), ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("MEND_BENCH_BINLOG: %q: want key=positive integer", kv)
		}
		switch k {
		case "batch":
			c.Batch = n
		case "flush_ms":
			c.FlushMS = n
		case "live":
			c.Live = n
		case "live_rate":
			c.LiveRate = n
		case "conc":
			c.Conc = n
		default:
			b.Fatalf("MEND_BENCH_BINLOG: unknown key %q", k)
		}
	}
	return c
}

// BenchmarkBinlogBacklog is BenchmarkSubscribeBacklog's backlog (the same
// shape, MEND_BENCH_SUBSCRIBE's letters and partitions, seeded the same
// way on the same server) recorded by one binlog.Reader instead of the
// offset subscription. The reader first reads up to the end of the log
// and saves its position, is stopped, the backlog is committed, and a new
// reader resumes from the saved position: records/s counts the dead letters
// recorded (OnRecorded) from its start until the last; record-share and
// save-share are the parts of that time the reader spent inside RecordMany
// and saving its position (timedReaderPorts), rows/batch the mean rows per
// RecordMany and saves the positions saved. stmts/record is,
// as BenchmarkSubscribeBacklog's, the server's Questions per dead letter
// (both databases: mend's recording included); queue-stmts/record the
// statements the reader sent to the queue database alone (stmtCounter: its
// probe and the replication client's setup at its start, nothing polled;
// the rows come in the binary log's stream), and steady-queue-stmts/s the
// same per second of the steady state below. Then the live phase: steady-ms and
// steady-max-ms as BenchmarkSubscribeBacklog's (20 single dead letters,
// one at a time, from its INSERT until recorded), and delay-p50-ms,
// delay-p99-ms, delay-max-ms the delay of each of `live` single-row
// commits made at live_rate a second by four writers, from the moment its
// autocommit INSERT returned until the reader's OnRecorded hook saw it
// (live-records/s is the rate the writers reached). Both databases are on
// one server, so the reader also reads (and skips) mend's own writes: a
// cost a deployment with mend's store apart does not pay.
func BenchmarkBinlogBacklog(b *testing.B) {
	size := subscribeSizeFromEnv(b)
	bs := binlogSizeFromEnv(b)
	name := fmt.Sprintf("letters=%d/partitions=%d/readers=1/batch=%d/flush=%dms", size.Letters, size.Partitions, bs.Batch, bs.FlushMS)
	if bs.Conc != binlog.ConcurrencyDefault {
		name += fmt.Sprintf("/conc=%d", bs.Conc)
	}
	b.Run(name, func(b *testing.B) {
		mysqltest.SkipVitess(b, "the binary log is read from the queue database's own server, never through vtgate")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		for range b.N {
			b.StopTimer()
			mendDB := mysqltest.NewDB(b, migrations.Up)
			queueDB := mysqltest.NewDB(b, sqtest.Apply)
			printServer(b, mendDB)
			store, err := storage.Open(ctx, mendDB.DSN, storage.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = store.Close() })
			in, err := dlq.New(store, dlq.Config{})
			if err != nil {
				b.Fatal(err)
			}
			counter, queueDSN := newStmtCounter(b, queueDB)
			qcfg, err := mysql.ParseDSN(queueDSN)
			if err != nil {
				b.Fatal(err)
			}
			rec := &binlogRecorded{at: map[string]time.Time{}, changed: make(chan struct{}, 1)}
			timed := &timedReaderPorts{in: in, store: store}
			newReader := func() *binlog.Reader {
				f, err := fence.New(store, fence.Config{Holder: "bench-binlog", TTL: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				r, err := binlog.New(binlog.Config{Server: qcfg, Intake: timed, Parker: store, Store: timed, Fence: f,
					BatchRows: bs.Batch, Concurrency: bs.Conc, FlushInterval: time.Duration(bs.FlushMS) * time.Millisecond,
					Heartbeat: 100 * time.Millisecond, StandbyPoll: 50 * time.Millisecond,
					Hooks: binlog.Hooks{OnRecorded: rec.add, OnSaved: func(storage.BinlogPosition) { rec.poke() }}})
				if err != nil {
					b.Fatal(err)
				}
				return r
			}

			// The first reader reads to the end of the log (the server's
			// earlier benchmarks included) and saves its position there.
			first := newReader()
			stopFirst := runReader(ctx, first)
			rec.wait(b, ctx, "the first reader to catch up and save its position", func() bool {
				st := first.Status()
				return st.CaughtUp && st.Position.File != ""
			})
			if err := stopFirst(); err != nil {
				b.Fatal(err)
			}
			if n := rec.count(); n != 0 {
				b.Fatalf("the first reader recorded %d dead letters of an empty queue", n)
			}
			seedBacklog(b, queueDB, size)

			runtime.GC()
			var base runtime.MemStats
			runtime.ReadMemStats(&base)
			peak := heapSampler(base)
			questions := serverQuestions(b, queueDB)
			queueStmts := counter.Statements()
			reader := newReader()
			timed.reset()
			b.StartTimer()
			start := time.Now()
			stop := runReader(ctx, reader)
			rec.wait(b, ctx, "the backlog to be recorded", func() bool { return rec.count() >= size.Letters })
			recorded := rec.last().Sub(start)
			b.StopTimer()
			recordTook, recordCalls, saveTook, saveCalls := timed.totals()
			questions = serverQuestions(b, queueDB) - questions
			queueStmts = counter.Statements() - queueStmts
			heap, live := peak()
			var end runtime.MemStats
			runtime.ReadMemStats(&end)
			if got := rec.count(); got != size.Letters {
				b.Fatalf("%d dead letters recorded, want %d", got, size.Letters)
			}
			var records int
			if err := mendDB.SQL(b).QueryRowContext(ctx, "SELECT COUNT(*) FROM mend_records").Scan(&records); err != nil {
				b.Fatal(err)
			}
			if records != size.Letters {
				b.Fatalf("%d records in mend's store, want %d", records, size.Letters)
			}

			// Steady state: single dead letters one at a time, as
			// BenchmarkSubscribeBacklog times them.
			const steady = 20
			var worst, total time.Duration
			steadyStmts, steadyFrom := counter.Statements(), time.Now()
			for j := range steady {
				q := fmt.Sprintf("q%04d", j%size.Partitions)
				id := fmt.Sprintf("%s/batch/steady-%d", q, j)
				t0 := time.Now()
				insertDeadLetter(b, ctx, queueDB.SQL(b), q, id)
				rec.wait(b, ctx, "steady-state dead letter "+id, func() bool { return rec.has(id) })
				d := time.Since(t0)
				worst, total = max(worst, d), total+d
			}
			steadyRate := float64(counter.Statements()-steadyStmts) / time.Since(steadyFrom).Seconds()

			// Live: single-row commits at live_rate a second, each timed
			// from its commit until recorded.
			committed, liveRate := liveLoad(b, ctx, queueDB.SQL(b), size.Partitions, bs.Live, bs.LiveRate)
			rec.wait(b, ctx, "the live dead letters to be recorded", func() bool { return rec.count() >= size.Letters+steady+bs.Live })
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			delays := make([]time.Duration, 0, len(committed))
			for id, c := range committed {
				at, ok := rec.get(id)
				if !ok {
					b.Fatalf("live dead letter %s not recorded", id)
				}
				delays = append(delays, max(at.Sub(c), 0))
			}
			slices.Sort(delays)
			pct := func(p float64) float64 {
				i := min(int(p*float64(len(delays))), len(delays)-1)
				return float64(delays[i].Microseconds()) / 1000
			}

			b.ReportMetric(float64(size.Letters)/recorded.Seconds(), "records/s")
			b.ReportMetric(recordTook.Seconds()/recorded.Seconds(), "record-share")
			b.ReportMetric(saveTook.Seconds()/recorded.Seconds(), "save-share")
			b.ReportMetric(float64(size.Letters)/float64(max(recordCalls, 1)), "rows/batch")
			b.ReportMetric(float64(saveCalls), "saves")
			b.ReportMetric(recorded.Seconds(), "recorded-s")
			b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
			b.ReportMetric(float64(live)/(1<<20), "live-MB")
			b.ReportMetric(float64(end.TotalAlloc-base.TotalAlloc)/float64(size.Letters)/1024, "alloc-KB/record")
			b.ReportMetric(float64(questions)/float64(size.Letters), "stmts/record")
			b.ReportMetric(float64(queueStmts)/float64(size.Letters), "queue-stmts/record")
			b.ReportMetric(steadyRate, "steady-queue-stmts/s")
			b.ReportMetric(float64(total.Milliseconds())/steady, "steady-ms")
			b.ReportMetric(float64(worst.Milliseconds()), "steady-max-ms")
			b.ReportMetric(pct(0.50), "delay-p50-ms")
			b.ReportMetric(pct(0.99), "delay-p99-ms")
			b.ReportMetric(float64(delays[len(delays)-1].Microseconds())/1000, "delay-max-ms")
			b.ReportMetric(liveRate, "live-records/s")
		}
	})
}

// timedReaderPorts is the reader's Intake and Store, timed: how much of the
// backlog's time the reader spent in RecordMany and in saving its position
// (the rest it spent reading and decoding the log, or waiting for it).
type timedReaderPorts struct {
	in    binlog.Recorder
	store binlog.Store

	recordNS, recordCalls, saveNS, saveCalls atomic.Int64
}

func (p *timedReaderPorts) RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	t0 := time.Now()
	defer func() { p.recordNS.Add(int64(time.Since(t0))); p.recordCalls.Add(1) }()
	return p.in.RecordMany(ctx, ds)
}

func (p *timedReaderPorts) BinlogPositionGet(ctx context.Context, name string) (storage.BinlogPosition, error) {
	return p.store.BinlogPositionGet(ctx, name)
}

func (p *timedReaderPorts) BinlogPositionSave(ctx context.Context, term mend.Term, pos storage.BinlogPosition) error {
	t0 := time.Now()
	defer func() { p.saveNS.Add(int64(time.Since(t0))); p.saveCalls.Add(1) }()
	return p.store.BinlogPositionSave(ctx, term, pos)
}

func (p *timedReaderPorts) reset() {
	p.recordNS.Store(0)
	p.recordCalls.Store(0)
	p.saveNS.Store(0)
	p.saveCalls.Store(0)
}

func (p *timedReaderPorts) totals() (record time.Duration, records int64, save time.Duration, saves int64) {
	return time.Duration(p.recordNS.Load()), p.recordCalls.Load(), time.Duration(p.saveNS.Load()), p.saveCalls.Load()
}

// binlogRecorded is what the readers' OnRecorded hooks saw: when each dead
// letter (by message ID) was first recorded. Waits are on its channel.
type binlogRecorded struct {
	mu      sync.Mutex
	at      map[string]time.Time
	latest  time.Time
	changed chan struct{}
}

func (r *binlogRecorded) add(rows []dlq.Row, _ int) {
	now := time.Now()
	r.mu.Lock()
	for _, row := range rows {
		if _, ok := r.at[row.ID]; !ok {
			r.at[row.ID] = now
		}
	}
	r.latest = now
	r.mu.Unlock()
	r.poke()
}

func (r *binlogRecorded) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *binlogRecorded) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

func (r *binlogRecorded) has(id string) bool {
	_, ok := r.get(id)
	return ok
}

func (r *binlogRecorded) get(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[id]
	return at, ok
}

func (r *binlogRecorded) last() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest
}

// wait waits for cond, rechecked at each hook (and every 100 ms, for a
// condition on the reader's status, which a heartbeat changes without a
// hook), until ctx ends.
func (r *binlogRecorded) wait(b *testing.B, ctx context.Context, what string, cond func() bool) {
	b.Helper()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-r.changed:
		case <-t.C:
		case <-ctx.Done():
			b.Fatalf("waiting for %s: %v (%d recorded)", what, ctx.Err(), r.count())
		}
	}
}

// runReader runs r until the returned stop is called, which returns Run's
// error (nil when it ended because it was stopped).
func runReader(ctx context.Context, r *binlog.Reader) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() error {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// insertDeadLetter commits one dead letter on speculate_dlq (autocommit),
// its failed_at the client's clock now.
func insertDeadLetter(b *testing.B, ctx context.Context, db *sql.DB, q, id string) {
	if _, err := db.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES ('speculate_dlq', ?, ?, NULL, ?, ?, ?, ?, 3, 'boom', 'speculate', NULL)",
		id, `{"id":"`+id+`","queue":"`+q+`"}`, q, time.Now().UnixMilli(), time.Now().UnixMilli(), time.Now().UnixMilli()); err != nil {
		b.Error(err)
	}
}

// liveLoad commits n single dead letters at rate a second (a ticker hands
// them to four writers; a tick the writers are too busy for is dropped, so
// the rate reached may be lower) and returns when each one's INSERT
// returned, by message ID, and the rate reached.
func liveLoad(b *testing.B, ctx context.Context, db *sql.DB, partitions, n, rate int) (map[string]time.Time, float64) {
	b.Helper()
	const writers = 4
	jobs := make(chan int)
	var mu sync.Mutex
	committed := make(map[string]time.Time, n)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				q := fmt.Sprintf("q%04d", j%partitions)
				id := fmt.Sprintf("%s/batch/live-%d", q, j)
				if _, err := db.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES ('speculate_dlq', ?, ?, NULL, ?, ?, ?, ?, 3, 'boom', 'speculate', NULL)",
					id, `{"id":"`+id+`","queue":"`+q+`"}`, q, time.Now().UnixMilli(), time.Now().UnixMilli(), time.Now().UnixMilli()); err != nil {
					failed.Store(true)
					continue
				}
				now := time.Now()
				mu.Lock()
				committed[id] = now
				mu.Unlock()
			}
		}()
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	start := time.Now()
	for j := range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	tick.Stop()
	took := time.Since(start)
	if failed.Load() {
		b.Fatal("a live dead letter's INSERT failed")
	}
	return committed, float64(n) / took.Seconds()
}

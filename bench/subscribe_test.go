package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// subscribeSize sizes BenchmarkSubscribeBacklog. MEND_BENCH_SUBSCRIBE
// overrides it: "full" for issue 18's size (100,000 dead letters over 1,000
// partitions), or key=value pairs (letters, partitions, replicas,
// page_size, concurrency: the partitions each replica reads at once). The
// default is small (10,000 over 100, two replicas); make bench runs "full"
// with one replica and with two, make bench-smoke a small size.
type subscribeSize struct {
	Letters, Partitions, Replicas, PageSize, Concurrency int
}

func subscribeSizeFromEnv(b *testing.B) subscribeSize {
	c := subscribeSize{Letters: 10_000, Partitions: 100, Replicas: 2, PageSize: subscribe.PageSizeDefault, Concurrency: subscribe.ConcurrencyDefault}
	for _, kv := range strings.Split(os.Getenv("MEND_BENCH_SUBSCRIBE"), ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		if kv == "full" {
			c.Letters, c.Partitions = 100_000, 1_000
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("MEND_BENCH_SUBSCRIBE: %q: want key=positive integer", kv)
		}
		switch k {
		case "letters":
			c.Letters = n
		case "partitions":
			c.Partitions = n
		case "replicas":
			c.Replicas = n
		case "page_size":
			c.PageSize = n
		case "concurrency":
			c.Concurrency = n
		default:
			b.Fatalf("MEND_BENCH_SUBSCRIBE: unknown key %q", k)
		}
	}
	return c
}

// BenchmarkSubscribeBacklog: a backlog of dead letters on speculate_dlq,
// spread over many partitions, recorded by Replicas subscriptions of one
// group running side by side (each with its own pools, as separate mend run
// processes would have), dividing the partitions through slot leases in
// mend's lease table as mend run's do. records/s counts distinct records
// created, from the start until the last one exists; release-s is how long
// until a pass finds no row above the group's watermarks (the settle
// window, 1 s here, included); heap-MB is the peak Go heap in use over the
// run above the heap before it, garbage included, and live-MB the peak of
// what the GC found live, which the page size bounds, not the backlog;
// alloc-KB/record is the bytes allocated per dead letter (by every
// replica: each reads only its share, the steady-state letters included);
// steady-ms and steady-max-ms are, once the backlog is released, the mean
// and worst time from a single dead letter's commit until a pass recorded
// it (PollInterval is 100 ms here; mend run's default is 1 s);
// reads/record is the rows the replicas read per dead letter (1 when they
// divide the work perfectly) and stmts/record the statements the server
// ran per dead letter until the release, both databases and every replica
// included; queue-stmts/record those the replicas sent to the queue
// database alone (through stmtCounter, a proxy that counts them), and
// steady-queue-stmts/s the same per second of the steady state (the
// polling). Issue 18's target: 100,000 over 1,000 partitions at 10,000
// records/s or more with two replicas.
func BenchmarkSubscribeBacklog(b *testing.B) {
	size := subscribeSizeFromEnv(b)
	name := fmt.Sprintf("letters=%d/partitions=%d/replicas=%d/page=%d/conc=%d", size.Letters, size.Partitions, size.Replicas, size.PageSize, size.Concurrency)
	b.Run(name, func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		for range b.N {
			b.StopTimer()
			mendDB := mysqltest.NewDB(b, migrations.Up)
			queueDB := mysqltest.NewDB(b, sqtest.Apply)
			printServer(b, mendDB)
			seedBacklog(b, queueDB, size)
			counter, queueDSN := newStmtCounter(b, queueDB)
			var created, read atomic.Int64
			var doneAt atomic.Int64 // unix nanos when the last record was created
			released := make(chan struct{})
			recordedSome := make(chan struct{}, 1)
			var once sync.Once
			onPass := func(st subscribe.PassStats) {
				read.Add(int64(st.Read))
				if created.Add(int64(st.Recorded)) == int64(size.Letters) && st.Recorded > 0 {
					doneAt.Store(time.Now().UnixNano())
				}
				if st.Recorded > 0 {
					select {
					case recordedSome <- struct{}{}:
					default:
					}
				}
				var lag int64
				for _, l := range st.Lag {
					lag += l.Rows
				}
				if lag == 0 && created.Load() == int64(size.Letters) {
					once.Do(func() { close(released) })
				}
			}
			subs := make([]*subscribe.Subscriber, size.Replicas)
			for i := range subs {
				store, err := storage.Open(ctx, mendDB.DSN, storage.Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = store.Close() })
				qdb, err := subscribe.Open(ctx, queueDSN)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = qdb.Close() })
				in, err := dlq.New(store, dlq.Config{})
				if err != nil {
					b.Fatal(err)
				}
				subs[i], err = subscribe.New(subscribe.Config{DB: qdb, Intake: in, Parker: store, Leases: store,
					Holder: fmt.Sprintf("bench-replica-%d", i), PageSize: size.PageSize, Concurrency: size.Concurrency,
					PollInterval: 100 * time.Millisecond, Settle: time.Second, Hooks: subscribe.Hooks{OnPass: onPass}})
				if err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			var base runtime.MemStats
			runtime.ReadMemStats(&base)
			peak := heapSampler(base)
			questions := serverQuestions(b, queueDB)
			queueStmts := counter.Statements()
			b.StartTimer()
			start := time.Now()
			for _, s := range subs {
				if err := s.Start(ctx); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-released:
			case <-ctx.Done():
				b.Fatalf("not released in time: %d of %d records created", created.Load(), size.Letters)
			}
			releasedIn := time.Since(start)
			b.StopTimer()
			questions = serverQuestions(b, queueDB) - questions
			queueStmts = counter.Statements() - queueStmts
			reads := read.Load()
			var left int
			if err := queueDB.SQL(b).QueryRow("SELECT COUNT(*) FROM queue_offsets o JOIN queue_messages m ON m.topic = o.topic AND m.partition_key = o.partition_key AND m.`offset` > o.offset_acked WHERE o.consumer_group = 'mend'").Scan(&left); err != nil {
				b.Fatal(err)
			}
			if left != 0 {
				b.Fatalf("%d dead letters above the group's watermarks after release", left)
			}
			// Steady state: single dead letters, one at a time, each timed
			// from its commit until a pass has recorded it.
			const steady = 20
			var worst, total time.Duration
			steadyStmts, steadyFrom := counter.Statements(), time.Now()
			for j := range steady {
				q := fmt.Sprintf("q%04d", j%size.Partitions)
				id := fmt.Sprintf("%s/batch/steady-%d", q, j)
				t0 := time.Now()
				if _, err := queueDB.SQL(b).Exec("INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES ('speculate_dlq', ?, ?, NULL, ?, 1760000000000, 1760000000000, 1760000000500, 3, 'boom', 'speculate', NULL)",
					id, `{"id":"`+id+`","queue":"`+q+`"}`, q); err != nil {
					b.Fatal(err)
				}
				for created.Load() < int64(size.Letters+j+1) {
					select {
					case <-recordedSome:
					case <-ctx.Done():
						b.Fatalf("steady-state dead letter %d not recorded", j)
					}
				}
				d := time.Since(t0)
				worst, total = max(worst, d), total+d
			}
			steadyRate := float64(counter.Statements()-steadyStmts) / time.Since(steadyFrom).Seconds()
			for _, s := range subs {
				s.Stop()
			}
			heap, live := peak()
			var end runtime.MemStats
			runtime.ReadMemStats(&end)
			if got := created.Load(); got != int64(size.Letters+steady) {
				b.Fatalf("%d records created, want %d", got, size.Letters+steady)
			}
			recorded := time.Duration(doneAt.Load() - start.UnixNano())
			b.ReportMetric(float64(size.Letters)/recorded.Seconds(), "records/s")
			b.ReportMetric(recorded.Seconds(), "recorded-s")
			b.ReportMetric(releasedIn.Seconds(), "release-s")
			b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
			b.ReportMetric(float64(live)/(1<<20), "live-MB")
			b.ReportMetric(float64(end.TotalAlloc-base.TotalAlloc)/float64(size.Letters)/1024, "alloc-KB/record")
			b.ReportMetric(float64(reads)/float64(size.Letters), "reads/record")
			b.ReportMetric(float64(questions)/float64(size.Letters), "stmts/record")
			b.ReportMetric(float64(queueStmts)/float64(size.Letters), "queue-stmts/record")
			b.ReportMetric(steadyRate, "steady-queue-stmts/s")
			b.ReportMetric(float64(total.Milliseconds())/steady, "steady-ms")
			b.ReportMetric(float64(worst.Milliseconds()), "steady-max-ms")
		}
	})
}

// serverQuestions is the server's count of statements so far (the
// harness's server serves this benchmark alone: both databases, every
// replica).
func serverQuestions(b *testing.B, db *mysqltest.DB) int64 {
	b.Helper()
	var name string
	var n int64
	if err := db.SQL(b).QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		b.Fatal(err)
	}
	return n
}

// heapSampler samples the heap every 10 ms until the returned func is
// called, which returns the peaks above base of the heap in use (garbage
// not yet collected included) and of the live heap (what the last GC
// found reachable: what the code holds).
func heapSampler(base runtime.MemStats) func() (inuse, live uint64) {
	var peak, peakLive atomic.Uint64
	baseLive := liveHeap()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base.HeapInuse && m.HeapInuse-base.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse - base.HeapInuse)
			}
			if l := liveHeap(); l > baseLive && l-baseLive > peakLive.Load() {
				peakLive.Store(l - baseLive)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		close(stop)
		<-done
		return peak.Load(), peakLive.Load()
	}
}

// liveHeap is the heap the last GC marked live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// seedBacklog writes size.Letters dead letters on speculate_dlq, round
// robin over size.Partitions queues, with the twelve columns MoveToDLQ
// writes, in multi-row inserts (the benchmark measures the subscription,
// not the seeding).
func seedBacklog(b *testing.B, db *mysqltest.DB, size subscribeSize) {
	b.Helper()
	conn := db.SQL(b)
	const chunk = 1000
	for from := 0; from < size.Letters; from += chunk {
		n := min(chunk, size.Letters-from)
		var sb strings.Builder
		sb.WriteString("INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES ")
		args := make([]any, 0, 3*n)
		for i := range n {
			k := from + i
			q := fmt.Sprintf("q%04d", k%size.Partitions)
			id := fmt.Sprintf("%s/batch/%d", q, k)
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("('speculate_dlq', ?, ?, NULL, ?, 1760000000000, 1760000000000, 1760000000500, 3, 'boom', 'speculate', NULL)")
			args = append(args, id, `{"id":"`+id+`","queue":"`+q+`"}`, q)
		}
		if _, err := conn.Exec(sb.String(), args...); err != nil {
			b.Fatal(err)
		}
	}
}

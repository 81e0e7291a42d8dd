package bench

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

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

// trials is how many times each latency is measured (MEND_BENCH_TRIALS).
func trials() int {
	if n, err := strconv.Atoi(os.Getenv("MEND_BENCH_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// reportLatency reports the median and worst of samples against bound.
func reportLatency(b *testing.B, samples []time.Duration, bound time.Duration) {
	slices.Sort(samples)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(samples[len(samples)/2]), "median-ms")
	b.ReportMetric(ms(samples[len(samples)-1]), "max-ms")
	b.ReportMetric(ms(bound), "bound-ms")
	b.ReportMetric(float64(len(samples)), "trials")
	b.Logf("mend-bench: samples %s: %v", b.Name(), samples)
}

type latencyEnv struct {
	db    *mysqltest.DB
	store *storage.DB
	host  *host.DB
	world sqtest.World
}

func newLatencyEnv(b *testing.B) *latencyEnv {
	b.Helper()
	ctx := context.Background()
	db := mysqltest.NewDB(b, migrations.Up, sqtest.Apply)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	h, err := host.Open(ctx, db.DSN, "", host.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	return &latencyEnv{db: db, store: store, host: h, world: world(b, db)}
}

// seedOne gives queue a live batch and one due record on a speculating batch.
func (e *latencyEnv) seedOne(b *testing.B, queue string) {
	b.Helper()
	ctx := context.Background()
	if err := e.world.SeedBatch(ctx, queue, batchID(queue, "z-live"), string(mend.BatchCreated), requestID(queue, "live")); err != nil {
		b.Fatal(err)
	}
	if err := e.world.SeedBatch(ctx, queue, batchID(queue, "b1"), string(mend.BatchSpeculating), requestID(queue, "r1")); err != nil {
		b.Fatal(err)
	}
	if _, _, err := e.store.RecordCreate(ctx, mend.CreateParams{Source: src(queue, "m1"), OpID: mend.NewOpID(), Actor: "bench",
		Target: mend.Target{BatchID: batchID(queue, "b1"), Desired: mend.OutcomeFailed}}); err != nil {
		b.Fatal(err)
	}
}

// reconciler starts a reconciler polling every interval; hooks go to its
// planner. Its wake-ups go through waker (nil: the host adapter itself).
func (e *latencyEnv) reconciler(b *testing.B, holder string, ttl, interval time.Duration, backoff time.Duration, hooks planner.Hooks, waker planner.Waker) *reconcile.Reconciler {
	b.Helper()
	f, err := fence.New(e.store, fence.Config{Holder: holder, TTL: ttl})
	if err != nil {
		b.Fatal(err)
	}
	if waker == nil {
		waker = e.host
	}
	p, err := planner.New(planner.Config{Store: e.store, Batches: e.host, Waker: waker, Actor: "planner/" + holder,
		BackoffBase: backoff, BackoffMax: backoff, Hooks: hooks})
	if err != nil {
		b.Fatal(err)
	}
	r, err := reconcile.New(reconcile.Config{Store: e.store, Fence: f, Planner: p, Interval: interval})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// failoverInterval is the standby reconciler's interval in BenchmarkFailover.
const failoverInterval = 250 * time.Millisecond

// BenchmarkFailover: a planner holding a queue's lease is killed (its
// connections closed, no release) while a second reconciler polls every
// failoverInterval; measured from the kill to the second's first write under
// the next epoch. Target: lease TTL + one interval.
func BenchmarkFailover(b *testing.B) {
	for _, ttl := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} {
		b.Run("ttl="+ttl.String(), func(b *testing.B) {
			e := newLatencyEnv(b)
			var samples []time.Duration
			for range b.N {
				for trial := range trials() {
					samples = append(samples, e.failover(b, ttl, "f"+ttl.String()+"-"+strconv.Itoa(trial)))
				}
			}
			reportLatency(b, samples, ttl+failoverInterval)
		})
	}
}

func (e *latencyEnv) failover(b *testing.B, ttl time.Duration, queue string) time.Duration {
	b.Helper()
	ctx := context.Background()
	e.seedOne(b, queue)
	// A holds the lease through a pool of its own, and does nothing else.
	storeA, err := storage.Open(ctx, e.db.DSN, storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fA, err := fence.New(storeA, fence.Config{Holder: "A-" + queue, TTL: ttl})
	if err != nil {
		b.Fatal(err)
	}
	leaseA, err := fA.TryAcquire(ctx, queue)
	if err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	written := make(chan time.Time, 1)
	recB := e.reconciler(b, "B-"+queue, ttl, failoverInterval, time.Second, planner.Hooks{
		OnSettled: func(string, mend.BatchState, bool) { once.Do(func() { written <- time.Now() }) },
	}, nil)
	if err := recB.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer recB.Stop()
	// Kill A at a random point of its renew cycle: its pool goes away, so
	// renewals fail and nothing is released.
	phase := time.NewTimer(time.Duration(time.Now().UnixNano() % int64(ttl/3)))
	<-phase.C
	killed := time.Now()
	_ = storeA.Close()
	var at time.Time
	select {
	case at = <-written:
	case <-time.After(ttl + time.Minute):
		b.Fatal("no write under the next epoch")
	}
	<-leaseA.Done()
	_ = leaseA.Release(ctx)
	return at.Sub(killed)
}

// BenchmarkWakeResend: the wake-up publish fails once; the record is due
// again after its backoff, and the reconciler's next pass re-sends it.
// Measured by the database clock from the record's next_attempt_at to the
// re-sent message's created_at. Target: within one reconcile interval.
func BenchmarkWakeResend(b *testing.B) {
	for _, interval := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		b.Run("interval="+interval.String(), func(b *testing.B) {
			e := newLatencyEnv(b)
			var samples []time.Duration
			for range b.N {
				for trial := range trials() {
					samples = append(samples, e.resend(b, interval, "w"+interval.String()+"-"+strconv.Itoa(trial)))
				}
			}
			reportLatency(b, samples, interval)
		})
	}
}

func (e *latencyEnv) resend(b *testing.B, interval time.Duration, queue string) time.Duration {
	b.Helper()
	ctx := context.Background()
	e.seedOne(b, queue)
	// The first publish is refused before it reaches the host (mend never
	// puts a trigger on the host's tables to make one fail).
	waker := &sqtest.FaultyWaker{Next: e.host}
	waker.RefuseNext(1)
	// The failed publish leaves the record settled and due again after its
	// backoff; the pass that re-sends reads it with that due time, which
	// the planner hands to BeforeWake. Taking it there, rather than polling
	// the record, cannot miss it on a loaded machine (a poll that came late
	// would find the record already done).
	dueCh := make(chan time.Time, 1)
	hooks := planner.Hooks{BeforeWake: func(_ context.Context, rec mend.Record) {
		if rec.Attempts >= 1 && rec.NextAttemptAt != nil {
			select {
			case dueCh <- *rec.NextAttemptAt:
			default:
			}
		}
	}}
	r := e.reconciler(b, "R-"+queue, 10*time.Second, interval, 300*time.Millisecond, hooks, waker)
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer r.Stop()
	deadline := time.Now().Add(time.Minute)
	var due time.Time
	select {
	case due = <-dueCh:
	case <-time.After(time.Minute):
		b.Fatal("the wake-up was not re-sent")
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		msgs, err := e.world.Messages(ctx, host.WakeTopicDefault, queue)
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) == 1 {
			// created_at is the real column: epoch milliseconds from the
			// publisher's clock (this machine's, as the server's is), so
			// the sample is exact to a millisecond.
			return time.UnixMilli(int64(msgs[0].CreatedAt)).Sub(due)
		}
		if len(msgs) > 1 {
			b.Fatalf("%d wake-ups published; want one", len(msgs))
		}
		if time.Now().After(deadline) {
			b.Fatal("the wake-up was not re-sent")
		}
		<-tick.C
	}
}

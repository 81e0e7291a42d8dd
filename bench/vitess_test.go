package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// vitessTargets are where BenchmarkVitess puts mend's tables: a keyspace sharded in two,
// through vtgate, and a plain database on the mysqld under the same cluster, reached
// directly. Same server, same machine, same run: the ratio is what vtgate and the tablets
// cost, nothing else.
var vitessTargets = []struct {
	name string
	db   func(testing.TB, ...mysqltest.Migrator) *mysqltest.DB
}{
	{"vitess", mysqltest.NewDB},
	{"mysql", mysqltest.NewHostDB},
}

// vitessConns are BenchmarkVitess's concurrency levels.
var vitessConns = []int{1, 4}

// vitessQueues is how many queues the due listing and the idle pass are measured at.
const vitessQueues = 3000

// BenchmarkVitess compares mend's hot paths through vtgate (2 shards) with the same on one
// MySQL (make bench-vitess; MEND_TEST_ENGINE=vitess, skipped elsewhere): intake, fenced
// append, lease acquire and planner repair per operation (ops/s), and the reconciler's due
// listing (QueuesDue, a scatter) and idle pass at vitessQueues queues (ms per call). The
// host's tables of the repair are a plain MySQL database beside the cluster on both sides,
// as the submit queue's own server is in production. No tap, no replay: this measures the
// deployment, not mend's client.
func BenchmarkVitess(b *testing.B) {
	if !mysqltest.Vitess() {
		b.Skipf("compares Vitess with MySQL: runs on the Vitess backend only (%s=vitess, make bench-vitess)", mysqltest.EnvEngine)
	}
	ops := []struct {
		name string
		run  func(b *testing.B, mendDB *mysqltest.DB, conns int) time.Duration
	}{
		{"Intake", vitessIntake},
		{"AppendFenced", vitessAppend},
		{"LeaseAcquire", vitessAcquire},
		{"PlannerRepair", vitessRepair},
	}
	for _, op := range ops {
		for _, conns := range vitessConns {
			for _, tg := range vitessTargets {
				b.Run(fmt.Sprintf("%s/conns=%d/target=%s", op.name, conns, tg.name), func(b *testing.B) {
					took := op.run(b, tg.db(b, migrations.Up), conns)
					b.ReportMetric(float64(b.N)/took.Seconds(), "ops/s")
				})
			}
		}
	}
	for _, due := range []bool{true, false} {
		name := "QueuesDue"
		if !due {
			name = "IdlePass"
		}
		for _, tg := range vitessTargets {
			b.Run(fmt.Sprintf("%s/queues=%d/target=%s", name, vitessQueues, tg.name), func(b *testing.B) {
				took := vitessListing(b, tg.db(b, migrations.Up), due)
				b.ReportMetric(float64(took.Microseconds())/1000/float64(b.N), "ms/op")
			})
		}
	}
}

// vitessQueue names worker w's queue number i. The intake spreads each worker over 8 queues,
// the lease acquire takes a queue per operation and the listings use vitessQueues, so those
// reach both shards; the append and the repair use one queue per worker (as a planner holds
// one queue's lease), so at 1 connection they run on one shard.
func vitessQueue(w, i int) string { return fmt.Sprintf("vq%d-%d", w, i) }

func vitessIntake(b *testing.B, db *mysqltest.DB, conns int) time.Duration {
	ctx := context.Background()
	intakes := make([]*dlq.Intake, conns)
	for w := range conns {
		in, err := dlq.New(openStore(b, db.DSN), dlq.Config{})
		if err != nil {
			b.Fatal(err)
		}
		intakes[w] = in
	}
	errs := make([]error, conns)
	b.ResetTimer()
	took := measure(conns, func(w int) {
		for i := range share(b.N, conns, w) {
			q := vitessQueue(w, i%8)
			payload := []byte(`{"id":"` + batchID(q, "1") + `","queue":"` + q + `"}`)
			if _, err := intakes[w].Record(ctx, dlq.Delivery{Source: src(q, fmt.Sprintf("m%d", i)), Payload: payload, FailureCount: 3, LastError: "boom"}); err != nil {
				errs[w] = err
				return
			}
		}
	})
	b.StopTimer()
	failOn(b, errs)
	return took
}

func vitessAppend(b *testing.B, db *mysqltest.DB, conns int) time.Duration {
	ctx := context.Background()
	setup := openStore(b, db.DSN)
	stores := make([]*storage.DB, conns)
	params := make([]storage.AppendParams, conns)
	for w := range conns {
		stores[w] = openStore(b, db.DSN)
		q := vitessQueue(w, 0)
		rec, _, err := setup.RecordCreate(ctx, mend.CreateParams{Source: src(q, "m"), OpID: mend.NewOpID(), Actor: "bench",
			Target: mend.Target{BatchID: "b", Desired: mend.OutcomeFailed}})
		if err != nil {
			b.Fatal(err)
		}
		term, err := setup.LeaseAcquire(ctx, q, "bench-"+strconv.Itoa(w), 10*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		p := storage.AppendTo(rec)
		p.Kind, p.State, p.Actor, p.Fence, p.RetryIn = mend.EventAttemptFailed, mend.StatePending, "bench", &term, time.Second
		params[w] = p
	}
	errs := make([]error, conns)
	b.ResetTimer()
	took := measure(conns, func(w int) {
		p := params[w]
		for range share(b.N, conns, w) {
			p.OpID = mend.NewOpID()
			p.Attempts++
			v, err := stores[w].RecordAppend(ctx, p)
			if err != nil {
				errs[w] = err
				return
			}
			p.Version = v
		}
	})
	b.StopTimer()
	failOn(b, errs)
	return took
}

func vitessAcquire(b *testing.B, db *mysqltest.DB, conns int) time.Duration {
	ctx := context.Background()
	queues := make([][]string, conns)
	var all []string
	for w := range conns {
		for i := range share(b.N, conns, w) {
			queues[w] = append(queues[w], vitessQueue(w, i))
		}
		all = append(all, queues[w]...)
	}
	seedExpiredLeases(b, db.SQL(b), all)
	stores := make([]*storage.DB, conns)
	for w := range conns {
		stores[w] = openStore(b, db.DSN)
	}
	errs := make([]error, conns)
	b.ResetTimer()
	took := measure(conns, func(w int) {
		for _, q := range queues[w] {
			term, err := stores[w].LeaseAcquire(ctx, q, "bench-"+strconv.Itoa(w), 10*time.Minute)
			if err == nil && term.Epoch != 2 {
				err = fmt.Errorf("acquired %s at epoch %d; want 2", q, term.Epoch)
			}
			if err != nil {
				errs[w] = err
				return
			}
		}
	})
	b.StopTimer()
	failOn(b, errs)
	return took
}

// vitessRepair is BenchmarkPlannerRepair's repair (see there) with mend's tables on db and the
// host's in a plain database beside them.
func vitessRepair(b *testing.B, db *mysqltest.DB, conns int) time.Duration {
	ctx := context.Background()
	hostDB := mysqltest.NewHostDB(b, sqtest.Apply)
	setup := openStore(b, db.DSN)
	w0 := world(b, hostDB)
	leases := make([]planLease, conns)
	seed := make([]error, conns)
	measure(conns, func(w int) {
		leases[w], seed[w] = seedRepairQueue(ctx, w0, setup, vitessQueue(w, 0), w, share(b.N, conns, w))
	})
	failOn(b, seed)
	planners := make([]*planner.Planner, conns)
	for w := range conns {
		h := openHost(b, hostDB.DSN)
		p, err := planner.New(planner.Config{Store: openStore(b, db.DSN), Batches: h, Waker: h, Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		planners[w] = p
	}
	errs := make([]error, conns)
	stats := make([]planner.Stats, conns)
	b.ResetTimer()
	took := measure(conns, func(w int) {
		stats[w], errs[w] = runUntilDrained(ctx, planners[w], leases[w])
	})
	b.StopTimer()
	failOn(b, errs)
	woken := 0
	for _, st := range stats {
		woken += st.Woken
	}
	if woken != b.N {
		b.Fatalf("planner woke %d records; want %d", woken, b.N)
	}
	return took
}

// idleRunner fails a pass that finds work: the idle pass must find none.
type idleRunner struct{}

func (idleRunner) Run(context.Context, planner.Lease) (planner.Stats, error) {
	return planner.Stats{}, fmt.Errorf("bench: an idle pass ran the planner")
}

// vitessListing seeds vitessQueues queues with one record each, all due (due) or all
// scheduled an hour ahead, and times b.N calls of QueuesDue at the reconciler's default
// limit (due) or b.N reconcile passes that find nothing to do.
func vitessListing(b *testing.B, db *mysqltest.DB, due bool) time.Duration {
	ctx := context.Background()
	store := openStore(b, db.DSN)
	ps := make([]storage.CreateParams, vitessQueues)
	for i := range ps {
		q := vitessQueue(0, i)
		ps[i] = mend.CreateParams{Source: src(q, "m"), OpID: mend.NewOpID(), Actor: "bench", Target: mend.Target{BatchID: batchID(q, "1"), Desired: mend.OutcomeFailed}}
	}
	for chunk := range slices.Chunk(ps, 500) {
		if _, err := store.RecordCreateMany(ctx, chunk); err != nil {
			b.Fatal(err)
		}
	}
	shift := "- INTERVAL 1 MINUTE"
	if !due {
		shift = "+ INTERVAL 1 HOUR"
	}
	if _, err := db.SQL(b).ExecContext(ctx, "UPDATE mend_records SET next_attempt_at = NOW(6) "+shift); err != nil {
		b.Fatal(err)
	}
	if due {
		b.ResetTimer()
		begin := time.Now()
		for range b.N {
			qs, err := store.QueuesDue(ctx, reconcile.QueueLimitDefault)
			if err != nil {
				b.Fatal(err)
			}
			if len(qs) != min(vitessQueues, reconcile.QueueLimitDefault) {
				b.Fatalf("QueuesDue listed %d queues; want %d", len(qs), min(vitessQueues, reconcile.QueueLimitDefault))
			}
		}
		return time.Since(begin)
	}
	f, err := fence.New(store, fence.Config{Holder: "bench", TTL: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	r, err := reconcile.New(reconcile.Config{Store: store, Fence: f, Planner: idleRunner{}, Retention: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	begin := time.Now()
	for range b.N {
		ps, err := r.RunOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if ps.Queues != 0 {
			b.Fatalf("an idle pass found %d due queues", ps.Queues)
		}
	}
	return time.Since(begin)
}

package bench

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
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

// vitessQueues is how many queues the due listing and the idle pass are measured at: issue
// 21's 10,000.
const vitessQueues = 10_000

// BenchmarkVitess compares mend's hot paths through vtgate (2 shards) with the same on one
// MySQL (make bench-vitess; MEND_TEST_ENGINE=vitess, skipped elsewhere): intake, fenced
// append, lease acquire and planner repair per operation (ops/s), and the reconciler's due
// listing (QueuesDue, a scatter) and idle pass at vitessQueues queues (ms per call). The
// host's tables of the repair are a plain MySQL database beside the cluster on both sides,
// as the submit queue's own server is in production. No tap, no replay: this measures the
// deployment, not mend's client. The storm is BenchmarkVitessStorm: it runs once per b.N,
// at -benchtime 1x, where these cases take 1000x.
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
	// The listings' queues are seeded once per target, here, and shared by both listings
	// (each first sets every record's due time): a case's function runs twice (-benchtime's
	// probe run of 1, then b.N), and four seedings of 10,000 queues per target would cost
	// more than the listings. This runs even when -bench selects no listing.
	listing := make([]*mysqltest.DB, len(vitessTargets))
	for i, tg := range vitessTargets {
		listing[i] = tg.db(b, migrations.Up)
		begin := time.Now()
		seedListing(b, listing[i].SQL(b), vitessQueues)
		// Printed, not logged: a parent benchmark's log is not shown.
		fmt.Printf("mend-bench: vitess listing seeded %d queues on %s in %s\n", vitessQueues, tg.name, time.Since(begin).Round(time.Millisecond))
	}
	for _, due := range []bool{true, false} {
		name := "QueuesDue"
		if !due {
			name = "IdlePass"
		}
		for i, tg := range vitessTargets {
			b.Run(fmt.Sprintf("%s/queues=%d/target=%s", name, vitessQueues, tg.name), func(b *testing.B) {
				took := vitessListing(b, listing[i], due)
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

// seedListing gives each of n queues one pending record with its created event, not yet
// due, in multi-row INSERTs of 500 rows through raw. vtgate splits each by shard (raw asks
// for MULTI transactions), so 10,000 queues take 20 statements per table on both targets;
// mend's own batch create commits each queue apart through vtgate, 10,000 transactions.
// The rows are what RecordCreate writes but for the source key, a hash of the queue rather
// than of the source's canonical form (nothing reads them by source).
func seedListing(b *testing.B, raw *sql.DB, n int) {
	b.Helper()
	ctx := context.Background()
	const chunk = 500
	const record = "(?, ?, ?, 'speculate_dlq', ?, 'm', '{}', 3, 'boom', NULL, '[]', ?, 'failed', 'pending', 1, 0, NULL, '', 0, NOW(6), NOW(6), NOW(6))"
	const event = "(?, 1, ?, 'created', 0, 'bench', ?, '{}', NOW(6), 'pending', 0, '', NULL)"
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		var recs, evs []any
		for i := lo; i < hi; i++ {
			q := vitessQueue(0, i)
			key := sha256.Sum256([]byte("listing/" + q))
			recs = append(recs, key[:16], q, key[:], q, batchID(q, "1"))
			evs = append(evs, key[:16], q, "op-listing-"+q)
		}
		rows := func(tuple string) string { return strings.TrimSuffix(strings.Repeat(tuple+", ", hi-lo), ", ") }
		if _, err := raw.ExecContext(ctx, `INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, payload,
			failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome,
			state, version, attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since) VALUES `+rows(record), recs...); err != nil {
			b.Fatalf("seed listing records: %v", err)
		}
		if _, err := raw.ExecContext(ctx, `INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, created_at,
			state, attempts, last_error, next_attempt_at) VALUES `+rows(event), evs...); err != nil {
			b.Fatalf("seed listing events: %v", err)
		}
	}
}

// vitessListing makes every record of db (seedListing's) due (due) or scheduled an hour
// ahead, and times b.N calls of QueuesDue at the reconciler's default limit (due) or b.N
// reconcile passes that find nothing to do.
func vitessListing(b *testing.B, db *mysqltest.DB, due bool) time.Duration {
	ctx := context.Background()
	store := openStore(b, db.DSN)
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

// vitessStormScale is BenchmarkVitessStorm's storm: 10,000 dead letters over 100 queues, a
// tenth of BenchmarkScale's at the same 100 per queue (each queue takes five planner runs of
// RunLimit 20, as at full size, so the passes go round the queues as they do there), with two
// replicas and mend run's defaults otherwise. It settles in a minute or two through vtgate
// here. No world of finished records: they are outside the due range every pass reads
// (BenchmarkVitess's IdlePass measures the listing at 10,000 queues).
func vitessStormScale() scaleConfig {
	c := fullScale()
	c.Queues, c.Finished, c.Storm, c.StormQueues, c.Replicas, c.Bound = 100, 0, 10_000, 100, []int{2}, 10*time.Minute
	return c
}

// vitessStormSmoke is its "smoke" preset: 500 dead letters over 10 queues, still past the
// planner's RunLimit per queue.
func vitessStormSmoke() scaleConfig {
	c := vitessStormScale()
	c.Queues, c.Storm, c.StormQueues, c.Bound = 10, 500, 10, 5*time.Minute
	return c
}

// BenchmarkVitessStorm runs BenchmarkScale's storm (scaleStorm: dead letters recorded through
// the real intake by concurrent workers while the replicas run, each replica wired as `mend
// run` wires it) with mend's tables through vtgate (2 shards) and then on one MySQL, in the
// same run (make bench-vitess; MEND_TEST_ENGINE=vitess, skipped elsewhere). The host's tables
// are a plain database on the mysqld under the cluster on both sides, as for PlannerRepair.
// Sizes: vitessStormScale, or MEND_BENCH_VITESS_STORM as MEND_BENCH_SCALE for BenchmarkScale
// ("smoke": vitessStormSmoke). Each b.N is a whole storm: run it at -benchtime 1x.
func BenchmarkVitessStorm(b *testing.B) {
	if !mysqltest.Vitess() {
		b.Skipf("compares Vitess with MySQL: runs on the Vitess backend only (%s=vitess, make bench-vitess)", mysqltest.EnvEngine)
	}
	cfg := scaleFrom(b, "MEND_BENCH_VITESS_STORM", vitessStormScale(), vitessStormSmoke())
	// Printed, not logged: a parent benchmark's log is not shown.
	fmt.Printf("mend-bench: vitess storm sizes storm=%d storm_queues=%d replicas=%v interval=%s intake_conns=%d intake_batch=%d bound=%s\n",
		cfg.Storm, cfg.StormQueues, cfg.Replicas, cfg.Interval, cfg.IntakeConns, cfg.IntakeBatch, cfg.Bound)
	for _, n := range cfg.Replicas {
		for _, tg := range vitessTargets {
			b.Run(fmt.Sprintf("replicas=%d/target=%s", n, tg.name), func(b *testing.B) {
				dbs := stormDBs{mend: tg.db(b, migrations.Up), host: mysqltest.NewHostDB(b, sqtest.Apply)}
				for i := range b.N {
					prefix := fmt.Sprintf("v%d%c-", n, 'a'+i)
					if i == 0 && tg.name == "vitess" {
						logShards(b, dbs.mend, cfg, prefix)
					}
					cnt, st, reps := startReplicas(b, dbs, cfg, n, prefix)
					scaleStorm(b, dbs, cfg, prefix, cnt, st, reps)
				}
			})
		}
	}
}

// logShards says how the storm's queues spread over the shards of db, a keyspace.
func logShards(b *testing.B, db *mysqltest.DB, cfg scaleConfig, prefix string) {
	shards := map[string]int{}
	for q := range cfg.StormQueues {
		shards[db.QueueShard(b, stormQueue(prefix, q))]++
	}
	b.Logf("mend-bench: vitess storm shards %s: queues per shard %v", b.Name(), shards)
}

package bench

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"net"
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
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// scaleConfig sizes a storm run: BenchmarkScale's (MEND_BENCH_SCALE) and
// BenchmarkVitessStorm's (MEND_BENCH_VITESS_STORM). The variable overrides
// it: "smoke" for the benchmark's small preset, or comma-separated
// key=value pairs (keys as in scaleFrom), applied on top of the full sizes
// or of "smoke,...".
type scaleConfig struct {
	Queues      int           // queues that hold finished records: the world's size
	Finished    int           // finished (done) records spread over them
	Storm       int           // dead letters in the storm
	StormQueues int           // queues the storm hits
	Replicas    []int         // reconciler counts, one run each, in this order
	IdlePasses  int           // idle passes measured per replica
	IntakeConns int           // intake workers delivering the storm
	IntakeBatch int           // deliveries per intake call: 1 is Intake.Record, more is RecordMany (a subscription page)
	Interval    time.Duration // the reconcilers' pass interval (mend run's default)
	Deadline    time.Duration // the storm target: every queue's first wake-up within this of its first dead letter
	Settle      time.Duration // the storm target: every record settled and woken within this of the first delivery
	Bound       time.Duration // the storm is given up after this (the benchmark always ends)
	RunLimit    int           // planner.Config.RunLimit (0: mend's default; -1: drain a queue per run)
	FollowLimit int           // planner.Config.FollowLimit (0: mend's default; run_limit's value: no follow-up runs larger than first runs)
	Concurrency int           // reconcile.Config.Concurrency of each replica (0: mend's default)
	NoLimit     bool          // leave out the limit storm after each of mend's (BenchmarkScale)
}

func fullScale() scaleConfig {
	// Two and four replicas twice each, in the order 2, 4, 4, 2: the world
	// grows by a storm each run, so that order cancels the drift, and two
	// runs of each show the spread of runs alike.
	return scaleConfig{Queues: 10_000, Finished: 1_000_000, Storm: 100_000, StormQueues: 1_000, Replicas: []int{2, 4, 4, 2},
		IdlePasses: 20, IntakeConns: 16, IntakeBatch: subscribe.PageSizeDefault, Interval: reconcile.IntervalDefault,
		Deadline: time.Minute, Settle: 2 * time.Minute, Bound: 20 * time.Minute}
}

func smokeScale() scaleConfig {
	c := fullScale()
	c.Queues, c.Finished, c.Storm, c.StormQueues, c.IdlePasses, c.Bound = 100, 10_000, 2_000, 20, 10, 5*time.Minute
	c.Replicas = []int{2, 4}
	return c
}

// scaleFrom returns full with the environment variable env's sizes applied
// (smoke is its "smoke" preset).
func scaleFrom(tb testing.TB, env string, full, smoke scaleConfig) scaleConfig {
	v := os.Getenv(env)
	c := full
	for _, kv := range strings.Split(v, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		if kv == "smoke" {
			c = smoke
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		var err error
		atoi := func(p *int) { *p, err = strconv.Atoi(val) }
		dur := func(p *time.Duration) { *p, err = time.ParseDuration(val) }
		switch {
		case !ok:
			err = fmt.Errorf("want key=value")
		case k == "queues":
			atoi(&c.Queues)
		case k == "finished":
			atoi(&c.Finished)
		case k == "storm":
			atoi(&c.Storm)
		case k == "storm_queues":
			atoi(&c.StormQueues)
		case k == "idle_passes":
			atoi(&c.IdlePasses)
		case k == "run_limit":
			atoi(&c.RunLimit)
		case k == "follow_limit":
			atoi(&c.FollowLimit)
		case k == "concurrency":
			atoi(&c.Concurrency)
		case k == "intake_conns":
			atoi(&c.IntakeConns)
		case k == "intake_batch":
			atoi(&c.IntakeBatch)
		case k == "settle":
			dur(&c.Settle)
		case k == "interval":
			dur(&c.Interval)
		case k == "deadline":
			dur(&c.Deadline)
		case k == "bound":
			dur(&c.Bound)
		case k == "limit":
			var on bool
			on, err = strconv.ParseBool(val)
			c.NoLimit = !on
		case k == "replicas":
			c.Replicas = nil
			for _, f := range strings.Split(val, "+") {
				n, e := strconv.Atoi(f)
				if e != nil {
					err = e
				}
				c.Replicas = append(c.Replicas, n)
			}
		default:
			err = fmt.Errorf("unknown key")
		}
		if err != nil {
			tb.Fatalf("%s %q: %v (keys: queues, finished, storm, storm_queues, replicas=2+4, idle_passes, run_limit, follow_limit, concurrency, intake_conns, intake_batch, interval, deadline, settle, bound, limit=false; or smoke)", env, kv, err)
		}
	}
	if c.Queues < 1 || c.StormQueues < 1 || c.Storm < c.StormQueues || c.Finished < 0 || c.Finished > 1_000_000 || c.Storm > 1_000_000 || c.IdlePasses < 1 || c.IntakeConns < 1 || c.IntakeBatch < 1 {
		tb.Fatalf("%s: inconsistent sizes %+v (at most 10^6 finished and 10^6 dead letters: the numbers table's size)", env, c)
	}
	return c
}

// counter counts the statements sent on every connection dialed through
// it, by kind (mend's "-- name:" label), keeping one text of each kind,
// and sums by kind the time each waited for its reply (from the packet's
// write until the reply's first bytes arrive: the server's work, the
// loopback and the port proxy, and the reading goroutine's scheduling;
// summed over connections, so concurrent waits add up).
// Unlike the tap it stores no history: the storm sends millions.
type counter struct {
	net    string
	dials  atomic.Int64 // connections opened
	mu     sync.Mutex
	counts map[string]int64
	waits  map[string]time.Duration
	sample map[string]string
}

func newCounter() *counter {
	c := &counter{net: "mendcount" + strconv.FormatInt(tapSeq.Add(1), 10), counts: map[string]int64{}, waits: map[string]time.Duration{}, sample: map[string]string{}}
	mysql.RegisterDialContext(c.net, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		c.dials.Add(1)
		return &countConn{Conn: conn, c: c}, nil
	})
	return c
}

func (c *counter) DSN(tb testing.TB, dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Net = c.net
	return cfg.FormatDSN()
}

// snapshot returns the counts so far.
func (c *counter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// waitSnapshot returns the time waited for replies so far, by kind.
func (c *counter) waitSnapshot() map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]time.Duration, len(c.waits))
	for k, v := range c.waits {
		out[k] = v
	}
	return out
}

func diff[V int64 | time.Duration](after, before map[string]V) map[string]V {
	out := map[string]V{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func mixString(m map[string]int64, per float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(m[b] - m[a]) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%.2f", k, float64(m[k])/per))
	}
	return strings.Join(parts, ", ")
}

// countConn is one counted connection. The driver writes a command and
// reads its reply on one goroutine at a time, so kind and sent need no
// lock.
type countConn struct {
	net.Conn
	c    *counter
	kind string    // the statement awaiting its reply, "" when none
	sent time.Time // when it was written
}

func (c *countConn) Write(b []byte) (int, error) {
	if isRoundTrip(b) && b[4] == comQuery {
		text := string(b[5:])
		k := stmtKind(text)
		c.c.mu.Lock()
		c.c.counts[k]++
		if _, ok := c.c.sample[k]; !ok {
			c.c.sample[k] = text
		}
		c.c.mu.Unlock()
		c.kind, c.sent = k, time.Now()
	}
	return c.Conn.Write(b)
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.kind != "" {
		d := time.Since(c.sent)
		c.c.mu.Lock()
		c.c.waits[c.kind] += d
		c.c.mu.Unlock()
		c.kind = ""
	}
	return n, err
}

// The scale world's finished records: record i is in queue
// s<i mod queues>, done, with its last event; next_attempt_at is NULL, as
// the planner leaves a done record.
const sqlScaleFinished = `INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, payload,
	failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome,
	state, version, attempts, next_attempt_at, last_error, epoch, created_at, updated_at, state_since)
SELECT UNHEX(LEFT(SHA2(CONCAT('scale-', n.i), 256), 32)), CONCAT('s', LPAD(n.i MOD ?, 5, '0')), UNHEX(SHA2(CONCAT('scale-', n.i), 256)),
	'speculate_dlq', CONCAT('s', LPAD(n.i MOD ?, 5, '0')), CONCAT('done-', n.i), '{}',
	3, 'boom', NULL, '[]', CONCAT('old-', n.i), 'failed',
	'done', 4, 1, NULL, '', 1, NOW(6), NOW(6), NOW(6)
FROM bench_numbers n WHERE n.i >= ? AND n.i < ? ORDER BY 1`

const sqlScaleFinishedEvents = `INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, created_at)
SELECT UNHEX(LEFT(SHA2(CONCAT('scale-', n.i), 256), 32)), 4, CONCAT('s', LPAD(n.i MOD ?, 5, '0')), 'woken', 1, 'bench', CONCAT('op-scale-', n.i), '{}', NOW(6)
FROM bench_numbers n WHERE n.i >= ? AND n.i < ? ORDER BY 1`

// Every queue of the world has been leased before: its lease row holds a
// released term, as a finished planner run leaves it.
const sqlScaleLeases = `INSERT INTO mend_leases (queue, holder, epoch, acquired_at, renewed_at, expires_at, transitions)
SELECT CONCAT('s', LPAD(n.i, 5, '0')), 'old', 1, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR, 2
FROM bench_numbers n WHERE n.i < ?`

const sqlScaleLeaseHistory = `INSERT INTO mend_lease_history (queue, epoch, holder, acquired_at, ended_at, ended_how)
SELECT CONCAT('s', LPAD(n.i, 5, '0')), 1, 'old', NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR, 'released'
FROM bench_numbers n WHERE n.i < ?`

// The storm's host side, seeded in bulk: per storm queue a live batch
// (created, with a request) to wake; per dead letter a speculating batch
// with one request, enrolled as the host leaves it (request batched at
// version 1, its request_batch row, the batch's membership row). Dead
// letter i is in queue <prefix><i mod queues>.
var sqlStormHost = []string{
	`INSERT INTO batch (queue, id, contains, dependencies, state, version)
SELECT q, CONCAT(q, '/batch/z-live'), CONCAT('["', q, '/live"]'), '[]', 'created', 1
FROM (SELECT CONCAT(?, LPAD(n.i, 4, '0')) q FROM bench_numbers n WHERE n.i < ?) t`,
	`INSERT INTO queue_batch_state (queue, state, batch_id)
SELECT q, 'created', CONCAT(q, '/batch/z-live') FROM (SELECT CONCAT(?, LPAD(n.i, 4, '0')) q FROM bench_numbers n WHERE n.i < ?) t`,
	`INSERT INTO request (queue, id, change_uri, land_strategy, state, version)
SELECT q, CONCAT(q, '/live'), '{}', 'rebase', 'batched', 1 FROM (SELECT CONCAT(?, LPAD(n.i, 4, '0')) q FROM bench_numbers n WHERE n.i < ?) t`,
	`INSERT INTO batch (queue, id, contains, dependencies, state, version)
SELECT q, CONCAT(q, '/batch/d', LPAD(i, 6, '0')), CONCAT('["', q, '/r', LPAD(i, 6, '0'), '"]'), '[]', 'speculating', 1
FROM (SELECT CONCAT(?, LPAD(n.i MOD ?, 4, '0')) q, n.i FROM bench_numbers n WHERE n.i < ?) t`,
	`INSERT INTO queue_batch_state (queue, state, batch_id)
SELECT q, 'speculating', CONCAT(q, '/batch/d', LPAD(i, 6, '0'))
FROM (SELECT CONCAT(?, LPAD(n.i MOD ?, 4, '0')) q, n.i FROM bench_numbers n WHERE n.i < ?) t`,
	`INSERT INTO request (queue, id, change_uri, land_strategy, state, version)
SELECT q, CONCAT(q, '/r', LPAD(i, 6, '0')), '{}', 'rebase', 'batched', 1
FROM (SELECT CONCAT(?, LPAD(n.i MOD ?, 4, '0')) q, n.i FROM bench_numbers n WHERE n.i < ?) t`,
	`INSERT INTO request_batch (queue, request_id, batch_id, version)
SELECT q, CONCAT(q, '/r', LPAD(i, 6, '0')), CONCAT(q, '/batch/d', LPAD(i, 6, '0')), 1
FROM (SELECT CONCAT(?, LPAD(n.i MOD ?, 4, '0')) q, n.i FROM bench_numbers n WHERE n.i < ?) t`,
}

func stormQueue(prefix string, i int) string { return fmt.Sprintf("%s%04d", prefix, i) }

// replica is one `mend run` equivalent: its own pools (as a separate
// process has), fence, planner and reconciler, wired as cmd/mend wires them
// with mend run's defaults.
type replica struct {
	store *storage.DB
	host  *host.DB
	rec   *reconcile.Reconciler
}

// scaleStats gathers what the replicas' hooks report.
type scaleStats struct {
	passes   atomic.Int64
	acquired atomic.Int64
	renewed  atomic.Int64
	released atomic.Int64
	mu       sync.Mutex
	firstW   map[string]time.Time // queue: its first wake-up
	lastW    time.Time            // the last wake-up of all
	woken    int64
	// finished counts the records the runs reported done (woken, or done
	// with nothing to wake); finishedAll is closed when it reaches want.
	finished    atomic.Int64
	runs, empty atomic.Int64 // planner runs, and those that found nothing to do
	runNanos    atomic.Int64 // the planner runs' durations, summed
	want        int64
	finishedAll chan struct{}
	closeOnce   sync.Once
}

func newReplica(b *testing.B, storeDSN, hostDSN, holder string, cfg scaleConfig, st *scaleStats) *replica {
	b.Helper()
	ctx := context.Background()
	store, err := storage.Open(ctx, storeDSN, storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	h, err := host.Open(ctx, hostDSN, "", host.Options{})
	if err != nil {
		b.Fatal(err)
	}
	f, err := fence.New(store, fence.Config{Holder: holder, Hooks: fence.Hooks{
		OnAcquired: func(mend.Term) { st.acquired.Add(1) },
		OnRenew: func(_ mend.Term, _ time.Duration, err error) {
			if err == nil {
				st.renewed.Add(1)
			}
		},
		OnReleased: func(mend.Term) { st.released.Add(1) },
	}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := planner.New(planner.Config{Store: store, Batches: h, Waker: h, Actor: "planner/" + holder, RunLimit: cfg.RunLimit, FollowLimit: cfg.FollowLimit, Hooks: planner.Hooks{
		OnWake: func(queue string, err error) {
			if err != nil {
				return
			}
			now := time.Now()
			st.mu.Lock()
			if _, ok := st.firstW[queue]; !ok {
				st.firstW[queue] = now
			}
			st.lastW = now
			st.woken++
			st.mu.Unlock()
		},
	}})
	if err != nil {
		b.Fatal(err)
	}
	rec, err := reconcile.New(reconcile.Config{Store: store, Fence: f, Planner: p, Interval: cfg.Interval, Concurrency: cfg.Concurrency,
		Hooks: reconcile.Hooks{
			OnPass: func(reconcile.PassStats, time.Duration) { st.passes.Add(1) },
			OnQueue: func(_ string, ps planner.Stats, took time.Duration, err error) {
				st.runs.Add(1)
				st.runNanos.Add(int64(took))
				if err == nil && ps.Settled+ps.Woken+ps.WakeFailed+ps.Done+ps.Waiting+ps.Parked+ps.Failed+ps.Conflicts == 0 {
					st.empty.Add(1)
				}
				if n := st.finished.Add(int64(ps.Woken + ps.Done)); st.want > 0 && n >= st.want {
					st.closeOnce.Do(func() { close(st.finishedAll) })
				}
			},
		}})
	if err != nil {
		b.Fatal(err)
	}
	r := &replica{store: store, host: h, rec: rec}
	b.Cleanup(func() { _ = h.Close(); _ = store.Close() })
	return r
}

// BenchmarkScale: mend's reconcilers in a big world (MEND_BENCH_SCALE, see
// scaleConfig; `make bench-scale`). The replicas run in-process, each with
// reconcile.New over its own storage, fence, planner and host adapter, as
// `mend run` wires them, with mend run's defaults (interval 10 s,
// concurrency 4, lease TTL 15 s). For each replica count it measures:
//
//   - the idle pass (nothing due): statements per pass and its latency,
//     with the plan of its statement;
//   - a storm of dead letters over many queues, recorded through the real
//     intake by concurrent workers while the replicas run: time from the
//     first delivery to the last wake-up, and each queue's time to its first
//     wake-up against the deadline (2 minutes);
//   - lease traffic per pass during the storm (statements by kind);
//   - the process's Go heap in use and RSS at the end. The process also
//     holds the intake workers and the benchmark, so these bound a
//     replica's memory from above.
//
// A storm that does not drain within the bound is reported as such and
// given up; the benchmark fails only on a wrong result.
func BenchmarkScale(b *testing.B) {
	cfg := scaleFrom(b, "MEND_BENCH_SCALE", fullScale(), smokeScale())
	db := mysqltest.NewDB(b, migrations.Up, sqtest.Apply)
	raw := db.SQL(b)
	var version string
	if err := raw.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("mend-bench: server %s (%s)\n", version, db.Server)
	if cfg.Finished >= 100_000 {
		setPool(b, raw, bigPool)
	}
	// Printed, not logged: a parent benchmark's log is not shown.
	fmt.Printf("mend-bench: scale sizes queues=%d finished=%d storm=%d storm_queues=%d replicas=%v interval=%s intake_conns=%d deadline=%s bound=%s",
		cfg.Queues, cfg.Finished, cfg.Storm, cfg.StormQueues, cfg.Replicas, cfg.Interval, cfg.IntakeConns, cfg.Deadline, cfg.Bound)
	if cfg.RunLimit != 0 || cfg.FollowLimit != 0 {
		fmt.Printf(" run_limit=%d follow_limit=%d", cfg.RunLimit, cfg.FollowLimit)
	}
	fmt.Println()
	seedStart := time.Now()
	seedScaleWorld(b, raw, cfg)
	fmt.Printf("mend-bench: scale world seeded in %s\n", time.Since(seedStart).Round(time.Millisecond))

	for run, n := range cfg.Replicas {
		// A count run twice is replicas=N#01 the second time.
		b.Run("replicas="+strconv.Itoa(n), func(b *testing.B) {
			for i := range b.N {
				scaleRun(b, db, cfg, n, fmt.Sprintf("t%d%d%c-", run, n, 'a'+i))
			}
		})
		// The limit storm after each of mend's (limit, limit#01, ...): the
		// same storm in the same world, which grows alike for both.
		if !cfg.NoLimit {
			b.Run("limit", func(b *testing.B) {
				for i := range b.N {
					limitScaleRun(b, db, cfg, reconcile.ClusterConcurrencyDefault, fmt.Sprintf("l%d%c-", run, 'a'+i))
				}
			})
		}
	}
}

func seedScaleWorld(b *testing.B, raw *sql.DB, cfg scaleConfig) {
	b.Helper()
	ctx := context.Background()
	conn, err := raw.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			b.Fatalf("seed: %.60s: %v", q, err)
		}
	}
	// Unique keys are unique by construction here.
	exec("SET SESSION unique_checks = 0")
	if err := ensureNumbers(ctx, conn); err != nil {
		b.Fatal(err)
	}
	const chunk = 250_000
	for lo := 0; lo < cfg.Finished; lo += chunk {
		hi := min(lo+chunk, cfg.Finished)
		exec(sqlScaleFinished, cfg.Queues, cfg.Queues, lo, hi)
		exec(sqlScaleFinishedEvents, cfg.Queues, lo, hi)
	}
	exec(sqlScaleLeases, cfg.Queues)
	exec(sqlScaleLeaseHistory, cfg.Queues)
	exec("ANALYZE TABLE mend_records, mend_events, mend_leases")
}

// seedStorm seeds the storm's host side (sqlStormHost) in raw's database.
func seedStorm(b *testing.B, raw *sql.DB, cfg scaleConfig, prefix string) {
	b.Helper()
	ctx := context.Background()
	if err := ensureNumbers(ctx, raw); err != nil {
		b.Fatal(err)
	}
	for i, q := range sqlStormHost {
		args := []any{prefix, cfg.StormQueues}
		if i >= 3 {
			args = []any{prefix, cfg.StormQueues, cfg.Storm}
		}
		if _, err := raw.ExecContext(ctx, q, args...); err != nil {
			b.Fatalf("seed storm: %.60s: %v", q, err)
		}
	}
}

// stormDBs are a storm's two sides: mend's tables and the host's. In
// BenchmarkScale they are one database; on Vitess mend's is a keyspace
// through vtgate and the host's a plain database beside it.
type stormDBs struct{ mend, host *mysqltest.DB }

func scaleRun(b *testing.B, db *mysqltest.DB, cfg scaleConfig, n int, prefix string) {
	dbs := stormDBs{mend: db, host: db}
	cnt, st, reps := startReplicas(b, dbs, cfg, n, prefix)
	scaleIdle(b, cfg, cnt, reps, db.SQL(b))
	scaleStorm(b, dbs, cfg, prefix, cnt, st, reps)
}

// startReplicas makes n replicas whose statements, to mend's tables and
// the host's, cnt counts, and runs each one's first pass: the first pass
// of a reconciler also prunes (once per hour), which is neither an idle
// pass nor the storm's work. It leaves the benchmark's timer stopped.
func startReplicas(b *testing.B, dbs stormDBs, cfg scaleConfig, n int, prefix string) (cnt *counter, st *scaleStats, reps []*replica) {
	b.StopTimer()
	cnt = newCounter()
	st = &scaleStats{firstW: map[string]time.Time{}, want: int64(cfg.Storm), finishedAll: make(chan struct{})}
	reps = make([]*replica, n)
	for i := range n {
		reps[i] = newReplica(b, cnt.DSN(b, dbs.mend.DSN), cnt.DSN(b, dbs.host.DSN), fmt.Sprintf("%sreplica-%d", prefix, i), cfg, st)
	}
	for _, r := range reps {
		if _, err := r.rec.RunOnce(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return cnt, st, reps
}

// scaleIdle measures the replicas' idle passes (nothing due), run
// concurrently, as they would, and explains QueuesDue's plan on raw.
func scaleIdle(b *testing.B, cfg scaleConfig, cnt *counter, reps []*replica, raw *sql.DB) {
	ctx := context.Background()
	n := len(reps)
	before := cnt.snapshot()
	lat := make([][]time.Duration, n)
	errs := make([]error, n)
	b.StartTimer()
	measure(n, func(w int) {
		for range cfg.IdlePasses {
			start := time.Now()
			ps, err := reps[w].rec.RunOnce(ctx)
			lat[w] = append(lat[w], time.Since(start))
			if err == nil && ps.Queues != 0 {
				err = fmt.Errorf("an idle pass found %d due queues", ps.Queues)
			}
			if err != nil {
				errs[w] = err
				return
			}
		}
	})
	b.StopTimer()
	failOn(b, errs)
	idle := diff(cnt.snapshot(), before)
	passes := float64(n * cfg.IdlePasses)
	all := slices.Concat(lat...)
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64(total(idle))/passes, "idle-stmts/pass")
	b.ReportMetric(ms(all[len(all)/2]), "idle-median-ms")
	b.ReportMetric(ms(all[len(all)-1]), "idle-max-ms")
	b.Logf("mend-bench: scale idle %s: %s per pass", b.Name(), mixString(idle, passes))
	cnt.mu.Lock()
	text, ok := cnt.sample["QueuesDue"]
	cnt.mu.Unlock()
	if ok {
		b.Logf("mend-bench: scale explain %s: %s", b.Name(), explain(b, raw, text))
	}
}

// scaleStorm runs the storm (see BenchmarkScale) against the replicas,
// started, and reports it: the time to settle and wake, each queue's first
// wake-up, the round trips the replicas sent per record (to mend's tables
// and the host's), lease traffic per pass and the process's memory. A wrong
// result fails the benchmark.
func scaleStorm(b *testing.B, dbs stormDBs, cfg scaleConfig, prefix string, cnt *counter, st *scaleStats, reps []*replica) {
	ctx := context.Background()
	raw := dbs.mend.SQL(b)
	seedStart := time.Now()
	seedStorm(b, dbs.host.SQL(b), cfg, prefix)
	deliveries := stormDeliveries(cfg, prefix)
	intakeCnt := newCounter()
	intakes := make([]*dlq.Intake, cfg.IntakeConns)
	for w := range intakes {
		s, err := storage.Open(ctx, intakeCnt.DSN(b, dbs.mend.DSN), storage.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		if intakes[w], err = dlq.New(s, dlq.Config{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("mend-bench: scale seeded-storm for %s in %s", b.Name(), time.Since(seedStart).Round(time.Millisecond))
	// The previous storm's row versions are purged by InnoDB in the
	// background; that work is not this storm's, so it waits for it.
	b.ReportMetric(quiesce(b, raw).Seconds(), "storm-purge-wait-s")
	firstD := make([]atomic.Int64, cfg.StormQueues) // unix nanos of each queue's first delivery
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, r := range reps {
		if err := r.rec.Start(runCtx); err != nil {
			b.Fatal(err)
		}
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			for _, r := range reps {
				r.rec.Stop()
			}
		}
	}
	defer stop()
	before, waitsBefore := cnt.snapshot(), cnt.waitSnapshot()
	passesBefore, dialsBefore := st.passes.Load(), cnt.dials.Load()
	runsBefore, emptyBefore, runNanosBefore := st.runs.Load(), st.empty.Load(), st.runNanos.Load()
	var (
		next     atomic.Int64
		errMu    sync.Mutex
		intakeEr error
	)
	b.StartTimer()
	procs := findServerProcs(b, raw, dbs.mend.DSN)
	procBefore := procs.read()
	cpuBefore := readCPU()
	stormStart := time.Now()
	intakeTook := measure(cfg.IntakeConns, func(w int) {
		for {
			from := int(next.Add(int64(cfg.IntakeBatch)) - int64(cfg.IntakeBatch))
			if from >= cfg.Storm {
				return
			}
			page := deliveries[from:min(from+cfg.IntakeBatch, cfg.Storm)]
			now := time.Now().UnixNano()
			for i := range page {
				firstD[(from+i)%cfg.StormQueues].CompareAndSwap(0, now)
			}
			var err error
			if len(page) == 1 {
				_, err = intakes[w].Record(ctx, page[0])
			} else {
				var res []dlq.ManyResult
				res, err = intakes[w].RecordMany(ctx, page)
				for _, r := range res {
					err = cmp.Or(err, r.Err)
				}
			}
			if err != nil {
				errMu.Lock()
				intakeEr = err
				errMu.Unlock()
				return
			}
		}
	})
	if intakeEr != nil {
		b.Fatalf("intake: %v", intakeEr)
	}
	// Wait for the storm to drain: no storm record due any more (done, or
	// parked, which the check at the end refuses). The probe only decides
	// when to stop: the times come from the hooks. It runs when the runs
	// have reported every record done, and every 10 s in case they never
	// do: a probe costs about 0.6 s of server time at full size (it reads
	// the due records' index entries), and the first version, four times a
	// second through the storm's rows at 1.5 s each, took a core from the
	// replicas it measured.
	drained := false
	allDone := st.finishedAll
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	giveUp := time.NewTimer(cfg.Bound)
	defer giveUp.Stop()
wait:
	for !drained {
		select {
		case <-tick.C:
		case <-allDone:
			allDone = nil // the probe below confirms; then every 10 s
		case <-giveUp.C:
			b.Logf("mend-bench: scale gave-up %s: the storm did not drain within %s", b.Name(), cfg.Bound)
			break wait
		}
		var left int
		if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM mend_records WHERE next_attempt_at IS NOT NULL AND queue LIKE ?", prefix+"%").Scan(&left); err != nil {
			b.Fatal(err)
		}
		drained = left == 0
	}
	b.StopTimer()
	cpuDuring := readCPU().since(cpuBefore)
	procDuring := procs.read().since(procBefore)
	stop()
	storm := diff(cnt.snapshot(), before)
	reportProcCPU(b, cpuDuring, procDuring)
	b.ReportMetric(float64(total(intakeCnt.snapshot()))/float64(cfg.Storm), "storm-intake-roundtrips/record")
	reportPhases(b, storm, float64(cfg.Storm), diff(cnt.waitSnapshot(), waitsBefore), intakeCnt.waitSnapshot())
	// What the machine's CPUs did during the storm: the server and every
	// replica share them, and time the hypervisor gave elsewhere (steal)
	// is time the storm did not get, the main source of run-to-run spread.
	b.ReportMetric(cpuDuring.pct(cpuDuring.steal), "storm-steal-%")
	b.ReportMetric(cpuDuring.pct(cpuDuring.idle), "storm-idle-%")
	stormPasses, dials := st.passes.Load()-passesBefore, cnt.dials.Load()-dialsBefore
	b.ReportMetric(float64(st.runs.Load()-runsBefore), "storm-runs")
	b.ReportMetric(float64(st.empty.Load()-emptyBefore), "storm-empty-runs")
	// The planner runs' time, summed over the runs in flight: against the
	// cluster's budget of runs at once over the storm's time it says
	// whether the storm waited for work or for the next pass.
	b.ReportMetric(time.Duration(st.runNanos.Load()-runNanosBefore).Seconds(), "storm-run-s")
	b.ReportMetric(float64(reconcile.ClusterConcurrencyDefault), "storm-run-slots")

	st.mu.Lock()
	firstWake, missing := firstWakes(st.firstW, firstD, cfg, prefix)
	lastW, woken := st.lastW, st.woken
	st.mu.Unlock()
	sec := func(d time.Duration) float64 { return d.Seconds() }
	within := 0.0
	if missing == 0 && len(firstWake) > 0 && firstWake[len(firstWake)-1] <= cfg.Deadline {
		within = 1
	}
	drainedF := 0.0
	if drained {
		drainedF = 1
		b.ReportMetric(sec(lastW.Sub(stormStart)), "storm-drain-s")
	}
	b.ReportMetric(drainedF, "storm-drained")
	b.ReportMetric(float64(cfg.Storm)/intakeTook.Seconds(), "storm-intake/s")
	b.ReportMetric(intakeTook.Seconds(), "storm-intake-s")
	b.ReportMetric(float64(woken), "storm-woken")
	b.ReportMetric(float64(missing), "storm-queues-unwoken")
	if len(firstWake) > 0 {
		b.ReportMetric(sec(firstWake[len(firstWake)/2]), "storm-firstwake-p50-s")
		b.ReportMetric(sec(firstWake[len(firstWake)-1]), "storm-firstwake-max-s")
	}
	b.ReportMetric(within, "storm-within-deadline")
	b.ReportMetric(sec(cfg.Deadline), "storm-deadline-s")
	b.ReportMetric(sec(cfg.Settle), "storm-settle-deadline-s")

	// The replicas' pools open connections as they need them; database/sql
	// keeps two idle ones by default, so more concurrent work than that
	// reconnects.
	b.ReportMetric(float64(dials), "storm-connects")

	// (c) Lease traffic per pass, during the storm: the fence's own
	// statements (LeaseCheck is the fenced writes' read of the lease row,
	// counted with the writes).
	per := math.Max(float64(stormPasses), 1)
	b.ReportMetric(float64(stormPasses), "storm-passes")
	lease := map[string]int64{}
	for k, v := range storm {
		if strings.HasPrefix(k, "Lease") && k != "LeaseCheck" {
			lease[k] = v
		}
	}
	b.ReportMetric(float64(storm["LeaseEnsure"])/per, "lease-acquires/pass")
	b.ReportMetric(float64(storm["LeaseTake"])/per, "lease-takes/pass")
	b.ReportMetric(float64(storm["LeaseRenew"])/per, "lease-renews/pass")
	b.ReportMetric(float64(storm["LeaseRelease"])/per, "lease-releases/pass")
	b.Logf("mend-bench: scale lease %s: %s per pass over %d passes (hooks: %d terms acquired, %d renewed, %d released)",
		b.Name(), mixString(lease, per), stormPasses, st.acquired.Load(), st.renewed.Load(), st.released.Load())
	b.Logf("mend-bench: scale storm-mix %s: %s per dead letter", b.Name(), mixString(storm, float64(cfg.Storm)))
	var stmts int64
	for _, v := range storm {
		stmts += v
	}
	// Every statement the replicas sent is one round trip (a multi-statement
	// packet is counted once), amortised over the storm's records.
	b.ReportMetric(float64(stmts)/float64(cfg.Storm), "storm-roundtrips/record")

	// (d) Memory at the end.
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	rss, peak := procMemory()
	b.ReportMetric(float64(m.HeapInuse)/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(rss, "rss-MiB")
	b.ReportMetric(peak, "rss-peak-MiB")

	if drained {
		b.ReportMetric(float64(checkStorm(b, dbs, cfg, prefix)), "storm-wakeups")
	}
}

// checkStorm fails b unless every record of the storm is done by a woken
// event whose message is in the queue's speculate partition, and returns
// the wake-ups published (a run wakes its queue once for all the records
// it settled, so there are fewer than records). mend's tables and the
// host's are read apart, as on Vitess they are on different servers.
func checkStorm(b *testing.B, dbs stormDBs, cfg scaleConfig, prefix string) int {
	ctx := context.Background()
	type message struct{ partition, id string }
	published := map[message]bool{}
	rows, err := dbs.host.SQL(b).QueryContext(ctx, "SELECT partition_key, id FROM queue_messages WHERE topic = 'speculate' AND partition_key LIKE ?", prefix+"%")
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var m message
		if err := rows.Scan(&m.partition, &m.id); err != nil {
			b.Fatal(err)
		}
		published[m] = true
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	// The join names the queue on both sides, so vtgate runs it on each
	// shard whole.
	rows, err = dbs.mend.SQL(b).QueryContext(ctx, `SELECT r.queue, r.state, COALESCE(e.kind, ''), COALESCE(JSON_UNQUOTE(JSON_EXTRACT(e.data, '$.message_id')), '')
		FROM mend_records r LEFT JOIN mend_events e ON e.queue = r.queue AND e.record_id = r.record_id AND e.seq = r.version
		WHERE r.queue LIKE ?`, prefix+"%")
	if err != nil {
		b.Fatal(err)
	}
	var done, unwoken int
	for rows.Next() {
		var queue, state, kind, msg string
		if err := rows.Scan(&queue, &state, &kind, &msg); err != nil {
			b.Fatal(err)
		}
		if state == string(mend.StateDone) {
			done++
		}
		if kind != string(mend.EventWoken) || !published[message{queue, msg}] {
			unwoken++
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if done != cfg.Storm || unwoken != 0 {
		b.Fatalf("storm: %d records done, %d not woken by a published message; want %d and 0", done, unwoken, cfg.Storm)
	}
	return len(published)
}

// explain returns the plan of a statement mend sent: the key each table is
// read through and the rows the optimizer expects.
func explain(b *testing.B, db *sql.DB, text string) string {
	// MySQL 9 prints EXPLAIN as a tree unless asked for the table;
	// MariaDB knows no FORMAT=TRADITIONAL and prints the table anyway.
	rows, err := db.QueryContext(context.Background(), "EXPLAIN FORMAT=TRADITIONAL "+text)
	if err != nil {
		rows, err = db.QueryContext(context.Background(), "EXPLAIN "+text)
	}
	if err != nil {
		return "explain failed: " + err.Error()
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var parts []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "explain failed: " + err.Error()
		}
		var f []string
		for i, c := range cols {
			switch c {
			case "table", "type", "key", "rows", "Extra":
				f = append(f, c+"="+vals[i].String)
			}
		}
		parts = append(parts, strings.Join(f, " "))
	}
	return strings.Join(parts, "; ")
}

// procMemory returns this process's resident set and its peak, in MiB.
// quiesce waits, at most a minute, until InnoDB's history list (undo of
// committed transactions not yet purged) is short, and returns how long it
// waited.
func quiesce(b *testing.B, raw *sql.DB) time.Duration {
	b.Helper()
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < time.Minute {
		var typ, name, status string
		if err := raw.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
			b.Logf("mend-bench: scale purge wait skipped: %v", err)
			return 0
		}
		_, rest, ok := strings.Cut(status, "History list length ")
		if !ok {
			return 0
		}
		f := strings.Fields(rest)
		if n, err := strconv.Atoi(f[0]); err != nil || n <= 1000 {
			return time.Since(start)
		}
		<-tick.C
	}
	return time.Since(start)
}

// cpuTimes are the machine's CPU counters from /proc/stat's first line, in
// clock ticks; zero where it cannot be read.
type cpuTimes struct{ total, idle, steal float64 }

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		n, _ := strconv.ParseFloat(v, 64)
		t.total += n
		switch i {
		case 3, 4:
			t.idle += n
		case 7:
			t.steal += n
		}
	}
	return t
}

func (t cpuTimes) since(before cpuTimes) cpuTimes {
	return cpuTimes{total: t.total - before.total, idle: t.idle - before.idle, steal: t.steal - before.steal}
}

// pct is part as a percentage of t's total.
func (t cpuTimes) pct(part float64) float64 {
	if t.total <= 0 {
		return 0
	}
	return 100 * part / t.total
}

func procMemory() (rss, peak float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak
}

package itest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/internal/vitesscluster"
	"github.com/mendq/mend/internal/vitessdb"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// envVitessCluster enables TestVitessFailover, which starts a production-shaped Vitess
// cluster (internal/vitesscluster: etcd, vtctld, vtgate, per shard a primary and two replicas
// with their own mysqld, semi_sync) for mend's tables. make test-vitess-failover sets it; the
// host's tables are on the harness's usual server (MEND_TEST_ENGINE, MySQL by default).
const envVitessCluster = "MEND_TEST_VITESS_CLUSTER"

// The failover storm's size: queues, dead letters per queue, and the fence's term.
const (
	foQueues   = 8
	foPerQueue = 12
	foTTL      = 3 * time.Second
	foBound    = 4 * time.Minute // a hang, not a slow machine, runs into it
)

// TestVitessFailover runs a storm of dead letters through a Vitess cluster (the intake and two
// reconciler replicas through vtgate, the host's real-shaped tables beside it) while each
// shard's primary is moved by PlannedReparentShard, and then one shard's primary mysqld and
// vttablet are killed (SIGKILL) and EmergencyReparentShard promotes a replica. A planner
// paused in the middle of a write ("zombie") across the failover, whose term ends meanwhile,
// resumes once the other replica has taken the queue over. Checked from SQL afterwards:
// every dead letter has one record, every queue got its wake-up, lease epochs per queue
// never repeat or go back, no event was written under a term that had ended, mend verify is
// clean. The subtest unfenced-caught is the negative control: the same scenario with the
// fence's check taken out of the planners' appends must be caught by those checks.
//
// The two subtests share one cluster; each kills a primary of a shard that still has all
// three tablets, so each also runs alone.
func TestVitessFailover(t *testing.T) {
	if os.Getenv(envVitessCluster) == "" {
		t.Skipf("%s is not set: this scenario starts a multi-process Vitess cluster (make test-vitess-failover)", envVitessCluster)
	}
	dir, etcd, err := vitesscluster.Find()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := vitessdb.MendSchema()
	if err != nil {
		t.Fatal(err)
	}
	c, err := vitesscluster.Start(t.Context(), vitesscluster.Config{VitessDir: dir, Etcd: etcd, Schema: schema, VSchema: migrations.VSchema, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	rss, n := c.RSS()
	t.Logf("cluster: started in %v, %d processes, RSS %.0f MiB", c.StartedIn.Round(time.Millisecond), n, float64(rss)/(1<<20))
	bin := buildMend(t)

	t.Run("fenced", func(t *testing.T) {
		res := runFailover(t, c, bin, "fo-f", false)
		if res.zombieErr == nil || !errors.Is(res.zombieErr, mend.ErrFenced) {
			t.Errorf("the paused planner's write after its term ended returned %v; want ErrFenced", res.zombieErr)
		}
		if len(res.violations) > 0 {
			t.Fatalf("%d invariants broken:\n  %s", len(res.violations), strings.Join(res.violations, "\n  "))
		}
	})
	t.Run("unfenced-caught", func(t *testing.T) {
		res := runFailover(t, c, bin, "fo-u", true)
		stale := 0
		for _, v := range res.violations {
			if strings.Contains(v, "ended") {
				stale++
			}
		}
		if stale == 0 {
			t.Fatalf("the planners wrote without the fence's check (the paused one's write returned %v) and the checks found nothing: they cannot be trusted; violations: %v", res.zombieErr, res.violations)
		}
		t.Logf("negative control caught: %d violations, %d of them writes under an ended term:\n  %s", len(res.violations), stale, strings.Join(res.violations, "\n  "))
	})
}

// failoverResult is what one run found.
type failoverResult struct {
	zombieErr  error    // what the paused planner's late write returned
	violations []string // broken invariants, one line each
}

// runFailover runs the scenario on queues named prefix-NN and returns what the checks found.
// With unfenced, every planner append goes without its fence (p.Fence dropped: no lease read,
// no term check), as a store whose fenced append lost its check would.
func runFailover(t *testing.T, c *vitesscluster.Cluster, bin *cli, prefix string, unfenced bool) failoverResult {
	ctx, cancel := context.WithTimeout(t.Context(), 3*foBound)
	defer cancel()
	begin := time.Now()
	phase := time.Now()
	logPhase := func(what string) {
		t.Logf("%s: %v (at %v)", what, time.Since(phase).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
		phase = time.Now()
	}

	// The shard whose primary dies: the first that still has every tablet.
	killShard := ""
	for _, s := range vitesscluster.ShardNames {
		if c.Alive(s) == vitesscluster.DefaultTabletsPerShard {
			killShard = s
			break
		}
	}
	if killShard == "" {
		t.Fatal("no shard has all its tablets left: the cluster has been through two failovers already")
	}

	// The host: its tables on the harness's server, a live batch per queue to wake and a
	// speculating batch per dead letter, each dead-lettered as the real queue does it.
	hostDB := mysqltest.NewHostDB(t, sqtest.Apply)
	w := &world{appDB: hostDB, queueDB: hostDB, sq: sqtest.World{App: hostDB.SQL(t), Queue: hostDB.SQL(t)}}
	queues := make([]string, foQueues)
	shardOf := map[string]string{}
	zombieQueue := ""
	for i := range queues {
		q := fmt.Sprintf("%s-%02d", prefix, i)
		queues[i] = q
		s, err := c.ShardOf(ctx, mysqltest.QueueVindex, q)
		if err != nil {
			t.Fatal(err)
		}
		shardOf[q] = s
		if zombieQueue == "" && s == killShard {
			zombieQueue = q
		}
	}
	if zombieQueue == "" || len(slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, s := range shardOf {
			if !yield(s) {
				return
			}
		}
	}))) < 2 {
		t.Fatalf("queues %v do not land on both shards (%v); pick another prefix", queues, shardOf)
	}
	t.Logf("queues by shard: %v; the paused planner's queue %s is on %s, whose primary dies", shardOf, zombieQueue, killShard)
	// Four phases of deliveries; the paused queue's all in the third.
	phases := make([][]dlq.Delivery, 4)
	var all []dlq.Delivery
	for _, q := range queues {
		w.seed(t, q, q+"/batch/z-live", mend.BatchCreated, q+"/live")
	}
	for i := range foPerQueue {
		for _, q := range queues {
			batch := fmt.Sprintf("%s/batch/d%03d", q, i)
			w.seed(t, q, batch, mend.BatchSpeculating, fmt.Sprintf("%s/r%03d", q, i))
			d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: batch, payload: batchMsg(q, batch), blame: []string{batch}})
			p := i * 4 / foPerQueue
			if q == zombieQueue {
				p = 2
			}
			phases[p] = append(phases[p], d)
			all = append(all, d)
		}
	}
	logPhase(fmt.Sprintf("host seeded: %d queues, %d dead letters", len(queues), len(all)))

	// Two replicas, each as mend run wires one: its own pools, fence, planner, reconciler.
	z := &zombie{queue: zombieQueue, parked: make(chan struct{}), release: make(chan struct{}), result: make(chan error, 1),
		succBlocked: make(chan struct{}), succRelease: make(chan struct{})}
	var acqMu sync.Mutex
	var acquired []mend.Term
	onAcquired := func(term mend.Term) {
		acqMu.Lock()
		defer acqMu.Unlock()
		acquired = append(acquired, term)
	}
	var reps []*reconcile.Reconciler
	for _, holder := range []string{prefix + "-a", prefix + "-b"} {
		store, err := storage.Open(ctx, c.DSN(), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		h, err := host.Open(ctx, hostDB.DSN, hostDB.DSN, host.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		f, err := fence.New(&partitionedLeases{DB: store, z: z}, fence.Config{Holder: holder, TTL: foTTL, Hooks: fence.Hooks{OnAcquired: onAcquired}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := planner.New(planner.Config{Store: &pausingStore{DB: store, z: z, holder: holder, unfenced: unfenced},
			Batches: h, Waker: h, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Actor: "planner/" + holder})
		if err != nil {
			t.Fatal(err)
		}
		r, err := reconcile.New(reconcile.Config{Store: store, Fence: f, Planner: p, Interval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		reps = append(reps, r)
	}

	// Whatever happens, the paused writes go on before the replicas are stopped (cleanups run
	// last-registered first), so a failed run does not hang in Stop.
	t.Cleanup(z.releaseAll)

	// The intake, as the DLQ consumers run it: pages of deliveries, each page recorded again
	// until it is durable (a consumer acknowledges nothing before that).
	intakeStore, err := storage.Open(ctx, c.DSN(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer intakeStore.Close()
	in, err := dlq.New(intakeStore, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var retries sync.Map // phase: *atomic.Int64, its failed intake calls
	deliver := func(name string, ds []dlq.Delivery) error {
		const page, workers = 8, 2
		work := make(chan []dlq.Delivery)
		errs := make(chan error, workers)
		for range workers {
			go func() {
				for pg := range work {
					for {
						res, err := in.RecordMany(ctx, pg)
						if err == nil {
							for _, r := range res {
								if r.Err != nil {
									err = r.Err
								}
							}
						}
						if err == nil {
							break
						}
						if ctx.Err() != nil {
							errs <- fmt.Errorf("intake (%s): %w", name, err)
							for range work {
							}
							return
						}
						v, _ := retries.LoadOrStore(name, new(atomic.Int64))
						v.(*atomic.Int64).Add(1)
						// A consumer's redelivery delay, not synchronisation: the shard may be
						// between primaries for seconds.
						select {
						case <-ctx.Done():
						case <-time.After(50 * time.Millisecond):
						}
					}
				}
				errs <- nil
			}()
		}
		for i := 0; i < len(ds); i += page {
			work <- ds[i:min(i+page, len(ds))]
		}
		close(work)
		var err error
		for range workers {
			err = errors.Join(err, <-errs)
		}
		return err
	}
	// during runs deliveries and an operation on the cluster at once.
	during := func(name string, ds []dlq.Delivery, op func() error) {
		t.Helper()
		var wg sync.WaitGroup
		var derr error
		wg.Go(func() { derr = deliver(name, ds) })
		oerr := op()
		wg.Wait()
		if err := errors.Join(derr, oerr); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		logPhase(fmt.Sprintf("%s (%d deliveries)", name, len(ds)))
	}

	during("phase 1", phases[0], func() error { return nil })
	for i, shard := range vitesscluster.ShardNames {
		during(fmt.Sprintf("phase %d + PlannedReparentShard %s", i+2, shard), phases[i+1], func() error {
			p, err := c.PlannedReparent(ctx, shard)
			if err == nil {
				t.Logf("PlannedReparentShard %s: primary now %s", shard, p.Alias)
			}
			return err
		})
	}
	select {
	case <-z.parked:
		t.Logf("planner %s paused in its write on %s at epoch %d", z.holder, z.queue, z.epoch)
	case <-time.After(foBound):
		t.Fatalf("no planner wrote to %s within %v", z.queue, foBound)
	}
	during("phase 4 + kill -9 of "+killShard+"'s primary mysqld and vttablet + EmergencyReparentShard", phases[3], func() error {
		dead, err := c.KillPrimary(ctx, killShard)
		if err != nil {
			return err
		}
		p, err := c.EmergencyReparent(ctx, killShard)
		if err == nil {
			t.Logf("killed %s; EmergencyReparentShard %s: primary now %s", dead.Alias, killShard, p.Alias)
		}
		return err
	})
	select {
	case <-z.succBlocked:
		t.Logf("%s taken over at a later epoch; the paused planner resumes", z.queue)
	case <-time.After(foBound):
		t.Fatalf("nobody took %s over within %v", z.queue, foBound)
	}
	z.releaseOnce.Do(func() { close(z.release) })
	var res failoverResult
	select {
	case res.zombieErr = <-z.result:
	case <-time.After(foBound):
		t.Fatalf("the paused planner's write did not return within %v", foBound)
	}
	z.succReleaseOnce.Do(func() { close(z.succRelease) })
	t.Logf("the paused planner's write under its ended term returned: %v", res.zombieErr)

	// Every record done, then the replicas stop.
	db, err := sql.Open("mysql", c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	like := prefix + "-%"
	err = pollUntil(ctx, foBound, 20*time.Millisecond, func() (bool, error) {
		var open int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM mend_records WHERE queue LIKE ? AND state <> 'done'", like).Scan(&open); err != nil {
			return false, nil // a replica's failover may still be settling in vtgate: ask again
		}
		return open == 0, nil
	})
	for _, r := range reps {
		r.Stop()
	}
	if err != nil {
		t.Fatalf("records not all done: %v", err)
	}
	logPhase("every record done")
	retries.Range(func(k, v any) bool { t.Logf("intake retries in %s: %d", k, v.(*atomic.Int64).Load()); return true })

	acqMu.Lock()
	terms := slices.Clone(acquired)
	acqMu.Unlock()
	res.violations = checkFailover(t, ctx, db, w, queues, all, terms, like)
	if r := bin.run(t, "verify", "--dsn", c.DSN()); r.code != 0 {
		res.violations = append(res.violations, fmt.Sprintf("mend verify: exit %d\n%s%s", r.code, r.stdout, r.stderr))
	}
	logPhase("checks")
	rss, n := c.RSS()
	t.Logf("run took %v; cluster now %d processes, RSS %.0f MiB", time.Since(begin).Round(time.Millisecond), n, float64(rss)/(1<<20))
	return res
}

// checkFailover reads what the run left, through vtgate and from the host's tables, and
// returns every broken invariant.
func checkFailover(t *testing.T, ctx context.Context, db *sql.DB, w *world, queues []string, all []dlq.Delivery, terms []mend.Term, like string) []string {
	t.Helper()
	var v []string
	bad := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }

	// Every dead letter has exactly one record.
	recs := map[string]int{}
	rows, err := db.QueryContext(ctx, "SELECT queue, HEX(source_key) FROM mend_records WHERE queue LIKE ?", like)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q, key string
		if err := rows.Scan(&q, &key); err != nil {
			t.Fatal(err)
		}
		recs[q+"/"+key]++
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range all {
		k := d.Source.Key()
		if n := recs[dlq.RecordQueue(d)+"/"+fmt.Sprintf("%X", k[:])]; n != 1 {
			bad("dead letter %s has %d records; want 1", d.Source, n)
		}
	}
	if len(recs) != len(all) {
		bad("%d records for %d dead letters", len(recs), len(all))
	}

	// Every queue got its wake-up: the last one on the speculate partition names the live
	// batch (every dead-lettered batch failed before it).
	for _, q := range queues {
		ups := w.wakeUps(t, q, false)
		if len(ups) == 0 {
			bad("queue %s got no wake-up", q)
			continue
		}
		if last := ups[len(ups)-1].Batch.ID; last != q+"/batch/z-live" {
			bad("queue %s: last wake-up names %s; want its live batch", q, last)
		}
	}

	// Lease terms: per queue, epochs 1, 2, 3, ... in the order they began, terms not
	// overlapping, and every term a replica was granted is there under that replica.
	type term struct {
		holder          string
		acquired, ended sql.NullTime
	}
	history := map[string]map[int64]term{}
	rows, err = db.QueryContext(ctx, "SELECT queue, epoch, holder, acquired_at, ended_at FROM mend_lease_history WHERE queue LIKE ? ORDER BY queue, acquired_at, epoch", like)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	lastEnd := map[string]sql.NullTime{}
	for rows.Next() {
		var q, holder string
		var epoch int64
		var tm term
		if err := rows.Scan(&q, &epoch, &holder, &tm.acquired, &tm.ended); err != nil {
			t.Fatal(err)
		}
		tm.holder = holder
		if history[q] == nil {
			history[q] = map[int64]term{}
		}
		if _, dup := history[q][epoch]; dup {
			bad("queue %s: epoch %d granted twice", q, epoch)
		}
		history[q][epoch] = tm
		if epoch != last[q]+1 {
			bad("queue %s: epoch %d began after epoch %d (epochs repeat, skip or go back)", q, epoch, last[q])
		}
		if e := lastEnd[q]; e.Valid && tm.acquired.Time.Before(e.Time) {
			bad("queue %s: epoch %d began at %v, before epoch %d ended at %v", q, epoch, tm.acquired.Time, last[q], e.Time)
		}
		last[q], lastEnd[q] = epoch, tm.ended
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	granted := map[string]string{}
	for _, tr := range terms {
		if !strings.HasPrefix(tr.Queue, strings.TrimSuffix(like, "%")) {
			continue
		}
		key := fmt.Sprintf("%s@%d", tr.Queue, tr.Epoch)
		if h, dup := granted[key]; dup {
			bad("queue %s: epoch %d granted to %s and to %s", tr.Queue, tr.Epoch, h, tr.Holder)
		}
		granted[key] = tr.Holder
		if h, ok := history[tr.Queue][tr.Epoch]; !ok || h.holder != tr.Holder {
			bad("queue %s: epoch %d was granted to %s, but history has %q (an acknowledged acquire was lost)", tr.Queue, tr.Epoch, tr.Holder, h.holder)
		}
	}
	current := map[string]struct {
		epoch   int64
		expires time.Time
	}{}
	rows, err = db.QueryContext(ctx, "SELECT queue, epoch, expires_at FROM mend_leases WHERE queue LIKE ?", like)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q string
		var cur struct {
			epoch   int64
			expires time.Time
		}
		if err := rows.Scan(&q, &cur.epoch, &cur.expires); err != nil {
			t.Fatal(err)
		}
		current[q] = cur
		if cur.epoch != last[q] {
			bad("queue %s: lease row at epoch %d, history at %d", q, cur.epoch, last[q])
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}

	// Every planner event was written inside its term: by its holder, after the term began
	// and before it ended; and per record, epochs never go back along the log.
	rows, err = db.QueryContext(ctx, "SELECT queue, HEX(record_id), seq, kind, epoch, actor, created_at FROM mend_events WHERE queue LIKE ? AND epoch > 0 ORDER BY queue, record_id, seq", like)
	if err != nil {
		t.Fatal(err)
	}
	prev := map[string]int64{}
	for rows.Next() {
		var q, rec, kind, actor string
		var seq, epoch int64
		var at time.Time
		if err := rows.Scan(&q, &rec, &seq, &kind, &epoch, &actor, &at); err != nil {
			t.Fatal(err)
		}
		if epoch < prev[rec] {
			bad("record %s of %s: event %d (%s) at epoch %d after an event at epoch %d (epoch went back)", rec[:12], q, seq, kind, epoch, prev[rec])
		}
		prev[rec] = max(prev[rec], epoch)
		tm, ok := history[q][epoch]
		switch {
		case !ok:
			bad("record %s of %s: event %d (%s) at epoch %d, a term history does not have", rec[:12], q, seq, kind, epoch)
		case actor != "planner/"+tm.holder:
			bad("record %s of %s: event %d (%s) at epoch %d by %s; the term was %s's", rec[:12], q, seq, kind, epoch, actor, tm.holder)
		case at.Before(tm.acquired.Time):
			bad("record %s of %s: event %d (%s) at %v, before its term (epoch %d) began at %v", rec[:12], q, seq, kind, at, epoch, tm.acquired.Time)
		case tm.ended.Valid && !at.Before(tm.ended.Time):
			bad("record %s of %s: event %d (%s) written at %v under epoch %d, which had ended at %v", rec[:12], q, seq, kind, at, epoch, tm.ended.Time)
		case !tm.ended.Valid && current[q].epoch == epoch && !at.Before(current[q].expires):
			bad("record %s of %s: event %d (%s) written at %v under epoch %d, which had ended (expired) at %v", rec[:12], q, seq, kind, at, epoch, current[q].expires)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	return v
}

// zombie pauses the first planner that writes to queue in the middle of that write, as a
// process pause (a long GC, a frozen VM) would: the write's statements are on their way but
// not yet sent. Meanwhile its replica's renewals of that queue's term fail (partitionedLeases),
// so the term runs out by the database clock, and the other replica takes the queue over.
// The first write of a later term on queue waits until the paused write has returned, so the
// paused write meets a record nobody has moved since it read it: only the fence stands
// between it and the log.
type zombie struct {
	queue string

	mu     sync.Mutex
	holder string // who paused, once parked is closed
	epoch  int64

	parked, release chan struct{}
	result          chan error
	succOnce        sync.Once
	succBlocked     chan struct{}
	succRelease     chan struct{}

	releaseOnce, succReleaseOnce sync.Once
}

// releaseAll lets every paused write go on.
func (z *zombie) releaseAll() {
	z.releaseOnce.Do(func() { close(z.release) })
	z.succReleaseOnce.Do(func() { close(z.succRelease) })
}

// role decides what a write to queue under term does: pause (the first), wait for the
// paused one (a later term's), or go on.
func (z *zombie) role(holder string, term *mend.Term) (pause, wait bool) {
	if term == nil || term.Queue != z.queue {
		return false, false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.holder == "" {
		z.holder, z.epoch = holder, term.Epoch
		close(z.parked)
		return true, false
	}
	return false, term.Epoch > z.epoch
}

// renewalsCut reports whether holder's renewals of a term on queue fail now.
func (z *zombie) renewalsCut(term mend.Term) bool {
	if term.Queue != z.queue {
		return false
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.holder == term.Holder && term.Epoch == z.epoch
}

// pausingStore is a replica's planner store: every append goes through the zombie, and with
// unfenced, without its fence (the negative control: no lease read, no term check).
type pausingStore struct {
	*storage.DB
	z        *zombie
	holder   string
	unfenced bool
}

func (s *pausingStore) gate(ctx context.Context, term *mend.Term) (context.Context, bool) {
	pause, wait := s.z.role(s.holder, term)
	switch {
	case pause:
		<-s.z.release
		// The paused write was already under way: its caller giving up meanwhile (the
		// lease's Done) does not call it back.
		return context.WithoutCancel(ctx), true
	case wait:
		s.z.succOnce.Do(func() { close(s.z.succBlocked) })
		<-s.z.succRelease
	}
	return ctx, false
}

func (s *pausingStore) RecordAppend(ctx context.Context, p mend.AppendParams) (int64, error) {
	ctx, paused := s.gate(ctx, p.Fence)
	if s.unfenced {
		p.Fence = nil
	}
	v, err := s.DB.RecordAppend(ctx, p)
	if paused {
		s.z.result <- err
	}
	return v, err
}

func (s *pausingStore) RecordAppendMany(ctx context.Context, ps []mend.AppendParams) ([]error, error) {
	if len(ps) == 0 {
		return s.DB.RecordAppendMany(ctx, ps)
	}
	ctx, paused := s.gate(ctx, ps[0].Fence)
	if s.unfenced {
		ps = slices.Clone(ps)
		for i := range ps {
			ps[i].Fence = nil
		}
	}
	res, err := s.DB.RecordAppendMany(ctx, ps)
	if paused {
		e := err
		if e == nil {
			for _, r := range res {
				e = errors.Join(e, r)
			}
		}
		s.z.result <- e
	}
	return res, err
}

// partitionedLeases is a replica's fence store: the paused planner's replica cannot renew the
// paused queue's term (its renewals do not reach the database), so the term runs out.
type partitionedLeases struct {
	*storage.DB
	z *zombie
}

// errRenewalCut is an injected renewal failure.
var errRenewalCut = errors.New("itest: renewal cut off from the database")

func (l *partitionedLeases) LeaseRenew(ctx context.Context, term mend.Term, ttl time.Duration) error {
	if l.z.renewalsCut(term) {
		return errRenewalCut
	}
	return l.DB.LeaseRenew(ctx, term, ttl)
}

package itest

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

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
)

// world is one submit queue with mend attached: mend's tables in a database
// of their own, and the submit queue's real-shaped tables (internal/sqtest)
// in one database or, with worldOpts.splitQueue, in two: the application
// database (batch, request, build, ...) and the queue database
// (queue_messages), as in production. On the Vitess backend mend's database
// is a keyspace sharded in two, reached through vtgate, and the host's are
// plain MySQL databases beside it (mysqltest.NewHostDB), as a submit queue's
// own server would be. Every wake-up goes through a
// FaultyWaker, so a test can lose one without touching the host's tables.
type world struct {
	mendDB         *mysqltest.DB
	appDB, queueDB *mysqltest.DB // the same database unless split
	sq             sqtest.World
	store          *storage.DB
	host           *host.DB
	waker          *sqtest.FaultyWaker

	mu       sync.Mutex
	dangling []string // "queue|state|batch" of each membership row the adapter reported dangling
}

// worldOpts shapes a world.
type worldOpts struct {
	// splitQueue puts the queue tables in a database apart from the
	// application tables, so no write of mend's can span both.
	splitQueue bool
}

func newWorld(t *testing.T) *world { return newWorldWith(t, worldOpts{}) }

func newWorldWith(t *testing.T, o worldOpts) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{mendDB: mysqltest.NewDB(t, migrations.Up)}
	if o.splitQueue {
		w.appDB, w.queueDB = mysqltest.NewHostDB(t), mysqltest.NewHostDB(t)
		if err := sqtest.CreateApp(ctx, w.appDB.SQL(t)); err != nil {
			t.Fatal(err)
		}
		if err := sqtest.CreateQueue(ctx, w.queueDB.SQL(t)); err != nil {
			t.Fatal(err)
		}
	} else {
		w.appDB = mysqltest.NewHostDB(t, sqtest.Apply)
		w.queueDB = w.appDB
	}
	w.sq = sqtest.World{App: w.appDB.SQL(t), Queue: w.queueDB.SQL(t)}
	var err error
	if w.store, err = storage.Open(ctx, w.mendDB.DSN, storage.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.store.Close() })
	w.host, err = host.Open(ctx, w.appDB.DSN, w.queueDB.DSN, host.Options{
		Logger: slog.New(slog.DiscardHandler),
		OnDangling: func(queue, batchID, state string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.dangling = append(w.dangling, queue+"|"+state+"|"+batchID)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.host.Close() })
	w.waker = &sqtest.FaultyWaker{Next: w.host}
	return w
}

// actorOpts tunes one planner replica.
type actorOpts struct {
	holder string
	grace  time.Duration
	hooks  planner.Hooks
	// backoff is the base retry delay; zero means 1 ms, so retries are due
	// almost at once.
	backoff time.Duration
	// maxAttempts parks a record after this many failed attempts; zero
	// means the planner's default.
	maxAttempts int
}

// actor is one replica: a fence holder, its planner and reconciler.
type actor struct {
	fence *fence.Fence
	plan  *planner.Planner
	rec   *reconcile.Reconciler
}

func (w *world) actor(t *testing.T, o actorOpts) *actor {
	t.Helper()
	if o.holder == "" {
		o.holder = "replica-" + mend.NewOpID()[:8]
	}
	f, err := fence.New(w.store, fence.Config{Holder: o.holder, TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := planner.New(planner.Config{
		Store: w.store, Batches: w.host, Waker: w.waker,
		// Short backoff so a re-send is due at once; convergence is still
		// asserted in passes, never in wall time.
		BackoffBase: max(o.backoff, time.Millisecond), BackoffMax: max(o.backoff, 5*time.Millisecond),
		Grace: o.grace, Actor: "planner/" + o.holder, Hooks: o.hooks, MaxAttempts: o.maxAttempts,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := reconcile.New(reconcile.Config{Store: w.store, Fence: f, Planner: p, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return &actor{fence: f, plan: p, rec: r}
}

func (w *world) intake(t *testing.T, repairer dlq.Repairer) *dlq.Intake {
	t.Helper()
	// The build lookup traces a buildsignal dead letter to its batch.
	in, err := dlq.New(w.store, dlq.Config{Repairer: repairer, Builds: w.host})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// seed inserts a batch as the host's enrolment leaves it: the batch row at
// version 1, its membership row (none for creating), its member requests at
// batched with their request_batch rows.
func (w *world) seed(t *testing.T, queue, id string, state mend.BatchState, reqs ...string) {
	t.Helper()
	if err := w.sq.SeedBatch(context.Background(), queue, id, string(state), reqs...); err != nil {
		t.Fatalf("seed batch %s: %v", id, err)
	}
}

// batch reads a batch row as the host stores it, and fails the test unless
// the stored ID is byte-equal to the one asked for (the app tables'
// collation would match another spelling).
func (w *world) batch(t *testing.T, queue, id string) sqtest.Batch {
	t.Helper()
	b, err := w.sq.Batch(context.Background(), queue, id)
	if err != nil {
		t.Fatalf("batch %s: %v", id, err)
	}
	if b.ID != id || b.Queue != queue {
		t.Fatalf("batch %q of %q is stored as %q of %q", id, queue, b.ID, b.Queue)
	}
	return b
}

func (w *world) batchState(t *testing.T, queue, id string) mend.BatchState {
	t.Helper()
	return mend.BatchState(w.batch(t, queue, id).State)
}

// requestStates returns the state of each member request of a batch, by
// request ID, from the request table.
func (w *world) requestStates(t *testing.T, queue, batchID string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, id := range w.batch(t, queue, batchID).Contains {
		r, err := w.sq.Request(context.Background(), queue, id)
		if err != nil {
			t.Fatal(err)
		}
		m[id] = r.State
	}
	return m
}

// requireFannedOut checks that every member request of a batch is in state
// want and that the gateway got a RequestLog saying so, as the real
// consumer of topic log decodes it.
func (w *world) requireFannedOut(t *testing.T, queue, batchID, want string) {
	t.Helper()
	ctx := context.Background()
	reqs := w.requestStates(t, queue, batchID)
	if len(reqs) == 0 {
		t.Fatalf("batch %s has no members to check", batchID)
	}
	for id, s := range reqs {
		if s != want {
			t.Errorf("request %s is %s; want %s", id, s, want)
		}
		logs, err := w.sq.ConsumeLog(ctx, id)
		if err != nil {
			t.Fatalf("log of %s: %v", id, err)
		}
		if len(logs) == 0 || logs[len(logs)-1].Status != want || logs[len(logs)-1].Queue != queue {
			t.Errorf("log of %s = %+v; want a %s entry of queue %s last", id, logs, want, queue)
		}
	}
}

// requireMembership checks that the batch's current state has its advisory
// membership row. The real schema allows 0..n rows per batch, so this is
// the one row that matters: the one mend's transition inserts and
// BatchFinish's EnsureRecord re-creates.
func (w *world) requireMembership(t *testing.T, queue, id string) {
	t.Helper()
	rows, err := w.sq.Membership(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	state := w.batch(t, queue, id).State
	if !slices.Contains(rows, state+"/"+id) {
		t.Fatalf("membership of %s = %v; want a row for its state %s", queue, rows, state)
	}
}

// wakeUps reads the queue's speculate partition as the real speculate
// consumer would (sqtest.ConsumeSpeculate: string-map metadata, a strict
// {"id","queue"} payload naming a batch of this queue spelled exactly so)
// and fails the test on any message it could not read. With live set,
// every message must also name a batch that is live now.
func (w *world) wakeUps(t *testing.T, queue string, live bool) []sqtest.Wake {
	t.Helper()
	ups, err := w.sq.ConsumeSpeculate(context.Background(), queue, live)
	if err != nil {
		t.Fatalf("speculate partition %s, read as the real consumer would: %v", queue, err)
	}
	return ups
}

// danglingReports returns what the adapter reported through OnDangling.
func (w *world) danglingReports() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.dangling)
}

func (w *world) record(t *testing.T, src mend.SourceID) mend.Record {
	t.Helper()
	rec, err := w.store.RecordGet(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (w *world) kinds(t *testing.T, rec mend.Record) []mend.EventKind {
	t.Helper()
	evs, err := w.store.RecordHistory(context.Background(), rec.Source.Queue, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	ks := make([]mend.EventKind, len(evs))
	for i, e := range evs {
		ks[i] = e.Kind
	}
	return ks
}

// converge runs reconcile passes until done reports true, failing the test
// if that takes more than maxPasses passes.
func converge(t *testing.T, r *reconcile.Reconciler, maxPasses int, done func() bool) int {
	t.Helper()
	ctx := context.Background()
	for pass := 1; pass <= maxPasses; pass++ {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if done() {
			return pass
		}
	}
	t.Fatalf("did not converge within %d passes", maxPasses)
	return 0
}

// ageState moves the time a record entered its state back by d, as if d had
// passed by the database clock.
func (w *world) ageState(t *testing.T, src mend.SourceID, d time.Duration) {
	t.Helper()
	key := src.Key()
	if _, err := w.mendDB.SQL(t).Exec("UPDATE mend_records SET state_since = state_since - INTERVAL ? MICROSECOND WHERE queue = ? AND source_key = ?",
		d.Microseconds(), src.Queue, key[:]); err != nil {
		t.Fatal(err)
	}
}

// makeDue moves a record's next attempt to now by the database clock: the
// test's way to let a backoff pass without waiting for it.
func (w *world) makeDue(t *testing.T, src mend.SourceID) {
	t.Helper()
	key := src.Key()
	res, err := w.mendDB.SQL(t).Exec("UPDATE mend_records SET next_attempt_at = NOW(6) WHERE queue = ? AND source_key = ? AND next_attempt_at IS NOT NULL", src.Queue, key[:])
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("makeDue: %d rows; the record is not scheduled", n)
	}
}

// ---- dead letters, from the host's own rows ----

// batchMsg is the real BatchID payload of speculate, build,
// dependency-analysis, submitqueue-merge and conclude messages.
func batchMsg(queue, batch string) string {
	return mustJSON(map[string]string{"id": batch, "queue": queue})
}

// buildMsg is the real BuildID payload of a buildsignal message.
func buildMsg(queue, build string) string {
	return mustJSON(map[string]string{"id": build, "queue": queue})
}

// mergeResult is the protojson MergeResult Runway publishes to
// merge-signal.
func mergeResult(queue, batch, outcome string) string {
	return mustJSON(map[string]any{"id": batch, "outcome": outcome, "reason": "", "steps": []string{}, "queue_name": queue})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// dead describes a message the host published and later dead-lettered.
type dead struct {
	topic, partition, id, payload string
	// blame is the failure's batch subjects; nil records no subject.
	blame []string
}

// deadLetter plays the host's part of a dead letter: the producer publishes
// the message, its consumer gives up and the store moves it to <topic>_dlq
// (sqtest.MoveToDLQ, the real MoveToDLQ's transaction). It returns the
// delivery a DLQ consumer would hand the intake for the row that landed
// there.
func (w *world) deadLetter(t *testing.T, d dead) dlq.Delivery {
	t.Helper()
	ctx := context.Background()
	if err := w.sq.Publish(ctx, d.topic, d.partition, d.id, []byte(d.payload), nil); err != nil {
		t.Fatal(err)
	}
	f := sqtest.Failure{Count: 5, LastError: "handler exhausted its retries"}
	for _, b := range d.blame {
		f.Subjects = append(f.Subjects, sqtest.Subject{Type: "batch", ID: b})
	}
	if err := w.sq.MoveToDLQ(ctx, d.topic, d.partition, d.id, f); err != nil {
		t.Fatal(err)
	}
	return w.dlqDelivery(t, d.topic+"_dlq", d.partition, d.id)
}

// dlqDelivery reads a DLQ row from the queue database and turns it into a
// delivery.
func (w *world) dlqDelivery(t *testing.T, topic, partition, id string) dlq.Delivery {
	t.Helper()
	rows, err := w.sq.Messages(context.Background(), topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rows {
		if m.ID == id {
			return deliveryFromRow(m)
		}
	}
	t.Fatalf("no row %s/%s/%s in the queue database", topic, partition, id)
	return dlq.Delivery{}
}

// deliveryFromRow is the one place itest turns a real DLQ row (a
// queue_messages row on <topic>_dlq, payload and all) into what a DLQ
// consumer hands the intake. The record is filed under the queue the row
// names: the payload's queue (queue_name on merge-signal), else the
// partition key.
func deliveryFromRow(m sqtest.Message) dlq.Delivery {
	return dlq.Row{Offset: m.Offset, Topic: m.Topic, PartitionKey: m.PartitionKey, ID: m.ID, Payload: m.Payload,
		Metadata: m.Metadata, FailedAtMS: m.FailedAt, FailureCount: m.FailureCount, LastError: m.LastError,
		OriginalTopic: m.OriginalTopic, FailureDetail: m.FailureDetail}.Delivery()
}

// requireBothShards fails the test on the Vitess backend unless queues land
// on both shards of mend's keyspace (as vtgate's vindex places them), so a
// scenario over them really crosses shards; elsewhere it checks nothing.
// Queue names are fixed, so the check is deterministic.
func (w *world) requireBothShards(t *testing.T, queues ...string) {
	t.Helper()
	on := map[string][]string{}
	for _, q := range queues {
		if s := w.mendDB.QueueShard(t, q); s != "" {
			on[s] = append(on[s], q)
		}
	}
	if mysqltest.Vitess() && len(on) < 2 {
		t.Fatalf("queues %v all land on one shard (%v); pick names that hash to both", queues, on)
	}
	if len(on) > 0 {
		t.Logf("queues by shard: %v", on)
	}
}

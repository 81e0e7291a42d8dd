package itest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// world is one submit queue with mend attached: mend's tables and the
// reference host's tables in two separate databases, as in production.
type world struct {
	mendDB, hostDB *mysqltest.DB
	store          *storage.DB
	host           *host.DB
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{
		mendDB: mysqltest.NewDB(t, migrations.Up),
		hostDB: mysqltest.NewDB(t, host.Migrations.Up),
	}
	var err error
	if w.store, err = storage.Open(ctx, w.mendDB.DSN, storage.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.store.Close() })
	if w.host, err = host.Open(ctx, w.hostDB.DSN, "", host.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.host.Close() })
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
		Store: w.store, Batches: w.host, Waker: w.host,
		// Short backoff so a re-send is due at once; convergence is still
		// asserted in passes, never in wall time.
		BackoffBase: max(o.backoff, time.Millisecond), BackoffMax: max(o.backoff, 5*time.Millisecond),
		Grace: o.grace, Actor: "planner/" + o.holder, Hooks: o.hooks,
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
	in, err := dlq.New(w.store, dlq.Config{Repairer: repairer})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func delivery(queue, topic, msgID, payload string) dlq.Delivery {
	return dlq.Delivery{
		Source:       mend.SourceID{Queue: queue, Topic: topic, Partition: queue, MessageID: msgID},
		Payload:      []byte(payload),
		FailureCount: 5,
		LastError:    "handler exhausted its retries",
		FailedAt:     time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC),
		Subjects:     []mend.Subject{{Kind: "batch", ID: "?"}},
	}
}

func (w *world) seed(t *testing.T, queue, id string, state mend.BatchState, reqs ...string) {
	t.Helper()
	if err := w.host.SeedBatch(context.Background(), queue, id, state, reqs...); err != nil {
		t.Fatalf("seed batch %s: %v", id, err)
	}
}

func (w *world) batchState(t *testing.T, queue, id string) mend.BatchState {
	t.Helper()
	b, err := w.host.BatchGet(context.Background(), queue, id)
	if err != nil {
		t.Fatalf("batch %s: %v", id, err)
	}
	return b.State
}

func (w *world) requestStates(t *testing.T, queue, batchID string) map[string]host.RequestState {
	t.Helper()
	reqs, err := w.host.Requests(context.Background(), queue, batchID)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]host.RequestState{}
	for _, r := range reqs {
		m[r.ID] = r.State
	}
	return m
}

// wakeUps returns the speculate messages of queue with the batch each names.
func (w *world) wakeUps(t *testing.T, queue string) []wakeUp {
	t.Helper()
	msgs, err := w.host.Messages(context.Background(), "speculate", queue)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]wakeUp, 0, len(msgs))
	for _, m := range msgs {
		var p host.WakePayload
		var md host.WakeMetadata
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			t.Fatalf("wake-up %s payload %q: %v", m.ID, m.Payload, err)
		}
		if err := json.Unmarshal(m.Metadata, &md); err != nil {
			t.Fatalf("wake-up %s metadata %q: %v", m.ID, m.Metadata, err)
		}
		out = append(out, wakeUp{ID: m.ID, BatchID: p.BatchID, Epoch: md.Epoch, RecordID: md.RecordID})
	}
	return out
}

type wakeUp struct {
	ID, BatchID string
	Epoch       int64
	RecordID    mend.RecordID
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

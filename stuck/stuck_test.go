package stuck_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/stuck"
)

func TestMain(m *testing.M) {
	mysqltest.Main(m, func() error { return goleak.Find() })
}

// The adapters satisfy the ports.
var (
	_ stuck.Scanner = (*host.DB)(nil)
	_ stuck.Store   = (*storage.DB)(nil)
)

const bound = 3 * time.Minute

// clock shifts the host's database clock forward, so a test can put two
// scans a bound apart without waiting for it.
type clock struct {
	next stuck.Scanner
	mu   sync.Mutex
	by   time.Duration
	// broken, the negative control: the scan as a rule that looks only at
	// batch states would see it, with nothing in flight and no marker.
	broken bool
}

func (c *clock) StuckScan(ctx context.Context) (mend.HostScan, error) {
	s, err := c.next.StuckScan(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	s.At = s.At.Add(c.by)
	if c.broken {
		for i := range s.Queues {
			s.Queues[i].InFlight, s.Queues[i].Marker = nil, 0
		}
	}
	return s, err
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by += d
}

// world is one test's submit queue on real-shaped tables, mend's store in
// a database of its own, the planner that finishes what the scan records,
// and the scan.
type world struct {
	w     sqtest.World
	h     *host.DB
	store *storage.DB
	p     *planner.Planner
	fence *fence.Fence
	clock *clock
	d     *stuck.Detector
}

func setup(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	hdb := mysqltest.NewDB(t, sqtest.Apply)
	s := hdb.SQL(t)
	h, err := host.Open(ctx, hdb.DSN, hdb.DSN, host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	mdb := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, mdb.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	f, err := fence.New(store, fence.Config{Holder: "test", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := planner.New(planner.Config{Store: store, Batches: h, Waker: h, BackoffFunc: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{next: h}
	d, err := stuck.New(stuck.Config{Scanner: c, Store: store, Bound: bound})
	if err != nil {
		t.Fatal(err)
	}
	return &world{w: sqtest.World{App: s, Queue: s}, h: h, store: store, p: p, fence: f, clock: c, d: d}
}

func (w *world) seed(t *testing.T, queue, id, state string) {
	t.Helper()
	if err := w.w.SeedBatch(context.Background(), queue, id, state, id+"/r"); err != nil {
		t.Fatal(err)
	}
}

func (w *world) scan(t *testing.T) stuck.Report {
	t.Helper()
	r, err := w.d.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// verdict scans and returns the verdict on queue.
func (w *world) verdict(t *testing.T, queue string) stuck.QueueReport {
	t.Helper()
	for _, q := range w.scan(t).Queues {
		if q.Queue == queue {
			return q
		}
	}
	t.Fatalf("queue %q not in the scan", queue)
	return stuck.QueueReport{}
}

// plan runs the planner on queue under its fence, as the reconciler does.
func (w *world) plan(t *testing.T, queue string) {
	t.Helper()
	ctx := context.Background()
	le, err := w.fence.TryAcquire(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = le.Release(ctx) }()
	if _, err := w.p.Run(ctx, le); err != nil {
		t.Fatal(err)
	}
}

// stuckRecords returns queue's stuck-queue records.
func (w *world) stuckRecords(t *testing.T, queue string) []mend.Record {
	t.Helper()
	recs, err := w.store.RecordsList(context.Background(), queue, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []mend.Record
	for _, r := range recs {
		if r.Source.Topic == mend.StuckTopic {
			out = append(out, r)
		}
	}
	return out
}

// wakes reads queue's speculate partition with the strict decoder of the
// real consumer's rules (every wake-up must name a live batch of the queue).
func (w *world) wakes(t *testing.T, queue string) []sqtest.Wake {
	t.Helper()
	ws, err := w.w.ConsumeSpeculate(context.Background(), queue, true)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// consume plays the orchestrator consuming every message of topic, then
// the host's GC.
func (w *world) consume(t *testing.T, topic string) {
	t.Helper()
	ctx := context.Background()
	if _, err := w.w.AckAll(ctx, "orchestrator", topic); err != nil {
		t.Fatal(err)
	}
	if _, err := w.w.GC(ctx, topic); err != nil {
		t.Fatal(err)
	}
}

func batchID(id, queue string) []byte {
	b, _ := json.Marshal(map[string]string{"id": id, "queue": queue})
	return b
}

// A quiet queue with live batches and no pending speculate message is woken
// once: after the bound, with the real wake-up naming the smallest live
// batch; not again while the wake-up is pending, nor after it was consumed
// while the queue's state stays the same; again once a batch moved and the
// queue went quiet for another bound.
func TestQuietQueueIsWokenOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setup(t)
	w.seed(t, "q", "q/batch/2", "created")
	w.seed(t, "q", "q/batch/10", "speculating") // smallest in byte order
	w.seed(t, "q", "q/batch/1", "failed")

	if v := w.verdict(t, "q"); v.Verdict != stuck.Quiet || v.Live != 2 || v.Target != "q/batch/10" {
		t.Fatalf("first scan = %+v; want quiet with 2 live batches", v)
	}
	w.clock.advance(bound - time.Second)
	if v := w.verdict(t, "q"); v.Verdict != stuck.Quiet {
		t.Fatalf("before the bound = %+v; want quiet", v)
	}
	w.clock.advance(time.Second)
	v := w.verdict(t, "q")
	if v.Verdict != stuck.Woken || v.QuietFor < bound {
		t.Fatalf("at the bound = %+v; want woken", v)
	}
	recs := w.stuckRecords(t, "q")
	if len(recs) != 1 || recs[0].ID != v.Record || recs[0].Target.Desired != mend.OutcomeWake || recs[0].State != mend.StatePending {
		t.Fatalf("records = %+v; want one pending stuck-queue record", recs)
	}
	// Issue 57: the record names the first live batch in byte order (the
	// one the host's planner starts from), not the last: the planner's
	// wake-up below reads the live batches again, so only the record's own
	// target catches a scan that names the wrong one.
	if recs[0].Target.BatchID != "q/batch/10" {
		t.Errorf("stuck record's batch = %q; want q/batch/10, the first live batch (q/batch/2 is the last)", recs[0].Target.BatchID)
	}
	// The record is due: mend's planner owns the wake-up now.
	w.clock.advance(bound)
	if v := w.verdict(t, "q"); v.Verdict != stuck.Busy {
		t.Fatalf("with the record due = %+v; want busy", v)
	}

	w.plan(t, "q")
	ws := w.wakes(t, "q")
	if len(ws) != 1 || ws[0].Batch.ID != "q/batch/10" || ws[0].Meta[host.MetaRecordID] != v.Record.String() ||
		ws[0].ID != planner.WakeMessageID(v.Record, 2) || ws[0].Meta[host.MetaEpoch] == "" {
		t.Fatalf("speculate = %+v; want one wake-up naming q/batch/10 from record %s", ws, v.Record)
	}
	got, err := w.store.RecordGetByID(ctx, "q", v.Record)
	if err != nil || got.State != mend.StateDone {
		t.Fatalf("record = %+v, %v; want done", got, err)
	}
	evs, err := w.store.RecordHistory(ctx, "q", v.Record)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []mend.EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if fmt.Sprint(kinds) != "[created settled woken]" || evs[0].Actor != stuck.ActorDefault {
		t.Fatalf("events = %v (first by %q); want created by %s, settled, woken", kinds, evs[0].Actor, stuck.ActorDefault)
	}

	// Pending on speculate: in flight, however long.
	for range 3 {
		w.clock.advance(bound)
		if v := w.verdict(t, "q"); v.Verdict != stuck.Busy || len(v.InFlight) != 1 {
			t.Fatalf("with the wake-up pending = %+v; want busy on it", v)
		}
	}
	// Consumed, and the state did not change: seen quiet afresh, and not
	// woken again for the same state.
	w.consume(t, "speculate")
	if v := w.verdict(t, "q"); v.Verdict != stuck.Quiet || v.QuietFor != 0 {
		t.Fatalf("after the wake-up was consumed = %+v; want quiet, the bound restarted", v)
	}
	for range 3 {
		w.clock.advance(bound)
		if v := w.verdict(t, "q"); v.Verdict != stuck.Recorded {
			t.Fatalf("same state, bound over = %+v; want recorded, not woken again", v)
		}
	}
	if n := len(w.stuckRecords(t, "q")); n != 1 {
		t.Fatalf("%d stuck-queue records; want 1", n)
	}
	if msgs, _ := w.w.Messages(ctx, "speculate", "q"); len(msgs) != 0 {
		t.Fatalf("speculate = %+v; want nothing new", msgs)
	}

	// A batch moved (the host's planner admitted q/batch/2) and the queue
	// went quiet again: a new state, woken once more after its own bound.
	if ok, err := w.w.Transition(ctx, "q", "q/batch/2", 1, "created", "speculating"); err != nil || !ok {
		t.Fatalf("transition: %v %v", ok, err)
	}
	if v := w.verdict(t, "q"); v.Verdict != stuck.Quiet {
		t.Fatalf("after the move = %+v; want quiet", v)
	}
	w.clock.advance(bound)
	if v := w.verdict(t, "q"); v.Verdict != stuck.Woken {
		t.Fatalf("new state, bound over = %+v; want woken", v)
	}
	w.plan(t, "q")
	if ws := w.wakes(t, "q"); len(ws) != 1 || ws[0].Batch.ID != "q/batch/10" {
		t.Fatalf("speculate = %+v; want one new wake-up", ws)
	}
	if n := len(w.stuckRecords(t, "q")); n != 2 {
		t.Fatalf("%d stuck-queue records; want 2", n)
	}
}

// busyScenario runs a healthy busy queue for steps scans, each a bound
// after the last: a message on speculate before every scan, consumed (the
// offsets advancing, then collected) before every consumeEvery-th one. It
// returns how many scans woke the queue.
func busyScenario(t *testing.T, w *world, steps, consumeEvery int) int {
	t.Helper()
	ctx := context.Background()
	woken := 0
	for i := range steps {
		if err := w.w.Publish(ctx, "speculate", "q", fmt.Sprintf("q/batch/1/build-signal/b%d/running", i), batchID("q/batch/1", "q"), nil); err != nil {
			t.Fatal(err)
		}
		if i%consumeEvery == consumeEvery-1 {
			w.consume(t, "speculate")
		}
		w.clock.advance(bound)
		for _, q := range w.scan(t).Queues {
			if q.Verdict == stuck.Woken {
				woken++
			}
		}
	}
	return woken
}

// A healthy busy queue (messages flowing on speculate, offsets advancing)
// is never woken, however far apart the scans; the negative control, a
// rule that looks only at batch states, wakes it.
func TestBusyQueueIsNeverWoken(t *testing.T) {
	t.Parallel()
	// Consumed before every scan, every scan finds nothing pending: only
	// the advancing offsets tell that the queue was not quiet in between.
	for _, every := range []int{1, 2} {
		t.Run(fmt.Sprintf("consumed every %d", every), func(t *testing.T) {
			t.Parallel()
			w := setup(t)
			w.seed(t, "q", "q/batch/1", "speculating")
			if n := busyScenario(t, w, 12, every); n != 0 {
				t.Fatalf("woken %d times; want never", n)
			}
			if recs := w.stuckRecords(t, "q"); len(recs) != 0 {
				t.Fatalf("records = %+v; want none", recs)
			}
		})
		t.Run(fmt.Sprintf("control consumed every %d", every), func(t *testing.T) {
			t.Parallel()
			w := setup(t)
			w.seed(t, "q", "q/batch/1", "speculating")
			w.clock.broken = true
			if n := busyScenario(t, w, 12, every); n == 0 {
				t.Fatal("the broken rule never woke the busy queue: the test cannot tell")
			}
		})
	}
}

// Work in flight on any stage that leads to a speculate message keeps the
// queue busy across any number of bounds; once it is acknowledged, the
// queue is quiet and woken after one bound.
func TestInFlightKeepsTheQueueBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type msg struct{ topic, partition, id string }
	cases := []struct {
		name  string
		state string
		msg   msg
		held  bool // the delivery is held (postponed) by the poll loop, unacked
	}{
		{"build poll loop", "speculating", msg{"buildsignal", "build-7", "build-7"}, true},
		{"build dispatch", "speculating", msg{"build", "q/batch/1", "q/batch/1@1-1"}, false},
		{"merge stage", "merging", msg{"submitqueue-merge", "q", "q/batch/1/merge-dispatch"}, false},
		{"runway merge", "merging", msg{"runway-merge", "q", "q/batch/1"}, false},
		{"merge signal", "merging", msg{"merge-signal", "q", "q/batch/1"}, false},
		{"dependency analysis", "created", msg{"dependency-analysis", "q", "q/batch/2"}, false},
		{"cancel", "cancelling", msg{"cancel", "q/5", "q/5@1-1"}, false},
		{"dead letter", "speculating", msg{"speculate_dlq", "q", "q/batch/1@9-9"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := setup(t)
			w.seed(t, "q", "q/batch/1", c.state)
			if err := w.w.Publish(ctx, c.msg.topic, c.msg.partition, c.msg.id, batchID(c.msg.id, "q"), nil); err != nil {
				t.Fatal(err)
			}
			if c.held {
				// The poll loop's hold: a delivery-state row, postponed and
				// unacked, under a group that joined at 0.
				if err := w.w.Join(ctx, "orchestrator", c.msg.topic, c.msg.partition); err != nil {
					t.Fatal(err)
				}
				msgs, err := w.w.Messages(ctx, c.msg.topic, c.msg.partition)
				if err != nil || len(msgs) != 1 {
					t.Fatal(msgs, err)
				}
				if _, err := w.w.Queue.Exec("INSERT INTO queue_delivery_state (consumer_group, topic, partition_key, message_offset, acked, invisible_until, retry_count, postponed) VALUES ('orchestrator', ?, ?, ?, 0, ?, 0, 1)",
					c.msg.topic, c.msg.partition, msgs[0].Offset, time.Now().Add(5*time.Second).UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}
			for range 4 {
				if v := w.verdict(t, "q"); v.Verdict != stuck.Busy || len(v.InFlight) != 1 {
					t.Fatalf("with %s/%s pending = %+v; want busy on it", c.msg.topic, c.msg.partition, v)
				}
				w.clock.advance(bound)
			}
			if c.held {
				// Acknowledged out of order: the watermark stays at 0.
				if _, err := w.w.Queue.Exec("UPDATE queue_delivery_state SET acked = 1, postponed = 0 WHERE topic = ?", c.msg.topic); err != nil {
					t.Fatal(err)
				}
			} else if _, err := w.w.AckAll(ctx, "orchestrator", c.msg.topic); err != nil {
				t.Fatal(err)
			}
			if v := w.verdict(t, "q"); v.Verdict != stuck.Quiet {
				t.Fatalf("acknowledged = %+v; want quiet", v)
			}
			w.clock.advance(bound)
			if v := w.verdict(t, "q"); v.Verdict != stuck.Woken {
				t.Fatalf("acknowledged, a bound later = %+v; want woken", v)
			}
		})
	}
}

// A message in flight whose payload names no queue counts against every
// queue; a queue with no live batch is never woken; a mend record due
// keeps the queue to mend's planner.
func TestNothingToWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("unattributed", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		w.seed(t, "q", "q/batch/1", "speculating")
		if err := w.w.Publish(ctx, "buildsignal", "build-1", "build-1", []byte(`{"id":"build-1"}`), nil); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if r := w.scan(t); r.Unattributed != 1 || r.Count(stuck.Busy) != 1 {
				t.Fatalf("report = %+v; want the queue busy on an unattributed message", r)
			}
			w.clock.advance(bound)
		}
	})
	t.Run("unattributed dead letter", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		w.seed(t, "q", "q/batch/1", "speculating")
		// A legacy build dead letter with an empty queue: the real DLQ
		// controller cannot resolve it and never wakes a queue for it.
		if err := w.w.Publish(ctx, "build_dlq", "q/batch/0", "b@1", []byte(`{"id":"q/batch/0","queue":""}`), nil); err != nil {
			t.Fatal(err)
		}
		if v := w.verdict(t, "q"); v.Verdict != stuck.Quiet {
			t.Fatalf("= %+v; want quiet", v)
		}
		w.clock.advance(bound)
		if v := w.verdict(t, "q"); v.Verdict != stuck.Woken {
			t.Fatalf("= %+v; want woken", v)
		}
	})
	t.Run("no live batch", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		w.seed(t, "q", "q/batch/1", "failed")
		w.seed(t, "q", "q/batch/2", "creating")
		for range 3 {
			if r := w.scan(t); r.Count(stuck.Woken)+r.Count(stuck.Quiet) != 0 {
				t.Fatalf("report = %+v; want nothing to wake", r)
			}
			w.clock.advance(bound)
		}
	})
	t.Run("mend record due", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		w.seed(t, "q", "q/batch/1", "speculating")
		if _, _, err := w.store.RecordCreate(ctx, mend.CreateParams{
			Source: mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/0"},
			Target: mend.Target{BatchID: "q/batch/0", Desired: mend.OutcomeFailed}, OpID: mend.NewOpID(), Actor: "test",
		}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if v := w.verdict(t, "q"); v.Verdict != stuck.Busy {
				t.Fatalf("with a record due = %+v; want busy", v)
			}
			w.clock.advance(bound)
		}
	})
}

// Two replicas that find the same queue stuck in the same state record one
// wake-up between them.
func TestReplicasRecordOneWakeUp(t *testing.T) {
	t.Parallel()
	w := setup(t)
	w.seed(t, "q", "q/batch/1", "speculating")
	other, err := stuck.New(stuck.Config{Scanner: w.clock, Store: w.store, Bound: bound})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, d := range []*stuck.Detector{w.d, other} {
		if _, err := d.Scan(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w.clock.advance(bound)
	var verdicts []stuck.Verdict
	for _, d := range []*stuck.Detector{w.d, other} {
		r, err := d.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verdicts = append(verdicts, r.Queues[0].Verdict)
	}
	// The second finds the first's record due (mend's planner owns the
	// wake-up); had it raced the first, create-if-absent would have
	// answered it with the same record.
	if fmt.Sprint(verdicts) != "[woken busy]" {
		t.Fatalf("verdicts = %v; want one woken, one busy on the record", verdicts)
	}
	if n := len(w.stuckRecords(t, "q")); n != 1 {
		t.Fatalf("%d records; want 1", n)
	}
}

// ScanAcross, the one-off entry point (mend import --stuck), measures the
// bound by the database's own clock: two scans a real second apart wake a
// quiet queue, and report a busy one busy.
func TestScanAcrossUsesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setup(t)
	w.seed(t, "q", "q/batch/1", "created")
	w.seed(t, "busy", "busy/batch/1", "speculating")
	if err := w.w.Publish(ctx, "submitqueue-merge", "busy", "busy/batch/1/merge-dispatch", batchID("busy/batch/1", "busy"), nil); err != nil {
		t.Fatal(err)
	}
	d, err := stuck.New(stuck.Config{Scanner: w.h, Store: w.store, Bound: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var first stuck.Report
	r, err := d.ScanAcross(ctx, func(f stuck.Report) { first = f })
	if err != nil {
		t.Fatal(err)
	}
	if first.Count(stuck.Quiet) != 1 || r.Count(stuck.Woken) != 1 || r.Count(stuck.Busy) != 1 || !r.At.After(first.At.Add(time.Second)) {
		t.Fatalf("first %+v, then %+v; want q quiet then woken a database second later, busy busy", first, r)
	}
}

// perDetection is the negative control of "woken once": a store that gives
// every detection an identity of its own (as a message ID naming the scan
// instead of the state would), so nothing ties a detection to the state
// already woken.
type perDetection struct {
	*storage.DB
	mu sync.Mutex
	n  int
}

func (p *perDetection) RecordCreate(ctx context.Context, c mend.CreateParams) (mend.Record, bool, error) {
	p.mu.Lock()
	p.n++
	c.Source.MessageID += fmt.Sprintf("/%d", p.n)
	p.mu.Unlock()
	return p.DB.RecordCreate(ctx, c)
}

// Without the state as the record's identity, the quiet queue of
// TestQuietQueueIsWokenOnce is woken again after its wake-up was consumed
// in the same state: the check that it is not can fail.
func TestWokenOnceControl(t *testing.T) {
	t.Parallel()
	w := setup(t)
	d, err := stuck.New(stuck.Config{Scanner: w.clock, Store: &perDetection{DB: w.store}, Bound: bound})
	if err != nil {
		t.Fatal(err)
	}
	w.d = d
	w.seed(t, "q", "q/batch/1", "speculating")
	w.scan(t)
	w.clock.advance(bound)
	if v := w.verdict(t, "q"); v.Verdict != stuck.Woken {
		t.Fatalf("= %+v; want woken", v)
	}
	w.plan(t, "q")
	w.consume(t, "speculate")
	if v := w.verdict(t, "q"); v.Verdict != stuck.Quiet {
		t.Fatalf("= %+v; want quiet", v)
	}
	w.clock.advance(bound)
	if v := w.verdict(t, "q"); v.Verdict != stuck.Woken {
		t.Fatalf("control = %+v; want woken again (the check in TestQuietQueueIsWokenOnce could not tell)", v)
	}
}

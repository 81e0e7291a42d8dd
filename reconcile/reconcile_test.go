package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

func TestMain(m *testing.M) {
	mysqltest.Main(m, func() error { return goleak.Find() })
}

// fakeRunner is a hand-written stand-in for the planner: it counts runs and
// can block until its context ends, to observe Stop.
type fakeRunner struct {
	runs    atomic.Int32
	block   bool
	started chan struct{}
}

func (f *fakeRunner) Run(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
	f.runs.Add(1)
	if f.block {
		f.started <- struct{}{}
		<-ctx.Done()
		return planner.Stats{}, ctx.Err()
	}
	return planner.Stats{Settled: 1}, nil
}

type bundle struct {
	store *storage.DB
	fence *fence.Fence
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(context.Background(), db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	f, err := fence.New(store, fence.Config{Holder: "test", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{store: store, fence: f}
}

func (b *bundle) record(t *testing.T, queue, msg string) {
	t.Helper()
	_, _, err := b.store.RecordCreate(context.Background(), mend.CreateParams{
		Source: mend.SourceID{Queue: queue, Topic: "speculate_dlq", MessageID: msg},
		Target: mend.Target{BatchID: "1", Desired: mend.OutcomeFailed},
		OpID:   mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	good := reconcile.Config{Store: &storage.DB{}, Fence: &fence.Fence{}, Planner: &fakeRunner{}}
	for name, mutate := range map[string]func(*reconcile.Config){
		"missing store":     func(c *reconcile.Config) { c.Store = nil },
		"missing planner":   func(c *reconcile.Config) { c.Planner = nil },
		"tiny interval":     func(c *reconcile.Config) { c.Interval = time.Microsecond },
		"huge concurrency":  func(c *reconcile.Config) { c.Concurrency = 100000 },
		"negative limit":    func(c *reconcile.Config) { c.QueueLimit = -1 },
		"negative interval": func(c *reconcile.Config) { c.Interval = -time.Second },
	} {
		c := good
		mutate(&c)
		if _, err := reconcile.New(c); !errors.Is(err, mend.ErrInvalid) {
			t.Errorf("%s: New = %v; want ErrInvalid", name, err)
		}
	}
	if _, err := reconcile.New(good); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

func TestRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, q := range []string{"q1", "q2", "q3"} {
		b.record(t, q, "m")
	}
	// Another holder has q3: the pass skips it.
	other, err := fence.New(b.store, fence.Config{Holder: "other", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.TryAcquire(ctx, "q3")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx) //nolint:errcheck // test cleanup

	runner := &fakeRunner{}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Queues != 3 || ps.Ran != 2 || ps.Held != 1 || ps.Records.Settled != 2 || runner.runs.Load() != 2 {
		t.Fatalf("pass = %+v, %d runs; want 3 queues, 2 ran, 1 held", ps, runner.runs.Load())
	}
	// Leases were released: another holder can take q1 at once.
	le, err := other.TryAcquire(ctx, "q1")
	if err != nil {
		t.Fatalf("q1 still held after the pass: %v", err)
	}
	_ = le.Release(ctx)
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.record(t, "q", "m")
	runner := &fakeRunner{block: true, started: make(chan struct{}, 1)}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Stop() // safe before Start
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err == nil {
		t.Fatalf("second Start succeeded")
	}
	<-runner.started // a planner run is in flight, holding q's lease
	r.Stop()
	r.Stop() // idempotent
	// Stop abandoned the run and released the lease.
	other, err := fence.New(b.store, fence.Config{Holder: "other", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	le, err := other.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatalf("lease not released by Stop: %v", err)
	}
	_ = le.Release(ctx)
}

func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, _, err := b.store.RecordCreate(ctx, mend.CreateParams{
		Source: mend.SourceID{Queue: "q", Topic: "t", MessageID: "m"},
		State:  mend.StateParked, Reason: "x", OpID: mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: &fakeRunner{}, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(ctx)
	if err != nil || ps.Pruned != 0 {
		t.Fatalf("pass = %+v, %v; a parked record is never pruned", ps, err)
	}
}

// turnRunner hands out a fixed number of turns per queue: each run reports
// More until the queue's turns are used up, and the order of runs is kept.
type turnRunner struct {
	mu    sync.Mutex
	turns map[string]int
	order []string
}

func (f *turnRunner) Run(_ context.Context, lease planner.Lease) (planner.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := lease.Term().Queue
	f.order = append(f.order, q)
	f.turns[q]--
	return planner.Stats{Settled: 1, More: f.turns[q] > 0}, nil
}

// TestPassTakesEachQueueOnce: a pass gives every due queue one run and
// ends; the queues whose run stopped at the planner's limit are counted in
// More, for the next pass.
func TestPassTakesEachQueueOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	queues := []string{"q1", "q2", "q3", "q4"}
	for _, q := range queues {
		b.record(t, q, "m")
	}
	runner := &turnRunner{turns: map[string]int{"q1": 3, "q2": 1, "q3": 2, "q4": 3}}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Ran != 4 || ps.Queues != 4 || ps.More != 3 {
		t.Fatalf("pass stats %+v; want 4 runs over 4 queues, 3 with more due", ps)
	}
	if !sameSet(runner.order, queues) {
		t.Fatalf("runs %v; want each queue exactly once", runner.order)
	}
}

// drainRunner is a hand-written fake planner doing real work: a run marks
// up to limit of the queue's due records done, oldest first, and reports
// More when it took limit. during, if set, runs inside every run.
type drainRunner struct {
	store  *storage.DB
	limit  int
	during func(queue string)
	mu     sync.Mutex
	order  []string
}

func (f *drainRunner) Run(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
	return f.take(ctx, lease, f.limit)
}

func (f *drainRunner) take(ctx context.Context, lease planner.Lease, limit int) (planner.Stats, error) {
	q := lease.Term().Queue
	f.mu.Lock()
	f.order = append(f.order, q)
	f.mu.Unlock()
	if f.during != nil {
		f.during(q)
	}
	recs, err := f.store.RecordsDue(ctx, q, limit)
	if err != nil {
		return planner.Stats{}, err
	}
	for _, rec := range recs {
		if _, err := f.store.RecordAppend(ctx, mend.AppendParams{Source: rec.Source, RecordID: rec.ID, Version: rec.Version,
			Kind: mend.EventDone, Actor: "test", OpID: mend.NewOpID(), State: mend.StateDone}); err != nil {
			return planner.Stats{}, err
		}
	}
	return planner.Stats{Done: len(recs), More: len(recs) == limit}, nil
}

func (f *drainRunner) runs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.order)
}

// followRunner is a drainRunner with follow-up runs (reconcile.FollowRunner)
// of followLimit records; kinds says which of the two each run was.
type followRunner struct {
	drainRunner
	followLimit int
	kinds       []string // "run" or "follow", one per run, in order
}

func (f *followRunner) Run(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
	f.mu.Lock()
	f.kinds = append(f.kinds, lease.Term().Queue+":run")
	f.mu.Unlock()
	return f.drainRunner.Run(ctx, lease)
}

func (f *followRunner) RunFollow(ctx context.Context, lease planner.Lease) (planner.Stats, error) {
	f.mu.Lock()
	f.kinds = append(f.kinds, lease.Term().Queue+":follow")
	f.mu.Unlock()
	return f.take(ctx, lease, f.followLimit)
}

// TestFollowUpRuns: a queue whose run stopped at the planner's limit (it
// was woken, more may be due) is run next with the larger follow-up run;
// a queue whose run took all it had goes back to plain runs, so a storm's
// first round stays short for every queue.
func TestFollowUpRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i := range 7 {
		b.record(t, "big", fmt.Sprintf("m%d", i))
	}
	b.record(t, "small", "m")
	runner := &followRunner{drainRunner: drainRunner{store: b.store, limit: 2}, followLimit: 4}
	r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(want ...string) {
		t.Helper()
		runner.kinds = nil
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		got := slices.Clone(runner.kinds)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("runs %v; want %v", got, want)
		}
	}
	pass("big:run", "small:run") // 2 of big's 7 (more), small's only one
	pass("big:follow")           // 4 more of big (more)
	pass("big:follow")           // big's last one: drained
	b.record(t, "big", "m7")     // new work on big, exactly the limit:
	b.record(t, "big", "m8")     // the run cannot tell whether more is due
	pass("big:run")              // a plain run again, stopped at the limit
	pass()                       // nothing due: big is forgotten
	b.record(t, "big", "m9")
	pass("big:run") // a plain run, not a follow-up of the run two passes ago
	if due, err := b.store.RecordsDue(ctx, "big", 10); err != nil || len(due) != 0 {
		t.Fatalf("big has %d due, %v; want none", len(due), err)
	}
}

// TestNextPassReachesNewWork: the passes end, so work that was not listed
// by one pass is reached by the next instead of after every listed queue
// is drained.
func TestNextPassReachesNewWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A record that falls due while a pass runs (a re-send's backoff ends,
	// a new dead letter) is taken by the next pass, although the queues
	// the first pass listed still have records due.
	t.Run("due mid-pass", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range 5 {
			b.record(t, "busy", fmt.Sprintf("m%d", i))
		}
		var once sync.Once
		runner := &drainRunner{store: b.store, limit: 2, during: func(string) {
			once.Do(func() { b.record(t, "late", "m") })
		}}
		r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		ps, err := r.RunOnce(ctx)
		if err != nil || ps.Ran != 1 || ps.More != 1 {
			t.Fatalf("first pass = %+v, %v; want one run, stopped at the limit", ps, err)
		}
		ps, err = r.RunOnce(ctx)
		if err != nil || ps.Ran != 2 {
			t.Fatalf("second pass = %+v, %v; want busy and late", ps, err)
		}
		if got := runner.runs(); !slices.Contains(got[1:], "late") {
			t.Fatalf("runs %v; want late taken by the second pass", got)
		}
		if due, err := b.store.RecordsDue(ctx, "busy", 10); err != nil || len(due) == 0 {
			t.Fatalf("busy has %d due, %v; the test wants it still busy when late is served", len(due), err)
		}
	})
	// More queues are due than a pass lists (QueueLimit): passes take the
	// queues with the longest-overdue record first, and a run takes a
	// queue's oldest records, so a queue left out of one pass is listed by
	// a later one before the listed queues are drained.
	t.Run("beyond queue limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Dead letters arrive interleaved, as in a storm.
		for i := range 5 {
			for _, q := range []string{"q1", "q2", "q3"} {
				b.record(t, q, fmt.Sprintf("m%d", i))
			}
		}
		runner := &drainRunner{store: b.store, limit: 2}
		r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: 1, QueueLimit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for pass := 1; pass <= 2; pass++ {
			ps, err := r.RunOnce(ctx)
			if err != nil || ps.Ran != 2 || ps.More != 2 {
				t.Fatalf("pass %d = %+v, %v; want two runs, both stopped at the limit", pass, ps, err)
			}
		}
		if got := runner.runs(); !slices.Contains(got, "q3") {
			t.Fatalf("runs %v; want q3 reached by the second pass", got)
		}
	})
}

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

// TestPassSkipsQueuesDrainedMeanwhile: a queue listed by a pass but drained
// by someone else before its turn is skipped without taking its lease; the
// same pass with the probe out of reach takes the lease and runs it empty
// (the negative control).
func TestPassSkipsQueuesDrainedMeanwhile(t *testing.T) {
	t.Parallel()
	for _, probe := range []bool{true, false} {
		t.Run(fmt.Sprintf("probe=%v", probe), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.record(t, "qa", "m1")
			b.record(t, "qb", "m1")
			other := map[string]string{"qa": "qb", "qb": "qa"}
			var runner *drainRunner
			runner = &drainRunner{store: b.store, limit: 10, during: func(q string) {
				if len(runner.runs()) > 1 {
					return
				}
				// The first queue's run drains the other queue too, as
				// another replica would.
				recs, err := b.store.RecordsDue(ctx, other[q], 10)
				if err != nil {
					t.Error(err)
					return
				}
				for _, rec := range recs {
					if _, err := b.store.RecordAppend(ctx, mend.AppendParams{Source: rec.Source, RecordID: rec.ID, Version: rec.Version,
						Kind: mend.EventDone, Actor: "other replica", OpID: mend.NewOpID(), State: mend.StateDone}); err != nil {
						t.Error(err)
					}
				}
			}}
			after := time.Nanosecond // every queue of the pass is probed
			if !probe {
				after = time.Hour
			}
			r, err := reconcile.New(reconcile.Config{Store: b.store, Fence: b.fence, Planner: runner, Concurrency: 1, ProbeAfter: after})
			if err != nil {
				t.Fatal(err)
			}
			ps, err := r.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			runs := runner.runs()
			if probe && (len(runs) != 1 || ps.Drained != 1 || ps.Ran != 1) {
				t.Fatalf("runs %v, stats %+v; want one run, the drained queue skipped", runs, ps)
			}
			if !probe && (len(runs) != 2 || ps.Drained != 0) {
				t.Fatalf("negative control: runs %v, stats %+v; want both queues run (the second empty)", runs, ps)
			}
			if !probe {
				return
			}
			// No term was taken on the skipped queue.
			skipped := other[runs[0]]
			if l, err := b.store.LeaseGet(ctx, skipped); err == nil && l.Term.Epoch != 0 {
				t.Fatalf("queue %s skipped, but its lease was taken: %+v", skipped, l)
			}
		})
	}
}

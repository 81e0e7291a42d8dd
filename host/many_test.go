package host_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/planner"
)

var _ planner.BatchesMany = (*host.DB)(nil)

// stmtCounter is a driver network that counts the statements (COM_QUERY
// packets, as the adapter's sessions interpolate on the client) sent on
// its connections, by their "-- name:" label.
type stmtCounter struct {
	network string
	mu      sync.Mutex
	counts  map[string]int
}

var counterSeq atomic.Int64

func newStmtCounter(t *testing.T, dsn string) (*stmtCounter, string) {
	t.Helper()
	c := &stmtCounter{network: "hostcount" + strconv.FormatInt(counterSeq.Add(1), 10), counts: map[string]int{}}
	mysql.RegisterDialContext(c.network, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &countConn{Conn: conn, c: c}, nil
	})
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Skipf("statement counting needs a TCP DSN, not %q", cfg.Net)
	}
	cfg.Net = c.network
	return c, cfg.FormatDSN()
}

// take returns the counts so far and starts again from zero.
func (c *stmtCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

type countConn struct {
	net.Conn
	c *stmtCounter
}

func (cc *countConn) Write(b []byte) (int, error) {
	// A command packet: 3-byte length, sequence 0, then the command byte.
	if len(b) > 5 && b[3] == 0 && b[4] == 0x03 {
		text := string(b[5:])
		name := "other"
		if rest, ok := strings.CutPrefix(text, "-- name: "); ok {
			name, _, _ = strings.Cut(rest, "\n")
		}
		cc.c.mu.Lock()
		cc.c.counts[name]++
		cc.c.mu.Unlock()
	}
	return cc.Conn.Write(b)
}

// TestBatchesMany: the batched path on real-shaped tables. Every item is
// judged alone: a missing or differently spelled batch, one that moved
// under the compare-and-set, one named twice, none of them holds back or
// corrupts the others.
func TestBatchesMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("get many", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating", "q/1")
		b.seed(t, "q", "q/batch/2", "failed", "q/2")
		b.seed(t, "q", "Q/Batch/3", "created")
		got, errs := b.h.BatchGetMany(ctx, "q", []string{"q/batch/1", "q/batch/9", "q/batch/2", "q/batch/3", "q/batch/1"})
		if errs[0] != nil || got[0].State != mend.BatchSpeculating || !slices.Equal(got[0].Requests, []string{"q/1"}) {
			t.Fatalf("item 0 = %+v, %v; want speculating with q/1", got[0], errs[0])
		}
		if !errors.Is(errs[1], mend.ErrNotFound) || errors.As(errs[1], new(*mend.SpellingError)) {
			t.Fatalf("missing batch: %v; want ErrNotFound", errs[1])
		}
		if errs[2] != nil || got[2].State != mend.BatchFailed {
			t.Fatalf("item 2 = %+v, %v; want failed", got[2], errs[2])
		}
		var sp *mend.SpellingError
		if !errors.As(errs[3], &sp) || sp.Stored != "Q/Batch/3" {
			t.Fatalf("case variant: %v; want a SpellingError naming Q/Batch/3", errs[3])
		}
		if errs[4] != nil || got[4].ID != "q/batch/1" {
			t.Fatalf("repeated ID = %+v, %v; want the same batch", got[4], errs[4])
		}
	})

	t.Run("a conflict on one batch leaves the others moved", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := 1; i <= 4; i++ {
			b.seed(t, "q", fmt.Sprintf("q/batch/%d", i), "speculating", fmt.Sprintf("q/%d", i))
		}
		ids := []string{"q/batch/1", "q/batch/2", "q/batch/3", "q/batch/4"}
		read, errs := b.h.BatchGetMany(ctx, "q", ids)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// After mend's read: the host moves batch 2 on, and batch 4 goes.
		if ok, err := b.w.Transition(ctx, "q", "q/batch/2", 1, "speculating", "merging"); !ok || err != nil {
			t.Fatalf("host transition: %v, %v", ok, err)
		}
		b.exec(t, `DELETE FROM batch WHERE queue = 'q' AND id = 'q/batch/4'`)
		bs := append(read, read[0]) // batch 1 named twice
		to := []mend.BatchState{mend.BatchFailed, mend.BatchFailed, mend.BatchFailed, mend.BatchFailed, mend.BatchFailed}
		now, errs := b.h.BatchTransitionMany(ctx, bs, to)
		for _, i := range []int{0, 2} {
			if errs[i] != nil || now[i].State != mend.BatchFailed || now[i].Version != 2 {
				t.Fatalf("item %d = %+v, %v; want failed at version 2", i, now[i], errs[i])
			}
		}
		if !errors.Is(errs[1], mend.ErrConflict) {
			t.Fatalf("moved batch: %v; want ErrConflict", errs[1])
		}
		if !errors.Is(errs[3], mend.ErrNotFound) || errors.Is(errs[3], mend.ErrConflict) {
			t.Fatalf("deleted batch: %v; want ErrNotFound, not ErrConflict", errs[3])
		}
		if !errors.Is(errs[4], mend.ErrConflict) {
			t.Fatalf("batch named twice: %v; want ErrConflict on the second", errs[4])
		}
		for id, want := range map[string]sqtestBatch{"q/batch/1": {"failed", 2}, "q/batch/2": {"merging", 2}, "q/batch/3": {"failed", 2}} {
			row, err := b.w.Batch(ctx, "q", id)
			if err != nil || row.State != want.state || int64(row.Version) != want.version {
				t.Fatalf("batch %s = %+v, %v; want %s at %d", id, row, err, want.state, want.version)
			}
		}
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"failed/q/batch/1", "failed/q/batch/3", "merging/q/batch/2", "speculating/q/batch/4"}) {
			t.Fatalf("membership = %q", m)
		}
		// A terminal batch is refused before anything is sent.
		if _, errs := b.h.BatchTransitionMany(ctx, now[:1], to[:1]); !errors.Is(errs[0], mend.ErrInvalid) {
			t.Fatalf("transition of a failed batch: %v; want ErrInvalid", errs[0])
		}
	})

	t.Run("finish many, a shared member and a protected outcome", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "failed", "q/1", "q/2")
		b.seed(t, "q", "q/batch/2", "failed", "q/3")
		// q/2 is a member of both batches (the seed creates each request once).
		b.exec(t, `UPDATE batch SET contains = JSON_ARRAY('q/2', 'q/3') WHERE queue = 'q' AND id = 'q/batch/2'`)
		b.seed(t, "q", "q/batch/3", "succeeded", "q/4")
		if err := b.w.SetRequestState(ctx, "q", "q/3", "landed"); err != nil {
			t.Fatal(err)
		}
		read, errs := b.h.BatchGetMany(ctx, "q", []string{"q/batch/1", "q/batch/2", "q/batch/3"})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		fs := []mend.FinishParams{{Batch: read[0], Cause: deadLetter}, {Batch: read[1], Cause: deadLetter}, {Batch: read[2], Cause: deadLetter}}
		if err := errors.Join(b.h.BatchFinishMany(ctx, fs)...); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]string{"q/1": "error", "q/2": "error", "q/3": "landed", "q/4": "landed"} {
			if r := b.request(t, id); r.State != want {
				t.Fatalf("request %s = %+v; want %s", id, r, want)
			}
		}
		if l := b.logs(t, "q/2"); len(l) != 1 || l[0].Status != "error" || l[0].LastError != deadLetter.LastError {
			t.Fatalf("log of the shared member = %+v; want one error entry", l)
		}
		if l := b.logs(t, "q/3"); len(l) != 0 {
			t.Fatalf("log of a request landed before = %+v; want none (another outcome is final)", l)
		}
		if l := b.logs(t, "q/4"); len(l) != 1 || l[0].Status != "landed" || l[0].LastError != "" {
			t.Fatalf("log of q/4 = %+v; want one landed entry without an error", l)
		}
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"failed/q/batch/1", "failed/q/batch/2", "succeeded/q/batch/3"}) {
			t.Fatalf("membership = %q; want each terminal batch's row ensured", m)
		}
		// Again: nothing changes, and it is as idempotent as BatchFinish.
		if err := errors.Join(b.h.BatchFinishMany(ctx, fs)...); err != nil {
			t.Fatal(err)
		}
		if r := b.request(t, "q/2"); r.Version != 2 {
			t.Fatalf("q/2 after a second finish = %+v; want version 2", r)
		}
	})
}

type sqtestBatch struct {
	state   string
	version int64
}

// TestRunStatementsDoNotGrowWithRecords: a planner run over K dead letters
// of one queue sends the host the same statements whatever K is: the
// host's application writes for all records in one statement each, and
// the queue database one insert of RequestLogs and one wake-up publish.
func TestRunStatementsDoNotGrowWithRecords(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, k int) map[string]int {
		r := setupRepair(t)
		counter, dsn := newStmtCounter(t, r.db.DSN)
		h := open(t, dsn, dsn, host.Options{NowFunc: func() time.Time { return testNow }})
		p, err := planner.New(planner.Config{Store: r.store, Batches: h, Waker: h, RunLimit: -1, BackoffFunc: func(int) time.Duration { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		r.seed(t, "q", "q/batch/live", "created")
		for i := range k {
			id := fmt.Sprintf("q/batch/%d", i)
			r.seed(t, "q", id, "speculating", fmt.Sprintf("q/%d/a", i), fmt.Sprintf("q/%d/b", i))
			r.record(t, id)
		}
		counter.take() // the pools' setup
		le, err := r.fence.TryAcquire(context.Background(), "q")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = le.Release(context.Background()) }()
		st, err := p.Run(context.Background(), le)
		if err != nil || st.Settled != k || st.Woken != k {
			t.Fatalf("run over %d records: %+v, %v", k, st, err)
		}
		for i := range k {
			if row, err := r.w.Batch(context.Background(), "q", fmt.Sprintf("q/batch/%d", i)); err != nil || row.State != "failed" {
				t.Fatalf("batch %d = %+v, %v; want failed", i, row, err)
			}
		}
		wakes, err := r.w.ConsumeSpeculate(context.Background(), "q", true)
		if err != nil || len(wakes) != 1 {
			t.Fatalf("wake-ups = %+v, %v; want one", wakes, err)
		}
		return counter.take()
	}
	small, large := run(t, 3), run(t, 30)
	if !maps.Equal(small, large) {
		t.Fatalf("host statements for 3 records %v, for 30 %v; want the same", small, large)
	}
	for _, name := range []string{"BatchGetMany", "BatchTransitionMany", "MembershipEnsure", "MembershipDeleteMany", "RequestsGet", "RequestsFinish", "LiveBatches"} {
		if small[name] != 1 {
			t.Errorf("%s sent %d times in the run; want once (all: %v)", name, small[name], small)
		}
	}
	if small["Publish"] != 2 {
		t.Errorf("Publish sent %d times; want twice: the RequestLogs together, then the wake-up (all: %v)", small["Publish"], small)
	}
	t.Logf("host statements per run: %v", small)
}

// movingHost is the adapter with a hook that runs before the batched
// transition, after the planner has read the batches.
type movingHost struct {
	*host.DB
	before func()
}

func (m movingHost) BatchTransitionMany(ctx context.Context, bs []mend.Batch, to []mend.BatchState) ([]mend.Batch, []error) {
	m.before()
	return m.DB.BatchTransitionMany(ctx, bs, to)
}

// TestPlannerConflictOnOneBatch: in a batched run, the host moves one
// batch between the planner's read and its transition. That record alone
// is read and decided again (the batch is now merging: it waits, never
// failed); the others are failed, finished and woken as usual, with one
// wake-up. The negative control trusts the compare-and-set's row count
// instead of reading the batches again: the merging batch's record is then
// settled as failed, which the test catches.
func TestPlannerConflictOnOneBatch(t *testing.T) {
	t.Parallel()
	for _, broken := range []bool{false, true} {
		t.Run(map[bool]string{false: "as built", true: "negative control"}[broken], func(t *testing.T) {
			t.Parallel()
			problems := conflictOnOneBatch(t, broken)
			if !broken && len(problems) > 0 {
				t.Fatal(strings.Join(problems, "\n"))
			}
			if broken && len(problems) == 0 {
				t.Fatal("trusting the row count went unnoticed: the test cannot fail")
			}
			if broken {
				t.Logf("negative control caught: %s", problems[0])
			}
		})
	}
}

func conflictOnOneBatch(t *testing.T, broken bool) []string {
	ctx := context.Background()
	r := setupRepair(t)
	host.SetTrustRowCount(r.h, broken)
	r.seed(t, "q", "q/batch/live", "created")
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("q/batch/%d", i)
		r.seed(t, "q", id, "speculating", fmt.Sprintf("q/%d", i))
		r.record(t, id)
	}
	mh := movingHost{DB: r.h, before: func() {
		if ok, err := r.w.Transition(ctx, "q", "q/batch/2", 1, "speculating", "merging"); !ok || err != nil {
			t.Errorf("host transition: %v, %v", ok, err)
		}
	}}
	p, err := planner.New(planner.Config{Store: r.store, Batches: mh, Waker: r.h, BackoffFunc: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	le, err := r.fence.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = le.Release(ctx) }()
	var problems []string
	st, err := p.Run(ctx, le)
	if err != nil || st.Settled != 2 || st.Woken != 2 || st.Waiting != 1 {
		problems = append(problems, fmt.Sprintf("run = %+v, %v; want 2 settled and woken, 1 waiting", st, err))
	}
	for id, want := range map[string]string{"q/batch/1": "failed", "q/batch/2": "merging", "q/batch/3": "failed"} {
		if row, err := r.w.Batch(ctx, "q", id); err != nil || row.State != want {
			problems = append(problems, fmt.Sprintf("batch %s = %+v, %v; want %s", id, row, err, want))
		}
	}
	for id, want := range map[string]string{"q/1": "error", "q/2": "batched", "q/3": "error"} {
		if got := r.request(t, id); got.State != want {
			problems = append(problems, fmt.Sprintf("request %s = %+v; want %s", id, got, want))
		}
	}
	if wakes, err := r.w.ConsumeSpeculate(ctx, "q", true); err != nil || len(wakes) != 1 {
		problems = append(problems, fmt.Sprintf("wake-ups = %+v, %v; want one", wakes, err))
	}
	return problems
}

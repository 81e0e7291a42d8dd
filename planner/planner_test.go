package planner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

func TestMain(m *testing.M) {
	mysqltest.Main(m, func() error { return goleak.Find() })
}

// Compile-time checks that the real implementations fit the ports.
var (
	_ planner.Store = (*storage.DB)(nil)
	_ planner.Lease = (*fence.Lease)(nil)
)

// fakeHost is a hand-written fake of the host ports; each Func field, when
// set, replaces the default in-memory behaviour.
type fakeHost struct {
	mu      sync.Mutex
	batches map[string]mend.Batch
	woken   []mend.WakeUp   // wake-ups that created a message
	sent    map[string]bool // message IDs the fake queue holds (its dedupe)
	causes  []mend.Snapshot // the cause of every BatchFinish call

	BatchGetFunc        func(queue, id string) (mend.Batch, error)
	BatchTransitionFunc func(queue, id string, from int64, to mend.BatchState) (mend.Batch, error)
	BatchFinishFunc     func(queue, id string, cause mend.Snapshot) error
	WakeFunc            func(w mend.WakeUp) error
}

func newFakeHost(batches ...mend.Batch) *fakeHost {
	h := &fakeHost{batches: map[string]mend.Batch{}, sent: map[string]bool{}}
	for _, b := range batches {
		h.batches[b.ID] = b
	}
	return h
}

func (h *fakeHost) BatchGet(_ context.Context, queue, id string) (mend.Batch, error) {
	if h.BatchGetFunc != nil {
		return h.BatchGetFunc(queue, id)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.batches[id]
	if !ok {
		return mend.Batch{}, mend.ErrNotFound
	}
	return b, nil
}

func (h *fakeHost) BatchTransition(_ context.Context, queue, id string, from int64, to mend.BatchState) (mend.Batch, error) {
	if h.BatchTransitionFunc != nil {
		return h.BatchTransitionFunc(queue, id, from, to)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.batches[id]
	switch {
	case !ok:
		return mend.Batch{}, mend.ErrNotFound
	case b.Version != from:
		return mend.Batch{}, mend.ErrConflict
	}
	b.State, b.Version = to, b.Version+1
	h.batches[id] = b
	return b, nil
}

func (h *fakeHost) BatchFinish(_ context.Context, queue, id string, cause mend.Snapshot) error {
	h.mu.Lock()
	h.causes = append(h.causes, cause)
	h.mu.Unlock()
	if h.BatchFinishFunc != nil {
		return h.BatchFinishFunc(queue, id, cause)
	}
	return nil
}

func (h *fakeHost) LiveBatches(_ context.Context, _ string, limit int) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for id, b := range h.batches {
		if b.State.Live() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids[:min(limit, len(ids))], nil
}

func (h *fakeHost) Wake(_ context.Context, w mend.WakeUp) error {
	if h.WakeFunc != nil {
		if err := h.WakeFunc(w); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Like the host's message store: an ID it still holds is a silent
	// no-op that publishes nothing.
	if h.sent[w.MessageID] {
		return nil
	}
	h.sent[w.MessageID] = true
	h.woken = append(h.woken, w)
	return nil
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
	f, err := fence.New(store, fence.Config{Holder: "p", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{store: store, fence: f}
}

func (b *bundle) record(t *testing.T, queue, msg, batch string) mend.Record {
	t.Helper()
	return b.recordWith(t, queue, msg, batch, mend.Snapshot{})
}

func (b *bundle) recordWith(t *testing.T, queue, msg, batch string, snap mend.Snapshot) mend.Record {
	t.Helper()
	rec, _, err := b.store.RecordCreate(context.Background(), mend.CreateParams{
		Source:   mend.SourceID{Queue: queue, Topic: "speculate_dlq", MessageID: msg},
		Snapshot: snap,
		Target:   mend.Target{BatchID: batch, Desired: mend.OutcomeFailed},
		OpID:     mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (b *bundle) lease(t *testing.T, queue string) *fence.Lease {
	t.Helper()
	le, err := b.fence.TryAcquire(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = le.Release(context.Background()) })
	return le
}

func newPlanner(t *testing.T, b *bundle, h *fakeHost, mutate func(*planner.Config)) *planner.Planner {
	t.Helper()
	// Retries are due at once, so one Run shows every attempt without
	// waiting on the clock.
	cfg := planner.Config{Store: b.store, Batches: h, Waker: h, BackoffFunc: func(int) time.Duration { return 0 }, MaxAttempts: 3}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := planner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPoisonRecordIsParkedAndDoesNotBlockTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "good", State: mend.BatchSpeculating, Version: 1})
	h.BatchGetFunc = func(q, id string) (mend.Batch, error) {
		if id == "poison" {
			return mend.Batch{}, errors.New("host exploded")
		}
		return h.batches2(id)
	}
	poison := b.record(t, "q", "m1", "poison")
	good := b.record(t, "q", "m2", "good")
	p := newPlanner(t, b, h, nil)
	st, err := p.Run(ctx, b.lease(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	gotPoison, _ := b.store.RecordGetByID(ctx, "q", poison.ID)
	gotGood, _ := b.store.RecordGetByID(ctx, "q", good.ID)
	if gotPoison.State != mend.StateParked || !strings.Contains(gotPoison.LastError, "host exploded") || !strings.Contains(gotPoison.LastError, "3 attempts") {
		t.Fatalf("poison record = %s %q; want parked with the reason after 3 attempts", gotPoison.State, gotPoison.LastError)
	}
	if gotGood.State != mend.StateDone {
		t.Fatalf("good record = %s; want done despite the poison record", gotGood.State)
	}
	if st.Parked != 1 || st.Failed != 2 {
		t.Fatalf("stats = %+v; want 2 failed attempts then 1 park", st)
	}
	// Issue 47: "gave up after 3 attempts" showed attempts 2 and failures
	// 2; the parking attempt is the third of both.
	failures, err := b.store.RecordFailures(ctx, []mend.Record{gotPoison})
	if err != nil || gotPoison.Attempts != 3 || failures[gotPoison.ID] != 3 {
		t.Fatalf("parked poison record: attempts %d, failures %d (%v); want 3 and 3, as its reason says", gotPoison.Attempts, failures[gotPoison.ID], err)
	}
}

// batches2 reads a batch without the Func override.
func (h *fakeHost) batches2(id string) (mend.Batch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.batches[id]
	if !ok {
		return mend.Batch{}, mend.ErrNotFound
	}
	return b, nil
}

func TestWakeRetriesUseNewMessageIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchSpeculating, Version: 1}, mend.Batch{ID: "2", State: mend.BatchCreated, Version: 1})
	var tried []string
	h.WakeFunc = func(w mend.WakeUp) error {
		tried = append(tried, w.MessageID)
		if len(tried) < 2 {
			return errors.New("queue database down")
		}
		return nil
	}
	rec := b.record(t, "q", "m", "1")
	le := b.lease(t, "q")
	if _, err := newPlanner(t, b, h, nil).Run(ctx, le); err != nil {
		t.Fatal(err)
	}
	// Created at version 1, settled at 2: the first publish goes out at
	// version 2, its failure is recorded at 3, the re-send at 3.
	want := []string{"mend/wake/" + rec.ID.String() + "/v2", "mend/wake/" + rec.ID.String() + "/v3"}
	if !slices.Equal(tried, want) {
		t.Fatalf("publishes = %q; want %q", tried, want)
	}
	if len(h.woken) != 1 || h.woken[0].BatchID != "2" || h.woken[0].Epoch != le.Term().Epoch {
		t.Fatalf("woken = %+v; want one wake-up for batch 2 at epoch %d", h.woken, le.Term().Epoch)
	}
	for _, id := range tried {
		if len(id) > 255 {
			t.Fatalf("message id %q is over 255 characters", id)
		}
	}
}

func TestLostLeaseStopsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchSpeculating, Version: 1})
	b.record(t, "q", "m", "1")
	le := b.lease(t, "q")
	lost := fakeLease{term: le.Term(), done: make(chan struct{})}
	close(lost.done)
	_, err := newPlanner(t, b, h, nil).Run(ctx, lost)
	if !errors.Is(err, mend.ErrLeaseLost) || mend.Classify(err) != mend.ClassFenced {
		t.Fatalf("Run with a lost lease = %v; want ErrLeaseLost", err)
	}
}

type fakeLease struct {
	term mend.Term
	done chan struct{}
}

func (l fakeLease) Term() mend.Term       { return l.term }
func (l fakeLease) Done() <-chan struct{} { return l.done }

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	for name, cfg := range map[string]planner.Config{
		"no store":          {Batches: h, Waker: h},
		"negative grace":    {Store: &storage.DB{}, Batches: h, Waker: h, Grace: -1},
		"base over the max": {Store: &storage.DB{}, Batches: h, Waker: h, BackoffBase: time.Hour, BackoffMax: time.Second},
	} {
		if _, err := planner.New(cfg); !errors.Is(err, mend.ErrInvalid) {
			t.Errorf("%s: New = %v; want ErrInvalid", name, err)
		}
	}
}

func TestWakeMessageID(t *testing.T) {
	t.Parallel()
	id, err := mend.ParseRecordID("00112233445566778899aabbccddeeff")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		version int64
		want    string
	}{
		{1, "mend/wake/00112233445566778899aabbccddeeff/v1"},
		{42, "mend/wake/00112233445566778899aabbccddeeff/v42"},
		{9223372036854775807, "mend/wake/00112233445566778899aabbccddeeff/v9223372036854775807"},
	} {
		got := planner.WakeMessageID(id, tt.version)
		if got != tt.want {
			t.Errorf("WakeMessageID(v%d) = %q; want %q", tt.version, got, tt.want)
		}
		if len(got) > 255 {
			t.Errorf("WakeMessageID(v%d) is %d characters; the host holds 255", tt.version, len(got))
		}
	}
}

// An operator retry resets the attempt counter; the wake-up after it must
// still get an ID the queue has not seen, or an earlier publish that landed
// without an answer (ambiguous) would swallow it and the queue stays stuck.
func TestOperatorRetryAfterAmbiguousWakeIsNotSwallowed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchSpeculating, Version: 1}, mend.Batch{ID: "2", State: mend.BatchCreated, Version: 1})
	var calls []string
	h.WakeFunc = func(w mend.WakeUp) error {
		calls = append(calls, w.MessageID)
		if len(calls) == 1 {
			// The message lands, but the answer is lost.
			h.mu.Lock()
			h.sent[w.MessageID] = true
			h.mu.Unlock()
			return mend.ErrAmbiguous
		}
		return nil
	}
	rec := b.record(t, "q", "m", "1")
	p := newPlanner(t, b, h, func(c *planner.Config) { c.MaxAttempts = 1 })
	le := b.lease(t, "q")
	if _, err := p.Run(ctx, le); err != nil {
		t.Fatal(err)
	}
	got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
	if got.State != mend.StateParked {
		t.Fatalf("record = %s after an ambiguous wake with MaxAttempts 1; want parked", got.State)
	}
	if _, err := b.store.RecordRetry(ctx, storage.RetryParams{ID: rec.ID, Actor: "operator", OpID: mend.NewOpID()}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(ctx, le); err != nil {
		t.Fatal(err)
	}
	got, _ = b.store.RecordGetByID(ctx, "q", rec.ID)
	if got.State != mend.StateDone {
		t.Fatalf("record = %s after the retry; want done", got.State)
	}
	if len(calls) != 2 || calls[0] == calls[1] {
		t.Fatalf("publishes = %q; want two with different IDs", calls)
	}
	if len(h.woken) != 1 || h.woken[0].MessageID != calls[1] || h.woken[0].BatchID != "2" {
		t.Fatalf("messages created by the planner's own publishes = %+v; want the retry's wake-up for batch 2", h.woken)
	}
}

// A host row found only under another spelling is not "batch not found":
// the record is parked with both spellings, and the host is not touched.
func TestSpellingVariantIsParked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	spelled := &mend.SpellingError{Field: "batch_id", Asked: "q/batch/1", Stored: "Q/Batch/1"}
	for name, mutate := range map[string]func(h *fakeHost){
		"on read": func(h *fakeHost) {
			h.BatchGetFunc = func(string, string) (mend.Batch, error) {
				return mend.Batch{}, fmt.Errorf("host: get batch: %w", spelled)
			}
		},
		"on transition": func(h *fakeHost) {
			h.BatchTransitionFunc = func(string, string, int64, mend.BatchState) (mend.Batch, error) {
				return mend.Batch{}, fmt.Errorf("host: transition: %w", spelled)
			}
		},
		"on finish": func(h *fakeHost) {
			h.BatchFinishFunc = func(string, string, mend.Snapshot) error { return fmt.Errorf("host: finish: %w", spelled) }
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			h := newFakeHost(mend.Batch{ID: "q/batch/1", State: mend.BatchSpeculating, Version: 1}, mend.Batch{ID: "q/batch/2", State: mend.BatchCreated, Version: 1})
			mutate(h)
			rec := b.record(t, "q", "m", "q/batch/1")
			st, err := newPlanner(t, b, h, nil).Run(ctx, b.lease(t, "q"))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
			if got.State != mend.StateParked || !strings.Contains(got.LastError, `"q/batch/1"`) || !strings.Contains(got.LastError, `"Q/Batch/1"`) {
				t.Fatalf("record = %s %q; want parked naming both spellings", got.State, got.LastError)
			}
			if st.Parked != 1 || st.Settled != 0 || len(h.woken) != 0 {
				t.Fatalf("stats %+v, woken %d; want parked, not settled, no wake-up", st, len(h.woken))
			}
		})
	}
}

func TestFinishCarriesTheDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchSpeculating, Version: 1})
	snap := mend.Snapshot{
		Payload: []byte(`{"id":"1","queue":"q"}`), OriginalTopic: "speculate", FailureCount: 7, LastError: "build broke",
		FailedAt: time.UnixMilli(1700000000123).UTC(), Subjects: []mend.Subject{{Kind: "batch", ID: "1"}},
	}
	rec := b.recordWith(t, "q", "m", "1", snap)
	if _, err := newPlanner(t, b, h, nil).Run(ctx, b.lease(t, "q")); err != nil {
		t.Fatal(err)
	}
	if len(h.causes) != 1 {
		t.Fatalf("BatchFinish called %d times; want once", len(h.causes))
	}
	// The cause is the snapshot as the store keeps it (whether the store
	// keeps OriginalTopic is the store's business, not the planner's).
	c, want := h.causes[0], rec.Snapshot
	if c.OriginalTopic != want.OriginalTopic || c.FailureCount != 7 || c.LastError != "build broke" || !c.FailedAt.Equal(snap.FailedAt) ||
		len(c.Subjects) != 1 || c.Subjects[0] != (mend.Subject{Kind: "batch", ID: "1"}) {
		t.Fatalf("cause = %+v; want the record's snapshot %+v", c, want)
	}
}

// seedSpeculating records n dead letters m0…m(n-1) on queue q, each naming
// its own speculating batch b0…b(n-1), beside a live batch, and returns the
// host holding those batches.
func seedSpeculating(t *testing.T, b *bundle, n int) *fakeHost {
	t.Helper()
	var batches []mend.Batch
	for i := range n {
		batches = append(batches, mend.Batch{ID: fmt.Sprintf("b%d", i), State: mend.BatchSpeculating, Version: 1})
	}
	h := newFakeHost(append(batches, mend.Batch{ID: "live", State: mend.BatchCreated, Version: 1})...)
	for i := range n {
		b.record(t, "q", fmt.Sprintf("m%d", i), fmt.Sprintf("b%d", i))
	}
	return h
}

// TestRunLimit: a run takes at most RunLimit due records and says whether
// more may be due, so a reconciler can give other queues a turn; the next
// runs pick up where it stopped, and the last says nothing more is due.
func TestRunLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := seedSpeculating(t, b, 5)
	p := newPlanner(t, b, h, func(c *planner.Config) { c.RunLimit = 2 })
	lease := b.lease(t, "q")
	for i, want := range []struct {
		woken int
		more  bool
	}{{2, true}, {2, true}, {1, false}} {
		st, err := p.Run(ctx, lease)
		if err != nil || st.Woken != want.woken || st.More != want.more {
			t.Fatalf("run %d: stats %+v, %v; want %d woken, more=%v", i+1, st, err, want.woken, want.more)
		}
	}
	if due, err := b.store.RecordsDue(ctx, "q", 10); err != nil || len(due) != 0 {
		t.Fatalf("after the runs %d records are due (%v); want none", len(due), err)
	}
	// Exactly RunLimit records due: the run cannot tell whether more are,
	// says so, and the next run finds none.
	b.record(t, "q", "m5", "b0")
	b.record(t, "q", "m6", "b1")
	if st, err := p.Run(ctx, lease); err != nil || st.More != true {
		t.Fatalf("run over exactly RunLimit records: %+v, %v; want more=true", st, err)
	}
	if st, err := p.Run(ctx, lease); err != nil || st.More || st.Settled != 0 {
		t.Fatalf("the run after: %+v, %v; want nothing done and more=false", st, err)
	}
}

// TestRunFollow: a follow-up run takes up to FollowLimit due records where
// Run takes RunLimit, and a FollowLimit below RunLimit is raised to it.
func TestRunFollow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		follow, wantFollow int
	}{{"follow limit 4", 4, 4}, {"follow limit below the run limit", 1, 2}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			h := seedSpeculating(t, b, 7)
			p := newPlanner(t, b, h, func(c2 *planner.Config) { c2.RunLimit, c2.FollowLimit = 2, c.follow })
			lease := b.lease(t, "q")
			if st, err := p.Run(ctx, lease); err != nil || st.Woken != 2 || !st.More {
				t.Fatalf("first run: %+v, %v; want 2 woken, more", st, err)
			}
			st, err := p.RunFollow(ctx, lease)
			if err != nil || st.Woken != c.wantFollow || !st.More {
				t.Fatalf("follow-up run: %+v, %v; want %d woken, more", st, err, c.wantFollow)
			}
			if due, err := b.store.RecordsDue(ctx, "q", 10); err != nil || len(due) != 5-c.wantFollow {
				t.Fatalf("after the follow-up run %d records are due (%v); want %d", len(due), err, 5-c.wantFollow)
			}
		})
	}
}

// Issue 57: with no run limit (RunLimit < 0) a follow-up run has none
// either: it does not stop at FollowLimitDefault. The case with more due
// records than that default is the one a planted slip (the FollowLimit
// default left in place) passed every other test with.
func TestRunFollowNoLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		follow int
		n      int
	}{
		{"follow limit left at its default", 0, planner.FollowLimitDefault + 1},
		{"follow limit set below the records", 2, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			h := seedSpeculating(t, b, c.n)
			p := newPlanner(t, b, h, func(c2 *planner.Config) { c2.RunLimit, c2.FollowLimit = -1, c.follow })
			st, err := p.RunFollow(ctx, b.lease(t, "q"))
			if err != nil || st.Woken != c.n || st.More {
				t.Fatalf("follow-up run with no run limit: %+v, %v; want all %d woken, no more", st, err, c.n)
			}
		})
	}
}

// Issue 19: a record that waits on a merge in flight says why in the log,
// so an operator sees the reason without opening the record.
func TestWaitingLogsItsReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	h := newFakeHost(mend.Batch{ID: "b1", State: mend.BatchMerging, Version: 4})
	var buf syncBuffer
	p := newPlanner(t, b, h, func(c *planner.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
		c.Grace = time.Hour
	})
	rec := b.record(t, "q", "m1", "b1")
	if _, err := p.Run(ctx, b.lease(t, "q")); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil || got.State != mend.StateWaiting {
		t.Fatalf("record = %s, %v; want waiting on the merging batch", got.State, err)
	}
	var line map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"msg":"waiting"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil || line["reason"] != got.LastError || got.LastError == "" || line["record_id"] != rec.ID.String() {
		t.Fatalf("waiting log line = %v; want the record's reason %q and its ID", line, got.LastError)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

var _ fence.Store = (*storage.DB)(nil)

type bundle struct {
	db    *mysqltest.DB
	store *storage.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := mysqltest.NewDB(t, migrations.Up)
	return &bundle{db: db, store: openStore(t, db.DSN)}
}

func openStore(t *testing.T, dsn string) *storage.DB {
	t.Helper()
	store, err := storage.Open(t.Context(), dsn, storage.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

func newFence(t *testing.T, store fence.Store, cfg fence.Config) *fence.Fence {
	t.Helper()
	f, err := fence.New(store, cfg)
	if err != nil {
		t.Fatalf("fence.New: %v", err)
	}
	return f
}

// release releases le in t.Cleanup, so no keepalive outlives its test.
func release(t *testing.T, le *fence.Lease) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = le.Release(ctx)
	})
}

// hang bounds every wait of these tests: it catches a hang and nothing
// else, so a loaded machine (a 2-core box compiling beside the suite)
// cannot fail a test by being slow. What a test decides on comes from hooks,
// a manual clock or the database clock, never from how long a wait took.
const hang = 2 * time.Minute

// manualClock is a holder's clock (Config.NowFunc) that moves only when the
// test steps it: the trust window ends when the test says so, not when a
// loaded machine gets round to it. The keepalive's timers still fire in real
// time; each firing reads this clock and finds the window open until the
// step.
type manualClock struct{ at atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.at.Store(time.Now().UnixNano())
	return c
}

func (c *manualClock) Now() time.Time       { return time.Unix(0, c.at.Load()) }
func (c *manualClock) Step(d time.Duration) { c.at.Add(int64(d)) }

func acquire(t *testing.T, f *fence.Fence, queue string) *fence.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hang)
	defer cancel()
	le, err := f.Acquire(ctx, queue)
	if err != nil {
		t.Fatalf("acquire %q as %s: %v", queue, f.Holder(), err)
	}
	release(t, le)
	return le
}

// waitClosed waits for ch to close and returns how long that took.
func waitClosed(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(timeout):
		t.Fatalf("%s: not closed after %s", what, timeout)
		return 0
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (b *bundle) record(t *testing.T, queue string) mend.Record {
	t.Helper()
	rec, _, err := b.store.RecordCreate(t.Context(), mend.CreateParams{
		Source: mend.SourceID{Queue: queue, Topic: "speculate_dlq", Partition: queue, MessageID: "m"},
		Target: mend.Target{BatchID: "b1", Desired: mend.OutcomeFailed},
		OpID:   mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// write appends one event to the record under term, as the planner would.
func (b *bundle) write(ctx context.Context, store *storage.DB, rec mend.RecordID, queue string, term *mend.Term) error {
	cur, err := b.store.RecordGetByID(ctx, queue, rec)
	if err != nil {
		return err
	}
	p := storage.AppendTo(cur)
	p.Kind, p.State, p.Actor, p.OpID, p.Fence = mend.EventAttemptFailed, mend.StatePending, "test", mend.NewOpID(), term
	if term != nil {
		p.Actor = term.Holder
	}
	_, err = store.RecordAppend(ctx, p)
	return err
}

func epochsOf(t *testing.T, store *storage.DB, queue string, id mend.RecordID) []int64 {
	t.Helper()
	evs, err := store.RecordHistory(t.Context(), queue, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range evs {
		out = append(out, e.Epoch)
	}
	return out
}

// flakyStore fails renews with a transient error while failing is set, as
// an unreachable database would.
type flakyStore struct {
	fence.Store
	failing atomic.Bool
}

func (s *flakyStore) LeaseRenew(ctx context.Context, term mend.Term, ttl time.Duration) error {
	if s.failing.Load() {
		return fmt.Errorf("%w: injected", mend.ErrUnavailable)
	}
	return s.Store.LeaseRenew(ctx, term, ttl)
}

// cancelOnHeld calls cancel once an acquire has been refused because the
// queue is held.
type cancelOnHeld struct {
	fence.Store
	cancel func()
}

func (s *cancelOnHeld) LeaseAcquire(ctx context.Context, queue, holder string, ttl time.Duration) (mend.Term, error) {
	term, err := s.Store.LeaseAcquire(ctx, queue, holder, ttl)
	if errors.Is(err, mend.ErrLeaseHeld) {
		s.cancel()
	}
	return term, err
}

// pause returns a beforeRenew hook that blocks every renew until the
// returned resume is called: the holder's process stands still.
func pause() (hook func(mend.Term), paused <-chan struct{}, resume func()) {
	p, r := make(chan struct{}), make(chan struct{})
	var pOnce, rOnce sync.Once
	return func(mend.Term) {
			pOnce.Do(func() { close(p) })
			<-r
		}, p, func() {
			rOnce.Do(func() { close(r) })
		}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	store := (*storage.DB)(nil)
	for _, tt := range []struct {
		name string
		cfg  fence.Config
		ok   bool
	}{
		{"zero value", fence.Config{}, true},
		{"ttl only", fence.Config{TTL: time.Second}, true},
		{"negative ttl", fence.Config{TTL: -time.Second}, false},
		{"margin as long as the ttl", fence.Config{TTL: time.Second, SafetyMargin: time.Second}, false},
		{"negative margin", fence.Config{SafetyMargin: -time.Second}, false},
		{"renew slower than the trust window", fence.Config{TTL: time.Second, SafetyMargin: 200 * time.Millisecond, RenewEvery: 800 * time.Millisecond}, false},
		{"negative retry", fence.Config{RetryEvery: -time.Second}, false},
		{"holder too long", fence.Config{Holder: string(make([]byte, 256))}, false},
		// Before, this started a daemon that logged "invalid holder" on
		// every acquire and never repaired.
		{"holder not UTF-8", fence.Config{Holder: "h\xff"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := fence.New(store, tt.cfg)
			if tt.ok && err != nil || !tt.ok && !errors.Is(err, mend.ErrInvalid) {
				t.Fatalf("New(%+v) = %v; want ok %v or ErrInvalid", tt.cfg, err, tt.ok)
			}
		})
	}
	if _, err := fence.New(nil, fence.Config{}); !errors.Is(err, mend.ErrInvalid) {
		t.Fatalf("New(nil store) = %v; want ErrInvalid", err)
	}
	f1, _ := fence.New(store, fence.Config{})
	f2, _ := fence.New(store, fence.Config{})
	if f1.Holder() == "" || f1.Holder() == f2.Holder() {
		t.Fatalf("default holders %q and %q; want distinct names", f1.Holder(), f2.Holder())
	}
}

func TestAcquire(t *testing.T) {
	t.Parallel()

	t.Run("try reports who holds it and for how long by the database clock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := newFence(t, b.store, fence.Config{Holder: "a", TTL: time.Minute})
		le, err := a.TryAcquire(t.Context(), "q")
		if err != nil {
			t.Fatal(err)
		}
		release(t, le)
		if want := (mend.Term{Queue: "q", Holder: "a", Epoch: 1}); le.Term() != want || le.Err() != nil || isClosed(le.Done()) {
			t.Fatalf("lease %v (err %v); want %v held", le.Term(), le.Err(), want)
		}
		other := newFence(t, b.store, fence.Config{Holder: "b", TTL: time.Minute})
		_, err = other.TryAcquire(t.Context(), "q")
		var held *mend.HeldError
		if !errors.As(err, &held) || held.Holder != "a" || held.Epoch != 1 || held.Remaining < 50*time.Second || held.Remaining > time.Minute {
			t.Fatalf("TryAcquire of a held queue = %v; want a HeldError naming a, epoch 1, about a minute left", err)
		}
	})

	t.Run("blocking acquire gets the next epoch when the holder releases", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := newFence(t, b.store, fence.Config{Holder: "a", TTL: time.Minute})
		bf := newFence(t, b.store, fence.Config{Holder: "b", TTL: time.Minute, RetryEvery: 10 * time.Millisecond})
		la := acquire(t, a, "q")
		got := make(chan *fence.Lease, 1)
		go func() {
			le, err := bf.Acquire(t.Context(), "q")
			if err != nil {
				t.Errorf("blocking acquire: %v", err)
			}
			got <- le
		}()
		if err := la.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		var lb *fence.Lease
		select {
		case lb = <-got:
		case <-time.After(hang):
			t.Fatalf("blocking acquire did not return %s after the release", hang)
		}
		if lb == nil {
			return
		}
		release(t, lb)
		if lb.Term().Epoch != 2 || !errors.Is(la.Err(), fence.ErrReleased) || !isClosed(la.Done()) {
			t.Fatalf("b got %v, a's err %v; want epoch 2 and a released", lb.Term(), la.Err())
		}
		// Release is idempotent.
		if err := la.Release(t.Context()); err != nil {
			t.Fatalf("second release = %v", err)
		}
	})

	t.Run("blocking acquire gives up when its context ends", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		acquire(t, newFence(t, b.store, fence.Config{Holder: "a", TTL: time.Minute}), "q")
		// The context ends right after the first refusal, with a deadline's
		// cause (not after 100 ms, which a loaded machine could spend on
		// the first attempt alone).
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		bf := newFence(t, &cancelOnHeld{Store: b.store, cancel: func() { cancel(context.DeadlineExceeded) }}, fence.Config{Holder: "b", RetryEvery: 10 * time.Millisecond})
		_, err := bf.Acquire(ctx, "q")
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, mend.ErrLeaseHeld) {
			t.Fatalf("acquire with a short deadline = %v; want the deadline and the held error", err)
		}
	})

	t.Run("a bad queue is refused without waiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		f := newFence(t, b.store, fence.Config{})
		if _, err := f.Acquire(t.Context(), ""); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("Acquire(\"\") = %v; want ErrInvalid", err)
		}
	})
}

// TestZombie pauses holder A past its TTL. B takes over and writes; A, not
// knowing, writes too and is fenced. Only the fence stops it: the same
// write unfenced lands.
func TestZombie(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.record(t, "q")
	hook, paused, resume := pause()
	var lostA atomic.Int32
	// A's clock stands still until the test steps it: A's first renew
	// pauses however late the machine runs it, never finding its window
	// already shut.
	clockA := newManualClock()
	a := newFence(t, b.store, fence.WithBeforeRenew(fence.Config{Holder: "a", TTL: time.Second, RenewEvery: 50 * time.Millisecond,
		NowFunc: clockA.Now, Hooks: fence.Hooks{OnLost: func(mend.Term, error) { lostA.Add(1) }}}, hook))
	bf := newFence(t, b.store, fence.Config{Holder: "b", TTL: time.Minute, RetryEvery: 20 * time.Millisecond})

	la := acquire(t, a, "q")
	t.Cleanup(resume) // before the release cleanup, which waits for the keepalive
	termA := la.Term()
	if err := b.write(t.Context(), b.store, rec.ID, "q", &termA); err != nil {
		t.Fatalf("A's write under its lease: %v", err)
	}
	waitClosed(t, paused, hang, "A's keepalive pausing") // it stands still from here
	lb := acquire(t, bf, "q")
	termB := lb.Term()
	if termB.Epoch != termA.Epoch+1 {
		t.Fatalf("B got epoch %d; want %d", termB.Epoch, termA.Epoch+1)
	}
	if err := b.write(t.Context(), b.store, rec.ID, "q", &termB); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if isClosed(la.Done()) {
		t.Fatal("A noticed the loss while paused; the test would not show a zombie")
	}
	before, _ := b.store.RecordGetByID(t.Context(), "q", rec.ID)
	err := b.write(t.Context(), b.store, rec.ID, "q", &termA)
	if !errors.Is(err, mend.ErrFenced) || mend.IsRetryable(err) {
		t.Fatalf("the zombie's write = %v; want ErrFenced, not retryable", err)
	}
	after, _ := b.store.RecordGetByID(t.Context(), "q", rec.ID)
	if after.Version != before.Version || after.Epoch != termB.Epoch {
		t.Fatalf("the fenced write changed the record: %+v -> %+v", before, after)
	}
	if got, want := epochsOf(t, b.store, "q", rec.ID), []int64{0, termA.Epoch, termB.Epoch}; !slices.Equal(got, want) {
		t.Fatalf("event epochs = %v; want %v", got, want)
	}

	// A wakes up: its trust window is long gone, so Done closes at once.
	clockA.Step(time.Hour)
	resume()
	waitClosed(t, la.Done(), hang, "A's Done after resuming")
	// OnLost runs just after Done closes, on the keepalive's goroutine: poll for it.
	for deadline := time.Now().Add(hang); lostA.Load() == 0 && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	if !errors.Is(la.Err(), mend.ErrLeaseLost) || lostA.Load() != 1 {
		t.Fatalf("A's Err = %v, OnLost ran %d times; want ErrLeaseLost once", la.Err(), lostA.Load())
	}
	// Negative control: without the fence the zombie's write would land.
	if err := b.write(t.Context(), b.store, rec.ID, "q", nil); err != nil {
		t.Fatalf("an unfenced write = %v; want it to land", err)
	}
}

// TestOldTermChangesNothing shows that a holder whose term was ended and
// replaced cannot renew or release the new term.
func TestOldTermChangesNothing(t *testing.T) {
	t.Parallel()

	t.Run("a refused renew closes Done at once and leaves the new term", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var renews atomic.Int32
		a := newFence(t, b.store, fence.Config{Holder: "a", TTL: time.Minute, RenewEvery: 20 * time.Millisecond,
			Hooks: fence.Hooks{OnRenew: func(_ mend.Term, _ time.Duration, err error) {
				if err == nil {
					renews.Add(1)
				}
			}}})
		la := acquire(t, a, "q")
		// An operator ends A's term and B takes the queue, well inside A's
		// trust window; A learns it from its next renew.
		if err := b.store.LeaseRelease(t.Context(), la.Term()); err != nil {
			t.Fatal(err)
		}
		lb := acquire(t, newFence(t, b.store, fence.Config{Holder: "b", TTL: time.Minute}), "q")
		before, _ := b.store.LeaseGet(t.Context(), "q")
		waitClosed(t, la.Done(), hang, "A's Done after its term was replaced")
		if !errors.Is(la.Err(), mend.ErrLeaseLost) {
			t.Fatalf("A's Err = %v; want ErrLeaseLost", la.Err())
		}
		if err := la.Release(t.Context()); err != nil {
			t.Fatalf("release after loss = %v; want nil", err)
		}
		after, _ := b.store.LeaseGet(t.Context(), "q")
		if after.Term != lb.Term() || !after.ExpiresAt.Equal(before.ExpiresAt) || after.Transitions != before.Transitions {
			t.Fatalf("B's term changed: %+v -> %+v", before, after)
		}
	})

	t.Run("releasing a term that ran out leaves the next one", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		hook, paused, resume := pause()
		// A's clock moves only when stepped, so its keepalive reaches the
		// pause however slow the machine; the database ends A's term by
		// its own clock after the 300 ms TTL.
		clockA := newManualClock()
		a := newFence(t, b.store, fence.WithBeforeRenew(fence.Config{Holder: "a", TTL: 300 * time.Millisecond, RenewEvery: 20 * time.Millisecond, NowFunc: clockA.Now}, hook))
		la := acquire(t, a, "q")
		t.Cleanup(resume)
		waitClosed(t, paused, hang, "the keepalive pausing")
		lb := acquire(t, newFence(t, b.store, fence.Config{Holder: "b", TTL: time.Minute, RetryEvery: 10 * time.Millisecond}), "q")
		before, _ := b.store.LeaseGet(t.Context(), "q")
		// A wakes with its window over (not refused by a renew), so its
		// Release goes to the database with the old term.
		clockA.Step(time.Hour)
		resume()
		if err := la.Release(t.Context()); err != nil {
			t.Fatalf("release by the old term = %v; want nil", err)
		}
		after, _ := b.store.LeaseGet(t.Context(), "q")
		if after.Term != lb.Term() || !after.ExpiresAt.Equal(before.ExpiresAt) || after.Transitions != before.Transitions {
			t.Fatalf("B's term changed: %+v -> %+v", before, after)
		}
	})
}

// TestWriterLoop runs a loop that writes under a lease as fast as it can
// and shows it cannot write once the lease is lost.
func TestWriterLoop(t *testing.T) {
	t.Parallel()

	t.Run("a loop that watches Done stops before the term ends in the database", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.record(t, "q")
		flaky := &flakyStore{Store: b.store}
		// A's trust window ends when the test steps A's clock past it,
		// after a few writes: how many writes a loaded machine manages
		// before a real clock ran out is no part of the test. The database
		// holds the term for a minute by its own clock, so it is surely
		// live when Done closes.
		const ttl, margin = time.Minute, time.Second
		clockA := newManualClock()
		a := newFence(t, flaky, fence.Config{Holder: "a", TTL: ttl, SafetyMargin: margin, RenewEvery: 50 * time.Millisecond, NowFunc: clockA.Now})
		la := acquire(t, a, "q")
		term := la.Term()
		writes := 0
		flaky.failing.Store(true) // the database stops answering A's renews
		for la.Err() == nil {
			if err := b.write(t.Context(), b.store, rec.ID, "q", &term); err != nil {
				t.Fatalf("write %d under a trusted lease: %v", writes+1, err)
			}
			if writes++; writes == 3 {
				clockA.Step(ttl - margin)
			}
		}
		if writes == 0 || !errors.Is(la.Err(), mend.ErrLeaseLost) {
			t.Fatalf("%d writes, Err %v; want some writes, then ErrLeaseLost", writes, la.Err())
		}
		// Done closed while the database still held the term: every write
		// landed inside it and nobody else could be in yet.
		st, err := b.store.LeaseGet(t.Context(), "q")
		if err != nil || st.Term != term || !st.Live() {
			t.Fatalf("lease after A stopped = %+v, %v; want A's term still live", st, err)
		}
		evs, _ := b.store.RecordHistory(t.Context(), "q", rec.ID)
		if last := evs[len(evs)-1]; last.Epoch != term.Epoch || !last.CreatedAt.Before(st.ExpiresAt) {
			t.Fatalf("last write %+v; want epoch %d before %v", last, term.Epoch, st.ExpiresAt)
		}
	})

	t.Run("a loop that ignores Done is fenced once the term ends", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.record(t, "q")
		hook, paused, resume := pause()
		clockA := newManualClock() // moves only when stepped: the pause is reached however slow the machine
		// A minute: the term ends when the test ends it, once the loop has
		// written (a 500 ms term ran out before a loaded machine's first write).
		a := newFence(t, b.store, fence.WithBeforeRenew(fence.Config{Holder: "a", TTL: time.Minute, RenewEvery: 20 * time.Millisecond, NowFunc: clockA.Now}, hook))
		la := acquire(t, a, "q")
		t.Cleanup(resume)
		term := la.Term()
		waitClosed(t, paused, hang, "the keepalive pausing")
		loopErr := make(chan error, 1)
		var writes atomic.Int64
		wrote := make(chan struct{})
		go func() {
			for {
				if err := b.write(context.Background(), b.store, rec.ID, "q", &term); err != nil {
					loopErr <- err
					return
				}
				if writes.Add(1) == 1 {
					close(wrote)
				}
			}
		}()
		select {
		case <-wrote:
		case err := <-loopErr:
			t.Fatalf("the loop's first write under a live term = %v", err)
		case <-time.After(hang):
			t.Fatal("the loop never wrote")
		}
		// The term ends (as an operator ending it would; the database's
		// clock would end it the same way, later) and B takes the queue.
		if err := b.store.LeaseRelease(t.Context(), term); err != nil {
			t.Fatal(err)
		}
		lb := acquire(t, newFence(t, b.store, fence.Config{Holder: "b", TTL: time.Minute, RetryEvery: 10 * time.Millisecond}), "q")
		var err error
		select {
		case err = <-loopErr:
		case <-time.After(hang):
			t.Fatal("the loop ignoring Done was never fenced")
		}
		if !errors.Is(err, mend.ErrFenced) || writes.Load() == 0 {
			t.Fatalf("loop ended with %v after %d writes; want ErrFenced after some", err, writes.Load())
		}
		clockA.Step(time.Hour)
		resume()
		waitClosed(t, la.Done(), hang, "A's Done after resuming")
		termB := lb.Term()
		if err := b.write(t.Context(), b.store, rec.ID, "q", &termB); err != nil {
			t.Fatal(err)
		}
		evs, _ := b.store.RecordHistory(t.Context(), "q", rec.ID)
		var acquiredB time.Time
		if err := b.db.SQL(t).QueryRow("SELECT acquired_at FROM mend_lease_history WHERE queue = 'q' AND epoch = ?", termB.Epoch).Scan(&acquiredB); err != nil {
			t.Fatal(err)
		}
		for i, e := range evs[1 : len(evs)-1] {
			if e.Epoch != term.Epoch || !e.CreatedAt.Before(acquiredB) {
				t.Fatalf("event %d = epoch %d at %v; want A's epoch %d before B's term began at %v", i+2, e.Epoch, e.CreatedAt, term.Epoch, acquiredB)
			}
		}
		if last := evs[len(evs)-1]; last.Epoch != termB.Epoch || int64(len(evs)) != writes.Load()+2 {
			t.Fatalf("%d events, last at epoch %d; want A's %d writes then B's", len(evs), last.Epoch, writes.Load())
		}
	})
}

// TestContention runs 8 contenders for one queue over many rounds. Each
// round's holder writes under its term and releases. History must show
// every epoch once, in order, with terms that never overlap by the
// database clock, and the event log must follow the epochs.
func TestContention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.record(t, "q")
	const contenders, rounds = 8, 48
	var taken atomic.Int64
	var mu sync.Mutex
	var granted []int64
	var wg sync.WaitGroup
	for i := range contenders {
		store := openStore(t, b.db.DSN)
		// Each holder releases its term, so the TTL never decides who goes
		// next: a minute keeps a holder the machine stalls for seconds
		// from being expired mid-round (its writes then fenced).
		f := newFence(t, store, fence.Config{Holder: fmt.Sprintf("c%d", i), TTL: time.Minute, RetryEvery: 5 * time.Millisecond,
			Hooks: fence.Hooks{OnAcquired: func(term mend.Term) {
				mu.Lock()
				granted = append(granted, term.Epoch)
				mu.Unlock()
			}}})
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 2*hang) // 48 rounds on a loaded machine; only a hang reaches it
			defer cancel()
			for taken.Load() < rounds {
				le, err := f.Acquire(ctx, "q")
				if err != nil {
					t.Errorf("%s: acquire: %v", f.Holder(), err)
					return
				}
				taken.Add(1)
				term := le.Term()
				for range 2 {
					if err := b.write(ctx, store, rec.ID, "q", &term); err != nil {
						t.Errorf("%s: write under %v: %v", f.Holder(), term, err)
					}
				}
				if err := le.Release(ctx); err != nil {
					t.Errorf("%s: release: %v", f.Holder(), err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	rows, err := b.db.SQL(t).Query("SELECT epoch, holder, acquired_at, ended_at, ended_how FROM mend_lease_history WHERE queue = 'q' ORDER BY acquired_at, epoch")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type term struct {
		epoch        int64
		holder       string
		from, to     time.Time
		how          string
		eventsInTerm int
	}
	var hist []term
	for rows.Next() {
		var h term
		var to sql.NullTime
		var how sql.NullString
		if err := rows.Scan(&h.epoch, &h.holder, &h.from, &to, &how); err != nil {
			t.Fatal(err)
		}
		h.to, h.how = to.Time, how.String
		hist = append(hist, h)
	}
	slices.Sort(granted)
	if len(hist) != len(granted) || len(hist) < rounds {
		t.Fatalf("%d terms in history, %d granted; want the same, at least %d", len(hist), len(granted), rounds)
	}
	for i, h := range hist {
		if h.epoch != int64(i+1) || granted[i] != h.epoch {
			t.Fatalf("term %d has epoch %d (granted %d); want %d: epochs must rise by one", i, h.epoch, granted[i], i+1)
		}
		if h.how != "released" || h.to.Before(h.from) { // ended_how as mend_lease_history stores it
			t.Fatalf("term %+v; want released after it began", h)
		}
		if i > 0 && h.from.Before(hist[i-1].to) {
			t.Fatalf("term %d began at %v, before term %d ended at %v", h.epoch, h.from, hist[i-1].epoch, hist[i-1].to)
		}
	}
	evs, _ := b.store.RecordHistory(t.Context(), "q", rec.ID)
	for _, e := range evs[1:] {
		h := &hist[e.Epoch-1]
		if e.Actor != h.holder || e.CreatedAt.Before(h.from) || e.CreatedAt.After(h.to) {
			t.Fatalf("event %d by %s at epoch %d at %v lies outside its term %+v", e.Seq, e.Actor, e.Epoch, e.CreatedAt, *h)
		}
		h.eventsInTerm++
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Epoch < evs[i-1].Epoch {
			t.Fatalf("event %d at epoch %d follows one at epoch %d", evs[i].Seq, evs[i].Epoch, evs[i-1].Epoch)
		}
	}
	for _, h := range hist {
		if h.eventsInTerm != 2 {
			t.Fatalf("term %d has %d events; want its 2 writes", h.epoch, h.eventsInTerm)
		}
	}
}

// fakeClock is the holder's clock as a drifting, stepping machine clock
// would read it: real elapsed time times rate, plus a step that can be
// changed at any moment. Its readings carry no monotonic part, so every Sub
// sees the drift and the steps (time.Now().Add(skew) would not: the
// monotonic reading cancels the skew).
type fakeClock struct {
	origin time.Time
	rate   float64
	step   atomic.Int64 // nanoseconds added to every reading
}

func newFakeClock(rate float64) *fakeClock { return &fakeClock{origin: time.Now(), rate: rate} }

func (c *fakeClock) Now() time.Time {
	elapsed := time.Duration(float64(time.Since(c.origin)) * c.rate)
	return c.origin.Round(0).Add(elapsed + time.Duration(c.step.Load()))
}

// TestClockSkew: the trust window is measured on the holder's clock, which
// may run slow or step. Renews stop at once, so the acquire's window alone
// decides when Done closes. A clock slower than the safety margin covers,
// or one stepped back, keeps trusting after the database ended the term:
// the margin is what keeps a trusting holder's writes inside the term, and
// beyond it only the fence does.
func TestClockSkew(t *testing.T) {
	t.Parallel()
	// The margin covers a clock up to 40% slow. These cases measure the
	// trust window itself against the database's clock, so they cannot
	// run on a manual clock; the sizes leave every case that must close
	// Done inside the term at least 3 s to spare, so only a stall of the
	// keepalive or of this test's next statement that long could fail it.
	const ttl, margin = 10 * time.Second, 4 * time.Second
	for _, tt := range []struct {
		name string
		rate float64
		step time.Duration // applied right after the acquire
		// insideTerm: Done closes while the database still holds the term.
		insideTerm bool
	}{
		{"true clock", 1, 0, true},
		{"clock 10% slow: the margin absorbs it", 0.9, 0, true},
		{"clock 10% fast: Done closes early", 1.1, 0, true},
		{"stepped an hour forward: Done closes at once", 1, time.Hour, true},
		{"clock 50% slow: beyond the margin (negative control)", 0.5, 0, false},
		{"stepped an hour back: beyond the margin (negative control)", 1, -time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rec := b.record(t, "q")
			clock := newFakeClock(tt.rate)
			flaky := &flakyStore{Store: b.store}
			flaky.failing.Store(true) // no renew ever succeeds
			var lost atomic.Int32
			a := newFence(t, flaky, fence.Config{Holder: "a", TTL: ttl, SafetyMargin: margin, RenewEvery: 100 * time.Millisecond,
				NowFunc: clock.Now, Hooks: fence.Hooks{OnLost: func(mend.Term, error) { lost.Add(1) }}})
			la := acquire(t, a, "q")
			clock.step.Store(int64(tt.step))
			term := la.Term()
			if tt.insideTerm {
				waitClosed(t, la.Done(), hang, "Done")
				st, err := b.store.LeaseGet(t.Context(), "q")
				if err != nil || !st.Live() {
					t.Fatalf("when Done closed the database had ended the term (%+v, %v); the holder trusted it too long", st, err)
				}
				// A write made just before Done closed lands inside the term.
				if err := b.write(t.Context(), b.store, rec.ID, "q", &term); err != nil {
					t.Fatalf("write right after Done: %v; want it inside the term", err)
				}
				return
			}
			// The database ends the term while the holder still trusts it.
			deadline := time.Now().Add(hang)
			for {
				st, err := b.store.LeaseGet(t.Context(), "q")
				if err != nil {
					t.Fatal(err)
				}
				if !st.Live() {
					break
				}
				if isClosed(la.Done()) {
					t.Fatal("Done closed inside the term; the control no longer shows a clock beyond the margin")
				}
				if time.Now().After(deadline) {
					t.Fatal("the term never ended")
				}
				waitClosed(t, timerChan(10*time.Millisecond), hang, "tick")
			}
			if isClosed(la.Done()) {
				t.Skip("Done closed in the same instant the term ended; nothing to show this run")
			}
			// Only the fence stops the trusting holder now.
			if err := b.write(t.Context(), b.store, rec.ID, "q", &term); !errors.Is(err, mend.ErrFenced) {
				t.Fatalf("write by a holder trusting an ended term = %v; want ErrFenced", err)
			}
			// Its release finds the term over: that loss is reported.
			if err := la.Release(t.Context()); err != nil {
				t.Fatalf("release = %v; want nil", err)
			}
			if !errors.Is(la.Err(), mend.ErrLeaseLost) || lost.Load() != 1 {
				t.Fatalf("after release of an ended term: Err %v, OnLost ran %d times; want ErrLeaseLost once", la.Err(), lost.Load())
			}
		})
	}
}

// timerChan returns a channel that closes after d.
func timerChan(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// slowReplyStore renews in the database at once but holds the first renew's
// reply back for delay; later renews fail, as if the database went away.
type slowReplyStore struct {
	fence.Store
	delay   time.Duration
	renews  atomic.Int32
	renewed chan struct{} // closed when the first renew has committed
}

func (s *slowReplyStore) LeaseRenew(ctx context.Context, term mend.Term, ttl time.Duration) error {
	if s.renews.Add(1) > 1 {
		return fmt.Errorf("%w: injected", mend.ErrUnavailable)
	}
	err := s.Store.LeaseRenew(ctx, term, ttl)
	close(s.renewed)
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
	return err
}

// TestTrustWindowStartsAtTheSend: a renew whose reply comes back late moves
// the trust window from when it was sent, not from when the reply came:
// the database's expiry counts from its NOW(6), which is no later than the
// reply. A reply delayed past the safety margin shows the difference. The
// sizes leave Done 3 s inside the term when measured right (and 3 s past it
// when measured from the reply), so only a stall that long could mislead it.
func TestTrustWindowStartsAtTheSend(t *testing.T) {
	t.Parallel()
	const ttl, margin = 10 * time.Second, 3 * time.Second
	b := setup(t)
	store := &slowReplyStore{Store: b.store, delay: 2 * margin, renewed: make(chan struct{})}
	a := newFence(t, store, fence.Config{Holder: "a", TTL: ttl, SafetyMargin: margin, RenewEvery: 100 * time.Millisecond})
	la := acquire(t, a, "q")
	waitClosed(t, store.renewed, hang, "the first renew")
	waitClosed(t, la.Done(), hang, "Done")
	if st, err := b.store.LeaseGet(t.Context(), "q"); err != nil || !st.Live() {
		t.Fatalf("when Done closed the database had ended the term (%+v, %v); the window was measured from the reply", st, err)
	}
}

// TestServerStopsAnswering shows Done closes within the trust window when
// the database stops answering, and that once it is back the old holder's
// writes are fenced.
func TestServerStopsAnswering(t *testing.T) {
	t.Parallel()
	// Done must close before the database's term ends; the sizes leave
	// 2 s between the two, so only a stall that long could mislead it.
	const ttl, margin = 6 * time.Second, 2 * time.Second

	run := func(t *testing.T, b *bundle, storeA *storage.DB, cut, heal func()) {
		rec := b.record(t, "q")
		renewed := make(chan struct{})
		var once sync.Once
		a := newFence(t, storeA, fence.Config{Holder: "a", TTL: ttl, SafetyMargin: margin, RenewEvery: 100 * time.Millisecond,
			Hooks: fence.Hooks{OnRenew: func(_ mend.Term, _ time.Duration, err error) {
				if err == nil {
					once.Do(func() { close(renewed) })
				}
			}}})
		la := acquire(t, a, "q")
		termA := la.Term()
		if err := b.write(t.Context(), storeA, rec.ID, "q", &termA); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, renewed, hang, "the first renew")
		cut()
		t.Cleanup(heal)
		// The last good renew began before the cut, so the trust window
		// ends at most TTL - margin after it: before the term the database
		// holds ends, by the database's clock (the same machine's).
		waitClosed(t, la.Done(), hang, "Done with the server gone")
		closedBy := time.Now()
		if !errors.Is(la.Err(), mend.ErrLeaseLost) {
			t.Fatalf("Err = %v; want ErrLeaseLost", la.Err())
		}
		heal()
		if st, err := b.store.LeaseGet(t.Context(), "q"); err != nil || st.Term != termA || !closedBy.Before(st.ExpiresAt) {
			t.Fatalf("Done closed by %v; the database's term %+v (%v) ended first", closedBy, st, err)
		}
		lb := acquire(t, newFence(t, b.store, fence.Config{Holder: "b", TTL: time.Minute, RetryEvery: 20 * time.Millisecond}), "q")
		termB := lb.Term()
		if err := b.write(t.Context(), b.store, rec.ID, "q", &termB); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), hang)
		defer cancel()
		if err := b.write(ctx, storeA, rec.ID, "q", &termA); !errors.Is(err, mend.ErrFenced) {
			t.Fatalf("the old holder's write after the server came back = %v; want ErrFenced", err)
		}
		if got, want := epochsOf(t, b.store, "q", rec.ID), []int64{0, termA.Epoch, termB.Epoch}; !slices.Equal(got, want) {
			t.Fatalf("event epochs = %v; want %v", got, want)
		}
	}

	t.Run("server paused", func(t *testing.T) {
		t.Parallel()
		srv := mysqltest.StartPrivate(t)
		db := mysqltest.NewDBOn(t, srv, migrations.Up)
		b := &bundle{db: db, store: openStore(t, db.DSN)}
		storeA := openStore(t, db.DSN)
		var paused atomic.Bool
		run(t, b, storeA, func() {
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			paused.Store(true)
		}, func() {
			if paused.CompareAndSwap(true, false) {
				if err := srv.Resume(); err != nil {
					t.Error(err)
				}
			}
		})
	})

	t.Run("connection cut", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy := mysqltest.NewProxy(t, b.db.Server.Addr())
		storeA := openStore(t, b.db.DSNVia(proxy.Addr()))
		run(t, b, storeA, proxy.Cut, proxy.Heal)
	})
}

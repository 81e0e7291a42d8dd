package itest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// This file cuts the current planner off the database (toxiproxy) and,
// separately, freezes the server (SIGSTOP, or docker pause) past the lease
// TTL, while a second planner is ready. The lease passes to the second; the first —
// a planner that never noticed it lost its lease — has every late write
// refused with ErrFenced; and the event log shows disjoint, increasing
// epochs per queue.

const partQueue = "pq"

// partTTL is the lease TTL of both planners.
const partTTL = time.Second

// zombieLease is a lease whose holder never learns it was lost (a process
// paused or cut off that resumes believing it still holds its term): only
// the database's fence can stop its writes.
type zombieLease struct{ term mend.Term }

func (z zombieLease) Term() mend.Term       { return z.term }
func (z zombieLease) Done() <-chan struct{} { return nil }

// partEnv is one queue with records to repair, a first planner A routed as
// the scenario needs, and a second reconciler B ready to take over.
type partEnv struct {
	db      *mysqltest.DB
	store   *storage.DB // direct, for checks
	host    *host.DB
	sq      sqtest.World
	storeA  *storage.DB
	records []mend.SourceID

	leaseA  *fence.Lease
	lostA   chan struct{}
	blockA  chan struct{} // A's planner waits here after publishing a wake-up
	inWakeA chan struct{} // closed when A first reaches that point
	runA    chan error    // A's planner result
	fencedA atomic.Int64

	recB *reconcile.Reconciler
}

func newPartEnv(t *testing.T, db *mysqltest.DB, dsnA string, records int) *partEnv {
	t.Helper()
	quietDriver()
	ctx := t.Context()
	e := &partEnv{db: db, lostA: make(chan struct{}), blockA: make(chan struct{}), inWakeA: make(chan struct{}), runA: make(chan error, 1)}
	e.store = openRealStore(t)(db.DSN).(realStore).db
	e.storeA = openRealStore(t)(dsnA).(realStore).db
	var err error
	quiet := host.Options{Logger: slog.New(slog.DiscardHandler)}
	if e.host, err = host.Open(ctx, db.DSN, db.DSN, quiet); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.host.Close() })
	e.sq = sqtest.World{App: db.SQL(t), Queue: db.SQL(t)}
	// A's application and queue connections both go through the route
	// the scenario cuts or freezes.
	hostA, err := host.Open(ctx, dsnA, dsnA, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostA.Close() })

	// The live batch sorts after every record's batch by bytes.
	if err := e.sq.SeedBatch(ctx, partQueue, partQueue+"/batch/live", string(mend.BatchCreated), partQueue+"/live"); err != nil {
		t.Fatal(err)
	}
	for i := range records {
		batch := fmt.Sprintf("%s/batch/%04d", partQueue, i)
		if err := e.sq.SeedBatch(ctx, partQueue, batch, string(mend.BatchSpeculating), batch+"-r"); err != nil {
			t.Fatal(err)
		}
		src := mend.SourceID{Queue: partQueue, Topic: "speculate_dlq", Partition: partQueue, MessageID: batch}
		if _, _, err := e.store.RecordCreate(ctx, mend.CreateParams{Source: src, OpID: mend.NewOpID(), Actor: "intake",
			Target: mend.Target{BatchID: batch, Desired: mend.OutcomeFailed}}); err != nil {
			t.Fatal(err)
		}
		e.records = append(e.records, src)
	}

	// A: a fence whose loss is observed, and a planner that ignores it.
	var lostOnce sync.Once
	fA, err := fence.New(e.storeA, fence.Config{Holder: "planner-A", TTL: partTTL,
		Hooks: fence.Hooks{OnLost: func(mend.Term, error) { lostOnce.Do(func() { close(e.lostA) }) }}})
	if err != nil {
		t.Fatal(err)
	}
	var wakeOnce sync.Once
	pA, err := planner.New(planner.Config{Store: e.storeA, Batches: hostA, Waker: hostA, Actor: "planner/A",
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Hooks: planner.Hooks{
			OnWake: func(string, error) {
				wakeOnce.Do(func() { close(e.inWakeA) })
				<-e.blockA
			},
			OnFenced: func(string) { e.fencedA.Add(1) },
		}})
	if err != nil {
		t.Fatal(err)
	}
	if e.leaseA, err = fA.TryAcquire(ctx, partQueue); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.leaseA.Release(context.Background()) })
	go func() {
		_, err := pA.Run(context.WithoutCancel(ctx), zombieLease{e.leaseA.Term()})
		e.runA <- err
	}()

	// B: a reconciler on a healthy connection, polling often.
	fB, err := fence.New(e.store, fence.Config{Holder: "planner-B", TTL: partTTL, RetryEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pB, err := planner.New(planner.Config{Store: e.store, Batches: e.host, Waker: e.host, Actor: "planner/B",
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if e.recB, err = reconcile.New(reconcile.Config{Store: e.store, Fence: fB, Planner: pB, Interval: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return e
}

// waitFor waits on ch with a deadline.
func waitFor(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// waitAllDone polls until every record is done.
func (e *partEnv) waitAllDone(t *testing.T) {
	t.Helper()
	err := pollUntil(t.Context(), time.Minute, 20*time.Millisecond, func() (bool, error) {
		for _, src := range e.records {
			rec, err := e.store.RecordGet(t.Context(), src)
			if err != nil || rec.State != mend.StateDone {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("planner B did not finish the queue: %v", err)
	}
	e.checkWakeUps(t)
}

// checkWakeUps reads the queue's speculate partition as the real consumer
// would, whichever planner published into it and however their terms
// overlapped, and finds the wake-up that finished each record there.
func (e *partEnv) checkWakeUps(t *testing.T) {
	t.Helper()
	ups, err := e.sq.ConsumeSpeculate(t.Context(), partQueue, false)
	if err != nil {
		t.Fatalf("speculate partition, read as the real consumer would: %v", err)
	}
	sent := map[string]bool{}
	for _, u := range ups {
		sent[u.ID] = true
	}
	for _, src := range e.records {
		rec, err := e.store.RecordGet(t.Context(), src)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := e.store.RecordHistory(t.Context(), partQueue, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		var data struct {
			MessageID string `json:"message_id"`
		}
		if err := json.Unmarshal(last.Data, &data); err != nil || last.Kind != mend.EventWoken || !sent[data.MessageID] {
			t.Errorf("record %s ends with %s %s; want woken by a wake-up present in the partition", src.MessageID, last.Kind, last.Data)
		}
	}
}

// lateWrites makes A write once more to every record under its old term,
// through its own (healed) connection; every one must be fenced.
func (e *partEnv) lateWrites(t *testing.T) int {
	t.Helper()
	term := e.leaseA.Term()
	n := 0
	for _, src := range e.records {
		rec, err := e.storeA.RecordGet(t.Context(), src)
		if err != nil {
			t.Fatal(err)
		}
		p := storage.AppendTo(rec)
		p.Kind, p.Actor, p.OpID, p.Fence, p.State = mend.EventSettled, "planner/A", mend.NewOpID(), &term, mend.StateSettled
		if _, err := e.storeA.RecordAppend(t.Context(), p); !errors.Is(err, mend.ErrFenced) {
			t.Errorf("late write of A (epoch %d) to %s = %v; want ErrFenced", term.Epoch, src.MessageID, err)
		}
		n++
	}
	if err := e.storeA.LeaseRenew(t.Context(), term, partTTL); !errors.Is(err, mend.ErrLeaseLost) {
		t.Errorf("late renew of A = %v; want ErrLeaseLost", err)
	}
	return n
}

// finishA lets A's blocked planner go on and returns what it ended with.
func (e *partEnv) finishA(t *testing.T) error {
	t.Helper()
	close(e.blockA)
	select {
	case err := <-e.runA:
		return err
	case <-time.After(time.Minute):
		t.Fatal("planner A did not return")
		return nil
	}
}

// epochLog checks the queue's event log against its lease history: the
// events of each epoch lie after that term was granted and before the next
// term was, so the epochs' time ranges are disjoint and increasing, and
// along every record the epoch never goes down.
func epochLog(t *testing.T, db *sql.DB, queue string) (events int, epochs []int64, problems []string) {
	t.Helper()
	ctx := t.Context()
	granted := map[int64]time.Time{}
	rows, err := db.QueryContext(ctx, `SELECT epoch, acquired_at FROM mend_lease_history WHERE queue = ? ORDER BY epoch`, queue)
	if err != nil {
		t.Fatal(err)
	}
	var order []int64
	for rows.Next() {
		var e int64
		var at time.Time
		if err := rows.Scan(&e, &at); err != nil {
			t.Fatal(err)
		}
		granted[e] = at
		order = append(order, e)
	}
	rows.Close()
	nextGrant := func(e int64) (time.Time, bool) {
		for _, o := range order {
			if o > e {
				return granted[o], true
			}
		}
		return time.Time{}, false
	}
	rows, err = db.QueryContext(ctx, `SELECT record_id, seq, epoch, created_at, actor FROM mend_events WHERE queue = ? ORDER BY record_id, seq`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prevRec []byte
	var prevEpoch int64
	seen := map[int64]bool{}
	type span struct{ lo, hi time.Time }
	spans := map[int64]*span{}
	for rows.Next() {
		var id []byte
		var seq, e int64
		var at time.Time
		var actor string
		if err := rows.Scan(&id, &seq, &e, &at, &actor); err != nil {
			t.Fatal(err)
		}
		events++
		if string(id) == string(prevRec) && e < prevEpoch {
			problems = append(problems, fmt.Sprintf("record %x seq %d by %s: epoch %d after epoch %d", id[:3], seq, actor, e, prevEpoch))
		}
		prevRec, prevEpoch = id, e
		if e == 0 {
			continue // unfenced intake writes
		}
		if !seen[e] {
			seen[e] = true
			epochs = append(epochs, e)
			spans[e] = &span{at, at}
		}
		s := spans[e]
		s.lo, s.hi = minTime(s.lo, at), maxTime(s.hi, at)
		g, ok := granted[e]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("event of epoch %d by %s, which was never granted", e, actor))
		case at.Before(g):
			problems = append(problems, fmt.Sprintf("event of epoch %d by %s at %s, before the term was granted at %s", e, actor, at.Format(time.StampMicro), g.Format(time.StampMicro)))
		}
		if next, ok := nextGrant(e); ok && at.After(next) {
			problems = append(problems, fmt.Sprintf("event of epoch %d by %s at %s, after a later term was granted at %s", e, actor, at.Format(time.StampMicro), next.Format(time.StampMicro)))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(epochs)
	for i := 1; i < len(order); i++ {
		a, b := spans[order[i-1]], spans[order[i]]
		if a != nil && b != nil && a.hi.After(b.lo) {
			problems = append(problems, fmt.Sprintf("epochs %d and %d overlap in time", order[i-1], order[i]))
		}
	}
	return events, epochs, problems
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// finish runs the checks shared by both scenarios.
func (e *partEnv) finish(t *testing.T, fault string) {
	t.Helper()
	errA := e.finishA(t)
	if !errors.Is(errA, mend.ErrFenced) {
		t.Errorf("planner A's late write after %s ended with %v; want ErrFenced", fault, errA)
	}
	late := e.lateWrites(t) + int(e.fencedA.Load())
	events, epochs, problems := epochLog(t, e.db.SQL(t), partQueue)
	st, err := e.store.LeaseGet(t.Context(), partQueue)
	if err != nil {
		t.Fatal(err)
	}
	prooff(t, "fault: %s; lease passed from A (epoch %d) to B (latest epoch %d); %d late writes of A, all refused with ErrFenced; %d events over epochs %v, %d problems",
		fault, e.leaseA.Term().Epoch, st.Term.Epoch, late, events, epochs, len(problems))
	if st.Term.Holder == "planner-A" || st.Term.Epoch <= e.leaseA.Term().Epoch {
		t.Errorf("lease is %v; want it passed on to planner-B", st.Term)
	}
	for _, p := range problems {
		t.Errorf("event log: %s", p)
	}
}

// TestPartitionPlannerCut: the planner holding the lease loses its network
// (every connection through toxiproxy closed, new ones refused) in the
// middle of a repair. The second planner takes over after the term expires;
// after healing, the first planner's writes are refused.
func TestPartitionPlannerCut(t *testing.T) {
	t.Parallel()
	mysqltest.SkipVitess(t, "the partition cuts one proxy in front of one database holding mend's tables and the host's; on Vitess those are two servers (vtgate, and the host's MySQL beside it), and a keyspace refuses the host's tables (error 1173: table 'batch' does not have a primary vindex)")
	db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
	proxy := mysqltest.NewProxy(t, db.Server.Addr())
	e := newPartEnv(t, db, db.DSNVia(proxy.Addr()), sized(4, 30))
	waitFor(t, e.inWakeA, time.Minute, "planner A to publish its first wake-up")
	if err := e.recB.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer e.recB.Stop()

	cutAt := time.Now()
	proxy.Cut()
	// A's trust window ends within partTTL; the bound only catches a hang
	// (three TTLs failed on a loaded machine that ran the keepalive late).
	waitFor(t, e.lostA, time.Minute, "A's fence to report the lease lost")
	e.waitAllDone(t)
	took := time.Since(cutAt)
	proxy.Heal()
	e.recB.Stop()
	e.finish(t, fmt.Sprintf("A's connections cut for %s (TTL %s)", took.Round(time.Millisecond), partTTL))
}

// TestPauseServerPastTTL: the server is frozen (SIGSTOP or docker pause) while planner A
// holds the lease, for longer than the TTL; A's write in flight when it
// froze must be refused when it thaws, and B takes over.
func TestPauseServerPastTTL(t *testing.T) {
	t.Parallel()
	srv := mysqltest.StartPrivate(t)
	db := mysqltest.NewDBOn(t, srv, migrations.Up, sqtest.Apply)
	e := newPartEnv(t, db, db.DSN, sized(4, 30))
	waitFor(t, e.inWakeA, time.Minute, "planner A to publish its first wake-up")
	if err := e.recB.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer e.recB.Stop()

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	// A's write of the woken event goes out to the frozen server.
	errA := make(chan error, 1)
	go func() { errA <- e.finishAErr() }()
	waitFor(t, e.lostA, time.Minute, "A's fence to stop trusting the lease") // only a hang reaches the bound
	// The database's term ends at most a safety margin after A stopped
	// trusting it; stay frozen well past that by the wall clock the server
	// will read when it thaws.
	hold := time.NewTimer(partTTL / 2)
	<-hold.C
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	frozen := time.Since(pausedAt)
	select {
	case err := <-errA:
		if !errors.Is(err, mend.ErrFenced) {
			t.Errorf("A's write in flight across the freeze ended with %v; want ErrFenced", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("planner A did not return after the server thawed")
	}
	e.waitAllDone(t)
	e.recB.Stop()
	late := e.lateWrites(t) + int(e.fencedA.Load())
	events, epochs, problems := epochLog(t, e.db.SQL(t), partQueue)
	st, err := e.store.LeaseGet(t.Context(), partQueue)
	if err != nil {
		t.Fatal(err)
	}
	prooff(t, "fault: server frozen (SIGSTOP or docker pause) for %s with a write of A in flight (TTL %s); lease passed from A (epoch %d) to B (latest epoch %d); %d late writes of A, all refused with ErrFenced; %d events over epochs %v, %d problems",
		frozen.Round(time.Millisecond), partTTL, e.leaseA.Term().Epoch, st.Term.Epoch, late, events, epochs, len(problems))
	if st.Term.Holder == "planner-A" || st.Term.Epoch <= e.leaseA.Term().Epoch {
		t.Errorf("lease is %v; want it passed on to planner-B", st.Term)
	}
	for _, p := range problems {
		t.Errorf("event log: %s", p)
	}
}

// finishAErr releases A's planner and waits for its result, without failing
// the test from this goroutine.
func (e *partEnv) finishAErr() error {
	close(e.blockA)
	return <-e.runA
}

// TestPartitionCatchesUnfencedLateWrite is the negative control of the
// event-log check: a late write that skips the fence, after the lease
// passed on, must be reported.
func TestPartitionCatchesUnfencedLateWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := mysqltest.NewDB(t, migrations.Up)
	s := openRealStore(t)(db.DSN).(realStore).db
	src := mend.SourceID{Queue: partQueue, Topic: "t", MessageID: "m"}
	if _, _, err := s.RecordCreate(ctx, mend.CreateParams{Source: src, OpID: mend.NewOpID(), Actor: "intake"}); err != nil {
		t.Fatal(err)
	}
	write := func(term mend.Term, fenced bool) {
		t.Helper()
		rec, err := s.RecordGet(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		p := storage.AppendTo(rec)
		p.Kind, p.Actor, p.OpID, p.Epoch = mend.EventAttemptFailed, term.Holder, mend.NewOpID(), term.Epoch
		if fenced {
			p.Fence = &term
		}
		if _, err := s.RecordAppend(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.LeaseAcquire(ctx, partQueue, "planner-A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	write(a, true)
	if err := s.LeaseRelease(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, err := s.LeaseAcquire(ctx, partQueue, "planner-B", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	write(b, true)
	write(a, false) // A, late, without the fence
	events, epochs, problems := epochLog(t, db.SQL(t), partQueue)
	prooff(t, "unfenced late write of epoch %d after epoch %d: the event-log check found %d problems in %d events over epochs %v: %v", a.Epoch, b.Epoch, len(problems), events, epochs, problems)
	if len(problems) == 0 {
		t.Fatal("the event-log check did not catch a late write of an old epoch")
	}
}

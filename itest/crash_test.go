package itest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// This file SIGKILLs the private server while the intake, a direct event
// writer and the reconciler are busy, restarts it on the same data
// directory, and checks that nothing acknowledged was lost, that ambiguous
// writes resolve through their op IDs, and that the reconciler converges.

// acker records deliveries and says when one may be acknowledged.
type acker interface {
	Record(ctx context.Context, d dlq.Delivery) (mend.RecordID, error)
}

// realIntake is dlq.Intake: it acknowledges once the record is durable.
type realIntake struct{ in *dlq.Intake }

func (r realIntake) Record(ctx context.Context, d dlq.Delivery) (mend.RecordID, error) {
	res, err := r.in.Record(ctx, d)
	return res.Record.ID, err
}

// writeBehindIntake is the broken variant: it acknowledges at once and
// creates records in the background every few milliseconds, dropping a
// batch whose writes fail — the "fast" intake a crash must expose.
type writeBehindIntake struct {
	store   *storage.DB
	mu      sync.Mutex
	buf     []dlq.Delivery
	flushed atomic.Int64 // records written
}

func (w *writeBehindIntake) Record(_ context.Context, d dlq.Delivery) (mend.RecordID, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, d)
	// It cannot know the record ID before the write; the test only needs
	// "acknowledged", so a placeholder stands in.
	return mend.RecordID{1}, nil
}

func (w *writeBehindIntake) flushLoop(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		batch := w.buf
		w.buf = nil
		w.mu.Unlock()
		for _, d := range batch {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			_, _, err := w.store.RecordCreate(wctx, mend.CreateParams{Source: d.Source, OpID: mend.NewOpID(), Actor: "write-behind",
				Snapshot: mend.Snapshot{Payload: d.Payload}, Target: mend.Target{BatchID: "x", Desired: mend.OutcomeFailed}})
			cancel()
			if err == nil {
				w.flushed.Add(1)
			}
		}
	}
}

// crashEnv is a private server with mend's schema and the submit queue's
// real-shaped tables in one database.
type crashEnv struct {
	srv   *mysqltest.Server
	db    *mysqltest.DB
	store *storage.DB
	host  *host.DB
	sq    sqtest.World
}

func newCrashEnv(t *testing.T) *crashEnv {
	t.Helper()
	quietDriver()
	srv := mysqltest.StartPrivate(t)
	db := mysqltest.NewDBOn(t, srv, migrations.Up, sqtest.Apply)
	store := openRealStore(t)(db.DSN).(realStore).db
	h, err := host.Open(t.Context(), db.DSN, db.DSN, host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	s := db.SQL(t)
	return &crashEnv{srv: srv, db: db, store: store, host: h, sq: sqtest.World{App: s, Queue: s}}
}

// crashQueues are the queues the crash scenario's deliveries go to.
var crashQueues = []string{"cq1", "cq2", "cq3"}

func crashQueue(i int) string { return crashQueues[i%len(crashQueues)] }

func crashBatch(i int) string { return fmt.Sprintf("%s/batch/%05d", crashQueue(i), i) }

// crashDelivery is delivery i, built from the speculate_dlq row the host's
// store would hold for it. The row itself is not stored: the crash is
// mend's, and the intake reads only the delivery.
func crashDelivery(i int) dlq.Delivery {
	q, batch := crashQueue(i), crashBatch(i)
	return deliveryFromRow(sqtest.Message{
		Topic: "speculate_dlq", PartitionKey: q, ID: batch, Payload: []byte(batchMsg(q, batch)),
		FailedAt: 1_764_482_400_000, FailureCount: 3, LastError: "boom", OriginalTopic: "speculate",
	})
}

// seed gives every delivery's batch a speculating batch, and every queue a
// live batch to wake, larger in byte order than every delivery's batch.
func (e *crashEnv) seed(t *testing.T, deliveries int) {
	t.Helper()
	for _, q := range crashQueues {
		if err := e.sq.SeedBatch(t.Context(), q, q+"/batch/live", string(mend.BatchCreated), q+"/live"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range deliveries {
		b := crashBatch(i)
		if err := e.sq.SeedBatch(t.Context(), crashQueue(i), b, string(mend.BatchSpeculating), b+"-r"); err != nil {
			t.Fatal(err)
		}
	}
}

// intakeLoad delivers every delivery through rec from workers goroutines,
// redelivering (as a DLQ consumer would) until acknowledged or ctx ends.
type intakeLoad struct {
	mu       sync.Mutex
	acked    map[mend.SourceID]mend.RecordID
	failures atomic.Int64 // deliveries that failed and were redelivered
	done     chan struct{}
}

func startIntake(ctx context.Context, rec acker, deliveries, workers int) *intakeLoad {
	l := &intakeLoad{acked: map[mend.SourceID]mend.RecordID{}, done: make(chan struct{})}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < deliveries; i += workers {
				d := crashDelivery(i)
				for ctx.Err() == nil {
					opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
					id, err := rec.Record(opCtx, d)
					cancel()
					if err == nil {
						l.mu.Lock()
						l.acked[d.Source] = id
						l.mu.Unlock()
						break
					}
					l.failures.Add(1)
					// Redeliver after a short pause, as the DLQ would.
					t := time.NewTimer(20 * time.Millisecond)
					select {
					case <-ctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
		})
	}
	go func() { wg.Wait(); close(l.done) }()
	return l
}

func (l *intakeLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// lost returns the acknowledged deliveries whose record is missing or
// carries another ID. checkIDs is false for intakes that cannot know the ID.
func (l *intakeLoad) lost(t *testing.T, s *storage.DB, checkIDs bool) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for src, id := range l.acked {
		rec, err := s.RecordGet(t.Context(), src)
		switch {
		case errors.Is(err, mend.ErrNotFound):
			out = append(out, src.MessageID+": missing")
		case err != nil:
			t.Fatalf("read %s: %v", src, err)
		case checkIDs && rec.ID != id:
			out = append(out, fmt.Sprintf("%s: acknowledged as %s, stored as %s", src.MessageID, short(id), short(rec.ID)))
		}
	}
	return out
}

// appendLoad appends events to parked audit records (the reconciler leaves
// parked records alone) and keeps each op ID with what the caller was told.
type appendLoad struct {
	mu        sync.Mutex
	acked     []string // op IDs reported written
	ambiguous []string // outcome unknown
	refused   []string // reported failed with nothing written
	done      chan struct{}
}

const auditQueue = "audit"

func startAppends(ctx context.Context, t *testing.T, s *storage.DB, writers int) *appendLoad {
	t.Helper()
	l := &appendLoad{done: make(chan struct{})}
	srcs := make([]mend.SourceID, writers)
	for w := range writers {
		srcs[w] = mend.SourceID{Queue: auditQueue, Topic: "audit", MessageID: fmt.Sprintf("a%d", w)}
		if _, _, err := s.RecordCreate(t.Context(), mend.CreateParams{Source: srcs[w], OpID: mend.NewOpID(), Actor: "audit",
			State: mend.StateParked, Reason: "audit trail of the crash test"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for ctx.Err() == nil {
				opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
				rec, err := s.RecordGet(opCtx, srcs[w])
				if err != nil {
					cancel()
					l.pace(ctx)
					continue
				}
				p := storage.AppendTo(rec)
				p.Kind, p.Actor, p.OpID, p.State = mend.EventAttemptFailed, "audit", mend.NewOpID(), mend.StateParked
				_, err = s.RecordAppend(opCtx, p)
				cancel()
				l.mu.Lock()
				switch {
				case err == nil:
					l.acked = append(l.acked, p.OpID)
				case errors.Is(err, mend.ErrAmbiguous):
					l.ambiguous = append(l.ambiguous, p.OpID)
				default:
					l.refused = append(l.refused, p.OpID)
				}
				l.mu.Unlock()
				if err != nil {
					l.pace(ctx)
				}
			}
		})
	}
	go func() { wg.Wait(); close(l.done) }()
	return l
}

func (l *appendLoad) pace(ctx context.Context) {
	t := time.NewTimer(10 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// check resolves every op through OpLookup and compares with the event log:
// acknowledged ops must be found, refused ones must not, and an ambiguous
// one is found exactly when its event is in the log.
func (l *appendLoad) check(t *testing.T, s *storage.DB) (acked, ambiguous, ambiguousCommitted, refused int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	inLog := map[string]bool{}
	for w := 0; ; w++ {
		rec, err := s.RecordGet(t.Context(), mend.SourceID{Queue: auditQueue, Topic: "audit", MessageID: fmt.Sprintf("a%d", w)})
		if errors.Is(err, mend.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.RecordHistory(t.Context(), auditQueue, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			inLog[ev.OpID] = true
		}
	}
	found := func(op string) bool {
		_, err := s.OpLookup(t.Context(), auditQueue, op)
		if err != nil && !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("op lookup: %v", err)
		}
		if (err == nil) != inLog[op] {
			t.Errorf("op %s: lookup says found=%v but the event log says %v", op, err == nil, inLog[op])
		}
		return err == nil
	}
	for _, op := range l.acked {
		if !found(op) {
			t.Errorf("acknowledged append %s was lost", op)
		}
	}
	for _, op := range l.refused {
		if found(op) {
			t.Errorf("append %s was reported failed with nothing written, but it was written", op)
		}
	}
	for _, op := range l.ambiguous {
		if found(op) {
			ambiguousCommitted++
		}
	}
	return len(l.acked), len(l.ambiguous), ambiguousCommitted, len(l.refused)
}

// crashReconciler starts a reconciler with short intervals and backoff.
func crashReconciler(t *testing.T, e *crashEnv, woken *atomic.Int64) *reconcile.Reconciler {
	t.Helper()
	f, err := fence.New(e.store, fence.Config{Holder: "crash-reconciler", TTL: 2 * time.Second, RetryEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := planner.New(planner.Config{Store: e.store, Batches: e.host, Waker: e.host, Actor: "planner/crash",
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, MaxAttempts: 50,
		Hooks: planner.Hooks{OnWake: func(_ string, err error) {
			if err == nil {
				woken.Add(1)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := reconcile.New(reconcile.Config{Store: e.store, Fence: f, Planner: p, Interval: 50 * time.Millisecond, Concurrency: len(crashQueues)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// killAndRestart SIGKILLs the server and starts it again on the same data.
func (e *crashEnv) killAndRestart(t *testing.T) time.Duration {
	t.Helper()
	if err := e.srv.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := e.srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	return time.Since(begin)
}

// TestCrashKeepsAcknowledgedWork: SIGKILL the server while the intake, a
// writer and the reconciler are busy; restart it on the same data. Nothing
// acknowledged is lost, ambiguous writes resolve through their op IDs, and
// the reconciler converges: every record done or parked with a reason, and
// every owed wake-up in the message table (at least once: wake-ups are at-least-once).
func TestCrashKeepsAcknowledgedWork(t *testing.T) {
	t.Parallel()
	deliveries := sized(300, 1500)
	kills := sized(2, 5)
	e := newCrashEnv(t)
	e.seed(t, deliveries)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	var woken atomic.Int64
	rec := crashReconciler(t, e, &woken)
	in, err := dlq.New(e.store, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rec.Stop()
	appendCtx, stopAppends := context.WithCancel(ctx)
	defer stopAppends()
	appends := startAppends(appendCtx, t, e.store, 4)
	intake := startIntake(ctx, realIntake{in}, deliveries, 4)

	var restarts []time.Duration
	for k := range kills {
		// Kill when both the intake and the reconciler are mid-stream.
		wantAcked := deliveries * (k + 1) / (kills + 1)
		if err := pollUntil(ctx, time.Minute, 2*time.Millisecond, func() (bool, error) {
			return intake.ackedCount() >= wantAcked && woken.Load() > 0, nil
		}); err != nil {
			t.Fatalf("before kill %d: %v (acked %d, woken %d)", k+1, err, intake.ackedCount(), woken.Load())
		}
		restarts = append(restarts, e.killAndRestart(t))
	}
	<-intake.done
	if ctx.Err() != nil {
		t.Fatalf("intake did not finish: %v", ctx.Err())
	}
	stopAppends()
	<-appends.done

	// Converge: nothing due, every record done or parked.
	if err := pollUntil(ctx, 2*time.Minute, 20*time.Millisecond, func() (bool, error) {
		qs, err := e.store.QueuesDue(ctx, 10)
		return err == nil && len(qs) == 0, err
	}); err != nil {
		t.Fatalf("the reconciler did not converge: %v", err)
	}
	rec.Stop()

	if lost := intake.lost(t, e.store, true); len(lost) > 0 {
		t.Fatalf("%d acknowledged records lost or replaced: %v", len(lost), lost)
	}
	ackedOps, amb, ambCommitted, refused := appends.check(t, e.store)
	done, parked, wakes := e.checkConverged(t, deliveries)
	prooff(t, "%d SIGKILLs (restarts took %v); %d deliveries acknowledged after %d failed attempts, none lost; %d appends acknowledged and found, %d ambiguous resolved by op_id (%d committed), %d refused and absent; %d records done, %d parked with a reason, %d records woken, each by a message present exactly once and named after a record it woke",
		kills, roundAll(restarts), deliveries, intake.failures.Load(), ackedOps, amb, ambCommitted, refused, done, parked, wakes)
	if amb == 0 && intake.failures.Load() == 0 {
		t.Errorf("the kills hit nothing in flight: no ambiguous write and no failed delivery")
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// checkConverged checks the final state: one record per delivery, each done
// or parked with a reason, every done record's wake-up in the message table
// (a message ID is stored at most once; a record may have more than one wake-up,
// since a crash between a landed publish and its woken event re-sends under a new
// ID), and epochs never going down along a record's history.
func (e *crashEnv) checkConverged(t *testing.T, deliveries int) (done, parked, wakes int) {
	t.Helper()
	ctx := t.Context()
	msgs := map[string]int{}        // message ID -> copies
	anchorOf := map[string]string{} // message ID -> the record its metadata names
	wokenBy := map[string]string{}  // record ID -> the message its woken event names
	for _, q := range crashQueues {
		// Not live: a wake-up may name a batch a later record failed.
		ups, err := e.sq.ConsumeSpeculate(ctx, q, false)
		if err != nil {
			t.Fatalf("speculate partition %s, read as the real consumer would: %v", q, err)
		}
		for _, u := range ups {
			msgs[u.ID]++
			anchorOf[u.ID] = u.Meta[host.MetaRecordID]
		}
	}
	for i := range deliveries {
		src := crashDelivery(i).Source
		rec, err := e.store.RecordGet(ctx, src)
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		evs, err := e.store.RecordHistory(ctx, src.Queue, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j < len(evs); j++ {
			if evs[j].Epoch < evs[j-1].Epoch {
				t.Errorf("record %s: epoch goes down from %d to %d at seq %d", short(rec.ID), evs[j-1].Epoch, evs[j].Epoch, evs[j].Seq)
			}
		}
		switch rec.State {
		case mend.StateDone:
			done++
			last := evs[len(evs)-1]
			var data struct {
				MessageID string `json:"message_id"`
			}
			if err := json.Unmarshal(last.Data, &data); err != nil || last.Kind != mend.EventWoken {
				t.Errorf("record %s is done by a %s event, want woken (%v)", short(rec.ID), last.Kind, err)
				continue
			}
			if msgs[data.MessageID] != 1 {
				t.Errorf("record %s: wake-up %s present %d times; want its woken message once", short(rec.ID), data.MessageID, msgs[data.MessageID])
			}
			wokenBy[rec.ID.String()] = data.MessageID
			wakes++
		case mend.StateParked:
			parked++
			if rec.LastError == "" {
				t.Errorf("record %s parked without a reason", short(rec.ID))
			}
		default:
			t.Errorf("record %s is %s after convergence", short(rec.ID), rec.State)
		}
	}
	// A wake-up serves every record of one planner run (settle together,
	// wake once); its metadata names one of them, which that same message
	// woke.
	for id, m := range wokenBy {
		if a := anchorOf[m]; wokenBy[a] != m {
			t.Errorf("record %s: its wake-up %s names record %s, which was woken by %q", id, m, a, wokenBy[a])
		}
	}
	return done, parked, wakes
}

// TestCrashCatchesWriteBehindIntake is the negative control: an intake that
// acknowledges before the record is durable must be caught losing records
// by the same check.
func TestCrashCatchesWriteBehindIntake(t *testing.T) {
	t.Parallel()
	const deliveries = 400
	e := newCrashEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	wb := &writeBehindIntake{store: e.store}
	flushCtx, stopFlush := context.WithCancel(ctx)
	flushed := make(chan struct{})
	go func() { defer close(flushed); wb.flushLoop(flushCtx) }()
	defer func() { stopFlush(); <-flushed }()

	intake := startIntake(ctx, wb, deliveries, 2)
	if err := pollUntil(ctx, time.Minute, time.Millisecond, func() (bool, error) {
		wb.mu.Lock()
		defer wb.mu.Unlock()
		return intake.ackedCount() == deliveries && wb.flushed.Load() >= deliveries/4, nil
	}); err != nil {
		t.Fatal(err)
	}
	restart := e.killAndRestart(t)
	<-intake.done
	stopFlush()
	<-flushed
	lost := intake.lost(t, e.store, false)
	prooff(t, "write-behind intake: 1 SIGKILL (restart %s), %d deliveries acknowledged, %d written before the kill, the check found %d lost", restart.Round(time.Millisecond), intake.ackedCount(), wb.flushed.Load(), len(lost))
	if len(lost) == 0 {
		t.Fatalf("the crash check did not catch an intake that acknowledges before the record is durable")
	}
}

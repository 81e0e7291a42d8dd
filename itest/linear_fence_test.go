package itest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// This file checks the fence as a linearizable object per queue: the lease's
// epoch only moves up by one per grant, a grant is refused only while the
// current term is live, and a write is accepted only while its term is the
// current, live one. So no write of epoch e is accepted after anything of a
// higher epoch, and every accepted write's epoch was current when it took
// effect. A writer that skips the fence must be rejected by the same check.

type fenceKind uint8

const (
	fenceAcquire fenceKind = iota
	fenceWrite             // a fenced append under a term
	fenceRenew
	fenceRelease
	fenceObserve // LeaseGet: the current term and whether it is live
)

var fenceKindNames = [...]string{"acquire", "write", "renew", "release", "observe"}

type fenceResult uint8

const (
	fenceOK      fenceResult = iota // acquire granted, write/renew/release accepted
	fencePassed                     // write: the fence let it through but the CAS lost (ErrConflict)
	fenceHeld                       // acquire: another live term
	fenceRefused                    // write: ErrFenced; renew/release: ErrLeaseLost
)

type fenceInput struct {
	Kind   fenceKind
	Queue  string
	Holder string
	Epoch  int64 // the term acted under (write, renew, release)
}

type fenceOutput struct {
	Unknown bool
	Result  fenceResult
	Epoch   int64  // acquire: granted or holding epoch; observe: current epoch
	Holder  string // acquire held, observe: the current holder
	Live    bool   // observe: the term had time left
	// Maybe narrows an acquire of unknown outcome (see narrowAcquires): if
	// it took effect, it was granted one of these epochs; an empty set says
	// it did not. Nil: nothing is known, any grant is possible.
	Maybe *fenceEpochs `json:",omitempty"`
}

// fenceEpochs is a set of epochs, sorted. A pointer to it keeps
// fenceOutput comparable.
type fenceEpochs []int64

func (e *fenceEpochs) has(epoch int64) bool {
	i := sort.Search(len(*e), func(i int) bool { return (*e)[i] >= epoch })
	return i < len(*e) && (*e)[i] == epoch
}

// fenceState is the lease of one queue. Live is false once the term is known
// to have ended: released, or expired as a refusal of it showed. Expiry
// depends on the database clock, which the model does not see, so it may
// happen at any moment: a grant is always possible, and a refusal of the
// current term means it expired, for good (a renewal never brings an
// expired term back: issue 35).
//
// SeenOver is weaker: an observe (LeaseGet, a read that takes no lock) saw
// the current term past its expiry. Such a read cannot see a renewal that
// is committing, judged while the term was live, so the term may be renewed
// after all; until it is, nothing may be accepted under it or report it
// held. A renewal of the term, known or of unknown outcome, clears it.
type fenceState struct {
	Epoch    int64
	Holder   string
	Live     bool
	SeenOver bool
}

// matches: (holder, epoch) is the latest term and no refusal or release
// has ended it (a renewal's test).
func (s fenceState) matches(holder string, epoch int64) bool {
	return s.Live && s.Epoch == epoch && s.Holder == holder
}

// current: the term may be written under or reported held now.
func (s fenceState) current(holder string, epoch int64) bool {
	return s.matches(holder, epoch) && !s.SeenOver
}

// refused returns the states a refusal of (holder, epoch) may leave: if the
// term is the current one it must have expired.
func (s fenceState) refused(holder string, epoch int64) []any {
	if s.matches(holder, epoch) {
		s.Live, s.SeenOver = false, false
	}
	return []any{s}
}

func fenceStep(state, input, output any) []any {
	s, in, out := state.(fenceState), input.(fenceInput), output.(fenceOutput)
	switch in.Kind {
	case fenceAcquire:
		granted := fenceState{Epoch: s.Epoch + 1, Holder: in.Holder, Live: true}
		switch {
		case out.Unknown && out.Maybe != nil && !out.Maybe.has(granted.Epoch):
			return []any{s}
		case out.Unknown:
			return []any{s, granted}
		case out.Result == fenceOK:
			if out.Epoch != s.Epoch+1 {
				return nil
			}
			return []any{granted}
		case out.Result == fenceHeld:
			if !s.current(out.Holder, out.Epoch) {
				return nil
			}
			return []any{s}
		}
	case fenceWrite:
		switch {
		case out.Unknown:
			// Writes never change the lease: free (withoutFreeOps).
			return []any{s}
		case out.Result == fenceOK || out.Result == fencePassed:
			if !s.current(in.Holder, in.Epoch) {
				return nil
			}
			return []any{s}
		default:
			return s.refused(in.Holder, in.Epoch)
		}
	case fenceRenew:
		renewed := s
		renewed.SeenOver = false
		switch {
		case out.Unknown && s.matches(in.Holder, in.Epoch):
			return []any{s, renewed}
		case out.Unknown:
			return []any{s}
		case out.Result == fenceOK:
			if !s.matches(in.Holder, in.Epoch) {
				return nil
			}
			return []any{renewed}
		default:
			return s.refused(in.Holder, in.Epoch)
		}
	case fenceRelease:
		released := s
		released.Live, released.SeenOver = false, false
		switch {
		case out.Unknown && s.matches(in.Holder, in.Epoch):
			return []any{s, released}
		case out.Unknown:
			return []any{s}
		case out.Result == fenceOK:
			if !s.current(in.Holder, in.Epoch) {
				return nil
			}
			return []any{released}
		default:
			return s.refused(in.Holder, in.Epoch)
		}
	case fenceObserve:
		if s.Epoch != out.Epoch || s.Holder != out.Holder {
			return nil
		}
		if !out.Live {
			if s.Live {
				s.SeenOver = true
			}
			return []any{s}
		}
		if !s.Live || s.SeenOver {
			return nil
		}
		return []any{s}
	}
	return nil
}

var fenceModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byQueue := map[string][]porcupine.Operation{}
		var queues []string
		for _, op := range h {
			q := op.Input.(fenceInput).Queue
			if _, ok := byQueue[q]; !ok {
				queues = append(queues, q)
			}
			byQueue[q] = append(byQueue[q], op)
		}
		sort.Strings(queues)
		out := make([][]porcupine.Operation, 0, len(queues))
		for _, q := range queues {
			out = append(out, byQueue[q])
		}
		return out
	},
	Init: func() []any { return []any{fenceState{}} },
	Step: fenceStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(fenceInput), output.(fenceOutput)
		var res string
		switch {
		case out.Unknown && out.Maybe != nil && len(*out.Maybe) == 0:
			res = "unknown: did not take effect (lease history)"
		case out.Unknown && out.Maybe != nil:
			res = fmt.Sprintf("unknown: nothing or one of e%v (lease history)", []int64(*out.Maybe))
		case out.Unknown:
			res = "unknown"
		case in.Kind == fenceObserve:
			res = fmt.Sprintf("e%d %s live=%v", out.Epoch, out.Holder, out.Live)
		case in.Kind == fenceAcquire && out.Result == fenceOK:
			res = fmt.Sprintf("granted e%d", out.Epoch)
		case in.Kind == fenceAcquire:
			res = fmt.Sprintf("held by %s e%d", out.Holder, out.Epoch)
		default:
			res = [...]string{"ok", "passed (cas lost)", "held", "refused"}[out.Result]
		}
		return fmt.Sprintf("%s(%s e%d) -> %s", fenceKindNames[in.Kind], in.Holder, in.Epoch, res)
	},
	DescribeState: func(state any) string {
		s := state.(fenceState)
		return fmt.Sprintf("e%d %s live=%v seen-over=%v", s.Epoch, s.Holder, s.Live, s.SeenOver)
	},
}

// fenceWriter appends one event to a record under a term. The real one is a
// fenced RecordAppend; the negative control skips the fence.
type fenceWriter func(ctx context.Context, s *storage.DB, term mend.Term, rec mend.Record, op string) error

func fencedWrite(ctx context.Context, s *storage.DB, term mend.Term, rec mend.Record, op string) error {
	p := storage.AppendTo(rec)
	p.Kind, p.Actor, p.OpID, p.Fence = mend.EventAttemptFailed, term.Holder, op, &term
	_, err := s.RecordAppend(ctx, p)
	return err
}

// unfencedWrite is the broken variant: it trusts the term it was given and
// writes with its epoch, without asking the database whether it is current.
func unfencedWrite(ctx context.Context, s *storage.DB, term mend.Term, rec mend.Record, op string) error {
	p := storage.AppendTo(rec)
	p.Kind, p.Actor, p.OpID, p.Epoch = mend.EventAttemptFailed, term.Holder, op, term.Epoch
	_, err := s.RecordAppend(ctx, p)
	return err
}

type fenceRun struct {
	start     time.Time // the history's time origin
	mu        sync.Mutex
	history   []porcupine.Operation
	ambiguous []fenceAmbiguous // writes with unknown outcome, resolved after the run
	late      atomic.Int64     // writes made after observing a newer term
	refused   atomic.Int64     // failed with nothing done (dropped from the history)
	byKind    [5]atomic.Int64
}

type fenceAmbiguous struct {
	index int // in history
	queue string
	op    string
}

// fenceWorkload runs contenders (one per store) on queues until totalOps
// operations were recorded. Each contender takes a queue's lease with a short
// TTL, writes under it to the queue's shared records, sometimes renews, and
// then releases, abandons the term, or waits until it sees a newer term and
// writes late under the old one.
func fenceWorkload(ctx context.Context, stores []*storage.DB, observer *storage.DB, queues []string, records map[string][]mend.SourceID, write fenceWriter, totalOps int) *fenceRun {
	start := time.Now()
	run := &fenceRun{start: start}
	var budget atomic.Int64
	budget.Store(int64(totalOps))
	add := func(client int, in fenceInput, call time.Time, out fenceOutput) int {
		ret := int64(time.Since(start))
		if out.Unknown {
			ret = math.MaxInt64
		}
		budget.Add(-1)
		run.byKind[in.Kind].Add(1)
		run.mu.Lock()
		defer run.mu.Unlock()
		run.history = append(run.history, porcupine.Operation{ClientId: client, Input: in, Call: int64(call.Sub(start)), Output: out, Return: ret})
		return len(run.history) - 1
	}
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	var wg sync.WaitGroup
	for c, store := range stores {
		holder := fmt.Sprintf("h%d", c)
		wg.Go(func() {
			for budget.Load() > 0 && ctx.Err() == nil {
				queue := queues[rand.IntN(len(queues))]
				ttl := time.Duration(20+rand.IntN(60)) * time.Millisecond
				call := time.Now()
				term, err := store.LeaseAcquire(ctx, queue, holder, ttl)
				var held *mend.HeldError
				switch {
				case err == nil:
					add(c, fenceInput{Kind: fenceAcquire, Queue: queue, Holder: holder}, call, fenceOutput{Result: fenceOK, Epoch: term.Epoch})
				case errors.As(err, &held):
					add(c, fenceInput{Kind: fenceAcquire, Queue: queue, Holder: holder}, call, fenceOutput{Result: fenceHeld, Epoch: held.Epoch, Holder: held.Holder})
					pause(time.Duration(3+rand.IntN(12)) * time.Millisecond)
					continue
				case errors.Is(err, mend.ErrAmbiguous):
					add(c, fenceInput{Kind: fenceAcquire, Queue: queue, Holder: holder}, call, fenceOutput{Unknown: true})
					continue
				default:
					run.refused.Add(1)
					continue
				}
				termOp := func(kind fenceKind, fn func() error) {
					in := fenceInput{Kind: kind, Queue: queue, Holder: holder, Epoch: term.Epoch}
					call := time.Now()
					err := fn()
					switch {
					case err == nil:
						add(c, in, call, fenceOutput{Result: fenceOK})
					case errors.Is(err, mend.ErrFenced), errors.Is(err, mend.ErrLeaseLost):
						add(c, in, call, fenceOutput{Result: fenceRefused})
					case errors.Is(err, mend.ErrAmbiguous):
						add(c, in, call, fenceOutput{Unknown: true})
					default:
						run.refused.Add(1)
					}
				}
				writeOnce := func() {
					src := records[queue][rand.IntN(len(records[queue]))]
					rec, err := store.RecordGet(ctx, src)
					if err != nil {
						run.refused.Add(1)
						return
					}
					in := fenceInput{Kind: fenceWrite, Queue: queue, Holder: holder, Epoch: term.Epoch}
					op := mend.NewOpID()
					call := time.Now()
					err = write(ctx, store, term, rec, op)
					switch {
					case err == nil:
						add(c, in, call, fenceOutput{Result: fenceOK})
					case errors.Is(err, mend.ErrConflict):
						add(c, in, call, fenceOutput{Result: fencePassed})
					case errors.Is(err, mend.ErrFenced):
						add(c, in, call, fenceOutput{Result: fenceRefused})
					case errors.Is(err, mend.ErrAmbiguous):
						i := add(c, in, call, fenceOutput{Unknown: true})
						run.mu.Lock()
						run.ambiguous = append(run.ambiguous, fenceAmbiguous{index: i, queue: queue, op: op})
						run.mu.Unlock()
					default:
						run.refused.Add(1)
					}
				}
				for range 1 + rand.IntN(4) {
					writeOnce()
					if rand.IntN(4) == 0 {
						termOp(fenceRenew, func() error { return store.LeaseRenew(ctx, term, ttl) })
					}
				}
				switch rand.IntN(10) {
				case 0, 1, 2, 3:
					termOp(fenceRelease, func() error { return store.LeaseRelease(ctx, term) })
				case 4, 5, 6:
					// Abandon the term: it expires by the database clock.
				default:
					// Late write: wait until a newer term is seen (or this one
					// has run out), record that observation, then write under
					// the old term.
					deadline := time.Now().Add(2 * time.Second)
					for time.Now().Before(deadline) && ctx.Err() == nil {
						call := time.Now()
						st, err := observer.LeaseGet(ctx, queue)
						if err != nil {
							break
						}
						if st.Term.Epoch > term.Epoch || st.Remaining <= 0 {
							add(c, fenceInput{Kind: fenceObserve, Queue: queue}, call,
								fenceOutput{Result: fenceOK, Epoch: st.Term.Epoch, Holder: st.Term.Holder, Live: st.Remaining > 0})
							run.late.Add(1)
							writeOnce()
							break
						}
						pause(2 * time.Millisecond)
					}
				}
			}
		})
	}
	wg.Wait()
	return run
}

// resolve looks ambiguous writes up by op ID: one that committed is recorded
// as accepted at an unknown time after its call (it still never returns);
// one that is not found stays unknown, since a commit may still be in
// flight on a connection the test gave up on.
func (r *fenceRun) resolve(t *testing.T, s *storage.DB) (committed int) {
	t.Helper()
	for _, a := range r.ambiguous {
		_, err := s.OpLookup(t.Context(), a.queue, a.op)
		switch {
		case err == nil:
			r.history[a.index].Output = fenceOutput{Result: fenceOK}
			committed++
		case errors.Is(err, mend.ErrNotFound):
		default:
			t.Fatalf("op lookup: %v", err)
		}
	}
	return committed
}

// epochOrder checks the event log: along each record's history the writer's
// epoch never goes down. It returns the violations found.
func epochOrder(t *testing.T, s *storage.DB, records map[string][]mend.SourceID) (events int, violations []string) {
	t.Helper()
	for queue, srcs := range records {
		for _, src := range srcs {
			rec, err := s.RecordGet(t.Context(), src)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := s.RecordHistory(t.Context(), queue, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			events += len(evs)
			for i := 1; i < len(evs); i++ {
				if evs[i].Epoch < evs[i-1].Epoch {
					violations = append(violations, fmt.Sprintf("record %s: seq %d by %s at epoch %d follows seq %d at epoch %d",
						short(rec.ID), evs[i].Seq, evs[i].Actor, evs[i].Epoch, evs[i-1].Seq, evs[i-1].Epoch))
				}
			}
		}
	}
	return events, violations
}

// fenceRecords creates two shared records in each queue.
func fenceRecords(t *testing.T, direct *storage.DB, queues []string) map[string][]mend.SourceID {
	t.Helper()
	records := map[string][]mend.SourceID{}
	for _, q := range queues {
		for i := range 2 {
			src := mend.SourceID{Queue: q, Topic: "fence_dlq", Partition: q, MessageID: fmt.Sprintf("r%d", i)}
			if _, _, err := direct.RecordCreate(t.Context(), mend.CreateParams{Source: src, OpID: mend.NewOpID(), Actor: "setup"}); err != nil {
				t.Fatal(err)
			}
			records[q] = append(records[q], src)
		}
	}
	return records
}

// fenceSetup creates the queues' shared records and one store per
// contender, routed directly, through a toxiproxy under chaos, or through a
// driver network that cuts connections at COMMIT.
func fenceSetup(t *testing.T, contenders int) (*mysqltest.DB, *storage.DB, []*storage.DB, []string, map[string][]mend.SourceID, *linFaults) {
	t.Helper()
	quietDriver()
	db := mysqltest.NewDB(t, migrations.Up)
	direct := openRealStore(t)(db.DSN).(realStore).db
	queues := []string{"fq1", "fq2"}
	records := fenceRecords(t, direct, queues)
	routes, faults := linRoutes(t, db, contenders, openRealStore(t))
	stores := make([]*storage.DB, len(routes))
	for i, r := range routes {
		stores[i] = r.store.(realStore).db
	}
	return db, direct, stores, queues, records, faults
}

// freeOp reports whether op is left out of the check: a write whose
// outcome stayed unknown. fenceStep returns exactly the state it was given
// for it, in every state (TestFenceFreeOpsAreFree checks that), so it
// constrains nothing and no linearisation gains or loses by it; but each is
// open until the end of the history (its return is unknown), and a few of
// them multiply the orders the checker must try: in a make test run on a
// loaded machine the checker gave up ("Unknown" after 2 minutes) on a
// history of 1,518 operations with 7 such writes.
//
// A renewal of unknown outcome is not free, and is checked: one that
// committed renews the term an observe saw past its expiry, which the
// operations after it may depend on (TestFenceModelNeedsUnknownRenewals).
// Before issue 35 renewals were left out too; that was sound only while the
// model let an observe's "expired" stand for good.
//
// An acquire of unknown outcome that the lease history shows did not take
// effect (narrowAcquires gave it no epoch) is free too: its step returns
// the state unchanged.
func freeOp(op porcupine.Operation) bool {
	out, kind := op.Output.(fenceOutput), op.Input.(fenceInput).Kind
	if !out.Unknown {
		return false
	}
	return kind == fenceWrite || kind == fenceAcquire && out.Maybe != nil && len(*out.Maybe) == 0
}

// narrowAcquires narrows the acquires of history whose outcome the client
// never learned, from grants: every term the lease history shows (it is
// written in the acquire's own transaction). Each grant is a new epoch for
// one holder, and a holder name belongs to one contender, so an acquire of
// unknown outcome by h on q that took effect was granted one of the epochs
// the lease history shows for h on q that no acquire of known outcome
// returned; if there is none, it did not take effect. Which of several it
// took is left to the checker: an effect can land after the client gave
// up, so the order of calls does not decide it. Before issue 35's soak the
// checker saw every such acquire as "granted the next epoch, or nothing";
// twenty of them in one history made it give up (Unknown after 2 minutes).
//
// When start (the wall time the history's call times count from) is set,
// a grant is also held to the time the lease history gives it: the
// database's NOW(6) in the granting statement, which ran after the call
// (the server and the test read the same kernel clock; grantSlack allows
// for rounding). So an acquire can have taken only an epoch granted after
// it was called.
//
// It returns how many acquires it narrowed, how many of those did not take
// effect, and orphans: epochs granted to a holder that has no acquire of
// unknown outcome on that queue, which only an acquire reported as refused
// with nothing done (and left out of the history) could have taken. The
// checker then finds the history illegal: the epochs no longer follow.
func narrowAcquires(history []porcupine.Operation, grants []fenceGrant, start time.Time) (narrowed, none, orphans int) {
	type key struct{ queue, holder string }
	unclaimed := map[key]map[int64]time.Time{}
	for _, g := range grants {
		k := key{g.Term.Queue, g.Term.Holder}
		if unclaimed[k] == nil {
			unclaimed[k] = map[int64]time.Time{}
		}
		unclaimed[k][g.Term.Epoch] = g.At
	}
	pending := map[key][]int{}
	for i, op := range history {
		in, out := op.Input.(fenceInput), op.Output.(fenceOutput)
		if in.Kind != fenceAcquire {
			continue
		}
		k := key{in.Queue, in.Holder}
		switch {
		case out.Unknown:
			pending[k] = append(pending[k], i)
		case out.Result == fenceOK:
			delete(unclaimed[k], out.Epoch)
		}
	}
	for k, ops := range pending {
		for _, i := range ops {
			call := start.Add(time.Duration(history[i].Call) - grantSlack)
			epochs := fenceEpochs{}
			for e, at := range unclaimed[k] {
				if start.IsZero() || !at.Before(call) {
					epochs = append(epochs, e)
				}
			}
			slices.Sort(epochs)
			out := history[i].Output.(fenceOutput)
			out.Maybe = &epochs
			history[i].Output = out
			narrowed++
			if len(epochs) == 0 {
				none++
			}
		}
	}
	for k, epochs := range unclaimed {
		if len(pending[k]) == 0 {
			orphans += len(epochs)
		}
	}
	return narrowed, none, orphans
}

// fenceGrant is a term the lease history shows and when it was granted,
// by the database's clock.
type fenceGrant struct {
	Term mend.Term
	At   time.Time
}

// grantSlack is how much earlier than an acquire's call the database's
// clock may date the grant it made: the two clocks are the same kernel
// clock, read in microseconds by the server.
const grantSlack = 2 * time.Millisecond

// grantsOf turns lease history rows into grants.
func grantsOf(terms []storage.LeaseTerm) []fenceGrant {
	out := make([]fenceGrant, len(terms))
	for i, term := range terms {
		out[i] = fenceGrant{Term: term.Term, At: term.AcquiredAt}
	}
	return out
}

// leaseGrants reads every term the lease history of queues shows.
func leaseGrants(t *testing.T, s *storage.DB, queues []string) []fenceGrant {
	t.Helper()
	const limit = 1_000_000
	var grants []fenceGrant
	for _, q := range queues {
		h, err := s.LeaseHistory(t.Context(), q, limit)
		if err != nil {
			t.Fatalf("lease history of %s: %v", q, err)
		}
		if len(h) == limit {
			t.Fatalf("lease history of %s has %d terms or more: raise the limit", q, limit)
		}
		grants = append(grants, grantsOf(h)...)
	}
	return grants
}

// withoutFreeOps returns h without the operations freeOp leaves out.
func withoutFreeOps(h []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(h))
	for _, op := range h {
		if !freeOp(op) {
			out = append(out, op)
		}
	}
	return out
}

// fenceDatabaseEvidence reads the database's side of a fence run for a
// failure's evidence: every record's events and every queue's lease
// history and lease row.
func fenceDatabaseEvidence(t *testing.T, s *storage.DB, queues []string, records map[string][]mend.SourceID) map[string]any {
	t.Helper()
	out := map[string]any{}
	events := map[string][]mend.Event{}
	for queue, srcs := range records {
		for _, src := range srcs {
			rec, err := s.RecordGet(t.Context(), src)
			if err != nil {
				t.Logf("evidence: record %v: %v", src, err)
				continue
			}
			evs, err := s.RecordHistory(t.Context(), queue, rec.ID)
			if err != nil {
				t.Logf("evidence: events of %v: %v", src, err)
			}
			events[queue+"/"+src.MessageID+"/"+rec.ID.String()] = evs
		}
	}
	out["mend_events.json"] = events
	terms := map[string][]storage.LeaseTerm{}
	leases := map[string]storage.LeaseStatus{}
	for _, q := range queues {
		h, err := s.LeaseHistory(t.Context(), q, 100000)
		if err != nil {
			t.Logf("evidence: lease history of %s: %v", q, err)
		}
		terms[q] = h
		st, err := s.LeaseGet(t.Context(), q)
		if err != nil {
			t.Logf("evidence: lease of %s: %v", q, err)
		}
		leases[q] = st
	}
	out["mend_lease_history.json"] = terms
	out["mend_leases.json"] = leases
	return out
}

// fenceVerdict is what judgeFenceRun found.
type fenceVerdict struct {
	res        porcupine.CheckResult
	violations []string // epoch inversions in the event log
	summary    string   // the PROOF line
	evidence   string   // where the evidence is, if the run failed
}

// judgeFenceRun resolves a run's ambiguous writes, checks its history
// against the model and the event log for epoch inversions, and keeps the
// evidence if either fails.
func judgeFenceRun(t *testing.T, run *fenceRun, direct *storage.DB, queues []string, records map[string][]mend.SourceID, faults *linFaults, contenders int, faultText string) fenceVerdict {
	t.Helper()
	committed := run.resolve(t, direct)
	narrowed, none, orphans := narrowAcquires(run.history, leaseGrants(t, direct, queues), run.start)
	events, violations := epochOrder(t, direct, records)
	res, info, took := fenceCheck(run.history)
	v := fenceVerdict{res: res, violations: violations}
	v.summary = fmt.Sprintf("%d operations (%d of unknown outcome left out of the check: writes, and acquires the lease history shows did not take effect; they constrain nothing) (%d acquire, %d write, %d renew, %d release, %d observe) from %d contenders on %d queues; %d late writes under an old term; %d ambiguous writes (%d found committed by op_id); %d ambiguous acquires narrowed by the lease history (%d did not take effect), %d granted epochs no acquire claims; %d refused with nothing done; %d events in the log, %d epoch inversions; faults: %s; checker %s in %s",
		len(run.history), len(run.history)-len(withoutFreeOps(run.history)), run.byKind[fenceAcquire].Load(), run.byKind[fenceWrite].Load(), run.byKind[fenceRenew].Load(),
		run.byKind[fenceRelease].Load(), run.byKind[fenceObserve].Load(), contenders, len(queues), run.late.Load(), len(run.ambiguous), committed,
		narrowed, none, orphans, run.refused.Load(), events, len(violations), faultText, res, took.Round(time.Millisecond))
	if res != porcupine.Ok || len(violations) > 0 {
		v.evidence = keepEvidence(t, proofEvidence{
			Model: fenceModel.ToModel(), Info: info, History: run.history, Result: res, Summary: v.summary,
			Checked: func(i int) bool { return !freeOp(run.history[i]) },
			JSON: mergeJSON(fenceDatabaseEvidence(t, direct, queues, records), map[string]any{
				"epoch_inversions.json": violations,
				"faults.json":           faultLog(run.start, faults.chaos, faults.cutter),
				"routes.json":           faults.routes,
				"start.json":            run.start.UTC(), // the wall time call_ns and return_ns count from
			}),
		})
	}
	return v
}

// TestFenceLinearizable: leases and fenced writes against the real server,
// with network faults and cut commits, are linearizable against the fence
// model, and the event log never shows an epoch going down.
func TestFenceLinearizable(t *testing.T) {
	t.Parallel()
	contenders := sized(6, 9)
	total := sized(1500, 12000)
	_, direct, stores, queues, records, faults := fenceSetup(t, contenders)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	run := fenceWorkload(ctx, stores, direct, queues, records, fencedWrite, total)
	v := judgeFenceRun(t, run, direct, queues, records, faults, contenders, faults.describe(t))
	prooff(t, "%s", v.summary)
	if v.res != porcupine.Ok {
		t.Fatalf("the fence's history is %s against the model; evidence (history, faults, event log, lease history, visualisation) kept in %s", v.res, v.evidence)
	}
	if len(v.violations) > 0 {
		t.Fatalf("the event log shows epochs going down (evidence kept in %s):\n%v", v.evidence, v.violations)
	}
	if run.late.Load() == 0 {
		t.Errorf("no late write was made: the workload did not exercise fencing")
	}
}

// TestFenceLinearizableCatchesUnfencedWriter is the negative control: the
// same workload with writes that skip the fence must be rejected.
func TestFenceLinearizableCatchesUnfencedWriter(t *testing.T) {
	t.Parallel()
	_, direct, stores, _, _, faults := fenceSetup(t, 6)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const maxRuns = 5
	checked := 0
	for i := range maxRuns {
		// Queues of its own per run: the model starts every history at
		// epoch 0, so a run on the queues of an earlier one would be
		// illegal from its first grant, whatever the writer did.
		queues := []string{fmt.Sprintf("uf%da", i), fmt.Sprintf("uf%db", i)}
		records := fenceRecords(t, direct, queues)
		run := fenceWorkload(ctx, stores, direct, queues, records, unfencedWrite, 600)
		run.resolve(t, direct)
		narrowAcquires(run.history, leaseGrants(t, direct, queues), run.start)
		checked += len(run.history)
		res, info, took := fenceCheck(run.history)
		if res == porcupine.Illegal {
			viz := fenceVisualise(t, info)
			_, violations := epochOrder(t, direct, records)
			prooff(t, "unfenced writer rejected as %s after %d runs, %d operations checked (%d late writes; checker %s); the event log shows %d epoch inversions; faults: %s; visualisation: %s",
				res, i+1, checked, run.late.Load(), took.Round(time.Millisecond), len(violations), faults.describe(t), viz)
			return
		}
		t.Logf("run %d: unfenced writer not caught (%s) in %d operations", i, res, len(run.history))
	}
	t.Fatalf("the fence checker accepted an unfenced writer in %d runs (%d operations): it cannot be trusted", maxRuns, checked)
}

// fenceCheck checks h, without its free operations, against the model.
func fenceCheck(h []porcupine.Operation) (porcupine.CheckResult, porcupine.LinearizationInfo, time.Duration) {
	h = withoutFreeOps(h)
	begin := time.Now()
	res, info := porcupine.CheckOperationsVerbose(fenceModel.ToModel(), h, 2*time.Minute)
	return res, info, time.Since(begin)
}

// fenceVisualise writes porcupine's visualisation of info into a test
// temporary directory and returns its path.
func fenceVisualise(t *testing.T, info porcupine.LinearizationInfo) string {
	t.Helper()
	path := t.TempDir() + "/fence.html"
	if err := porcupine.VisualizePath(fenceModel.ToModel(), info, path); err != nil {
		t.Logf("write visualisation: %v", err)
		return ""
	}
	return path
}

// mergeJSON returns the union of evidence file maps.
func mergeJSON(ms ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

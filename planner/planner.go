package planner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mendq/mend"
)

// Defaults for Config.
const (
	MaxAttemptsDefault = 10
	GraceDefault       = 30 * time.Minute
	BackoffBaseDefault = time.Second
	BackoffMaxDefault  = 5 * time.Minute
	BatchSizeDefault   = 100
	// RunLimitDefault: a run takes at most this many due records, then
	// returns with Stats.More set so the reconciler can give other queues a
	// turn (a storm over many queues wakes each of them early instead of
	// draining one queue at a time).
	RunLimitDefault = 20
	// FollowLimitDefault: a follow-up run (RunFollow, for a queue whose
	// previous run stopped at RunLimit and so has woken it already) takes
	// at most this many due records: the rest of a storm's records on a
	// queue go in a few large runs rather than many of RunLimit.
	FollowLimitDefault = 100
	ActorDefault       = "planner"
	// MaxHostErrorsDefault: a run stops after this many host errors in a
	// row (the queue is due again on the reconciler's next pass).
	MaxHostErrorsDefault = 3
	// RetryMaxIntervals is how many reconcile intervals RetryDefaults
	// allows the backoff to grow to.
	RetryMaxIntervals = 4
	maxPasses         = 1000
)

// RetryDefaults returns the backoff base and cap for a planner run by a
// reconciler passing every interval: the base is BackoffBaseDefault or the
// interval if shorter, the cap RetryMaxIntervals intervals (at least the
// base). A record whose host calls keep failing is then retried at least
// every cap + interval, so a lost wake-up stays lost at most that long
// (plus the pass's own duration), instead of up to BackoffMaxDefault.
func RetryDefaults(interval time.Duration) (base, limit time.Duration) {
	base = min(BackoffBaseDefault, interval)
	return base, max(RetryMaxIntervals*interval, base)
}

// Store is the record store as the planner needs it.
type Store interface {
	// RecordsDue returns up to limit records of queue due by the database
	// clock, oldest first.
	RecordsDue(ctx context.Context, queue string, limit int) ([]mend.Record, error)
	// RecordAppend appends an event as a compare-and-set on p.Version; with
	// p.Fence set, only while that term is the queue's current lease.
	// Returns mend.ErrFenced if the term is not current (nothing written;
	// never retry), mend.ErrConflict if the version moved, mend.ErrNotFound
	// or mend.ErrStaleRecord if the record is gone, and mend.ErrAmbiguous if
	// the commit's outcome is unknown.
	RecordAppend(ctx context.Context, p mend.AppendParams) (int64, error)
}

// Lease is the term the planner acts under.
type Lease interface {
	// Term names the queue, holder and epoch every write is fenced with.
	Term() mend.Term
	// Done closes when the lease is lost or can no longer be trusted.
	Done() <-chan struct{}
}

// Hooks observe the planner; every field is optional. The binary binds them
// to metrics; tests use them to stop the planner at a chosen point.
type Hooks struct {
	// OnSettled runs after a record's outcome is settled.
	OnSettled func(queue string, outcome mend.BatchState, divergent bool)
	// OnWake runs after a wake-up publish, with its error (nil: sent).
	OnWake func(queue string, err error)
	// OnParked runs after a record is parked.
	OnParked func(queue, reason string)
	// OnAttemptFailed runs after an attempt on a record failed and was
	// recorded (rescheduled with backoff, or parked when it was the last):
	// what names the step that failed ("read batch", "transition batch",
	// "finish fan-out", "list live batches", "publish wake-up"), a small
	// fixed set fit for a metric label.
	OnAttemptFailed func(queue string, id mend.RecordID, what string, err error)
	// OnFenced runs when a write is refused because the term is stale.
	OnFenced func(queue string)
	// BeforeWake runs after a record is settled and before its wake-up is
	// published.
	BeforeWake func(ctx context.Context, rec mend.Record)
	// OnRepaired runs for each record whose repair the run finished and
	// made durable (its woken event, or its done event when there was
	// nothing to wake), when the run ends, with the repair SLO's latency
	// (storage.SLOStart: from the dead letter's failed_at, or the record's
	// latest retry, to the finishing event), read from the Store when it
	// has RepairLatencyOf, else failed_at to now on this process's clock.
	// Not called for a dead letter that carried no failure time. The
	// binary binds it to the mend_repair_latency_seconds histogram.
	OnRepaired func(queue string, latency time.Duration)
}

// Config configures a Planner. Batches, Waker and Store are required; the
// rest have documented defaults.
type Config struct {
	Store   Store
	Batches Batches
	Waker   Waker
	// MaxAttempts parks a record after this many failed attempts in a row
	// (host errors, failed wake-ups). Zero means MaxAttemptsDefault.
	MaxAttempts int
	// Grace is how long a record may wait on a batch that is merging or
	// cancelling before it is parked for an operator. Zero means
	// GraceDefault.
	Grace time.Duration
	// BackoffBase and BackoffMax bound the jittered exponential delay
	// between attempts. Zero means the defaults.
	BackoffBase, BackoffMax time.Duration
	// BackoffFunc, when set, replaces the jittered exponential backoff: it
	// returns the delay before the record's next attempt, given how many
	// attempts it has had (0-based). Tests use it to make retries due at once.
	BackoffFunc func(attempt int) time.Duration
	// BatchSize is how many due records are read at a time.
	BatchSize int
	// RunLimit is how many due records one Run takes at most before it
	// returns with Stats.More set, so that a reconciler serving many queues
	// gives each a turn (round robin) instead of draining them one by one.
	// Zero means RunLimitDefault; negative means no limit.
	RunLimit int
	// FollowLimit is how many due records a follow-up run (RunFollow) takes
	// at most: the run of a queue whose previous run stopped at RunLimit.
	// That run woke the queue, so what RunLimit is for (every queue of a
	// storm woken early) is served, and the queue's other records are
	// settled in fewer runs, each paying the lease, the due read, the host's
	// batch statements and the publish once. Zero means FollowLimitDefault;
	// below RunLimit means RunLimit; negative means no limit.
	FollowLimit int
	// MaxHostErrors stops a run after this many host errors in a row (a
	// failed batch read, transition, fan-out, live-batch list or publish),
	// so a hung or failing host cannot hold a run, and the reconciler's
	// pass, for a whole queue's worth of calls. Zero means
	// MaxHostErrorsDefault; each failed record is still rescheduled with
	// backoff first.
	MaxHostErrors int
	// Actor names the planner in event logs, e.g. "planner/host-1".
	Actor  string
	Hooks  Hooks
	Logger *slog.Logger
}

func (c Config) validate() error {
	switch {
	case c.Store == nil || c.Batches == nil || c.Waker == nil:
		return &mend.ValidationError{Field: "planner config", Reason: "Store, Batches and Waker are required"}
	case c.MaxAttempts < 0 || c.Grace < 0 || c.BackoffBase < 0 || c.BackoffMax < 0 || c.BatchSize < 0 || c.MaxHostErrors < 0:
		return &mend.ValidationError{Field: "planner config", Reason: "attempts, grace, backoff and batch size must not be negative"}
	case c.BackoffBase > 0 && c.BackoffMax > 0 && c.BackoffBase > c.BackoffMax:
		return &mend.ValidationError{Field: "planner config", Reason: "BackoffBase must not exceed BackoffMax"}
	}
	return nil
}

// Planner repairs one queue's due records at a time, under a lease.
type Planner struct {
	cfg Config
	log *slog.Logger

	// bareHostFailing, when set (tests only: the negative control of
	// HostFailingError), ends a run stopped by a failing host with the bare
	// ErrHostFailing, as before issue 47: "database unavailable", whatever
	// the host's last failure was.
	bareHostFailing bool
}

// New returns a Planner.
func New(cfg Config) (*Planner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, MaxAttemptsDefault)
	cfg.Grace = cmp.Or(cfg.Grace, GraceDefault)
	cfg.BackoffBase = cmp.Or(cfg.BackoffBase, BackoffBaseDefault)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, BackoffMaxDefault)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.RunLimit = cmp.Or(cfg.RunLimit, RunLimitDefault)
	cfg.FollowLimit = cmp.Or(cfg.FollowLimit, FollowLimitDefault)
	if cfg.RunLimit < 0 {
		cfg.FollowLimit = -1
	} else if cfg.FollowLimit >= 0 && cfg.FollowLimit < cfg.RunLimit {
		cfg.FollowLimit = cfg.RunLimit
	}
	cfg.MaxHostErrors = cmp.Or(cfg.MaxHostErrors, MaxHostErrorsDefault)
	cfg.Actor = cmp.Or(cfg.Actor, ActorDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.BackoffFunc == nil {
		base, limit := cfg.BackoffBase, cfg.BackoffMax
		cfg.BackoffFunc = func(n int) time.Duration { return Backoff(n, base, limit) }
	}
	return &Planner{cfg: cfg, log: log.With("component", "planner")}, nil
}

// Stats counts what one Run did.
type Stats struct {
	Settled, Woken, WakeFailed, Done, Waiting, Parked, Failed, Conflicts int
	// More reports that the run stopped at Config.RunLimit (FollowLimit,
	// for RunFollow): records may still be due. Run the queue again, with
	// RunFollow, after others have had a turn.
	More bool

	lastFailure error         // the run's last failed host step, for HostFailingError
	finished    []mend.Record // repairs finished, for Hooks.OnRepaired (reportRepaired)
}

// ErrHostFailing is returned by Run when it stopped after
// Config.MaxHostErrors host errors in a row. It matches mend.ErrUnavailable.
// Run returns it inside a *HostFailingError, which names the last failure.
var ErrHostFailing = fmt.Errorf("planner: host keeps failing; run stopped: %w", mend.ErrUnavailable)

// HostFailingError is Run's error when it stopped after Config.MaxHostErrors
// host errors in a row: it matches ErrHostFailing (so mend.ErrUnavailable)
// and also the last failure, so a refused statement (mend.ErrDenied, with
// its GRANT) is named as what it is, not as an unavailable database.
type HostFailingError struct {
	InARow int
	Last   error // nil if the run recorded none (should not happen)
}

func (e *HostFailingError) Error() string {
	if e.Last == nil {
		return ErrHostFailing.Error()
	}
	return fmt.Sprintf("planner: host keeps failing (%d errors in a row); run stopped; last: %v", e.InARow, e.Last)
}

// Unwrap returns ErrHostFailing and the last failure.
func (e *HostFailingError) Unwrap() []error {
	if e.Last == nil {
		return []error{ErrHostFailing}
	}
	return []error{ErrHostFailing, e.Last}
}

// Run repairs the lease's queue until no record is due, it has taken
// RunLimit records (then Stats.More says more may be due), the lease is
// lost, ctx ends, or the host fails MaxHostErrors times in a row. Records
// that fail are rescheduled with backoff, so a Run always ends.
//
// Returns mend.ErrFenced or mend.ErrLeaseLost when the lease is gone (stop
// acting on the queue; never retry), ctx's error when cancelled or past its
// deadline, ErrHostFailing when the host keeps failing, and a store error
// (mend.ErrUnavailable, mend.ErrAmbiguous, ...) when the record store
// fails; the reconciler tries again on its next pass.
func (p *Planner) Run(ctx context.Context, lease Lease) (Stats, error) {
	return p.run(ctx, lease, p.cfg.RunLimit)
}

// RunFollow is Run with Config.FollowLimit in place of RunLimit: the
// reconciler calls it for a queue whose previous run stopped at RunLimit
// (Stats.More), which that run has woken, so the queue's remaining records
// are taken in one larger run.
func (p *Planner) RunFollow(ctx context.Context, lease Lease) (Stats, error) {
	return p.run(ctx, lease, p.cfg.FollowLimit)
}

func (p *Planner) run(ctx context.Context, lease Lease, limit int) (Stats, error) {
	var st Stats
	term := lease.Term()
	defer p.reportRepaired(ctx, term.Queue, &st)
	hostErrs := 0 // host errors in a row
	taken := 0    // records this run has taken
	full := false // the last read returned all it asked for: more may be due
	for range maxPasses {
		n := p.cfg.BatchSize
		if limit > 0 {
			if taken >= limit {
				st.More = full
				return st, nil
			}
			n = min(n, limit-taken)
		}
		recs, err := p.cfg.Store.RecordsDue(ctx, term.Queue, n)
		if err != nil {
			return st, fmt.Errorf("planner: list due records: %w", err)
		}
		if len(recs) == 0 {
			return st, nil
		}
		taken, full = taken+len(recs), len(recs) == n
		// Settle each record (its own fenced events, host calls and
		// decision, as alone); the records that then owe a wake-up are
		// woken together, with one publish, after the loop.
		var owed []owedRecord
		var stop error
		for i, step := range p.steps(ctx, lease, recs, &st) {
			rec := recs[i]
			if err := alive(ctx, lease); err != nil {
				stop = err
				break
			}
			failedBefore := st.Failed + st.WakeFailed
			next, owes, err := step()
			if owes {
				owed = append(owed, owedRecord{rec: next, cameSettled: rec.State == mend.StateSettled})
			}
			if st.Failed+st.WakeFailed > failedBefore {
				hostErrs++
			} else if err == nil {
				hostErrs = 0
			}
			if err := p.runError(term, err, &st); err != nil {
				stop = err
				break
			}
			if hostErrs >= p.cfg.MaxHostErrors {
				stop = ErrHostFailing
				break
			}
		}
		if len(owed) > 0 && !errors.Is(stop, mend.ErrFenced) && !errors.Is(stop, mend.ErrLeaseLost) && ctx.Err() == nil {
			// Settled records owe their wake-up whatever stopped the loop
			// (a host failing on another record must not delay it); a lost
			// lease or cancelled run leaves them settled and due.
			failedBefore := st.Failed + st.WakeFailed
			err := p.wakeAll(ctx, lease, owed, &st)
			if st.Failed+st.WakeFailed > failedBefore {
				hostErrs++
			}
			if err := p.runError(term, err, &st); err != nil && stop == nil {
				stop = err
			}
		}
		if errors.Is(stop, ErrHostFailing) || (stop == nil && hostErrs >= p.cfg.MaxHostErrors) {
			p.log.WarnContext(ctx, "host keeps failing; stopping the run", "queue", term.Queue, "errors_in_a_row", hostErrs, "last", st.lastFailure)
			if p.bareHostFailing {
				return st, ErrHostFailing
			}
			return st, &HostFailingError{InARow: hostErrs, Last: st.lastFailure}
		}
		if stop != nil {
			return st, stop
		}
	}
	return st, nil
}

func alive(ctx context.Context, lease Lease) error {
	select {
	case <-lease.Done():
		return fmt.Errorf("planner: %w", mend.ErrLeaseLost)
	default:
		return ctx.Err()
	}
}

// owedRecord is a settled record a run owes a wake-up; cameSettled
// reports that it was already settled when the run read it (an earlier
// wake-up failed or was cut off), so it may hold a wake intent.
type owedRecord struct {
	rec         mend.Record
	cameSettled bool
}

// runError sorts an error of one record's repair: nil for the ones the
// run goes on after (the record moved or went away under it: the next read
// decides again), the error itself for the ones that stop the run.
func (p *Planner) runError(term mend.Term, err error, st *Stats) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mend.ErrConflict), errors.Is(err, mend.ErrNotFound), errors.Is(err, mend.ErrStaleRecord):
		st.Conflicts++
		return nil
	case errors.Is(err, mend.ErrFenced):
		if p.cfg.Hooks.OnFenced != nil {
			p.cfg.Hooks.OnFenced(term.Queue)
		}
	}
	return err
}

// prepare settles a pending or waiting record; owes reports whether the
// record (settled now or before) owes a wake-up.
func (p *Planner) prepare(ctx context.Context, lease Lease, rec mend.Record, st *Stats) (mend.Record, bool, error) {
	switch rec.State {
	case mend.StatePending, mend.StateWaiting:
		return p.settle(ctx, lease, rec, st)
	case mend.StateSettled:
		return rec, true, nil
	}
	return rec, false, nil
}

// eventData is the JSON carried by the planner's events.
type eventData struct {
	Action    string          `json:"action,omitempty"`
	Outcome   mend.BatchState `json:"outcome,omitempty"`
	Divergent bool            `json:"divergent,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	BatchID   string          `json:"batch_id,omitempty"`
	MessageID string          `json:"message_id,omitempty"`
	Error     string          `json:"error,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	// Records is how many records one wake-up serves (wake intents and
	// the events of a coalesced wake-up).
	Records int `json:"records,omitempty"`
	// Covers lists, on a wake intent, the records whose settlement the
	// wake-up it names follows, each at the version it was owed at
	// ("<record id>/v<version>", coverKey): a later run may send that
	// message ID again only for these records at these versions (see
	// resumable).
	Covers []string `json:"covers,omitempty"`
}

// write appends one fenced event and returns the record as it now is.
func (p *Planner) write(ctx context.Context, lease Lease, rec mend.Record, kind mend.EventKind, state mend.State,
	attempts int, lastErr string, retryIn time.Duration, data eventData) (mend.Record, error) {
	term := lease.Term()
	raw, err := json.Marshal(data)
	if err != nil {
		return rec, fmt.Errorf("planner: encode event: %w", err)
	}
	v, err := p.cfg.Store.RecordAppend(ctx, mend.AppendParams{
		Source: rec.Source, RecordID: rec.ID, Version: rec.Version, Fence: &term,
		Kind: kind, Actor: p.cfg.Actor, OpID: mend.NewOpID(), Epoch: term.Epoch, Data: raw,
		State: state, Attempts: attempts, LastError: lastErr, RetryIn: retryIn,
	})
	if err != nil {
		return rec, fmt.Errorf("planner: record %s: append %s: %w", rec.ID, kind, err)
	}
	if state != rec.State {
		rec.StateAge = 0
	}
	rec.Version, rec.State, rec.Attempts, rec.LastError, rec.Epoch = v, state, attempts, lastErr, term.Epoch
	return rec, nil
}

// settle drives the batch outcome; settled reports whether the record now
// owes a wake-up.
func (p *Planner) settle(ctx context.Context, lease Lease, rec mend.Record, st *Stats) (mend.Record, bool, error) {
	queue := rec.Source.Queue
	for range 3 { // a batch version conflict re-reads and decides again
		var batch *mend.Batch
		b, err := p.cfg.Batches.BatchGet(ctx, queue, rec.Target.BatchID)
		var spelling *mend.SpellingError
		switch {
		case err == nil:
			batch = &b
		case errors.As(err, &spelling):
			// Checked before ErrNotFound, which it also matches: a batch
			// the host finds only under another spelling is not "nothing
			// to repair" but a question for an operator.
			return rec, false, p.parkSpelling(ctx, lease, rec, "read batch", spelling, st)
		case errors.Is(err, mend.ErrNotFound):
		default:
			return p.attemptFailed(ctx, lease, rec, "read batch", err, st)
		}
		var waited time.Duration
		if rec.State == mend.StateWaiting {
			waited = rec.StateAge
		}
		d := Decide(Input{Desired: rec.Target.Desired, Batch: batch, Waited: waited, Grace: p.cfg.Grace})
		moved := false // this pass's transition made the batch terminal
		switch d.Action {
		case ActTransition:
			if err := alive(ctx, lease); err != nil {
				return rec, false, err
			}
			var err error
			if asRead, ok := p.cfg.Batches.(BatchesAsRead); ok {
				*batch, err = asRead.BatchTransitionFrom(ctx, *batch, d.To)
				moved = err == nil
			} else {
				_, err = p.cfg.Batches.BatchTransition(ctx, queue, batch.ID, batch.Version, d.To)
			}
			var spelling *mend.SpellingError
			switch {
			case errors.Is(err, mend.ErrConflict):
				continue
			case errors.As(err, &spelling):
				return rec, false, p.parkSpelling(ctx, lease, rec, "transition batch", spelling, st)
			case err != nil:
				return p.attemptFailed(ctx, lease, rec, "transition batch", err, st)
			}
			fallthrough
		case ActFinish:
			// The snapshot is the cause the host's users see on each
			// member request (its last error and failure context).
			var err error
			if asRead, ok := p.cfg.Batches.(BatchesAsRead); ok {
				err = asRead.BatchFinishFrom(ctx, *batch, rec.Snapshot, moved)
			} else {
				err = p.cfg.Batches.BatchFinish(ctx, queue, batch.ID, rec.Snapshot)
			}
			if err != nil {
				return p.hostFailed(ctx, lease, rec, "finish fan-out", err, st)
			}
			fallthrough
		default:
			return p.apply(ctx, lease, rec, d, waited, st)
		}
	}
	return rec, false, fmt.Errorf("planner: batch %q kept moving: %w", rec.Target.BatchID, mend.ErrConflict)
}

// apply writes rec's event for decision d once the host work d asks for
// (a transition, a fan-out) is done: waiting, parked, or settled, in which
// case the record owes a wake-up.
func (p *Planner) apply(ctx context.Context, lease Lease, rec mend.Record, d Decision, waited time.Duration, st *Stats) (mend.Record, bool, error) {
	queue := rec.Source.Queue
	data := eventData{Action: d.Action.String(), Outcome: d.Outcome, Divergent: d.Divergent, Reason: d.Reason, BatchID: rec.Target.BatchID}
	switch d.Action {
	case ActWait:
		retry := min(p.cfg.BackoffFunc(rec.Attempts), max(p.cfg.Grace-waited, 0)+time.Millisecond)
		_, err := p.write(ctx, lease, rec, mend.EventWaiting, mend.StateWaiting, rec.Attempts+1, d.Reason, retry, data)
		if err == nil {
			st.Waiting++
			// Say why: an operator looking at a queue that is not moving
			// needs the reason without opening the record.
			p.log.InfoContext(ctx, "waiting", "queue", queue, "record_id", rec.ID.String(), "batch_id", rec.Target.BatchID,
				"reason", d.Reason, "retry_in", retry, "waited", waited)
		}
		return rec, false, err
	case ActPark:
		return rec, false, p.park(ctx, lease, rec, d.Reason, data, st)
	}
	rec, err := p.write(ctx, lease, rec, mend.EventSettled, mend.StateSettled, 0, "", 0, data)
	if err != nil {
		return rec, false, err
	}
	return p.settled(ctx, rec, d, st), true, nil
}

// settled counts, reports and logs a record whose settled event was
// written.
func (p *Planner) settled(ctx context.Context, rec mend.Record, d Decision, st *Stats) mend.Record {
	st.Settled++
	if p.cfg.Hooks.OnSettled != nil {
		p.cfg.Hooks.OnSettled(rec.Source.Queue, d.Outcome, d.Divergent)
	}
	p.log.InfoContext(ctx, "outcome settled", "queue", rec.Source.Queue, "record_id", rec.ID.String(), "batch_id", rec.Target.BatchID,
		"outcome", string(d.Outcome), "divergent", d.Divergent, "epoch", rec.Epoch)
	return rec
}

// settleMany writes the settled events of records whose host calls were
// made together (steps), all in one fenced transaction when the Store has
// RecordAppendMany (one packet and COMMIT per appendManyMax records), and
// sets each one's step to report its own result when the run reaches it.
// Each event is the very one apply would have written alone, a
// compare-and-set on the record's own version; a record that moved under
// the run fails alone (the next read decides again), and a batch that
// fails as a whole (a lost term, a store error) is each record's error.
// Without RecordAppendMany, or for a single record, apply writes each.
func (p *Planner) settleMany(ctx context.Context, lease Lease, recs []mend.Record, jobs []settleJob, steps []step, st *Stats) {
	am, ok := p.cfg.Store.(appendManyStore)
	if !ok || len(jobs) < 2 || alive(ctx, lease) != nil {
		return
	}
	term := lease.Term()
	for len(jobs) > 0 {
		chunk := jobs[:min(len(jobs), appendManyMax)]
		jobs = jobs[len(chunk):]
		ps := make([]mend.AppendParams, len(chunk))
		for n, j := range chunk {
			rec, d := recs[j.i], j.d
			raw, err := json.Marshal(eventData{Action: d.Action.String(), Outcome: d.Outcome, Divergent: d.Divergent, Reason: d.Reason, BatchID: rec.Target.BatchID})
			if err != nil {
				return // apply writes each, as without RecordAppendMany
			}
			ps[n] = mend.AppendParams{Source: rec.Source, RecordID: rec.ID, Version: rec.Version, Fence: &term,
				Kind: mend.EventSettled, Actor: p.cfg.Actor, OpID: mend.NewOpID(), Epoch: term.Epoch, Data: raw,
				State: mend.StateSettled}
		}
		res, err := am.RecordAppendMany(ctx, ps)
		for n, j := range chunk {
			rec, d := recs[j.i], j.d
			switch {
			case err != nil:
				err := fmt.Errorf("planner: record %s: append %s: %w", rec.ID, mend.EventSettled, err)
				steps[j.i] = func() (mend.Record, bool, error) { return rec, false, err }
			case res[n] != nil:
				err := fmt.Errorf("planner: record %s: append %s: %w", rec.ID, mend.EventSettled, res[n])
				steps[j.i] = func() (mend.Record, bool, error) { return rec, false, err }
			default:
				if rec.State != mend.StateSettled {
					rec.StateAge = 0
				}
				rec.Version, rec.State, rec.Attempts, rec.LastError, rec.Epoch = rec.Version+1, mend.StateSettled, 0, "", term.Epoch
				steps[j.i] = func() (mend.Record, bool, error) { return p.settled(ctx, rec, d, st), true, nil }
			}
		}
	}
}

// settleJob is a record of a run whose host calls are done and whose
// decision settles it: recs[i] under decision d.
type settleJob struct {
	i int
	d Decision
}

// hostFailed records a host call's failure on rec: parked at once for a
// spelling (see parkSpelling), else a failed attempt.
func (p *Planner) hostFailed(ctx context.Context, lease Lease, rec mend.Record, what string, err error, st *Stats) (mend.Record, bool, error) {
	var spelling *mend.SpellingError
	if errors.As(err, &spelling) {
		return rec, false, p.parkSpelling(ctx, lease, rec, what, spelling, st)
	}
	return p.attemptFailed(ctx, lease, rec, what, err, st)
}

// step is what a run does with one of the records it read: it returns the
// record as it now is and whether it owes a wake-up.
type step func() (mend.Record, bool, error)

// steps returns one step per record of recs. Each is prepare, except when
// the Batches port has BatchesMany and more than one record is to be
// settled: then the host calls of all of those are made here, together
// (one batch read, one transition call, one fan-out call), and their steps
// write each record's own events as settle would have after the same
// calls, the settled ones together (settleMany). A record whose transition met a conflict is settled alone (settle
// reads its batch again and decides again).
func (p *Planner) steps(ctx context.Context, lease Lease, recs []mend.Record, st *Stats) []step {
	steps := make([]step, len(recs))
	var todo []int // records to settle
	for i, rec := range recs {
		steps[i] = func() (mend.Record, bool, error) { return p.prepare(ctx, lease, rec, st) }
		if rec.State == mend.StatePending || rec.State == mend.StateWaiting {
			todo = append(todo, i)
		}
	}
	bm, ok := p.cfg.Batches.(BatchesMany)
	if !ok || len(todo) < 2 || alive(ctx, lease) != nil {
		return steps
	}
	ids := make([]string, len(todo))
	for n, i := range todo {
		ids[n] = recs[i].Target.BatchID
	}
	batches, errs := bm.BatchGetMany(ctx, recs[todo[0]].Source.Queue, ids)
	type job struct {
		i      int
		d      Decision
		waited time.Duration
		b      mend.Batch
		moved  bool
	}
	var moves, finishes []job
	for n, i := range todo {
		rec, err := recs[i], errs[n]
		var batch *mend.Batch
		switch {
		case err == nil:
			batch = &batches[n]
		case !errors.Is(err, mend.ErrNotFound) || errors.As(err, new(*mend.SpellingError)):
			steps[i] = func() (mend.Record, bool, error) { return p.hostFailed(ctx, lease, rec, "read batch", err, st) }
			continue
		}
		var waited time.Duration
		if rec.State == mend.StateWaiting {
			waited = rec.StateAge
		}
		d := Decide(Input{Desired: rec.Target.Desired, Batch: batch, Waited: waited, Grace: p.cfg.Grace})
		switch d.Action {
		case ActTransition:
			moves = append(moves, job{i: i, d: d, waited: waited, b: *batch})
		case ActFinish:
			finishes = append(finishes, job{i: i, d: d, waited: waited, b: *batch})
		default:
			steps[i] = func() (mend.Record, bool, error) { return p.apply(ctx, lease, rec, d, waited, st) }
		}
	}
	if len(moves) > 0 {
		if alive(ctx, lease) != nil {
			return steps // the run stops before its next record
		}
		bs, to := make([]mend.Batch, len(moves)), make([]mend.BatchState, len(moves))
		for n, j := range moves {
			bs[n], to[n] = j.b, j.d.To
		}
		now, errs := bm.BatchTransitionMany(ctx, bs, to)
		for n, j := range moves {
			rec, err := recs[j.i], errs[n]
			switch {
			case err == nil:
				j.b, j.moved = now[n], true
				finishes = append(finishes, j)
			case errors.Is(err, mend.ErrConflict):
				// Decide again for this one alone, from a fresh read.
				steps[j.i] = func() (mend.Record, bool, error) { return p.settle(ctx, lease, rec, st) }
			default:
				steps[j.i] = func() (mend.Record, bool, error) { return p.hostFailed(ctx, lease, rec, "transition batch", err, st) }
			}
		}
	}
	if len(finishes) == 0 {
		return steps
	}
	fs := make([]mend.FinishParams, len(finishes))
	for n, j := range finishes {
		// The snapshot is the cause the host's users see on each member
		// request (its last error and failure context).
		fs[n] = mend.FinishParams{Batch: j.b, Cause: recs[j.i].Snapshot, Moved: j.moved}
	}
	var settles []settleJob
	for n, err := range bm.BatchFinishMany(ctx, fs) {
		j, rec := finishes[n], recs[finishes[n].i]
		if err != nil {
			steps[j.i] = func() (mend.Record, bool, error) { return p.hostFailed(ctx, lease, rec, "finish fan-out", err, st) }
		} else {
			steps[j.i] = func() (mend.Record, bool, error) { return p.apply(ctx, lease, rec, j.d, j.waited, st) }
			settles = append(settles, settleJob{i: j.i, d: j.d})
		}
	}
	p.settleMany(ctx, lease, recs, settles, steps, st)
	return steps
}

// attemptFailed records a failed attempt with backoff, or parks the record
// once MaxAttempts is reached, so a poison record never blocks its queue.
func (p *Planner) attemptFailed(ctx context.Context, lease Lease, rec mend.Record, what string, cause error, st *Stats) (mend.Record, bool, error) {
	if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return rec, false, cause
	}
	attempt := rec.Attempts + 1
	msg := what + ": " + cause.Error()
	st.lastFailure = fmt.Errorf("%s: %w", what, cause)
	if p.cfg.Hooks.OnAttemptFailed != nil {
		p.cfg.Hooks.OnAttemptFailed(rec.Source.Queue, rec.ID, what, cause)
	}
	data := eventData{Error: msg, Attempt: attempt, BatchID: rec.Target.BatchID}
	// Waiting records count their checks in Attempts (for backoff) and are
	// bounded by Grace instead, also when the checks themselves fail.
	if rec.State == mend.StateWaiting {
		if rec.StateAge >= p.cfg.Grace {
			return rec, false, p.park(ctx, lease, rec, fmt.Sprintf("still waiting after %s and the batch cannot be read; last: %s", p.cfg.Grace, msg), data, st)
		}
	} else if attempt >= p.cfg.MaxAttempts {
		rec.Attempts = attempt // the parked record's attempts (and failures) are the ones its reason counts
		return rec, false, p.park(ctx, lease, rec, fmt.Sprintf("gave up after %d attempts; last: %s", attempt, msg), data, st)
	}
	retry := p.cfg.BackoffFunc(attempt - 1)
	if rec.State == mend.StateWaiting {
		// Look again no later than the grace period's end.
		retry = min(retry, p.cfg.Grace-rec.StateAge+time.Millisecond)
	}
	_, err := p.write(ctx, lease, rec, mend.EventAttemptFailed, rec.State, attempt, msg, retry, data)
	if err == nil {
		st.Failed++
		p.log.WarnContext(ctx, "attempt failed", "queue", rec.Source.Queue, "record_id", rec.ID.String(), "attempt", attempt, "err", cause)
	}
	return rec, false, err
}

// parkSpelling parks a record because the host matched a row spelled
// differently from the one asked for. Retrying cannot help and settling as
// not found could drop a real repair, so an operator decides; the reason
// names both spellings.
func (p *Planner) parkSpelling(ctx context.Context, lease Lease, rec mend.Record, what string, e *mend.SpellingError, st *Stats) error {
	reason := fmt.Sprintf("%s: host %s %q matched a row stored as %q (the host's collation is not byte-exact); mend acts only on exact identities, so an operator must decide",
		what, e.Field, e.Asked, e.Stored)
	return p.park(ctx, lease, rec, reason, eventData{BatchID: rec.Target.BatchID, Error: e.Error()}, st)
}

func (p *Planner) park(ctx context.Context, lease Lease, rec mend.Record, reason string, data eventData, st *Stats) error {
	data.Reason = reason
	if _, err := p.write(ctx, lease, rec, mend.EventParked, mend.StateParked, rec.Attempts, reason, 0, data); err != nil {
		return err
	}
	st.Parked++
	if p.cfg.Hooks.OnParked != nil {
		p.cfg.Hooks.OnParked(rec.Source.Queue, reason)
	}
	p.log.WarnContext(ctx, "record parked for an operator", "queue", rec.Source.Queue, "record_id", rec.ID.String(), "reason", reason)
	return nil
}

// repaired notes a finished repair for Hooks.OnRepaired, which
// reportRepaired calls when the run ends.
func (p *Planner) repaired(rec mend.Record, st *Stats) {
	if p.cfg.Hooks.OnRepaired == nil || rec.Snapshot.FailedAt.IsZero() {
		return
	}
	st.finished = append(st.finished, rec)
}

// repairLatencyStore is a Store that computes the repair SLO's latency of
// records (storage.DB): the histogram then observes the very numbers mend
// status reports (issue 47: one SLO, storage.SLOStart).
type repairLatencyStore interface {
	RepairLatencyOf(ctx context.Context, queue string, ids []mend.RecordID) (map[mend.RecordID]time.Duration, error)
}

// reportRepaired reports the run's finished repairs to Hooks.OnRepaired
// with their SLO latency, read in one statement after the run (a record
// resolved by an operator is never among them; a retried one counts from
// its retry). A Store without RepairLatencyOf, or a failed read, falls
// back to failed_at to now on this process's clock.
func (p *Planner) reportRepaired(ctx context.Context, queue string, st *Stats) {
	recs := st.finished
	st.finished = nil
	if len(recs) == 0 {
		return
	}
	if ls, ok := p.cfg.Store.(repairLatencyStore); ok {
		ids := make([]mend.RecordID, len(recs))
		for i, r := range recs {
			ids[i] = r.ID
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		lat, err := ls.RepairLatencyOf(ctx, queue, ids)
		if err == nil {
			for _, r := range recs {
				if d, ok := lat[r.ID]; ok {
					p.cfg.Hooks.OnRepaired(queue, d)
				}
			}
			return
		}
		p.log.WarnContext(ctx, "read the repair latency of finished records; observing failed_at to now instead", "queue", queue, "err", err)
	}
	for _, r := range recs {
		p.cfg.Hooks.OnRepaired(queue, max(time.Since(r.Snapshot.FailedAt), 0))
	}
}

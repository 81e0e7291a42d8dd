package stuck

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mendq/mend"
)

// Defaults for Config.
const (
	// BoundDefault is how long a queue must be seen quiet (live batches,
	// nothing in flight, nothing moving) before it is woken: three minutes,
	// longer than anything the real queue leaves quiet on purpose while
	// work is in flight (a build poll holds its delivery for 2-5 s between
	// polls, a partition's consumer row is released after about 60 s idle),
	// short enough that a stuck queue is woken while someone still cares.
	BoundDefault = 3 * time.Minute
	// ActorDefault is the actor of the records the scan creates.
	ActorDefault = "stuck-scan"
	// MaxLiveListed bounds the live batches a record's snapshot lists.
	MaxLiveListed = 100
)

// Scanner reads the host. *host.DB implements it.
type Scanner interface {
	// StuckScan returns every queue with live batches, what is in flight
	// for each, and the host database's clock.
	StuckScan(ctx context.Context) (mend.HostScan, error)
}

// Store is mend's record store as the scan needs it. *storage.DB
// implements it.
type Store interface {
	// RecordCreate creates the record if its source identity is new and
	// reports whether this call created it (first writer wins).
	RecordCreate(ctx context.Context, p mend.CreateParams) (mend.Record, bool, error)
	// QueueHasDue reports whether queue has a record due now: mend's own
	// planner will then wake the queue, so the scan leaves it alone.
	QueueHasDue(ctx context.Context, queue string) (bool, error)
}

// Hooks observe the scan; every field is optional.
type Hooks struct {
	// OnWake runs for each stuck-queue record a scan created (a wake-up
	// is now owed to the queue).
	OnWake func(queue string, rec mend.Record)
	// OnScan runs after each scan with its report.
	OnScan func(r Report)
}

// Config configures a Detector. Scanner and Store are required.
type Config struct {
	Scanner Scanner
	Store   Store
	// Bound is how long a queue must stay quiet, by the host database's
	// clock, between the first scan that saw it quiet and the one that
	// records it stuck. Zero means BoundDefault; it must not be negative.
	Bound time.Duration
	// Actor is the actor of the records it creates. Empty means
	// ActorDefault.
	Actor  string
	Logger *slog.Logger
	Hooks  Hooks
}

// Detector is the level-triggered stuck-queue scan. It remembers, per
// queue, the first scan that saw it quiet; it is safe for concurrent use,
// though scans are meant to run one at a time.
type Detector struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	seen map[string]observation
}

// observation is the first scan that saw a queue quiet in its current state.
type observation struct {
	fingerprint string
	marker      uint64
	since       time.Time
	recorded    bool // a record for this state exists (created now or before)
}

// New returns a Detector.
func New(cfg Config) (*Detector, error) {
	if cfg.Scanner == nil || cfg.Store == nil {
		return nil, errors.New("stuck: Scanner and Store are required")
	}
	if cfg.Bound < 0 {
		return nil, fmt.Errorf("stuck: Bound must not be negative, got %s", cfg.Bound)
	}
	cfg.Bound = cmp.Or(cfg.Bound, BoundDefault)
	cfg.Actor = cmp.Or(cfg.Actor, ActorDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Detector{cfg: cfg, log: log.With("component", "stuck"), seen: map[string]observation{}}, nil
}

// Bound returns the configured bound.
func (d *Detector) Bound() time.Duration { return d.cfg.Bound }

// Verdict is what a scan concluded about one queue.
type Verdict string

// The verdicts.
const (
	// Busy: something is in flight that will wake the queue's planner
	// (or a mend record of the queue is due).
	Busy Verdict = "busy"
	// Quiet: nothing in flight, but not yet for the bound.
	Quiet Verdict = "quiet"
	// Woken: quiet for the bound; this scan recorded a wake-up for it.
	Woken Verdict = "woken"
	// Recorded: quiet for the bound in a state already woken once (by this
	// or another replica); not woken again until its state changes.
	Recorded Verdict = "recorded"
)

// QueueReport is one queue of a Report.
type QueueReport struct {
	Queue   string
	Verdict Verdict
	// Live is how many live batches it has; Target the smallest.
	Live   int
	Target string
	// QuietFor is how long it has been seen quiet (Quiet, Woken,
	// Recorded), by the host database's clock.
	QuietFor time.Duration
	// InFlight names a few of the messages that keep it busy (Busy).
	InFlight []string
	// Record is the stuck-queue record (Woken, Recorded when known).
	Record mend.RecordID
}

// Report is what one scan found.
type Report struct {
	At     time.Time // the host database's clock
	Queues []QueueReport
	// Unattributed counts in-flight messages whose queue could not be
	// read: while there are any, no queue is woken.
	Unattributed int
}

// Count returns how many queues got verdict v.
func (r Report) Count(v Verdict) int {
	n := 0
	for _, q := range r.Queues {
		if q.Verdict == v {
			n++
		}
	}
	return n
}

// Fingerprint identifies a queue's live state: its name and every live
// batch's ID, state and version, length-prefixed. Any transition of any
// live batch changes it; so does a batch becoming live or leaving.
func Fingerprint(queue string, live []mend.Batch) string {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(queue)
	for _, b := range live {
		put(b.ID)
		put(string(b.State))
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(b.Version))
		h.Write(v[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Source is the synthetic source identity of the stuck-queue record for a
// queue in the state fingerprint names: (queue, mend.StuckTopic, queue,
// "stuck/<fingerprint>").
func Source(queue, fingerprint string) mend.SourceID {
	return mend.SourceID{Queue: queue, Topic: mend.StuckTopic, Partition: queue, MessageID: "stuck/" + fingerprint}
}

// snapshot is the payload of a stuck-queue record: what the scan saw.
type snapshot struct {
	Reason      string      `json:"reason"`
	QuietSince  time.Time   `json:"quiet_since"`
	ObservedAt  time.Time   `json:"observed_at"`
	Bound       string      `json:"bound"`
	LiveBatches int         `json:"live_batches"`
	Live        []liveBatch `json:"live"`
}

type liveBatch struct {
	ID      string          `json:"id"`
	State   mend.BatchState `json:"state"`
	Version int64           `json:"version"`
}

// Scan runs one pass: it reads the host, updates what it remembers, and
// records a wake-up for every queue seen quiet in the same state, with the
// same marker, across the bound. The record is the planner's to finish: it
// wakes the queue under the queue's fence with the wake-up every repair
// sends (the smallest live batch, a deterministic message ID), and its
// events are the queue's event log.
//
// A queue is quiet when it has live batches, nothing in flight (see
// host.DB.StuckScan) and no mend record due. Anything else forgets the
// queue, so the bound restarts: a wake-up published is in flight until the
// host's consumer acknowledges it, and only then can the queue be seen
// quiet again. A queue in a state already recorded is not woken again
// (Recorded) until its state changes.
//
// Returns the host's or the store's error; a scan cut off part way has
// recorded what it recorded, and the next scan goes on.
func (d *Detector) Scan(ctx context.Context) (Report, error) {
	scan, err := d.cfg.Scanner.StuckScan(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("stuck: scan the host: %w", err)
	}
	rep := Report{At: scan.At, Unattributed: len(scan.Unattributed)}
	d.mu.Lock()
	defer d.mu.Unlock()
	present := map[string]bool{}
	for _, q := range scan.Queues {
		present[q.Queue] = true
		qr, err := d.judge(ctx, scan, q)
		if err != nil {
			return rep, err
		}
		rep.Queues = append(rep.Queues, qr)
	}
	for q := range d.seen {
		if !present[q] {
			delete(d.seen, q) // no live batch any more
		}
	}
	if d.cfg.Hooks.OnScan != nil {
		d.cfg.Hooks.OnScan(rep)
	}
	return rep, nil
}

func (d *Detector) judge(ctx context.Context, scan mend.HostScan, q mend.QueueScan) (QueueReport, error) {
	qr := QueueReport{Queue: q.Queue, Live: len(q.Live)}
	if len(q.Live) > 0 {
		qr.Target = q.Live[0].ID
	}
	busy := append([]string(nil), q.InFlight...)
	if len(busy) == 0 && len(scan.Unattributed) > 0 {
		busy = append(busy, scan.Unattributed...)
	}
	if len(busy) == 0 && len(q.Live) > 0 {
		due, err := d.cfg.Store.QueueHasDue(ctx, q.Queue)
		if err != nil {
			return qr, fmt.Errorf("stuck: queue %q: due records: %w", q.Queue, err)
		}
		if due {
			busy = append(busy, "mend record due")
		}
	}
	if len(q.Live) == 0 || len(busy) > 0 {
		delete(d.seen, q.Queue)
		qr.Verdict = Busy
		qr.InFlight = busy[:min(len(busy), 5)]
		return qr, nil
	}
	fp := Fingerprint(q.Queue, q.Live)
	obs, ok := d.seen[q.Queue]
	if !ok || obs.fingerprint != fp || obs.marker != q.Marker || scan.At.Before(obs.since) {
		d.seen[q.Queue] = observation{fingerprint: fp, marker: q.Marker, since: scan.At}
		qr.Verdict = Quiet
		return qr, nil
	}
	qr.QuietFor = scan.At.Sub(obs.since)
	if qr.QuietFor < d.cfg.Bound {
		qr.Verdict = Quiet
		return qr, nil
	}
	if obs.recorded {
		qr.Verdict = Recorded
		return qr, nil
	}
	rec, created, err := d.record(ctx, q, fp, obs.since, scan.At)
	if err != nil {
		return qr, err
	}
	obs.recorded = true
	d.seen[q.Queue] = obs
	qr.Record = rec.ID
	if !created {
		qr.Verdict = Recorded
		return qr, nil
	}
	qr.Verdict = Woken
	d.log.InfoContext(ctx, "queue stuck: wake-up recorded", "queue", q.Queue, "record_id", rec.ID.String(),
		"live_batches", len(q.Live), "target", qr.Target, "quiet_for", qr.QuietFor)
	if d.cfg.Hooks.OnWake != nil {
		d.cfg.Hooks.OnWake(q.Queue, rec)
	}
	return qr, nil
}

// record creates the stuck-queue record for q in state fp.
func (d *Detector) record(ctx context.Context, q mend.QueueScan, fp string, since, at time.Time) (mend.Record, bool, error) {
	quiet := at.Sub(since).Round(time.Second)
	reason := fmt.Sprintf("queue stuck: %d live batch(es) and nothing in flight to wake its planner for %s (bound %s)", len(q.Live), quiet, d.cfg.Bound)
	s := snapshot{Reason: reason, QuietSince: since, ObservedAt: at, Bound: d.cfg.Bound.String(), LiveBatches: len(q.Live)}
	for _, b := range q.Live[:min(len(q.Live), MaxLiveListed)] {
		s.Live = append(s.Live, liveBatch{ID: b.ID, State: b.State, Version: b.Version})
	}
	payload, err := json.Marshal(s)
	if err != nil {
		return mend.Record{}, false, fmt.Errorf("stuck: encode snapshot: %w", err)
	}
	rec, created, err := d.cfg.Store.RecordCreate(ctx, mend.CreateParams{
		Source:   Source(q.Queue, fp),
		Snapshot: mend.Snapshot{Payload: payload, LastError: reason},
		Target:   mend.Target{BatchID: q.Live[0].ID, Desired: mend.OutcomeWake},
		Reason:   reason,
		OpID:     mend.NewOpID(),
		Actor:    d.cfg.Actor,
	})
	if err != nil {
		return rec, false, fmt.Errorf("stuck: queue %q: record the wake-up: %w", q.Queue, err)
	}
	return rec, created, nil
}

// ScanAcross runs the scan once for a one-off command (mend import
// --stuck, the day mend is adopted): a scan, a wait of the bound on a
// cancellable timer, and a second scan, which records a wake-up for every
// queue quiet in the same state across both. It returns the second
// scan's report (the first's when the context ends before the second, or
// when the first found no queue quiet). onWait, when set, is called with
// the first report before the wait.
//
// This is the entry point for a one-off scan beside a running host (an
// end-to-end suite, an adoption script): cmd/mend's `mend import --stuck`
// is it with the host's and mend's databases opened.
func (d *Detector) ScanAcross(ctx context.Context, onWait func(first Report)) (Report, error) {
	first, err := d.Scan(ctx)
	if err != nil || first.Count(Quiet) == 0 {
		return first, err
	}
	if onWait != nil {
		onWait(first)
	}
	// A second past the bound: the wait is on this process's clock, the
	// bound on the database's.
	t := time.NewTimer(d.cfg.Bound + time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return first, ctx.Err()
	case <-t.C:
	}
	return d.Scan(ctx)
}

// Loop runs Scan every period until ctx ends; a failed scan is logged and
// retried on the next tick. It returns ctx's error.
func (d *Detector) Loop(ctx context.Context, every time.Duration, onErr func(error)) error {
	if every <= 0 {
		return errors.New("stuck: Loop needs a positive period")
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := d.Scan(ctx); err != nil && ctx.Err() == nil {
			d.log.WarnContext(ctx, "stuck-queue scan failed; trying again next period", "err", err)
			if onErr != nil {
				onErr(err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// Defaults for Config.
const (
	MaxPayloadDefault   = 1 << 20
	MaxErrorDefault     = 64 << 10
	ActorDefault        = "intake"
	createAttemptsLimit = 3
)

// Store is the record store as the intake needs it.
type Store interface {
	// RecordCreate creates the record for p.Source if none exists and
	// returns the stored record and whether this call created it; an
	// existing record is returned unchanged.
	// Returns mend.ErrInvalid for bad input, mend.ErrAmbiguous if the commit's
	// outcome is unknown (creating again is safe) and mend.ErrBusy or
	// mend.ErrUnavailable when the database cannot take the write now.
	RecordCreate(ctx context.Context, p mend.CreateParams) (mend.Record, bool, error)
}

// Repairer finishes a queue's due records inline, if it can take the
// queue's fence without waiting. The reconciler implements it.
type Repairer interface {
	// TryRepair runs the queue's planner if the queue's lease is free.
	// Returns an error matching mend.ErrLeaseHeld when another holder has
	// it; that holder, or the periodic reconciler, finishes the repair.
	TryRepair(ctx context.Context, queue string) error
}

// Config configures an Intake. The zero value is usable.
type Config struct {
	// MaxPayload bounds the payload snapshot; larger deliveries are refused
	// with a *mend.ValidationError. Zero means MaxPayloadDefault (1 MiB).
	MaxPayload int
	// MaxError bounds the copied last-error text; longer text is cut at a
	// character boundary and marked. Zero means MaxErrorDefault (64 KiB).
	MaxError int
	// Actor names the intake in event logs. Empty means ActorDefault.
	Actor string
	// Repairer, when set, is asked to finish the repair inline after the
	// record is durable. Nil leaves it to the periodic reconciler.
	Repairer Repairer
	// Logger receives one line per recorded delivery; nil discards.
	Logger *slog.Logger
}

func (c Config) validate() error {
	if c.MaxPayload < 0 || c.MaxError < 0 {
		return &mend.ValidationError{Field: "intake config", Reason: "MaxPayload and MaxError must not be negative"}
	}
	return nil
}

// Delivery is a dead-lettered message as a DLQ consumer receives it.
type Delivery struct {
	Source       mend.SourceID // topic may carry the _dlq suffix
	Payload      []byte
	FailureCount int
	LastError    string
	FailedAt     time.Time
	Subjects     []mend.Subject
}

// Result is what Record did.
type Result struct {
	Record  mend.Record // the durable record, as stored
	Created bool        // false: the delivery was already recorded (a redelivery)
	// RepairErr is the inline repair's error, if one was tried and failed.
	// The record is durable regardless; the reconciler will finish it.
	RepairErr error
}

// Intake turns dead-lettered deliveries into durable reconciliation records.
type Intake struct {
	store Store
	cfg   Config
	log   *slog.Logger
}

// New returns an Intake over store.
func New(store Store, cfg Config) (*Intake, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.MaxPayload = cmp.Or(cfg.MaxPayload, MaxPayloadDefault)
	cfg.MaxError = cmp.Or(cfg.MaxError, MaxErrorDefault)
	cfg.Actor = cmp.Or(cfg.Actor, ActorDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Intake{store: store, cfg: cfg, log: log.With("component", "intake")}, nil
}

// Record makes the delivery's repair obligation durable and returns once it
// is: from then on the DLQ message may be acknowledged, because the
// obligation lives in MySQL. A delivery whose topic is unknown or whose
// payload cannot be decoded is still recorded, parked with the reason, so it
// is never dropped and never retried forever. Recording the same source
// identity again returns the existing record (Created false).
//
// Then, if a Repairer is configured, Record tries to finish the repair
// inline without waiting for the queue's fence.
//
// Returns a *mend.ValidationError (mend.ErrInvalid) for an identity that
// cannot be stored or a payload over MaxPayload, before anything reaches the
// database; do not acknowledge on any error.
func (in *Intake) Record(ctx context.Context, d Delivery) (Result, error) {
	if err := d.Source.Validate(); err != nil {
		return Result{}, err
	}
	if len(d.Payload) > in.cfg.MaxPayload {
		return Result{}, &mend.ValidationError{Field: "payload", Reason: fmt.Sprintf("is %d bytes; the intake accepts at most %d (raise dlq.Config.MaxPayload, up to the store's limit)", len(d.Payload), in.cfg.MaxPayload)}
	}
	if d.FailureCount < 0 {
		d.FailureCount = 0
	}
	p := mend.CreateParams{
		Source: d.Source,
		Snapshot: mend.Snapshot{Payload: d.Payload, FailureCount: d.FailureCount,
			LastError: clip(d.LastError, in.cfg.MaxError), FailedAt: d.FailedAt, Subjects: d.Subjects},
		Actor: in.cfg.Actor,
	}
	target, err := Decode(d.Source.Topic, d.Payload)
	if err != nil {
		p.State, p.Reason = mend.StateParked, err.Error()
	} else {
		p.Target = target
	}
	rec, created, err := in.create(ctx, p)
	if err != nil {
		return Result{}, err
	}
	in.log.InfoContext(ctx, "dead letter recorded", "queue", d.Source.Queue, "topic", d.Source.Topic,
		"message_id", d.Source.MessageID, "record_id", rec.ID.String(), "created", created, "state", string(rec.State))
	res := Result{Record: rec, Created: created}
	if in.cfg.Repairer != nil && rec.State.Due() {
		if err := in.cfg.Repairer.TryRepair(ctx, d.Source.Queue); err != nil && !errors.Is(err, mend.ErrLeaseHeld) {
			res.RepairErr = err
			in.log.WarnContext(ctx, "inline repair failed; the reconciler will finish it", "queue", d.Source.Queue, "err", err)
		}
	}
	return res, nil
}

// create is idempotent, so an ambiguous outcome is resolved by creating again.
func (in *Intake) create(ctx context.Context, p mend.CreateParams) (mend.Record, bool, error) {
	var err error
	for range createAttemptsLimit {
		p.OpID = mend.NewOpID()
		var rec mend.Record
		var created bool
		rec, created, err = in.store.RecordCreate(ctx, p)
		if !errors.Is(err, mend.ErrAmbiguous) {
			if err != nil {
				return mend.Record{}, false, fmt.Errorf("dlq: record %s: %w", p.Source, err)
			}
			return rec, created, nil
		}
	}
	return mend.Record{}, false, fmt.Errorf("dlq: record %s: %w", p.Source, err)
}

// clip cuts s to at most n bytes at a character boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…[truncated]"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

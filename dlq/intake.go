package dlq

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// Limits and defaults.
const (
	// MaxHostPayload is the largest payload the host's message table can
	// hold: queue_messages.payload is a BLOB, at most 65,535 bytes. A larger
	// "dead letter" cannot have come from the host.
	MaxHostPayload = 65535
	// MaxPayloadDefault is Config.MaxPayload's default: the host's limit.
	MaxPayloadDefault   = MaxHostPayload
	MaxErrorDefault     = 64 << 10
	ActorDefault        = "intake"
	createAttemptsLimit = 3
)

// QueueUnresolved is the queue a parked record is filed under when neither
// its payload nor its partition key names a queue (for example a legacy
// build payload with an empty queue, partitioned by batch ID). It keeps such
// a dead letter visible to operators instead of dropping it; it is never a
// queue the planner can repair. A dead letter of a real queue spelled the
// same way is filed there too, and parked, so nothing in it is ever
// mistaken for a repairable record.
const QueueUnresolved = "(unresolved)"

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

// RecordReader is the optional part of a Store that lets Record report a
// record's state after its inline repair. storage.DB implements it.
type RecordReader interface {
	// RecordGetByID returns queue's record id as it is now.
	RecordGetByID(ctx context.Context, queue string, id mend.RecordID) (mend.Record, error)
}

// Repairer finishes a queue's due records inline, if it can take the
// queue's fence without waiting. The reconciler implements it.
type Repairer interface {
	// TryRepair runs the queue's planner if the queue's lease is free.
	// Returns an error matching mend.ErrLeaseHeld when another holder has
	// it; that holder, or the periodic reconciler, finishes the repair.
	TryRepair(ctx context.Context, queue string) error
}

// Builds finds the batch a build belongs to: the host's build table, which
// maps a runner build ID to its batch. A buildsignal dead letter names only
// the build. The host adapter implements it.
type Builds interface {
	// BuildBatch returns the ID of the batch build buildID of queue belongs
	// to. Returns an error matching mend.ErrNotFound if the queue has no
	// such build (a *mend.SpellingError when the host's collation matched a
	// differently spelled row); any other error means the lookup could not
	// be made now and may be tried again.
	BuildBatch(ctx context.Context, queue, buildID string) (string, error)
}

// Config configures an Intake. The zero value is usable.
type Config struct {
	// MaxPayload bounds the payload snapshot; larger deliveries are refused
	// with a *mend.ValidationError. Zero means MaxPayloadDefault (65,535
	// bytes, the host's BLOB column); it cannot be raised above that.
	MaxPayload int
	// MaxError bounds the copied last-error text; longer text is cut at a
	// character boundary and marked. Zero means MaxErrorDefault (64 KiB).
	MaxError int
	// Actor names the intake in event logs. Empty means ActorDefault.
	Actor string
	// Builds resolves a buildsignal dead letter's build to its batch. Nil
	// records such dead letters parked, with a reason saying the intake had
	// no build lookup.
	Builds Builds
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
	if c.MaxPayload > MaxHostPayload {
		return &mend.ValidationError{Field: "intake config", Reason: fmt.Sprintf("MaxPayload %d is above the host's payload limit of %d bytes", c.MaxPayload, MaxHostPayload)}
	}
	return nil
}

// Delivery is a dead-lettered message as a DLQ consumer receives it. Build
// it from the DLQ row with Row.Delivery, so that the linked-in consumer and
// mend import record the same row under the same identity.
type Delivery struct {
	// Source is the DLQ row's identity: its topic (with the _dlq suffix),
	// partition key and message ID, byte for byte. Source.Queue is
	// optional and only cross-checked: the record is filed under the queue
	// the row itself names (see Record).
	Source mend.SourceID
	// OriginalTopic is the row's original_topic, e.g. "speculate" for a
	// row on speculate_dlq. Empty means Source.Topic without the suffix.
	OriginalTopic string
	Payload       []byte
	FailureCount  int
	LastError     string
	FailedAt      time.Time
	Subjects      []mend.Subject // the failure's subjects: kind batch, queue or request

	// detailErr is set by Row.Delivery when failure_detail could not be
	// read; the intake parks the record with it.
	detailErr error
	// decoded is Row.Delivery's decode of the payload, kept so the intake
	// does not decode it again.
	decoded *decoded
}

// decoded is Decode's answer for a topic, partition and payload, kept with
// a copy of what it read: it answers only a delivery that still holds the
// same bytes, whatever a caller changed since.
type decoded struct {
	topic, partition, payload string
	p                         Payload
	err                       error
}

// decode is Decode of d's payload as its original topic's.
func (d Delivery) decode() (Payload, error) {
	orig := d.originalTopic()
	if m := d.decoded; m != nil && m.topic == orig && m.partition == d.Source.Partition && m.payload == string(d.Payload) {
		return m.p, m.err
	}
	return Decode(orig, d.Source.Partition, d.Payload)
}

func (d Delivery) validate() error {
	for _, f := range []struct {
		name, value string
		required    bool
	}{
		{"topic", d.Source.Topic, true},
		{"partition", d.Source.Partition, false},
		{"message_id", d.Source.MessageID, true},
		{"queue", d.Source.Queue, false},
		{"original_topic", d.OriginalTopic, false},
	} {
		if err := mend.ValidateIdentity(f.name, f.value, f.required); err != nil {
			return err
		}
	}
	return nil
}

// originalTopic is the topic the payload is decoded as.
func (d Delivery) originalTopic() string {
	return cmp.Or(d.OriginalTopic, BaseTopic(d.Source.Topic))
}

// RecordQueue returns the queue the intake files d's record under: the
// payload's queue; else the partition key, on a topic partitioned by queue;
// else QueueUnresolved. It reads only the row, never Source.Queue, so the
// same DLQ row always lands in the same record however it is handed in.
func RecordQueue(d Delivery) string {
	p, _ := d.decode()
	return fileQueue(p, d)
}

func fileQueue(p Payload, d Delivery) string {
	if p.Queue != "" {
		return p.Queue
	}
	if PartitionIsQueue(d.originalTopic()) && mend.ValidateIdentity("partition", d.Source.Partition, true) == nil {
		return d.Source.Partition
	}
	return QueueUnresolved
}

// Row is a dead-letter row of the host's queue_messages table, column for
// column (fact sheet §5). mend import reads rows; a linked-in DLQ consumer
// fills one from its delivery's metadata. Either way Row.Delivery is the one
// conversion into what the intake records.
type Row struct {
	Offset        uint64 // `offset`
	Topic         string // <original>_dlq
	PartitionKey  string
	ID            string
	Payload       []byte
	Metadata      []byte // JSON string map, or nil for NULL
	FailedAtMS    uint64 // failed_at, epoch milliseconds
	FailureCount  uint32
	LastError     string
	OriginalTopic string
	// FailureDetail is the failure_detail column:
	// {"subjects":[{"type":"batch|queue|request","id":"..."}],"detail":{...}},
	// or nil for NULL.
	FailureDetail []byte
}

// Delivery converts the row. Its Source.Queue is the queue the record will
// be filed under (RecordQueue), so a caller can look the record up by the
// delivery's Source afterwards. A failure_detail that is not the host's shape
// does not fail the conversion: the intake records the delivery parked,
// with the reason, since the failure's blame could not be read.
func (r Row) Delivery() Delivery {
	d := Delivery{
		Source:        mend.SourceID{Topic: r.Topic, Partition: r.PartitionKey, MessageID: r.ID},
		OriginalTopic: r.OriginalTopic,
		Payload:       r.Payload,
		FailureCount:  int(r.FailureCount),
		LastError:     r.LastError,
	}
	if r.FailedAtMS > 0 && r.FailedAtMS <= math.MaxInt64 {
		d.FailedAt = time.UnixMilli(int64(r.FailedAtMS)).UTC()
	}
	d.Subjects, d.detailErr = failureSubjects(r.FailureDetail)
	m := &decoded{topic: d.originalTopic(), partition: d.Source.Partition, payload: string(d.Payload)}
	m.p, m.err = Decode(m.topic, m.partition, d.Payload)
	d.decoded = m
	d.Source.Queue = RecordQueue(d)
	return d
}

// failureSubjects reads the subjects out of a failure_detail column. The
// detail map is not kept: mend's repair does not depend on it.
func failureSubjects(raw []byte) ([]mend.Subject, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var fd struct {
		Subjects []struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"subjects"`
	}
	if err := json.Unmarshal(raw, &fd); err != nil {
		return nil, fmt.Errorf(`failure_detail is not {"subjects":[{"type","id"}],"detail":{...}}: %v`, err)
	}
	var out []mend.Subject
	for _, s := range fd.Subjects {
		out = append(out, mend.Subject{Kind: s.Type, ID: s.ID})
	}
	return out, nil
}

// Result is what Record did.
type Result struct {
	// Record is the durable record as stored: after an inline repair that
	// ran without error, as that repair left it (done, say), when the store
	// can read a record back (RecordReader); otherwise as created.
	Record  mend.Record
	Created bool // false: the delivery was already recorded (a redelivery)
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
// obligation lives in MySQL. Recording the same source identity again
// returns the existing record (Created false).
//
// The payload is decoded as its original topic's format (see Decode). The
// record is filed under the queue the row names (see RecordQueue); a
// Source.Queue that disagrees is logged and overridden, because the planner
// fences and reads the host per queue, and the batch lives in the queue its
// payload names. What the record repairs:
//
//   - speculate, dependency-analysis, build, submitqueue-merge, conclude:
//     the payload's batch, to be failed. On speculate, as the host's own
//     controller does, a failure that blames exactly one batch (a batch
//     subject) targets that batch instead; one that blames several is
//     parked, since a record repairs one batch.
//   - merge-signal: the payload's batch, to end as its outcome says.
//   - buildsignal: the build's batch, found through Config.Builds.
//   - request topics (start, validate, batch, cancel,
//     merge-conflict-check-signal) and log: nothing; recorded parked for
//     the audit (mend.TopicAudit), not counted as parked.
//   - runway's merge-conflict-check and runway-merge: nothing; runway's own
//     DLQ controller repairs them, so they are recorded parked for the
//     audit (mend.TopicHost), not counted as parked.
//
// Anything that cannot be repaired automatically (unknown topic, a payload
// that breaks the strict decoding rules, no queue, an unknown build, a
// request topic) is still recorded, parked with the reason, so it is never
// dropped and never retried forever.
//
// Then, if a Repairer is configured and the record is due, Record tries to
// finish the repair inline without waiting for the queue's fence.
//
// Returns a *mend.ValidationError (mend.ErrInvalid) for an identity that
// cannot be stored or a payload over MaxPayload, before anything reaches the
// database; any other error (the store, or the build lookup, failing) may
// be retried. Do not acknowledge on any error.
func (in *Intake) Record(ctx context.Context, d Delivery) (Result, error) {
	if err := d.validate(); err != nil {
		return Result{}, err
	}
	if len(d.Payload) > in.cfg.MaxPayload {
		return Result{}, &mend.ValidationError{Field: "payload", Reason: fmt.Sprintf("is %d bytes; the intake accepts at most %d (the host's payload column holds at most %d)", len(d.Payload), in.cfg.MaxPayload, MaxHostPayload)}
	}
	p, err := in.params(ctx, d)
	if err != nil {
		return Result{}, err
	}
	if d.Source.Queue != "" && d.Source.Queue != p.Source.Queue {
		in.log.WarnContext(ctx, "delivery's queue differs from the queue its row names; recording under the row's", "given_queue", d.Source.Queue,
			"queue", p.Source.Queue, "topic", d.Source.Topic, "message_id", d.Source.MessageID)
	}
	rec, created, err := in.create(ctx, p)
	if err != nil {
		return Result{}, err
	}
	in.log.InfoContext(ctx, "dead letter recorded", "queue", rec.Source.Queue, "topic", rec.Source.Topic,
		"message_id", rec.Source.MessageID, "record_id", rec.ID.String(), "created", created, "state", string(rec.State))
	res := Result{Record: rec, Created: created}
	if in.cfg.Repairer != nil && rec.State.Due() {
		err := in.cfg.Repairer.TryRepair(ctx, rec.Source.Queue)
		switch {
		case err != nil && !errors.Is(err, mend.ErrLeaseHeld):
			res.RepairErr = err
			in.log.WarnContext(ctx, "inline repair failed; the reconciler will finish it", "queue", rec.Source.Queue, "err", err)
		case err == nil:
			// The record is durable either way; a failed read-back only
			// leaves Result at the state it was created in.
			if rr, ok := in.store.(RecordReader); ok {
				if now, err := rr.RecordGetByID(ctx, rec.Source.Queue, rec.ID); err == nil {
					res.Record = now
				}
			}
		}
	}
	return res, nil
}

// params decides what record d becomes. Its only error is a build lookup
// that could not be made now.
func (in *Intake) params(ctx context.Context, d Delivery) (mend.CreateParams, error) {
	orig := d.originalTopic()
	pl, decErr := d.decode()
	src := d.Source
	src.Queue = fileQueue(pl, d)
	p := mend.CreateParams{
		Source: src,
		Snapshot: mend.Snapshot{Payload: d.Payload, OriginalTopic: orig, FailureCount: max(d.FailureCount, 0),
			LastError: clip(d.LastError, in.cfg.MaxError), FailedAt: d.FailedAt, Subjects: d.Subjects},
		Actor: in.cfg.Actor,
	}
	park := func(reason string) (mend.CreateParams, error) {
		p.State, p.Reason = mend.StateParked, clip(reason, in.cfg.MaxError)
		return p, nil
	}
	switch {
	case mend.KindOfTopic(d.Source.Topic, orig) == mend.TopicHost:
		// Before the decode error: mend reads no runway payload, and "unknown
		// topic" would send a person after a dead letter runway repairs.
		return park(fmt.Sprintf("dlq: recorded for the audit: a dead letter of %q is repaired by its host's own DLQ controller (runway's), not by mend; nobody needs to act on this record", orig))
	case decErr != nil:
		return park(decErr.Error())
	case pl.Queue == QueueUnresolved || (pl.Queue == "" && src.Queue == QueueUnresolved && d.Source.Partition == QueueUnresolved):
		// A real queue spelled like mend's placeholder: filed there with
		// the dead letters that name no queue, and never repaired.
		return park(fmt.Sprintf("dlq: the dead letter names queue %q, which is mend's placeholder for dead letters without a queue; mend cannot repair a queue of that name, so an operator must settle it", QueueUnresolved))
	case d.detailErr != nil:
		return park("dlq: " + d.detailErr.Error())
	case pl.Kind == KindRequest:
		return park(fmt.Sprintf("dlq: recorded for the audit: a dead letter of request topic %q (request %q) is not mend's to repair: mend settles batches; the host's request DLQ controller, or an operator, decides the request", pl.Topic, pl.RequestID))
	case pl.Kind == KindBuild:
		return in.buildTarget(ctx, pl, p)
	}
	batch := pl.BatchID
	if pl.Topic == TopicSpeculate {
		blamed := blamedBatches(d.Subjects)
		switch {
		case len(blamed) > 1:
			return park(fmt.Sprintf("dlq: the speculate failure blames %d batches (%s); a record repairs one batch, so an operator must settle them", len(blamed), strings.Join(quoteAll(blamed), ", ")))
		case len(blamed) == 1:
			if err := mend.ValidateIdentity("blamed batch", blamed[0], true); err != nil {
				return park("dlq: the speculate failure blames a batch mend cannot name: " + err.Error())
			}
			batch = blamed[0]
		}
	}
	p.Target = mend.Target{BatchID: batch, Desired: pl.Desired}
	return p, nil
}

// buildTarget resolves a buildsignal dead letter's build to its batch.
func (in *Intake) buildTarget(ctx context.Context, pl Payload, p mend.CreateParams) (mend.CreateParams, error) {
	park := func(reason string) (mend.CreateParams, error) {
		p.State, p.Reason = mend.StateParked, reason
		return p, nil
	}
	if in.cfg.Builds == nil {
		return park(fmt.Sprintf("dlq: buildsignal for build %q of queue %q: this intake was built without a build lookup (dlq.Config.Builds), so the build's batch is unknown; record it again through one that has it (mend import --host-dsn)", pl.BuildID, pl.Queue))
	}
	batch, err := in.cfg.Builds.BuildBatch(ctx, pl.Queue, pl.BuildID)
	switch {
	case errors.Is(err, mend.ErrNotFound):
		// The host's controller acks this as a no-op. mend parks it
		// instead, so a person sees it and can check whether the queue
		// still has live work that nothing will wake.
		return park(fmt.Sprintf("dlq: buildsignal for build %q of queue %q: the host's build table holds no build spelled exactly so (%v); the host acks this as a no-op, so there is no batch to settle, but check whether queue %q is stuck", pl.BuildID, pl.Queue, err, pl.Queue))
	case err != nil:
		return p, fmt.Errorf("dlq: look up build %q of queue %q: %w", pl.BuildID, pl.Queue, err)
	}
	if err := mend.ValidateIdentity("batch_id", batch, true); err != nil {
		return park(fmt.Sprintf("dlq: build %q of queue %q names a batch mend cannot store: %v", pl.BuildID, pl.Queue, err))
	}
	p.Target = mend.Target{BatchID: batch, Desired: pl.Desired}
	return p, nil
}

// blamedBatches lists the distinct batch subjects, in order.
func blamedBatches(subjects []mend.Subject) []string {
	var out []string
	for _, s := range subjects {
		if s.Kind == "batch" && !slices.Contains(out, s.ID) {
			out = append(out, s.ID)
		}
	}
	return out
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
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

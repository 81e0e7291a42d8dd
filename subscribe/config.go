package subscribe

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
)

// Defaults for Config's zero values.
const (
	// GroupDefault is the consumer group mend joins the *_dlq partitions
	// as. The host's own groups are "orchestrator" and "orchestrator-dlq".
	GroupDefault = "mend"
	// PageSizeDefault is how many rows one read takes, shared between the
	// partitions it covers (up to 16), and the least one recording
	// transaction takes; the same page as mend import's. It bounds the
	// subscription's memory: each of Concurrency workers holds under two
	// pages of rows (the rows waiting to be recorded and one read), however
	// deep the backlog.
	PageSizeDefault = 500
	// PagesPerPassDefault bounds the rows one pass reads from a partition
	// (PagesPerPass pages' worth), so one deep partition does not starve
	// the others; a pass that stops early is followed by the next at once.
	PagesPerPassDefault = 20
	// PollIntervalDefault is the time between passes when nothing is
	// pending: a new dead letter is recorded within one of it. One second
	// is a tenth of the host's GC idle period (100 idle ticks of 100 ms),
	// so a partition first seen through its rows is registered long before
	// the host's GC could collect it.
	PollIntervalDefault = time.Second
	// SettleDefault is how long an offset must have been allocated before
	// the watermark may pass it (see the package doc, "Out-of-order
	// commits"). It only delays the watermark, never recording. It is
	// above InnoDB's default innodb_lock_wait_timeout (50 s): a MoveToDLQ
	// whose INSERT allocated its offset and then waited on a lock can
	// commit that long after. SettleFor raises it to cover every wait a
	// MoveToDLQ can spend after allocating its offset (window.go: two lock
	// waits and a semi-synchronous commit), plus SettleMargin: 110 s with
	// the 50 s default.
	SettleDefault = time.Minute
	// SettleMargin is how far SettleFor keeps the window above the
	// queue database's waits (Waits.Bound).
	SettleMargin = 10 * time.Second
	// AheadIntervalDefault is the time between scans of queue_offsets for
	// partitions to register ahead of their first dead letter.
	AheadIntervalDefault = 5 * time.Second
	// ConcurrencyDefault is how many partitions a pass reads at once.
	ConcurrencyDefault = 4
	// ParkAfterDefault is how many times in a row recording may fail at
	// one row for a reason that may pass (the store of a build lookup
	// down) before the row is parked as a stand-in so that its
	// partition's watermark, and with it the host's GC, moves on. With the
	// backoff doubling from PollInterval up to a minute, that is about
	// five minutes at the defaults.
	ParkAfterDefault = 10
	// ActorDefault names the subscription in records' event logs.
	ActorDefault = "subscribe"
	// PageSizeLimit bounds PageSize.
	PageSizeLimit = 10000
)

// AheadTopicsDefault are the host topics whose joined partitions mend
// registers ahead (T_dlq for every partition of T that one of the host's
// groups has joined): the topics partitioned by queue, so mend holds one
// row per queue and topic. The others (build by batch ID, buildsignal by
// build ID, cancel and log by request ID) would cost one row per batch,
// build or request ever, which mend cannot delete (its only DELETE is
// leaving); their *_dlq partitions are joined within one poll interval of
// their first dead letter instead, against the host's GC idle period of
// about 10 s. Add them to Config.AheadTopics to close that window too.
var AheadTopicsDefault = []string{
	dlq.TopicSpeculate, dlq.TopicDependencyAnalysis, dlq.TopicMerge, dlq.TopicMergeSignal, dlq.TopicConclude,
	dlq.TopicStart, dlq.TopicValidate, dlq.TopicBatch, dlq.TopicMergeConflictCheck,
}

// Recorder records dead letters. *dlq.Intake implements it.
type Recorder interface {
	// RecordMany records ds, one result per delivery (see dlq.Intake).
	// A result's Err is that delivery's own failure; the error is for the
	// whole call, and then nothing is known to be durable.
	RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error)
}

// Parker creates a record directly. *storage.DB implements it (it is
// dlq.Store). The subscription uses it for a row it cannot record as
// itself: it records a parked stand-in naming the row's offset instead.
type Parker interface {
	// RecordCreate creates the record for p.Source if none exists.
	// Returns mend.ErrInvalid for bad input; other errors may be retried.
	RecordCreate(ctx context.Context, p mend.CreateParams) (mend.Record, bool, error)
}

// Hooks observe a Subscriber; every field may be nil. They run on the
// subscription's goroutines and must not block.
type Hooks struct {
	// OnPass runs after each pass with what it did, including the lag per
	// topic.
	OnPass func(PassStats)
	// OnUnrecordable runs for each row that could not be recorded as
	// itself and was recorded as a parked stand-in (or, if even that was
	// refused, only logged), so the watermark could pass it.
	OnUnrecordable func(topic, partition string, offset uint64, err error)
	// OnFailed runs each time recording a partition fails at offset (0
	// when mend's store failed the whole batch), with how many times in a
	// row it failed there; the partition waits out a backoff and is
	// retried, and the row is parked after Config.ParkAfter failures.
	OnFailed func(topic, partition string, offset uint64, failures int, err error)
}

// Config configures a Subscriber. DB, Intake and Parker are required.
type Config struct {
	// DB is the host's queue database (queue_messages, queue_offsets).
	DB *sql.DB
	// Intake records the dead letters (a *dlq.Intake over mend's store).
	Intake Recorder
	// Parker records the parked stand-in of a row Intake refuses.
	Parker Parker
	// Group is the consumer group's name in queue_offsets. Empty means
	// GroupDefault.
	Group string
	// PageSize is the rows per read. Zero means PageSizeDefault.
	PageSize int
	// PagesPerPass bounds the pages a pass reads per partition. Zero means
	// PagesPerPassDefault.
	PagesPerPass int
	// PollInterval is the time between passes. Zero means
	// PollIntervalDefault.
	PollInterval time.Duration
	// Settle is how old an offset's allocation must be before the
	// watermark passes it; it must exceed the longest transaction that
	// inserts into queue_messages. Zero means SettleFor the queue
	// database's waits, read from DB at the first pass (110 s at InnoDB's
	// defaults; never less than SettleDefault): a library user gets the
	// window mend run uses, not one that a MoveToDLQ waiting on two locks
	// outlasts.
	Settle time.Duration
	// AheadInterval is the time between register-ahead scans. Zero means
	// AheadIntervalDefault.
	AheadInterval time.Duration
	// AheadTopics are the host topics whose joined partitions are
	// registered ahead (see AheadTopicsDefault, which nil means). An empty,
	// non-nil slice registers ahead only the *_dlq partitions other groups
	// have joined.
	AheadTopics []string
	// Queues, when set, lists queues the host knows; the subscription
	// registers every queue-partitioned *_dlq partition of each ahead.
	Queues func(ctx context.Context) ([]string, error)
	// ParkAfter is how many times in a row recording may fail at one row
	// (each followed by its partition's backoff) before the row is parked
	// as a stand-in. Zero means ParkAfterDefault.
	ParkAfter int
	// Concurrency is how many partitions a pass reads at once. Zero means
	// ConcurrencyDefault.
	Concurrency int
	// Leases, when set, makes the replicas of the group divide the
	// partitions between them instead of each reading all of them: each
	// holds one of Slots slot leases in mend's lease table and reads the
	// partitions that hash to its rank among the live slots (see the
	// package doc, "Replicas"). Drain never divides: it promises every
	// dead letter.
	Leases Leases
	// Holder names this replica in its slot lease; empty means the fence's
	// default (unique per process). It must differ from every other
	// holder's name, the queue leases' included.
	Holder string
	// Slots is how many replicas can divide the work. Zero means
	// SlotsDefault.
	Slots int
	// SlotTTL is a slot lease's term: a replica paused longer loses its
	// slot and the others take its partitions over. Zero means the fence's
	// default (15 s).
	SlotTTL time.Duration
	// Actor names the subscription in the parked stand-ins' event logs.
	// Empty means ActorDefault.
	Actor string
	// NowFunc is the clock for the settle window and lag; nil means
	// time.Now. Tests inject it.
	NowFunc func() time.Time
	Hooks   Hooks
	// Logger receives the subscription's lines; nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Group = cmp.Or(c.Group, GroupDefault)
	c.PageSize = cmp.Or(c.PageSize, PageSizeDefault)
	c.PagesPerPass = cmp.Or(c.PagesPerPass, PagesPerPassDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	// Settle stays zero here: the first pass reads the server's waits
	// (Subscriber.resolveSettle).
	c.AheadInterval = cmp.Or(c.AheadInterval, AheadIntervalDefault)
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.ParkAfter = cmp.Or(c.ParkAfter, ParkAfterDefault)
	c.Actor = cmp.Or(c.Actor, ActorDefault)
	c.Slots = cmp.Or(c.Slots, SlotsDefault)
	if c.AheadTopics == nil {
		c.AheadTopics = AheadTopicsDefault
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return &mend.ValidationError{Field: "subscribe config", Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.DB == nil:
		return bad("DB (the host's queue database) is required")
	case c.Intake == nil:
		return bad("Intake is required")
	case c.Parker == nil:
		return bad("Parker is required")
	case c.PageSize < 0 || c.PageSize > PageSizeLimit:
		return bad("PageSize must be 1 to %d, got %d", PageSizeLimit, c.PageSize)
	case c.PagesPerPass < 0:
		return bad("PagesPerPass must not be negative")
	case c.PollInterval < 0 || c.Settle < 0 || c.AheadInterval < 0:
		return bad("PollInterval, Settle and AheadInterval must not be negative")
	case c.ParkAfter < 0:
		return bad("ParkAfter must not be negative")
	case c.Slots < 0 || c.Slots > 100:
		return bad("Slots must be 1 to 100, got %d", c.Slots)
	case c.Concurrency < 0 || c.Concurrency > 64:
		return bad("Concurrency must be 1 to 64, got %d", c.Concurrency)
	}
	if err := mend.ValidateIdentity("group", c.Group, false); err != nil {
		return err
	}
	for _, t := range c.AheadTopics {
		if err := mend.ValidateIdentity("ahead topic", t, true); err != nil {
			return err
		}
		if len(t)+len(dlq.DLQSuffix) > mend.MaxIdentityChars {
			return bad("ahead topic %q is too long to have a dead-letter topic", t)
		}
	}
	return nil
}

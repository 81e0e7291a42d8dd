package client

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// Defaults of Config's fields, where the zero value does not say it.
const (
	// OpenTimeoutDefault bounds Open's connects and checks together.
	OpenTimeoutDefault = 30 * time.Second
	// MaxLeaseTTL is the longest LeaseTTL Open accepts (mend run's bound).
	MaxLeaseTTL = 24 * time.Hour
	// ActorPrefixPlanner names the planner in event logs, followed by the
	// holder: "planner/<holder>", as mend run's.
	ActorPrefixPlanner = "planner/"
)

// Config configures a Client. DSN and HostDSN are required; every other
// zero value means the documented default, which is mend run's.
type Config struct {
	// DSN is mend's own database (its tables made by mend migrate up).
	// Required.
	DSN string
	// HostDSN is the submit queue's application database (batch,
	// queue_batch_state, request, build). Required; it may equal DSN when
	// the host's tables live in mend's database.
	HostDSN string
	// QueueDSN is the submit queue's queue database (queue_messages).
	// Empty means HostDSN.
	QueueDSN string

	// Holder is this process's name in lease rows, unique per process.
	// Empty means fence.DefaultHolder() (host name and process ID).
	Holder string
	// LeaseTTL is a lease term by the database clock. Zero means
	// fence.TTLDefault (15 s); at least storage.MinLeaseTTL, at most
	// MaxLeaseTTL.
	LeaseTTL time.Duration
	// WakeTopic is the host planner's topic wake-ups are published to.
	// Empty means host.WakeTopicDefault ("speculate").
	WakeTopic string
	// WakeTopicUnjoined lets Open start although no consumer group of the
	// host reads WakeTopic yet: wake-ups are held (retried, then parked)
	// until one does, never counted as sent. mend run's
	// --wake-topic-unjoined.
	WakeTopicUnjoined bool
	// SubscriptionGroup is the consumer group of a mend subscription on
	// the queue database, if one runs (mend run --queue-dsn does): its
	// reads do not count as the host reading WakeTopic. With a
	// Subscription, its Group wins when set, and this is the group only
	// while Subscription.Group is empty; Config() reports the group in use
	// in both fields. Empty (and no Subscription.Group) means
	// subscribe.GroupDefault.
	SubscriptionGroup string

	// Interval is the time between the background reconciler's passes.
	// Zero means reconcile.IntervalDefault (10 s).
	Interval time.Duration
	// Concurrency bounds the queues this process repairs at once. Zero
	// means reconcile.ConcurrencyDefault (4).
	Concurrency int
	// ClusterConcurrency bounds the queues repaired at once by every
	// process sharing DSN. Zero means reconcile.ClusterConcurrencyDefault
	// (8); negative: no cluster-wide bound.
	ClusterConcurrency int
	// Retention is how long done records are kept. Zero means
	// reconcile.RetentionDefault (14 days); negative: never pruned.
	Retention time.Duration
	// MaxAttempts is how many failed attempts in a row park a record. Zero
	// means planner.MaxAttemptsDefault.
	MaxAttempts int
	// Grace is how long a record waits on a merging batch before it is
	// parked. Zero means planner.GraceDefault.
	Grace time.Duration
	// RetryBase and RetryMax bound the backoff after a failed attempt.
	// Zero means planner.RetryDefaults(Interval).
	RetryBase, RetryMax time.Duration
	// NoInlineRepair leaves every repair to the reconciler: Record returns
	// once the record is durable without trying the queue's fence.
	NoInlineRepair bool
	// Subscription, when not nil, records dead letters by joining the
	// host's *_dlq topics as a consumer group of its own in QueueDSN (what
	// mend run --queue-dsn does), for a host whose DLQ consumers do not
	// call Record. Start runs it beside the reconciler. Nil: no
	// subscription; the worker's consumers call Record.
	Subscription *Subscription

	// SkipChecks skips the checks Open runs (doctor.Preflight). For a
	// caller that ran them itself, and for tests; a worker should not.
	SkipChecks bool
	// Hooks observe the parts (metrics); the zero value observes nothing.
	Hooks Hooks
	// Logger receives the parts' logs; nil discards.
	Logger *slog.Logger
	// NowFunc is the monotonic clock the fence measures its trust window
	// on. Nil means time.Now; tests inject one.
	NowFunc func() time.Time
}

// Subscription configures the Client's subscription (see package
// subscribe). Every zero field means subscribe's default.
type Subscription struct {
	// Group is the consumer group in the host's queue_offsets (offsets
	// mode joins it; binlog mode leaves it). It is the more specific of
	// the two group fields and wins when set: Config.SubscriptionGroup is
	// then overridden by it. Empty means Config.SubscriptionGroup, and
	// when that is empty too, subscribe.GroupDefault ("mend").
	Group string
	// Interval is the time between the subscription's passes. Zero means
	// subscribe.PollIntervalDefault.
	Interval time.Duration
	// Settle is how old an offset must be before the group's watermark
	// passes it. Zero follows the queue database's waits
	// (subscribe.SettleFor); a window that does not cover them is kept,
	// with a warning in the log and from the checks.
	Settle time.Duration
	// PageSize is the rows read per query. Zero means
	// subscribe.PageSizeDefault.
	PageSize int
	// Mode is how dead letters are learned of: doctor.ModeBinlog reads
	// the queue database server's binary log (package binlog: no consumer
	// group, nothing of the host's held back), doctor.ModeOffsets joins
	// the *_dlq topics as consumer group Group (package subscribe), and
	// doctor.ModeAuto (or empty) picks binlog where every prerequisite
	// holds (doctor.Binlog), else offsets. Auto is sticky: once the source
	// has a saved binary-log position, it never falls back to offsets (a
	// dead letter committed after that position and collected by the
	// host's GC while offsets mode ran would never be recorded). An
	// explicit binlog mode, or auto beside a saved position, whose
	// prerequisites do not hold is refused: Open returns a
	// *BinlogUnavailableError naming the first, with its fix (and the
	// saved position). Any other value is a *ConfigError.
	Mode string
	// BinlogServerID is the server_id binlog mode's reader registers
	// with, unique in the host's topology. Zero means BinlogServerID(the
	// Config's Holder).
	BinlogServerID uint32
	// BinlogSource names binlog mode's position row and lease, the same
	// across a failover of the host's primary. Empty means the queue
	// database's schema name.
	BinlogSource string
	// Once: the Client serves one bounded run (mend run --once) instead of
	// Start. Auto mode then picks binlog mode only where the source has a
	// saved position (the run reads the log to its end, CatchUpBinlog, and
	// never joins the consumer group), else offsets (the run drains
	// Subscriber()); an explicit binlog mode runs CatchUpBinlog, whose
	// first read starts the source as Start's reader would.
	Once bool
}

// BinlogServerID is the server_id binlog mode's reader registers with by
// default (binlog.ServerIDFor).
func BinlogServerID(holder string) uint32 { return binlog.ServerIDFor(holder) }

// ErrBinlogUnavailable is matched by the error Open returns when binlog
// mode is asked for and one of its prerequisites does not hold.
var ErrBinlogUnavailable = errors.New("client: binlog mode cannot run")

// BinlogUnavailableError is binlog mode asked for (Subscription.Mode), or
// auto mode beside a saved binary-log position, on a queue database, or a
// schema, that does not allow it. Nothing was left open.
type BinlogUnavailableError struct {
	// Why is the first prerequisite that fails, with its fix.
	Why string
	// Target is where that check ran: the queue database ("--queue-dsn
	// addr/db as user"), or "" for mend's own database.
	Target string
	// Source and Saved are the source's saved position when one exists
	// (Saved nil otherwise): auto mode never falls back to offsets beside
	// it (doctor.StickyDetail).
	Source string
	Saved  *storage.BinlogPosition
}

func (e *BinlogUnavailableError) Error() string {
	on := ""
	if e.Target != "" {
		on = " on " + e.Target
	}
	if e.Saved != nil {
		return fmt.Sprintf("%v%s: %s (fix: %s; mend doctor lists every binlog check)", ErrBinlogUnavailable, on, doctor.StickyDetail(e.Source, *e.Saved, e.Why), doctor.StickyFix)
	}
	return fmt.Sprintf("%v%s: %s; or run --subscribe-mode offsets (mend doctor lists every binlog check)", ErrBinlogUnavailable, on, e.Why)
}

// Unwrap makes errors.Is(err, ErrBinlogUnavailable) hold.
func (e *BinlogUnavailableError) Unwrap() error { return ErrBinlogUnavailable }

// Hooks are the parts' observation points. The library registers no
// metrics of its own: bind these to yours (mend run binds Prometheus).
type Hooks struct {
	Fence     fence.Hooks
	Planner   planner.Hooks
	Reconcile reconcile.Hooks
	Subscribe subscribe.Hooks
	// Binlog observes binlog mode's reader.
	Binlog binlog.Hooks
	// OnDangling is called for each host membership row the adapter skips
	// as dangling (see host.Options.OnDangling).
	OnDangling func(queue, batchID, state string)
}

// ConfigError is a setting Open or one of the parts refused: nothing was
// left open. Fix the Config; trying again cannot help.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }

// Unwrap returns the refusal.
func (e *ConfigError) Unwrap() error { return e.Err }

func (c Config) validate() error {
	switch {
	case c.DSN == "":
		return errors.New("client: Config.DSN is required: mend's database, e.g. user:pass@tcp(127.0.0.1:3306)/mend")
	case c.HostDSN == "":
		return errors.New("client: Config.HostDSN is required: the submit queue's application database (DSN itself if its tables are in mend's database)")
	case c.LeaseTTL != 0 && (c.LeaseTTL < storage.MinLeaseTTL || c.LeaseTTL > MaxLeaseTTL):
		return fmt.Errorf("client: LeaseTTL must be between %s and %s, got %s", storage.MinLeaseTTL, MaxLeaseTTL, c.LeaseTTL)
	case c.Concurrency < 0:
		return fmt.Errorf("client: Concurrency must not be negative, got %d", c.Concurrency)
	case c.MaxAttempts < 0:
		return fmt.Errorf("client: MaxAttempts must not be negative, got %d", c.MaxAttempts)
	case c.Grace < 0:
		return fmt.Errorf("client: Grace must not be negative, got %s", c.Grace)
	case c.RetryBase < 0 || c.RetryMax < 0 || (c.RetryBase > 0 && c.RetryMax > 0 && c.RetryBase > c.RetryMax):
		return errors.New("client: RetryBase and RetryMax must not be negative, and the base not above the max")
	}
	if c.Holder != "" {
		if err := fence.ValidateHolder(c.Holder); err != nil {
			return fmt.Errorf("client: Holder: %w", err)
		}
	}
	if c.WakeTopic != "" {
		if err := host.ValidateWakeTopic(c.WakeTopic); err != nil {
			return fmt.Errorf("client: WakeTopic: %w", err)
		}
	}
	if c.Subscription != nil {
		if err := doctor.ValidateMode(c.Subscription.Mode); err != nil {
			return fmt.Errorf("client: Subscription.Mode %w", err)
		}
	}
	return nil
}

// withDefaults fills every zero field that has a default.
func (c Config) withDefaults() Config {
	c.QueueDSN = cmp.Or(c.QueueDSN, c.HostDSN)
	c.Holder = cmp.Or(c.Holder, fence.DefaultHolder())
	c.LeaseTTL = cmp.Or(c.LeaseTTL, fence.TTLDefault)
	c.WakeTopic = cmp.Or(c.WakeTopic, host.WakeTopicDefault)
	if c.Subscription != nil {
		sc := *c.Subscription
		sc.Group = cmp.Or(sc.Group, c.SubscriptionGroup, subscribe.GroupDefault)
		sc.Mode = cmp.Or(sc.Mode, doctor.ModeAuto)
		if sc.BinlogServerID == 0 {
			sc.BinlogServerID = BinlogServerID(cmp.Or(c.Holder, fence.DefaultHolder()))
		}
		c.Subscription, c.SubscriptionGroup = &sc, sc.Group
	}
	c.SubscriptionGroup = cmp.Or(c.SubscriptionGroup, subscribe.GroupDefault)
	c.Interval = cmp.Or(c.Interval, reconcile.IntervalDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, planner.MaxAttemptsDefault)
	c.Grace = cmp.Or(c.Grace, planner.GraceDefault)
	base, limit := planner.RetryDefaults(c.Interval)
	c.RetryBase, c.RetryMax = cmp.Or(c.RetryBase, base), cmp.Or(c.RetryMax, max(limit, c.RetryBase))
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// CheckParams are the checks Open runs for cfg (with cfg's defaults), for
// a caller that runs or prints them itself (mend doctor, mend run).
func CheckParams(cfg Config) doctor.Params {
	c := cfg.withDefaults()
	p := doctor.Params{DSN: c.DSN, LeaseTTL: c.LeaseTTL, HostDSN: c.HostDSN, QueueDSN: c.QueueDSN,
		WakeTopic: c.WakeTopic, WakeIgnore: doctor.WakeTopicIgnore(c.SubscriptionGroup),
		WakeTopicUnjoined: c.WakeTopicUnjoined, Logger: c.Logger}
	if c.Subscription != nil {
		sc := c.Subscription
		p.Subscription = &doctor.SubscriptionParams{Group: sc.Group, WarnAge: doctor.LagWarnDefault, Settle: sc.Settle,
			Mode: sc.Mode, DSN: c.DSN, ServerID: sc.BinlogServerID, Source: sc.BinlogSource, Once: sc.Once}
	}
	return p
}

// IOTimeout bounds each network read and write of the Client's
// connections: well above a lock wait (a third of the TTL) and any
// statement mend runs, so it only fires on a connection that hangs, and a
// client that hangs mid-transaction cannot hold the lease row (and so every
// takeover) for the server's default 8 hours.
func IOTimeout(ttl time.Duration) time.Duration { return max(2*ttl, 30*time.Second) }

// Client is mend linked into a worker: the intake (Record, RecordMany), a
// background reconciler (Start, Stop) and the parts they are built from.
// Its methods are safe for concurrent use.
type Client struct {
	cfg     Config
	store   *storage.DB
	host    *host.DB
	fence   *fence.Fence
	planner *planner.Planner
	rec     *reconcile.Reconciler
	intake  *dlq.Intake
	sub     *subscribe.Subscriber // nil without Config.Subscription, and in binlog mode
	subDB   *sql.DB
	reader  *binlog.Reader // binlog mode's, else nil
	mode    string         // doctor.ModeBinlog or doctor.ModeOffsets with a subscription, else ""
	modeWhy string

	// life orders Start, Stop and Close: a Start after (or racing) Close
	// starts nothing.
	life struct {
		sync.Mutex
		closed bool
	}
	readerMu   sync.Mutex
	readerStop context.CancelFunc
	readerDone chan struct{}
}

// Open validates cfg, runs the checks mend run runs before it starts
// (doctor.Preflight: the server, mend's schema range and grants, the
// sessions, the host's tables and grants, a reader of the wake topic),
// then opens mend's database and the host's and builds the parts. It
// refuses what mend run refuses, with the same advice: a failed check is
// a *doctor.RefusedError (errors.Is(err, doctor.ErrRefused)) naming the
// first, and every failed check is logged. A setting refused is a
// *ConfigError; any other error is a database that could not be opened.
// Close the Client when done.
func Open(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, &ConfigError{err}
	}
	c := cfg.withDefaults()
	if !c.SkipChecks {
		p := CheckParams(cfg)
		p.Logger = p.Logger.With("component", "client")
		if err := doctor.Preflight(ctx, p); err != nil {
			return nil, err
		}
	}
	openCtx, cancel := context.WithTimeout(ctx, OpenTimeoutDefault)
	defer cancel()
	store, err := storage.Open(openCtx, c.DSN,
		storage.Options{LeaseTTL: c.LeaseTTL, SessionIdleTimeout: max(c.LeaseTTL, time.Second), IOTimeout: IOTimeout(c.LeaseTTL)})
	if err != nil {
		return nil, fmt.Errorf("open mend's database: %w", err)
	}
	hostDB, err := host.Open(openCtx, c.HostDSN, c.QueueDSN, host.Options{WakeTopic: c.WakeTopic, LeaseTTL: c.LeaseTTL,
		IOTimeout: IOTimeout(c.LeaseTTL), Logger: c.Logger, OnDangling: c.Hooks.OnDangling,
		// A wake-up nobody reads is never counted as sent.
		RequireWakeConsumer: true, WakeConsumerIgnore: doctor.WakeTopicIgnore(c.SubscriptionGroup)})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open the host's databases: %w", err), store.Close())
	}
	cl := &Client{cfg: c, store: store, host: hostDB}
	fail := func(err error) (*Client, error) { return nil, errors.Join(err, cl.Close()) }
	if cl.fence, err = fence.New(store, fence.Config{Holder: c.Holder, TTL: c.LeaseTTL, Logger: c.Logger, Hooks: c.Hooks.Fence, NowFunc: c.NowFunc}); err != nil {
		return fail(&ConfigError{fmt.Errorf("lease settings: %w", err)})
	}
	if cl.planner, err = planner.New(planner.Config{Store: store, Batches: hostDB, Waker: hostDB,
		MaxAttempts: c.MaxAttempts, Grace: c.Grace, BackoffBase: c.RetryBase, BackoffMax: c.RetryMax,
		Actor: ActorPrefixPlanner + c.Holder, Hooks: c.Hooks.Planner, Logger: c.Logger}); err != nil {
		return fail(&ConfigError{fmt.Errorf("planner settings: %w", err)})
	}
	if cl.rec, err = reconcile.New(reconcile.Config{Store: store, Fence: cl.fence, Planner: cl.planner,
		Interval: c.Interval, Concurrency: c.Concurrency, ClusterConcurrency: c.ClusterConcurrency, Retention: c.Retention,
		Hooks: c.Hooks.Reconcile, Logger: c.Logger}); err != nil {
		return fail(&ConfigError{fmt.Errorf("reconciler settings: %w", err)})
	}
	icfg := dlq.Config{Builds: hostDB, Logger: c.Logger}
	if !c.NoInlineRepair {
		icfg.Repairer = cl.rec
	}
	if cl.intake, err = dlq.New(store, icfg); err != nil {
		return fail(&ConfigError{fmt.Errorf("intake settings: %w", err)})
	}
	if c.Subscription != nil {
		if cl.mode, cl.modeWhy, err = chooseMode(openCtx, c); err != nil {
			return fail(err)
		}
		if cl.mode == doctor.ModeBinlog {
			err = cl.openBinlog()
		} else {
			err = cl.openSubscription(openCtx)
		}
		if err != nil {
			return fail(err)
		}
	}
	return cl, nil
}

// chooseMode resolves the subscription's mode (see Subscription.Mode) and
// says why. Auto is sticky: beside a saved position of the source it
// refuses, as an explicit binlog mode does, rather than run offsets.
func chooseMode(ctx context.Context, c Config) (mode, why string, err error) {
	sc := c.Subscription
	if sc.Mode == doctor.ModeOffsets {
		return doctor.ModeOffsets, "asked for (--subscribe-mode offsets)", nil
	}
	r := doctor.Binlog(ctx, doctor.BinlogParams{DSN: c.DSN, QueueDSN: c.QueueDSN, ServerID: sc.BinlogServerID, Source: sc.BinlogSource, Starting: true})
	switch {
	case !r.Ready && (sc.Mode == doctor.ModeBinlog || r.Saved != nil):
		return "", "", &BinlogUnavailableError{Why: r.Why, Target: r.WhyTarget, Source: r.Source, Saved: r.Saved}
	case sc.Mode == doctor.ModeBinlog:
		return doctor.ModeBinlog, "asked for (--subscribe-mode binlog); every prerequisite holds", nil
	case sc.Once && r.Saved == nil:
		return doctor.ModeOffsets, "auto with --once: no binary-log position is saved for the source, so offsets (drained)", nil
	case r.Ready && sc.Once:
		return doctor.ModeBinlog, "auto with --once: the source has a saved binary-log position (" + doctor.DescribePosition(*r.Saved) + "); the run reads the log from it to its end", nil
	case r.Ready:
		return doctor.ModeBinlog, "auto: every prerequisite of binlog mode holds (binary log on, ROW, FULL images, REPLICATION SLAVE and CLIENT, migration 0019)", nil
	}
	return doctor.ModeOffsets, "auto: binlog mode cannot run here (" + r.Why + ") and no binary-log position is saved, so offsets", nil
}

// openBinlog wires binlog mode's reader: it records through mend's store
// (no inline repair: the reconciler repairs what it records), under a lease
// of the Client's fence per queue database.
func (cl *Client) openBinlog() error {
	c, sc := cl.cfg, *cl.cfg.Subscription
	// The DSN as given: the reader opens its own sessions (host.OpenDeadLetters)
	// and its replication connection from it.
	server, err := mysql.ParseDSN(c.QueueDSN)
	if err != nil {
		return &ConfigError{fmt.Errorf("binlog mode: the queue database DSN: %w", err)}
	}
	actor := "binlog/" + c.Holder
	in, err := dlq.New(cl.store, dlq.Config{Builds: cl.host, Actor: actor, Logger: c.Logger})
	if err != nil {
		return &ConfigError{fmt.Errorf("binlog intake settings: %w", err)}
	}
	cl.reader, err = binlog.New(binlog.Config{Server: server, Source: sc.BinlogSource, ServerID: sc.BinlogServerID,
		Intake: in, Parker: cl.store, Store: cl.store, Fence: cl.fence, Actor: actor, LeaveGroup: cmp.Or(sc.Group, subscribe.GroupDefault),
		Log: c.Logger.With("component", "binlog"), Hooks: c.Hooks.Binlog})
	if err != nil {
		return &ConfigError{fmt.Errorf("binlog reader settings: %w", err)}
	}
	return nil
}

// openSubscription wires the subscription: its intake records through
// mend's store (no inline repair: the reconciler repairs what it records)
// and finds a buildsignal's batch in the host's build table.
func (cl *Client) openSubscription(ctx context.Context) error {
	c, sc := cl.cfg, *cl.cfg.Subscription
	db, err := subscribe.Open(ctx, c.QueueDSN)
	if err != nil {
		return fmt.Errorf("open the host's queue database for the subscription: %w", err)
	}
	cl.subDB = db
	actor := "subscribe/" + c.Holder
	in, err := dlq.New(cl.store, dlq.Config{Builds: cl.host, Actor: actor, Logger: c.Logger})
	if err != nil {
		return &ConfigError{fmt.Errorf("subscription intake settings: %w", err)}
	}
	cfg := subscribe.Config{DB: db, Intake: in, Parker: cl.store, Group: sc.Group, PageSize: sc.PageSize,
		PollInterval: sc.Interval, Settle: settleWindow(ctx, db, sc.Settle, c.Logger), Actor: actor, Logger: c.Logger, Hooks: c.Hooks.Subscribe,
		// Replicas divide the partitions through slot leases beside the queue leases.
		Leases: cl.store, Holder: c.Holder + "/subscribe", SlotTTL: c.LeaseTTL,
		// Register ahead the *_dlq partitions of every queue of the host for
		// each topic it reads, quiet or not (host.ReadEvidence).
		Queues: cl.host.Queues}
	if cl.sub, err = subscribe.New(cfg); err != nil {
		return &ConfigError{fmt.Errorf("subscription settings: %w", err)}
	}
	return nil
}

// settleWindow is the subscription's settle window: settle when given
// (with a warning when it does not cover the queue database's waits,
// subscribe.Waits.Covers), otherwise subscribe.SettleFor them.
func settleWindow(ctx context.Context, db *sql.DB, settle time.Duration, log *slog.Logger) time.Duration {
	waits, err := subscribe.ReadWaits(ctx, db)
	if err != nil {
		log.Warn("could not read the queue database's lock wait and semi-sync settings; the settle window is not checked against them",
			"err", err, "settle", cmp.Or(settle, subscribe.SettleDefault).String())
		return cmp.Or(settle, subscribe.SettleDefault)
	}
	return SettleFrom(waits, settle, log)
}

// SettleFrom is the settle window for the queue database's waits: settle
// when not zero (logging a warning when it does not cover them), else
// subscribe.SettleFor(waits).
func SettleFrom(waits subscribe.Waits, settle time.Duration, log *slog.Logger) time.Duration {
	switch {
	case settle == 0:
		return subscribe.SettleFor(waits)
	case !waits.Covers(settle):
		log.Warn(doctor.SettleRisk(settle, waits), "settle", settle.String(), "waits", waits.String())
	}
	return settle
}

// Record makes a dead letter's repair obligation durable (see
// dlq.Intake.Record). Acknowledge the dead letter when it returns a nil
// error, never before and never on an error: from then on the obligation
// lives in mend's database, and redelivering it records nothing new.
// Unless Config.NoInlineRepair, it then tries to finish the repair at once
// under the queue's fence, without waiting for it; a failure of that try is
// in Result.RepairErr and is the reconciler's to finish, not a reason to
// withhold the acknowledgement.
func (c *Client) Record(ctx context.Context, d dlq.Delivery) (dlq.Result, error) {
	return c.intake.Record(ctx, d)
}

// RecordMany is Record for many dead letters in one transaction (see
// dlq.Intake.RecordMany). With a nil error, acknowledge each delivery
// whose result has no Err; a delivery with Err set was not recorded. With
// an error, acknowledge none: nothing is known to be durable, and
// recording again is safe.
func (c *Client) RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	return c.intake.RecordMany(ctx, ds)
}

// ErrClosed is what Start returns on a Client that Close has closed (or
// is closing): its pools are closed, so nothing is started.
var ErrClosed = errors.New("client: closed")

// Start runs the reconciler in the background, a pass every
// Config.Interval, and the subscription when configured, until Stop, Close
// or ctx ends. A worker that records inline needs a reconciler (this one
// or a mend run elsewhere) for the repairs an inline try could not finish.
// Returns an error if it is already running, and ErrClosed after (or
// racing) Close; on any error it leaves nothing of its own running: what it
// started before the failure is stopped again.
func (c *Client) Start(ctx context.Context) error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.life.closed {
		return ErrClosed
	}
	var started []func()
	undo := func(err error) error {
		for _, stop := range slices.Backward(started) {
			stop()
		}
		return err
	}
	if c.sub != nil {
		if err := c.sub.Start(ctx); err != nil {
			return err
		}
		started = append(started, c.sub.Stop)
	}
	if c.reader != nil {
		if err := c.startReader(ctx); err != nil {
			return undo(err)
		}
		started = append(started, c.stopReader)
	}
	if err := c.rec.Start(ctx); err != nil {
		return undo(err)
	}
	return nil
}

// Stop stops the subscription and the background reconciler: it stops
// taking queues, cancels runs in flight and waits until their leases are
// released. Idempotent and safe before Start.
func (c *Client) Stop() {
	c.life.Lock()
	defer c.life.Unlock()
	c.stop()
}

// stop is Stop with c.life held.
func (c *Client) stop() {
	c.stopSubscription()
	if c.rec != nil {
		c.rec.Stop()
	}
}

func (c *Client) stopSubscription() {
	if c.sub != nil {
		c.sub.Stop()
	}
	c.stopReader()
}

// stopReader stops the reader startReader started, if it runs, and waits
// for it.
func (c *Client) stopReader() {
	c.readerMu.Lock()
	stop, done := c.readerStop, c.readerDone
	c.readerStop, c.readerDone = nil, nil
	c.readerMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// startReader runs binlog mode's reader until Stop. The reader retries
// every failure itself (binlog.Reader.Run returns only when ctx ends); an
// error it returns otherwise is logged.
func (c *Client) startReader(ctx context.Context) error {
	if c.reader == nil {
		return nil
	}
	c.readerMu.Lock()
	defer c.readerMu.Unlock()
	if c.readerStop != nil {
		return errors.New("client: the binlog reader is already running")
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	c.readerStop, c.readerDone = stop, done
	go func() {
		defer close(done)
		if err := c.reader.Run(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Error("binlog reader stopped; dead letters are not recorded until mend run restarts", "component", "binlog", "err", err)
		}
	}()
	return nil
}

// CatchUpBinlog is binlog mode's bounded read, for a run that does not
// Start (Subscription.Once; see binlog.Reader.CatchUp): under the reader's
// lease it records the dead letters committed from the saved position to
// the log's end as the server has it now, saves the position and releases
// the lease. It joins no consumer group. Returns an error matching
// mend.ErrLeaseHeld, having read nothing, while another replica holds the
// reader's lease (that replica reads: intake is its job); ErrClosed after
// Close; an error when the Client is not in binlog mode.
func (c *Client) CatchUpBinlog(ctx context.Context) (binlog.CatchUpResult, error) {
	c.life.Lock()
	closed := c.life.closed
	c.life.Unlock()
	switch {
	case closed:
		return binlog.CatchUpResult{}, ErrClosed
	case c.reader == nil:
		return binlog.CatchUpResult{}, errors.New("client: CatchUpBinlog: the subscription is not in binlog mode")
	}
	return c.reader.CatchUp(ctx)
}

// Drain runs passes until no queue has work due now and returns their
// stats summed (mend run --once; see reconcile.Reconciler.Drain).
func (c *Client) Drain(ctx context.Context) (reconcile.PassStats, error) { return c.rec.Drain(ctx) }

// Close stops the reconciler and the subscription and closes the
// databases; a Start racing it either runs before it (and is stopped by
// it) or returns ErrClosed. Record must not be called after Close. A
// second Close does nothing.
func (c *Client) Close() error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.life.closed {
		return nil
	}
	c.life.closed = true
	c.stop()
	var subErr error
	if c.subDB != nil {
		subErr = c.subDB.Close()
	}
	return errors.Join(subErr, c.host.Close(), c.store.Close())
}

// Store is mend's database, for what the Client does not wrap (status,
// leases, the subscription's ledger).
func (c *Client) Store() *storage.DB { return c.store }

// Host is the submit queue's adapter (batches, wake-ups, the stuck scan).
func (c *Client) Host() *host.DB { return c.host }

// Fence is the Client's fence; its leases expose Done().
func (c *Client) Fence() *fence.Fence { return c.fence }

// Reconciler is the Client's reconciler (Start and Stop wrap it).
func (c *Client) Reconciler() *reconcile.Reconciler { return c.rec }

// BinlogReader is binlog mode's reader, nil in any other mode.
func (c *Client) BinlogReader() *binlog.Reader { return c.reader }

// SubscribeMode is the subscription's mode (doctor.ModeBinlog or
// doctor.ModeOffsets; "" without Config.Subscription) and why it was
// chosen.
func (c *Client) SubscribeMode() (mode, why string) { return c.mode, c.modeWhy }

// Subscriber is the Client's subscription, nil without
// Config.Subscription and in binlog mode (mend run --once drains it
// instead of starting it).
func (c *Client) Subscriber() *subscribe.Subscriber { return c.sub }

// Config is the Client's configuration with every default filled in.
func (c *Client) Config() Config { return c.cfg }

package host

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
)

// Defaults for Options.
const (
	DeadlockRetriesDefault = 4
	WakeTopicDefault       = "speculate"
	// IOTimeoutFloor is the least default Options.IOTimeout: well above a
	// normal statement's time.
	IOTimeoutFloor = 30 * time.Second
	// LeaseTTLDefault is the lease TTL the adapter assumes when
	// Options.LeaseTTL is zero: fence.TTLDefault.
	LeaseTTLDefault = 15 * time.Second
	// maxIdleConns is how many idle connections each pool keeps.
	maxIdleConns = 16
)

// Options tunes a DB. The zero value is ready to use.
type Options struct {
	// DeadlockRetries bounds how often a statement that hit a deadlock
	// (error 1213, which rolls the statement back whole) is run again. Zero
	// means DeadlockRetriesDefault; negative means never.
	DeadlockRetries int
	// WakeTopic is the topic Wake publishes to. Empty means
	// WakeTopicDefault ("speculate"), the topic the real submit queue's
	// planner consumes.
	WakeTopic string
	// RequireWakeConsumer makes Wake refuse, with an *UnjoinedTopicError
	// and before publishing anything, while no consumer group of the host
	// (other than those in WakeConsumerIgnore) reads the wake topic by
	// CheckWakeTopic's rule (a live subscriber heartbeat on it, or a
	// queue_offsets row): a wake-up nobody reads would otherwise count as
	// sent. Once a reader is seen the check is not run again. It needs
	// SELECT on queue_subscriber_heartbeats and queue_offsets.
	RequireWakeConsumer bool
	// WakeConsumerIgnore are consumer groups that do not count as readers
	// of the wake topic: mend's own subscription's.
	WakeConsumerIgnore []string
	// LeaseTTL is the lease TTL of the planners that write through this
	// adapter. Every write is bounded by it: the host's sessions wait for a
	// row or metadata lock at most LockWait, so a write begun under a lease
	// and blocked on the real queue's locks cannot land more than LockWait
	// (less than the TTL) after the lease was lost. Zero means
	// LeaseTTLDefault (15 s, the fence's default); at least 2 s otherwise.
	LeaseTTL time.Duration
	// LockWait is the host sessions' innodb_lock_wait_timeout and
	// lock_wait_timeout, in whole seconds. Zero means LeaseTTL/3 in whole
	// seconds, at least 1 s; negative keeps the server's default (50 s for
	// row locks), which no adapter a fenced planner writes through should
	// do. A DSN may not set it.
	LockWait time.Duration
	// IOTimeout bounds each network read and write of the driver
	// (readTimeout, writeTimeout), so a statement sent into a connection
	// that hangs returns instead of waiting for TCP to give up, and a
	// planner blocked on the host cannot outlive its lease by hours. Zero
	// means max(2 × LeaseTTL, IOTimeoutFloor); negative keeps the DSN's
	// setting.
	IOTimeout time.Duration
	// OnDangling, when set, is called for every membership row
	// (queue_batch_state) that LiveBatches finds naming a batch that does not
	// exist. The real ListByStates fails the whole call on such a row; mend
	// reports it here and goes on, so one broken row cannot hide the rest of
	// the queue.
	OnDangling func(queue, batchID, state string)
	// Logger receives reports of rows the adapter skipped (dangling or
	// differently spelled membership rows, differently spelled requests).
	// Nil discards them.
	Logger *slog.Logger
	// NowFunc is the clock for the epoch-millisecond times the adapter
	// writes (queue_messages.created_at and published_at, a RequestLog's
	// timestamp_ms), as the real message store uses its client clock. Nil
	// means time.Now.
	NowFunc func() time.Time
}

func (o Options) validate() error {
	if o.WakeTopic != "" {
		if err := ValidateWakeTopic(o.WakeTopic); err != nil {
			return err
		}
	}
	if o.LeaseTTL < 0 || (o.LeaseTTL > 0 && o.LeaseTTL < mysqlx.MinLeaseTTL) {
		return &mend.ValidationError{Field: "lease_ttl", Reason: fmt.Sprintf("must be at least %s, got %s", mysqlx.MinLeaseTTL, o.LeaseTTL)}
	}
	return nil
}

// withDefaults fills the zero values; see each field.
func (o Options) withDefaults() Options {
	o.LeaseTTL = cmp.Or(o.LeaseTTL, LeaseTTLDefault)
	if o.LockWait == 0 {
		o.LockWait = mysqlx.LockWaitFor(o.LeaseTTL)
	}
	if o.IOTimeout == 0 {
		o.IOTimeout = max(2*o.LeaseTTL, IOTimeoutFloor)
	}
	return o
}

// ValidateWakeTopic checks a wake-up topic before anything is connected:
// it is written to queue_messages.topic, so it must be valid UTF-8 of at
// most 255 characters and 1020 bytes. Returns a *mend.ValidationError.
func ValidateWakeTopic(topic string) error {
	return mend.ValidateIdentity("wake_topic", topic, true)
}

// DB is the adapter over uber/submitqueue's two databases. It implements
// planner.Batches on the application database and planner.Waker on the
// queue database. It is safe for concurrent use.
type DB struct {
	app        *sql.DB // batch, queue_batch_state, request, build
	queue      *sql.DB // queue_messages; the same pool as app when the DSNs are equal
	retries    int
	wakeTopic  string
	onDangling func(queue, batchID, state string)
	log        *slog.Logger
	now        func() time.Time
	ioTimeout  time.Duration // the driver's read and write timeout; 0: the DSN's

	requireConsumer bool        // Options.RequireWakeConsumer
	consumerIgnore  []string    // Options.WakeConsumerIgnore
	consumerSeen    atomic.Bool // a group was seen reading the wake topic

	// afterMembersRead, when set (tests only), runs between the fan-out's
	// read of a chunk of members and their compare-and-set.
	afterMembersRead func()
	// trustRowCount, when set (tests only: the negative control of
	// BatchTransitionMany), takes a batched compare-and-set's changed-row
	// count as every batch moved, without reading them again.
	trustRowCount bool
	// seenBeforeCheck, when set (tests only: the planted slip of issue
	// 47), remembers that a consumer of the wake topic was seen before
	// the check that would have seen one, so every later wake-up goes out
	// unchecked.
	seenBeforeCheck bool
}

// Open connects to the submit queue's application database (appDSN) and its
// queue database (queueDSN; empty or equal to appDSN means the same
// database, one pool) and checks that both answer. DSNs are go-sql-driver
// DSNs naming a database. Every session is mend's (see mysqlx.Config and
// mysqlx.Resolve): autocommit=1, READ COMMITTED, no sql_select_limit,
// utf8mb4, a strict sql_mode, UTC, client-side interpolation,
// multiStatements off, lock waits bounded by the lease TTL, and the rest of
// docs/operations.md's session contract, whatever the server's globals;
// a DSN parameter that would set any of these, or anything mend does not
// know to be harmless, is refused with a *mysqlx.ParamError before any
// connection is made. Open creates nothing: the host's tables must exist.
func Open(ctx context.Context, appDSN, queueDSN string, opts Options) (*DB, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	app, err := openPool(ctx, writePool("app_dsn", opts), appDSN)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &DB{
		app: app, queue: app,
		wakeTopic:  cmp.Or(opts.WakeTopic, WakeTopicDefault),
		onDangling: opts.OnDangling,
		log:        log.With("component", "host"),
		now:        opts.NowFunc,
		ioTimeout:  max(opts.IOTimeout, 0),

		requireConsumer: opts.RequireWakeConsumer,
		consumerIgnore:  slices.Clone(opts.WakeConsumerIgnore),
	}
	if d.now == nil {
		d.now = time.Now
	}
	if queueDSN != "" && queueDSN != appDSN {
		if d.queue, err = openPool(ctx, writePool("queue_dsn", opts), queueDSN); err != nil {
			return nil, errors.Join(err, app.Close())
		}
	}
	switch {
	case opts.DeadlockRetries == 0:
		d.retries = DeadlockRetriesDefault
	case opts.DeadlockRetries > 0:
		d.retries = opts.DeadlockRetries
	}
	return d, nil
}

// writePool is the session of a pool the planner writes through: its lock
// waits bounded from the lease TTL, multiple statements off.
func writePool(field string, o Options) mysqlx.Pool {
	return mysqlx.Pool{Field: field, LockWait: max(o.LockWait, 0), IOTimeout: max(o.IOTimeout, 0)}
}

// openPool opens a pool through mysqlx.Open, the constructor every pool of
// mend's goes through: it refuses DSN parameters that would set what mend
// forces (autocommit, charset, sql_mode, time_zone, lock waits, ...) and
// forces them itself, with multiStatements off on every host pool.
func openPool(ctx context.Context, p mysqlx.Pool, dsn string) (*sql.DB, error) {
	// mysqlx never puts the DSN itself in an error: it may hold a password.
	pool, err := mysqlx.Open(ctx, dsn, p, maxIdleConns)
	if err != nil {
		return nil, fmt.Errorf("host: %w", translate(err))
	}
	return pool, nil
}

// Close closes the connection pools.
func (d *DB) Close() error {
	if d.queue != d.app {
		return errors.Join(d.app.Close(), d.queue.Close())
	}
	return d.app.Close()
}

// translate maps a driver error to mend's sentinels by error number.
func translate(err error) error {
	switch mysqlx.ErrNumber(err) {
	case mysqlx.ErrDupEntry:
		return fmt.Errorf("%w: row already exists: %w", mend.ErrConflict, err)
	case mysqlx.ErrSignal:
		// A trigger or procedure of the host refused the write on purpose.
		// Nothing was written; it is neither a conflict nor retryable by
		// itself, so it stays a plain error.
		return fmt.Errorf("host: write rejected by the server (SIGNAL): %w", err)
	case mysqlx.ErrNoSuchTable:
		return fmt.Errorf("host: a submit queue table is missing (mend never creates host tables; check that the DSN names the submit queue's database): %w", err)
	}
	return mysqlx.Translate(err)
}

// translateWrite is translate for an autocommit write. A connection that
// failed after the statement was sent may have committed it, so what
// mysqlx calls unavailable ("nothing was written") is ambiguous here; the
// caller learns the outcome by reading the row again.
func translateWrite(op string, err error) error {
	t := translate(err)
	if errors.Is(t, mend.ErrUnavailable) {
		return fmt.Errorf("%w: %s may or may not have been applied (read the row again to learn): %w", mend.ErrAmbiguous, op, err)
	}
	return t
}

// exec runs one autocommit statement, again after a deadlock (which rolls
// the statement back whole, so rerunning it is safe), a bounded number of
// times. Errors come back translated.
func (d *DB) exec(ctx context.Context, pool *sql.DB, op, query string, args ...any) (sql.Result, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err // nothing sent
		}
		res, err := pool.ExecContext(ctx, query, args...)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil && mysqlx.ErrNumber(err) == 0 {
			// Cut off by the caller (the planner cancels on losing its
			// lease) with the statement possibly sent: the server may
			// still apply it, at most the lock wait later.
			if !errors.Is(err, ctx.Err()) {
				err = errors.Join(err, ctx.Err())
			}
			return nil, fmt.Errorf("%w: %s was cut off by the end of its context and may or may not have been applied (read the row again to learn): %w", mend.ErrAmbiguous, op, err)
		}
		if mysqlx.ErrNumber(err) != mysqlx.ErrDeadlock || attempt >= d.retries {
			return nil, translateWrite(op, err)
		}
		t := time.NewTimer(time.Duration(5<<attempt) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(translate(err), ctx.Err())
		case <-t.C:
		}
	}
}

// nowMS is the adapter's clock in epoch milliseconds.
func (d *DB) nowMS() int64 { return d.now().UnixMilli() }

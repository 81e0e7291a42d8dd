package host

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
)

// Defaults for Options.
const (
	DeadlockRetriesDefault = 4
	WakeTopicDefault       = "speculate"
	// IOTimeoutDefault is Options.IOTimeout when zero: the same floor as
	// storage's default I/O timeout, well above a normal statement's time.
	IOTimeoutDefault = 60 * time.Second
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
	// IOTimeout bounds each network read and write of the driver
	// (readTimeout, writeTimeout), so a statement or COMMIT sent into a
	// connection that hangs returns instead of waiting for TCP to give up
	// (database/sql cannot cancel a COMMIT in flight), and a planner blocked
	// on the host cannot outlive its lease by hours. Zero means
	// IOTimeoutDefault; negative keeps the DSN's setting.
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
		if err := mend.ValidateIdentity("wake_topic", o.WakeTopic, true); err != nil {
			return err
		}
	}
	return nil
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
}

// Open connects to the submit queue's application database (appDSN) and its
// queue database (queueDSN; empty or equal to appDSN means the same
// database, one pool) and checks that both answer. DSNs are go-sql-driver
// DSNs naming a database; Open sets parseTime, UTC, client-side
// interpolation and a strict sql_mode on them, and refuses
// clientFoundRows=true. Open creates nothing: the host's tables must exist.
func Open(ctx context.Context, appDSN, queueDSN string, opts Options) (*DB, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.IOTimeout == 0 {
		opts.IOTimeout = IOTimeoutDefault
	}
	opts.IOTimeout = max(opts.IOTimeout, 0)
	app, err := openPool(ctx, "app_dsn", appDSN, opts.IOTimeout)
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
		ioTimeout:  opts.IOTimeout,
	}
	if d.now == nil {
		d.now = time.Now
	}
	if queueDSN != "" && queueDSN != appDSN {
		if d.queue, err = openPool(ctx, "queue_dsn", queueDSN, opts.IOTimeout); err != nil {
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

func openPool(ctx context.Context, field, dsn string, ioTimeout time.Duration) (*sql.DB, error) {
	// mysqlx never puts the DSN itself in an error: it may hold a password.
	cfg, err := mysqlx.NormalizeDSN(field, dsn)
	if err != nil {
		return nil, err
	}
	if ioTimeout > 0 {
		cfg.ReadTimeout, cfg.WriteTimeout = ioTimeout, ioTimeout
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, &mend.ValidationError{Field: field, Reason: err.Error()}
	}
	pool := sql.OpenDB(connector)
	// Like mend's store: keep enough idle connections for concurrent planners,
	// instead of database/sql's two, so repairs do not redial.
	pool.SetMaxIdleConns(maxIdleConns)
	if err := pool.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("host: connect to %s: %w", cfg.Addr, translate(err)), pool.Close())
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
		res, err := pool.ExecContext(ctx, query, args...)
		if err == nil {
			return res, nil
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

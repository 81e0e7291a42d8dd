package host

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/migrations"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the reference host schema: its own series with its own
// bookkeeping table, so applying or reverting it never touches mend's schema
// versions, and mend's own migrations never touch a host's database. Apply it
// to the application database and, when they differ, to the queue database
// too (see Migrate).
var Migrations = migrations.Set{FS: mustSub(migrationFiles, "migrations"), Table: "mend_host_schema_migrations"}

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // dir is a constant valid path
	}
	return sub
}

// Migrate applies Migrations to the application database and, if queueDSN is
// non-empty and different, to the queue database as well.
func Migrate(ctx context.Context, appDSN, queueDSN string) error {
	if err := Migrations.Up(ctx, appDSN); err != nil {
		return fmt.Errorf("host: migrate application database: %w", err)
	}
	if queueDSN != "" && queueDSN != appDSN {
		if err := Migrations.Up(ctx, queueDSN); err != nil {
			return fmt.Errorf("host: migrate queue database: %w", err)
		}
	}
	return nil
}

// Defaults for Options.
const (
	DeadlockRetriesDefault = 4
	WakeTopicDefault       = "speculate"
)

// Options tunes a DB. The zero value is ready to use.
type Options struct {
	// DeadlockRetries bounds how often a transaction that hit a deadlock
	// (error 1213) is run again. Zero means DeadlockRetriesDefault; negative
	// means never.
	DeadlockRetries int
	// WakeTopic is the planner topic Wake publishes to. Empty means
	// WakeTopicDefault ("speculate").
	WakeTopic string
	// IOTimeout, when set, bounds each network read and write of the driver
	// (readTimeout, writeTimeout), so a COMMIT sent into a connection that
	// hangs returns instead of waiting for TCP to give up (database/sql
	// cannot cancel a COMMIT in flight). Zero keeps the DSN's setting.
	IOTimeout time.Duration
}

func (o Options) validate() error {
	if o.IOTimeout < 0 {
		return &mend.ValidationError{Field: "io_timeout", Reason: "must not be negative"}
	}
	if o.WakeTopic != "" {
		if err := mend.ValidateIdentity("wake_topic", o.WakeTopic, true); err != nil {
			return err
		}
	}
	return nil
}

// DB is the reference adapter over the host schema. It implements
// planner.Batches on the application database and planner.Waker on the queue
// database. It is safe for concurrent use.
type DB struct {
	app       *sql.DB // sq_batches, sq_batch_membership, sq_requests
	queue     *sql.DB // sq_messages; the same pool as app when the DSNs are equal
	retries   int
	wakeTopic string
}

// Open connects to the application database (appDSN) and the queue database
// (queueDSN; empty or equal to appDSN means the same database, one pool) and
// checks that both answer. DSNs are go-sql-driver DSNs naming a database; Open
// sets parseTime, UTC, client-side interpolation and a strict sql_mode on
// them, and refuses clientFoundRows=true. The schema must already be applied
// (see Migrations).
func Open(ctx context.Context, appDSN, queueDSN string, opts Options) (*DB, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	app, err := openPool(ctx, "app_dsn", appDSN, opts.IOTimeout)
	if err != nil {
		return nil, err
	}
	d := &DB{app: app, queue: app, wakeTopic: cmp.Or(opts.WakeTopic, WakeTopicDefault)}
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
	cfg, err := normalizeDSN(field, dsn)
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
	if err := pool.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("host: connect to %s: %w", cfg.Addr, translate(err)), pool.Close())
	}
	return pool, nil
}

// normalizeDSN parses dsn and sets what the adapter relies on (see
// mysqlx.NormalizeDSN). It never puts the DSN itself in an error, since it
// may hold a password.
func normalizeDSN(field, dsn string) (*mysql.Config, error) { return mysqlx.NormalizeDSN(field, dsn) }

// Close closes the connection pools.
func (d *DB) Close() error {
	if d.queue != d.app {
		return errors.Join(d.app.Close(), d.queue.Close())
	}
	return d.app.Close()
}

// MySQL error numbers the adapter reacts to beyond mysqlx.Translate.
const (
	errDupEntry    = mysqlx.ErrDupEntry
	errNoSuchTable = mysqlx.ErrNoSuchTable
	errSignal      = mysqlx.ErrSignal
)

func errNumber(err error) uint16 { return mysqlx.ErrNumber(err) }

// translate maps a driver error to mend's sentinels by error number.
func translate(err error) error {
	switch errNumber(err) {
	case errDupEntry:
		return fmt.Errorf("%w: row already exists: %w", mend.ErrConflict, err)
	case errSignal:
		// A trigger or procedure of the host refused the write on purpose.
		// Nothing was written; it is neither a conflict nor retryable by
		// itself, so it stays a plain error.
		return fmt.Errorf("host: write rejected by the server (SIGNAL): %w", err)
	case errNoSuchTable:
		return fmt.Errorf("host: schema missing (apply host.Migrations): %w", err)
	}
	return mysqlx.Translate(err)
}

// withTx runs fn in one READ COMMITTED transaction on pool and commits it,
// through mysqlx.Run: a deadlock reruns the whole transaction (bounded,
// jittered), any error before COMMIT rolls the whole transaction back, and a
// COMMIT that failed without a server answer may have landed and is
// reported as mend.ErrAmbiguous.
func (d *DB) withTx(ctx context.Context, pool *sql.DB, op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	r := mysqlx.Runner{DeadlockRetries: d.retries, Translate: translate}
	begin := func(ctx context.Context) (*sql.Tx, error) { return pool.BeginTx(ctx, mysqlx.ReadCommitted) }
	return mysqlx.Run(ctx, r, begin, op, "", fn)
}

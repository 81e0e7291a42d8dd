package host

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
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

// sessionSQLMode is set on every connection, so an over-long value is an
// error rather than a silent truncation whatever the server's default is.
const sessionSQLMode = "'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"

// Options tunes a DB. The zero value is ready to use.
type Options struct {
	// DeadlockRetries bounds how often a transaction that hit a deadlock
	// (error 1213) is run again. Zero means DeadlockRetriesDefault; negative
	// means never.
	DeadlockRetries int
	// WakeTopic is the planner topic Wake publishes to. Empty means
	// WakeTopicDefault ("speculate").
	WakeTopic string
}

func (o Options) validate() error {
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
	app, err := openPool(ctx, "app_dsn", appDSN)
	if err != nil {
		return nil, err
	}
	d := &DB{app: app, queue: app, wakeTopic: cmp.Or(opts.WakeTopic, WakeTopicDefault)}
	if queueDSN != "" && queueDSN != appDSN {
		if d.queue, err = openPool(ctx, "queue_dsn", queueDSN); err != nil {
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

func openPool(ctx context.Context, field, dsn string) (*sql.DB, error) {
	cfg, err := normalizeDSN(field, dsn)
	if err != nil {
		return nil, err
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

// normalizeDSN parses dsn and sets what the adapter relies on. It never puts
// the DSN itself in an error, since it may hold a password.
func normalizeDSN(field, dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, &mend.ValidationError{Field: field, Reason: "cannot be parsed; expected user:password@tcp(host:port)/database"}
	}
	if cfg.DBName == "" {
		return nil, &mend.ValidationError{Field: field, Reason: "names no database; add /<database> after the address"}
	}
	if cfg.ClientFoundRows {
		return nil, &mend.ValidationError{Field: field, Reason: "sets clientFoundRows=true, which makes a duplicate publish look like an insert; remove it"}
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Params["sql_mode"] = sessionSQLMode
	return cfg, nil
}

// Close closes the connection pools.
func (d *DB) Close() error {
	if d.queue != d.app {
		return errors.Join(d.app.Close(), d.queue.Close())
	}
	return d.app.Close()
}

// MySQL error numbers the adapter reacts to.
const (
	errDupEntry        = 1062
	errNoSuchTable     = 1146
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	errBadString       = 1366
	errDataTooLong     = 1406
	errSignal          = 1644 // SIGNAL SQLSTATE '45000', e.g. from a trigger
)

func errNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// translate maps a driver error to mend's sentinels by error number. It is
// the only place that looks inside driver errors.
func translate(err error) error {
	if err == nil {
		return nil
	}
	switch errNumber(err) {
	case 0:
		// Not a server error: ours, a context error or a broken connection.
	case errDupEntry:
		return fmt.Errorf("%w: row already exists: %w", mend.ErrConflict, err)
	case errDeadlock:
		return fmt.Errorf("%w: deadlock, transaction rolled back: %w", mend.ErrBusy, err)
	case errLockWaitTimeout:
		return fmt.Errorf("%w: lock wait timeout, transaction rolled back: %w", mend.ErrBusy, err)
	case errDataTooLong, errBadString:
		return fmt.Errorf("%w: the server refused a value: %w", mend.ErrInvalid, err)
	case errSignal:
		// A trigger or procedure of the host refused the write on purpose.
		// Nothing was written; it is neither a conflict nor retryable by
		// itself, so it stays a plain error.
		return fmt.Errorf("host: write rejected by the server (SIGNAL): %w", err)
	case errNoSuchTable:
		return fmt.Errorf("host: schema missing (apply host.Migrations): %w", err)
	default:
		return err
	}
	if errors.Is(err, mend.ErrAmbiguous) || errors.Is(err, mend.ErrUnavailable) {
		return err
	}
	if isConnErr(err) {
		return fmt.Errorf("%w: %w", mend.ErrUnavailable, err)
	}
	return err
}

func isConnErr(err error) bool {
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// withTx runs fn in one READ COMMITTED transaction on pool and commits it. A
// deadlock reruns the whole transaction, bounded, with jitter. Any error
// before COMMIT rolls the whole transaction back (also after error 1205,
// which alone would undo only the statement). A COMMIT that failed without a
// server answer may have landed and is reported as mend.ErrAmbiguous.
func (d *DB) withTx(ctx context.Context, pool *sql.DB, op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := txOnce(ctx, pool, op, fn)
		if errNumber(err) != errDeadlock || attempt >= d.retries {
			return translate(err)
		}
		wait := time.Duration(5+rand.IntN(10)) * time.Millisecond << attempt
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(translate(err), ctx.Err())
		case <-t.C:
		}
	}
}

func txOnce(ctx context.Context, pool *sql.DB, op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		// database/sql has already rolled back if ctx ended; ErrTxDone then
		// only says so.
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		if errNumber(err) != 0 {
			return err // the server answered: nothing was committed
		}
		return fmt.Errorf("%w: commit of %s: %w", mend.ErrAmbiguous, op, err)
	}
	return nil
}

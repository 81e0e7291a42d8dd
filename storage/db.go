package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// Defaults for Options.
const (
	DeadlockRetriesDefault = 4
	MaxPayloadDefault      = 1 << 20
	maxPayloadHard         = 8 << 20
)

// sessionSQLMode is set on every connection: strict, so an over-long value is
// an error instead of a silent truncation, whatever the server's default is.
const sessionSQLMode = "'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"

// Options tunes a DB. The zero value is ready to use.
type Options struct {
	// DeadlockRetries bounds how often a transaction that hit a deadlock
	// (error 1213) is run again. Zero means DeadlockRetriesDefault; negative
	// means never.
	DeadlockRetries int
	// MaxPayload bounds a record's payload snapshot in bytes. Zero means
	// MaxPayloadDefault (1 MiB); at most 8 MiB.
	MaxPayload int
}

func (o Options) validate() error {
	if o.MaxPayload < 0 || o.MaxPayload > maxPayloadHard {
		return &mend.ValidationError{Field: "max_payload", Reason: fmt.Sprintf("must be between 1 and %d bytes", maxPayloadHard)}
	}
	return nil
}

// DB is mend's MySQL store. It is safe for concurrent use.
type DB struct {
	db         *sqlx.DB
	retries    int
	maxPayload int

	// beforeCommit, when set (tests only), runs just before COMMIT is sent.
	beforeCommit func(op string)
}

// NormalizeDSN parses a go-sql-driver DSN and sets what mend depends on:
// parseTime, UTC for both the driver and the session (so NOW(6) and the
// DATETIME(6) columns are UTC), client-side interpolation (one round trip per
// statement) and a strict sql_mode. It refuses clientFoundRows=true, which
// would make a no-op upsert look like an insert.
func NormalizeDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, &mend.ValidationError{Field: "dsn", Reason: "cannot be parsed (" + err.Error() + "); expected user:password@tcp(host:port)/database"}
	}
	if cfg.DBName == "" {
		return nil, &mend.ValidationError{Field: "dsn", Reason: "names no database; add /<database> after the address"}
	}
	if cfg.ClientFoundRows {
		return nil, &mend.ValidationError{Field: "dsn", Reason: "sets clientFoundRows=true, which makes create-if-absent unable to tell an insert from a duplicate; remove it"}
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

// Open connects to the database named in dsn (see NormalizeDSN) and checks
// that it answers.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	cfg, err := NormalizeDSN(dsn)
	if err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, &mend.ValidationError{Field: "dsn", Reason: err.Error()}
	}
	sqlDB := sql.OpenDB(connector)
	if err := sqlDB.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("storage: connect to %s: %w", cfg.Addr, translate(err)), sqlDB.Close())
	}
	retries := opts.DeadlockRetries
	switch {
	case retries == 0:
		retries = DeadlockRetriesDefault
	case retries < 0:
		retries = 0
	}
	maxPayload := opts.MaxPayload
	if maxPayload == 0 {
		maxPayload = MaxPayloadDefault
	}
	return &DB{db: sqlx.NewDb(sqlDB, "mysql"), retries: retries, maxPayload: maxPayload}, nil
}

// Close closes the connection pool.
func (d *DB) Close() error { return d.db.Close() }

// SQL returns the underlying pool, for health checks and metrics queries.
func (d *DB) SQL() *sql.DB { return d.db.DB }

// MySQL error numbers mend reacts to.
const (
	errDupEntry        = 1062
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	errDataTooLong     = 1406
	errBadString       = 1366
	errNoSuchTable     = 1146
)

func mysqlErrNumber(err error) uint16 {
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
	switch mysqlErrNumber(err) {
	case 0:
		// Not a server error: a mend sentinel, a context error or a
		// connection failure.
	case errDeadlock:
		return fmt.Errorf("%w: deadlock, transaction rolled back: %w", mend.ErrBusy, err)
	case errLockWaitTimeout:
		return fmt.Errorf("%w: lock wait timeout, transaction rolled back: %w", mend.ErrBusy, err)
	case errDataTooLong, errBadString:
		return fmt.Errorf("%w: the server refused a value: %w", mend.ErrInvalid, err)
	case errNoSuchTable:
		return fmt.Errorf("storage: schema missing (run mend migrate up): %w", err)
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

// txFunc is the body of one transaction.
type txFunc func(ctx context.Context, tx *sqlx.Tx) error

// withTx runs fn in one READ COMMITTED transaction and commits it. A deadlock
// reruns the whole transaction a bounded number of times with jitter. Any
// error before COMMIT rolls back the whole transaction (also after error
// 1205, which on its own would roll back only the statement). A failure of
// COMMIT itself that the server did not explain is ambiguous: the commit may
// have landed, so it is reported as *mend.AmbiguousError naming opID.
func (d *DB) withTx(ctx context.Context, op, opID string, fn txFunc) error {
	for attempt := 0; ; attempt++ {
		err := d.txOnce(ctx, op, opID, fn)
		if mysqlErrNumber(err) != errDeadlock || attempt >= d.retries {
			return translate(err)
		}
		// Jittered backoff: 5-15 ms, doubling per attempt.
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

func (d *DB) txOnce(ctx context.Context, op, opID string, fn txFunc) error {
	tx, err := d.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
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
	if d.beforeCommit != nil {
		d.beforeCommit(op)
	}
	if err := tx.Commit(); err != nil {
		if mysqlErrNumber(err) != 0 {
			// The server answered: it did not commit.
			return err
		}
		return &mend.AmbiguousError{OpID: opID, Err: err}
	}
	return nil
}

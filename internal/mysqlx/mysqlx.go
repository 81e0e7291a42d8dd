// Package mysqlx holds what mend's two SQL packages (storage and the
// reference host adapter) share about talking to MySQL: DSN normalisation,
// translation of driver errors by error number, and the transaction runner
// with bounded deadlock retries and ambiguous-commit detection. It imports
// only the root package and the driver, so it adds no edge between storage
// and the packages that consume it.
package mysqlx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

// SessionSQLMode is set on every connection: strict, so an over-long value
// is an error instead of a silent truncation, whatever the server's default.
const SessionSQLMode = "'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"

// MySQL error numbers mend reacts to.
const (
	ErrDupEntry        = 1062
	ErrNoSuchTable     = 1146
	ErrLockWaitTimeout = 1205
	ErrDeadlock        = 1213
	ErrBadString       = 1366
	ErrDataTooLong     = 1406
	ErrSignal          = 1644 // SIGNAL SQLSTATE '45000', e.g. from a trigger
)

// NormalizeDSN parses a go-sql-driver DSN and sets what mend depends on:
// parseTime, UTC for both the driver and the session (so NOW(6) and
// DATETIME(6) columns are UTC), client-side interpolation (one round trip
// per statement) and a strict sql_mode. It refuses clientFoundRows=true,
// which makes a no-op upsert report one row like an insert. field names the
// DSN in errors; the DSN itself never appears in them (it may hold a
// password). Any DSN setting of the session isolation variable is dropped:
// the store sets READ COMMITTED itself (SetReadCommitted).
func NormalizeDSN(field, dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, &mend.ValidationError{Field: field, Reason: "cannot be parsed; expected user:password@tcp(host:port)/database"}
	}
	if cfg.DBName == "" {
		return nil, &mend.ValidationError{Field: field, Reason: "names no database; add /<database> after the address"}
	}
	if cfg.ClientFoundRows {
		return nil, &mend.ValidationError{Field: field, Reason: "sets clientFoundRows=true, which makes create-if-absent unable to tell an insert from a duplicate; remove it"}
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	ForceParam(cfg, "time_zone", "'+00:00'")
	ForceParam(cfg, "sql_mode", SessionSQLMode)
	// The isolation level is mend's to choose, never the DSN's: a DSN
	// spelling of either variable would decide how every transaction on
	// that connection locks. SetIsolation adds the one mend chose.
	for _, name := range IsolationVariables {
		DropParam(cfg, name)
	}
	return cfg, nil
}

// IsolationVariables are the names the session's isolation level goes by:
// MySQL 8 knows only transaction_isolation, MariaDB 10.6-10.11 only
// tx_isolation (11.1 added transaction_isolation as a synonym).
var IsolationVariables = []string{"transaction_isolation", "tx_isolation"}

// ErrUnknownSystemVariable is error 1193, what a server answers when asked
// for a session variable it does not have.
const ErrUnknownSystemVariable = 1193

// IsolationVariable asks the server behind connector which name its
// session isolation variable has, so that it can be set once per
// connection, on connect, instead of before every transaction (which the
// driver does, one round trip each, when sql.TxOptions names a level).
func IsolationVariable(ctx context.Context, connector driver.Connector) (string, error) {
	db := sql.OpenDB(connector)
	defer db.Close()
	var level string
	for _, name := range IsolationVariables {
		err := db.QueryRowContext(ctx, "SELECT @@SESSION."+name).Scan(&level)
		if err == nil {
			return name, nil
		}
		if ErrNumber(err) != ErrUnknownSystemVariable {
			return "", err
		}
	}
	return "", fmt.Errorf("the server knows neither %s", strings.Join(IsolationVariables, " nor "))
}

// SetReadCommitted makes every connection of cfg run its transactions READ
// COMMITTED, through the session variable name (see IsolationVariable).
// Transactions are then begun without an isolation option.
func SetReadCommitted(cfg *mysql.Config, name string) {
	for _, n := range IsolationVariables {
		DropParam(cfg, n)
	}
	cfg.Params[name] = "'READ-COMMITTED'"
}

// DropParam removes every DSN spelling of the session variable name (see
// ForceParam).
func DropParam(cfg *mysql.Config, name string) {
	for k := range cfg.Params {
		if paramNames(k, name) {
			delete(cfg.Params, k)
		}
	}
}

// ForceParam makes value the only setting of the session variable name
// that the driver sends on connect. The driver sends each DSN parameter as
// "SET <key>=<value>" in map order, and the server takes the key in any
// case, with "@@", "@@session." or "session " before it; a DSN spelling the
// variable another way (SQL_MODE, Sql_Mode, @@sql_mode) would otherwise win
// on some connections and not others. Every key that names the variable,
// compared case-insensitively with whitespace, "@@" and scope prefixes
// ignored, is dropped first. A "global." spelling is dropped too: mend never
// changes a server's global settings.
func ForceParam(cfg *mysql.Config, name, value string) {
	DropParam(cfg, name)
	cfg.Params[name] = value
}

// paramNames reports whether the DSN parameter key sets variable name.
func paramNames(key, name string) bool {
	k := strings.ToLower(strings.Join(strings.Fields(key), ""))
	k = strings.TrimPrefix(k, "@@")
	for _, scope := range []string{"session.", "local.", "global.", "session", "local", "global"} {
		if rest, ok := strings.CutPrefix(k, scope); ok && rest == name {
			return true
		}
	}
	return k == name
}

// ErrNumber returns the MySQL error number inside err, or 0.
func ErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Translate maps a driver error to mend's sentinels by error number; it is
// the only place that looks inside driver errors. Callers handle the numbers
// that mean something special to them first and pass the rest here.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	switch ErrNumber(err) {
	case 0:
		// Not a server error: a mend sentinel, a context error or a
		// connection failure.
	case ErrDeadlock:
		return fmt.Errorf("%w: deadlock, transaction rolled back: %w", mend.ErrBusy, err)
	case ErrLockWaitTimeout:
		return fmt.Errorf("%w: lock wait timeout, transaction rolled back: %w", mend.ErrBusy, err)
	case ErrDataTooLong, ErrBadString:
		return fmt.Errorf("%w: the server refused a value: %w", mend.ErrInvalid, err)
	default:
		return err
	}
	// The caller's own deadline or cancellation stays what it is (a
	// context.DeadlineExceeded also satisfies net.Error).
	if errors.Is(err, mend.ErrAmbiguous) || errors.Is(err, mend.ErrUnavailable) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
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

// Tx is a transaction: *sql.Tx, or *sqlx.Tx which embeds it.
type Tx interface {
	Commit() error
	Rollback() error
}

// Runner runs transactions. The zero value never retries.
type Runner struct {
	// DeadlockRetries bounds how often a transaction that hit a deadlock
	// (error 1213) is run again.
	DeadlockRetries int
	// Translate maps errors before they are returned; nil means Translate.
	Translate func(error) error
	// BeforeCommit, when set (tests only), runs just before COMMIT is sent.
	BeforeCommit func(op string)
}

// Run runs fn in one transaction begun by begin and commits it. A deadlock
// reruns the whole transaction a bounded number of times with jittered
// backoff. Any error before COMMIT rolls the whole transaction back (also
// after error 1205, which on its own would roll back only the statement).
// A COMMIT that fails without an answer from the server may have landed: it
// is reported as *mend.AmbiguousError naming opID.
func Run[T Tx](ctx context.Context, r Runner, begin func(context.Context) (T, error), op, opID string, fn func(context.Context, T) error) error {
	translate := r.Translate
	if translate == nil {
		translate = Translate
	}
	for attempt := 0; ; attempt++ {
		err := runOnce(ctx, r, begin, op, opID, fn)
		if ErrNumber(err) != ErrDeadlock || attempt >= r.DeadlockRetries {
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

func runOnce[T Tx](ctx context.Context, r Runner, begin func(context.Context) (T, error), op, opID string, fn func(context.Context, T) error) error {
	tx, err := begin(ctx)
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
	if r.BeforeCommit != nil {
		r.BeforeCommit(op)
	}
	if err := tx.Commit(); err != nil {
		if ErrNumber(err) != 0 {
			return err // the server answered: nothing was committed
		}
		return &mend.AmbiguousError{OpID: opID, Err: fmt.Errorf("commit of %s: %w", op, err)}
	}
	return nil
}

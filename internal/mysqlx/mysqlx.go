// Package mysqlx holds what mend's SQL packages (storage, the reference
// host adapter, the migrator) share about talking to MySQL: the one
// constructor of every pool mend opens (Config, Resolve and Open: what a
// session is forced to be, and which DSN parameters are refused), the checks of a
// session and of the server's globals that mend doctor reports (CheckSession,
// CheckServer), translation of driver errors by error number, and the
// transaction runner with bounded deadlock retries and ambiguous-commit
// detection. It imports only the root package and the driver, so it adds no
// edge between storage and the packages that consume it.
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
	"regexp"
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

	ErrTableAccessDenied  = 1142 // "UPDATE command denied to user 'u'@'h' for table ..."
	ErrColumnAccessDenied = 1143 // "... for column 'c' in table 't'"
	ErrDBAccessDenied     = 1044 // "Access denied for user 'u'@'h' to database 'd'"
)

// deniedMessage parses the server's text of 1142 and 1143: MySQL names the
// table 't' (8.0) or 'd.t' or `d`.`t`, MariaDB `d`.`t`.
var (
	deniedMessage   = regexp.MustCompile(`^(\w+) command denied to user '([^']*)'@'[^']*' for (?:column '([^']*)' in )?table (.+)$`)
	deniedDBMessage = regexp.MustCompile("^Access denied for user '([^']*)'@'[^']*' to database '([^']*)'")
	quotedName      = regexp.MustCompile("^[`']([^`']*)[`']\\.[`']([^`']*)[`']$|^'([^'.]*)\\.([^']*)'$|^[`']([^`']*)[`']$")
)

// Denied turns the server's refusal of a statement for a missing privilege
// (1142, 1143, 1044) into a *mend.DeniedError naming the GRANT that fixes
// it; any other error is returned as it is.
func Denied(err error) error {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return err
	}
	d := &mend.DeniedError{Err: err}
	switch me.Number {
	case ErrTableAccessDenied, ErrColumnAccessDenied:
		m := deniedMessage.FindStringSubmatch(me.Message)
		if m == nil {
			return fmt.Errorf("%w: %w", mend.ErrDenied, err)
		}
		d.Privilege, d.User, d.Column = strings.ToUpper(m[1]), m[2], m[3]
		if n := quotedName.FindStringSubmatch(m[4]); n != nil {
			d.Database, d.Table = n[1]+n[3], n[2]+n[4]+n[5]
		} else {
			d.Table = strings.Trim(m[4], "'`")
		}
	case ErrDBAccessDenied:
		m := deniedDBMessage.FindStringSubmatch(me.Message)
		if m == nil {
			return fmt.Errorf("%w: %w", mend.ErrDenied, err)
		}
		d.User, d.Database = m[1], m[2]
	default:
		return err
	}
	return d
}

// IsolationVariables are the names the session's isolation level goes by:
// MySQL 8 knows only transaction_isolation, MariaDB 10.6-10.11 only
// tx_isolation (11.1 added transaction_isolation as a synonym). Resolve
// sets the first the server has, once per connection, on connect, instead
// of before every transaction (which the driver does, one round trip
// each, when sql.TxOptions names a level).
var IsolationVariables = []string{"transaction_isolation", "tx_isolation"}

// ErrUnknownSystemVariable is error 1193, what a server answers when asked
// for a session variable it does not have.
const ErrUnknownSystemVariable = 1193

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
	case ErrTableAccessDenied, ErrColumnAccessDenied, ErrDBAccessDenied:
		return Denied(err)
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
	if isPoolClosed(err) {
		// The caller closed the pool (a shutdown racing a call): nothing was
		// sent, and another pool, or a restarted process, can do it.
		return fmt.Errorf("%w: the connection pool is closed: %w", mend.ErrUnavailable, err)
	}
	return err
}

// isPoolClosed reports database/sql's error for a call on a closed *sql.DB.
// database/sql does not export it; its text has been the same since Go 1.0.
func isPoolClosed(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "sql: database is closed" {
			return true
		}
	}
	return false
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

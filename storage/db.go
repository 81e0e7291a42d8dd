package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
)

// Defaults for Options.
const (
	DeadlockRetriesDefault = 4
	MaxPayloadDefault      = 1 << 20
	maxPayloadHard         = 8 << 20
	// LeaseTTLDefault is the lease TTL the defaults below assume when
	// Options.LeaseTTL is zero; it is fence.TTLDefault.
	LeaseTTLDefault = 15 * time.Second
	// MinLeaseTTL is the shortest lease TTL a store accepts: the server
	// counts lock waits in whole seconds, at least 1, and the lock wait
	// must stay below the TTL (mend run and mend doctor use the same bound).
	MinLeaseTTL = mysqlx.MinLeaseTTL
	// MaxIdleConns is how many idle connections a store's pool keeps.
	MaxIdleConns = 16
	// IOTimeoutFloor is the least default IOTimeout: above InnoDB's default
	// innodb_lock_wait_timeout (50 s), so a legitimate lock wait is never
	// cut off as a dead connection.
	IOTimeoutFloor = 60 * time.Second
)

// Options tunes a DB. The zero value is ready to use, and safe: a hung
// client can block a takeover for about one lease TTL, not hours.
type Options struct {
	// DeadlockRetries bounds how often a transaction that hit a deadlock
	// (error 1213) is run again. Zero means DeadlockRetriesDefault; negative
	// means never.
	DeadlockRetries int
	// MaxPayload bounds a record's payload snapshot in bytes. Zero means
	// MaxPayloadDefault (1 MiB); at most 8 MiB.
	MaxPayload int
	// LeaseTTL is the lease TTL of the fences that use this store; the two
	// timeouts below default from it. Zero means LeaseTTLDefault (15 s, the
	// fence's default).
	LeaseTTL time.Duration
	// SessionIdleTimeout is the server-side wait_timeout of mend's sessions
	// (whole seconds, at least 1). A client that hangs in the middle of a
	// fenced transaction (a half-open connection, a frozen process) keeps
	// its shared lock on the queue's lease row, and with it blocks every
	// takeover, until the server drops the session; this bounds that wait.
	// Zero means LeaseTTL, so a hung holder delays a takeover by about one
	// more TTL. Negative keeps the server's default (8 hours on MySQL and
	// MariaDB), which no store used by a fence should do.
	SessionIdleTimeout time.Duration
	// LockWait bounds how long any of the store's statements waits for a
	// row lock (innodb_lock_wait_timeout) or a metadata lock
	// (lock_wait_timeout), in whole seconds. A takeover's acquire waits on
	// the lease row behind in-flight fenced transactions, and should give
	// up (and try again next pass) well within a lease TTL rather than
	// after the server's default 50 s. Zero means LeaseTTL/3 in whole
	// seconds, at least 1 s; negative keeps the server's default. A DSN may
	// not set it.
	LockWait time.Duration
	// IOTimeout bounds each network read and write of the driver (its
	// readTimeout and writeTimeout). Without it a COMMIT sent into a
	// connection that hangs waits for TCP to give up, which can take many
	// minutes: database/sql cannot cancel a COMMIT in flight. It must be
	// above the longest legitimate statement, lock waits included. Zero
	// means max(2 × LeaseTTL, IOTimeoutFloor); negative keeps the DSN's
	// readTimeout and writeTimeout (none by default).
	IOTimeout time.Duration
}

// withDefaults fills the zero values; see each field.
func (o Options) withDefaults() Options {
	if o.LeaseTTL == 0 {
		o.LeaseTTL = LeaseTTLDefault
	}
	if o.SessionIdleTimeout == 0 {
		o.SessionIdleTimeout = max(o.LeaseTTL, time.Second)
	}
	if o.IOTimeout == 0 {
		o.IOTimeout = max(2*o.LeaseTTL, IOTimeoutFloor)
	}
	if o.LockWait == 0 {
		o.LockWait = mysqlx.LockWaitFor(o.LeaseTTL)
	}
	return o
}

func (o Options) validate() error {
	if o.MaxPayload < 0 || o.MaxPayload > maxPayloadHard {
		return &mend.ValidationError{Field: "max_payload", Reason: fmt.Sprintf("must be between 1 and %d bytes", maxPayloadHard)}
	}
	if o.LeaseTTL < 0 || (o.LeaseTTL > 0 && o.LeaseTTL < MinLeaseTTL) {
		return &mend.ValidationError{Field: "lease_ttl", Reason: fmt.Sprintf("must be at least %s (the lock wait, whole seconds and at least 1 s, must stay below it), got %s", MinLeaseTTL, o.LeaseTTL)}
	}
	if o.SessionIdleTimeout > 0 && o.SessionIdleTimeout < time.Second {
		return &mend.ValidationError{Field: "session_idle_timeout", Reason: fmt.Sprintf("must be at least 1s (the server counts whole seconds), got %s", o.SessionIdleTimeout)}
	}
	return nil
}

// DB is mend's MySQL store. It is safe for concurrent use.
type DB struct {
	db         *sqlx.DB
	retries    int
	maxPayload int
	// vtgate: the store talks to Vitess's vtgate, where a transaction must
	// stay on one shard (one queue); see RecordCreateMany.
	vtgate bool

	// beforeCommit, when set (tests only), runs just before COMMIT is sent.
	beforeCommit func(op string)
	// afterAppendTogether, when set (tests only), runs after
	// RecordAppendMany's all-at-once try, reporting whether a record missed
	// (and the records were then appended one by one).
	afterAppendTogether func(missed bool)
	// appendTogetherUnguarded, when set (tests only), leaves out
	// appendTogetherGuard: a planted bug for a negative control.
	appendTogetherUnguarded bool
	// afterPruneSelect, when set (tests only), runs between PruneDone's
	// listing of candidates and their deletion.
	afterPruneSelect func()
}

// NormalizeDSN parses a go-sql-driver DSN with the driver's own parser and
// returns the session configuration of a store with the zero Options (see
// SessionConfig). It refuses, before any connection is made, every DSN
// parameter that would set a session variable mend sets itself or one it
// does not know to be harmless (a *mysqlx.ParamError naming it, matching
// mend.ErrInvalid), clientFoundRows=true, and a charset other than utf8mb4.
func NormalizeDSN(dsn string) (*mysql.Config, error) {
	return SessionConfig(dsn, Options{})
}

// SessionConfig is the driver configuration every session of a store
// opened with opts gets (docs/operations.md, "What mend forces on its
// sessions"): autocommit=1, utf8mb4 with a utf8mb4 collation, a strict
// sql_mode, time_zone '+00:00', UTC times, client-side interpolation,
// multiStatements on (the store sends a write transaction's statements
// together, see batchTx), the lock waits of Options.LockWait, the idle
// timeout and the I/O timeouts. Open adds what depends on the server
// (mysqlx.Resolve): READ COMMITTED, sql_select_limit at its maximum and the
// rest of the session contract.
func SessionConfig(dsn string, opts Options) (*mysql.Config, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return mysqlx.Config(dsn, opts.withDefaults().pool())
}

func (o Options) pool() mysqlx.Pool {
	return mysqlx.Pool{Field: "dsn", MultiStatements: true,
		LockWait: max(o.LockWait, 0), IdleTimeout: max(o.SessionIdleTimeout, 0), IOTimeout: max(o.IOTimeout, 0)}
}

// Open connects to the database named in dsn (see SessionConfig) and checks
// that it answers, that its sessions hold what mend set (a
// *mysqlx.SessionError if a proxy or the server undid it) and that it is
// neither a multi-primary cluster nor logging statement-based binlogs
// (ErrTopology; see CheckTopology).
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	// Every transaction runs READ COMMITTED. The level is set once per
	// connection, when it is made, through the session variable this
	// server has (its name differs between MySQL and MariaDB), so that
	// beginning a transaction is one statement, not two.
	sqlDB, err := mysqlx.Open(ctx, dsn, opts.pool(), MaxIdleConns)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", translate(err))
	}
	if opts.SessionIdleTimeout > 0 {
		// Retire idle connections before the server drops them.
		sqlDB.SetConnMaxIdleTime(opts.SessionIdleTimeout / 2)
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
	d := &DB{db: sqlx.NewDb(sqlDB, "mysql"), retries: retries, maxPayload: maxPayload}
	// The fence does not hold on a multi-primary cluster, and a
	// statement-based binary log refuses every READ COMMITTED write: refuse
	// both before anything is written.
	vars, err := serverVars(ctx, d.db.DB)
	if err == nil {
		err = errors.Join(checkMultiPrimary(vars), checkBinlog(vars))
	}
	if err == nil {
		var version string
		err = d.db.QueryRowContext(ctx, "SELECT @@version").Scan(&version)
		d.vtgate = mysqlx.IsVTGate(version)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("storage: %w", err), sqlDB.Close())
	}
	return d, nil
}

// Close closes the connection pool.
func (d *DB) Close() error { return d.db.Close() }

// SQL returns the underlying pool, for health checks and metrics queries.
func (d *DB) SQL() *sql.DB { return d.db.DB }

// Error numbers and helpers shared with the host adapter.
const errDupEntry = mysqlx.ErrDupEntry

func mysqlErrNumber(err error) uint16 { return mysqlx.ErrNumber(err) }

// translate maps a driver error to mend's sentinels by error number.
func translate(err error) error {
	if mysqlx.ErrNumber(err) == mysqlx.ErrNoSuchTable {
		return fmt.Errorf("storage: schema missing (run mend migrate up): %w", err)
	}
	return mysqlx.Translate(err)
}

// txFunc is the body of one transaction.
type txFunc func(ctx context.Context, tx *sqlx.Tx) error

// withTx runs fn in one transaction and commits it, through mysqlx.Run. It
// is READ COMMITTED because every connection of the pool is (see Open), so
// beginning it is the one START TRANSACTION round trip. Deadlocks rerun the transaction (bounded, jittered), any error
// before COMMIT rolls the whole transaction back, and a COMMIT that fails
// without an answer from the server is a *mend.AmbiguousError naming opID.
func (d *DB) withTx(ctx context.Context, op, opID string, fn txFunc) error {
	r := mysqlx.Runner{DeadlockRetries: d.retries, Translate: translate, BeforeCommit: d.beforeCommit}
	begin := func(ctx context.Context) (*sqlx.Tx, error) { return d.db.BeginTxx(ctx, nil) }
	return mysqlx.Run(ctx, r, begin, op, opID, fn)
}

package mysqlx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

// Session settings mend forces on every connection it opens.
const (
	// SessionCharset is the connection character set. Only with a charset
	// whose multibyte characters never contain the byte 0x5c (backslash) is
	// the driver's client-side escaping safe: under gbk, sjis, big5 or
	// cp932 a payload byte 0xbf before a quote turns the escaping
	// backslash into the second byte of a character, and the quote closes
	// the literal.
	SessionCharset = "utf8mb4"
	// SessionCollation is the connection collation when the DSN names none.
	// Both MySQL 8+ and MariaDB 10.6+ have it.
	SessionCollation = "utf8mb4_general_ci"
	// SessionTimeZone is the session time zone: NOW(6) and the DATETIME(6)
	// columns are UTC. An offset needs no time zone tables.
	SessionTimeZone = "+00:00"
)

// Pool says what a pool is for, and so what its sessions get. Every pool
// mend opens (the store, the host's application and queue databases, the
// import's dead-letter reader, the subscription's, doctor's probes, the
// migrator) goes through Config and Resolve (Open does both) with one of
// these. What a Pool chooses are only the timeouts and multiStatements:
// every other forced variable, the isolation level included, is the same on
// every pool.
type Pool struct {
	// Field names the DSN in errors ("dsn", "app_dsn", "queue_dsn").
	Field string
	// MultiStatements turns the driver's multiStatements on. Only mend's
	// own store needs it (it sends a write transaction's statements in one
	// packet); every other pool has it off, explicitly.
	MultiStatements bool
	// LockWait, when positive, bounds every row lock wait
	// (innodb_lock_wait_timeout) and metadata lock wait
	// (lock_wait_timeout) of the pool's sessions, in whole seconds rounded
	// down, at least 1. Pools whose writes the fence must bound set it
	// from the lease TTL (LockWaitFor).
	LockWait time.Duration
	// IdleTimeout, when positive, is the server-side wait_timeout (whole
	// seconds rounded up).
	IdleTimeout time.Duration
	// IOTimeout, when positive, is the driver's readTimeout and
	// writeTimeout.
	IOTimeout time.Duration
}

// LockWaitFor is the lock wait a pool used under a lease of ttl gets: a
// third of the TTL in whole seconds, at least 1 s. A write blocked on a
// row lock then gives up well within a term, so a write begun under a
// lease cannot land more than this long after the lease was lost.
func LockWaitFor(ttl time.Duration) time.Duration {
	return max(time.Second, (ttl / 3).Truncate(time.Second))
}

// MinLeaseTTL is the shortest lease TTL under which LockWaitFor stays below
// the TTL (the server counts lock waits in whole seconds, at least 1).
const MinLeaseTTL = 2 * time.Second

// ParamError reports a DSN parameter mend refuses: one that would set a
// session variable mend sets itself, one mend does not know to be harmless,
// or a value that could carry more than one assignment. It matches
// mend.ErrInvalid. Param is the parameter as the driver parsed it; the DSN
// itself never appears (it may hold a password).
type ParamError struct {
	Field  string // the DSN: "dsn", "app_dsn", "queue_dsn"
	Param  string // the parameter's key, as written
	Reason string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("mend: invalid %s: parameter %q %s", e.Field, e.Param, e.Reason)
}

// Unwrap lets errors.Is(err, mend.ErrInvalid) match.
func (e *ParamError) Unwrap() error { return mend.ErrInvalid }

// forcedVariables are the session variables mend sets itself (or that
// would change what a session mend set means); a DSN naming any of them, in
// any spelling, is refused with this reason.
var forcedVariables = map[string]bool{
	"autocommit": true, "sql_mode": true, "time_zone": true,
	"names": true, "charset": true, "character_set_client": true, "character_set_connection": true,
	"character_set_results": true, "collation_connection": true,
	"transaction_isolation": true, "tx_isolation": true, "transaction_read_only": true, "tx_read_only": true,
	"innodb_lock_wait_timeout": true, "lock_wait_timeout": true, "wait_timeout": true, "interactive_timeout": true,
	"sql_select_limit": true, "sql_safe_updates": true, "foreign_key_checks": true, "unique_checks": true,
	"sql_log_bin": true, "binlog_format": true, "max_statement_time": true, "max_execution_time": true,
	"sql_auto_is_null": true, "completion_type": true, "div_precision_increment": true, "max_sort_length": true,
}

// harmlessVariables are the only session variables a DSN may set: they
// change neither what a statement means nor how long it may hold a lock.
var harmlessVariables = map[string]bool{
	"net_read_timeout":  true,
	"net_write_timeout": true,
	"long_query_time":   true,
}

var (
	plainName    = regexp.MustCompile(`^[A-Za-z_]+$`)
	plainNumber  = regexp.MustCompile(`^[0-9]{1,9}(\.[0-9]{1,6})?$`)
	collationRE  = regexp.MustCompile(`^utf8mb4_[a-z0-9_]+$`)
	variableTrim = strings.NewReplacer("`", "", "'", "", `"`, "", " ", "", "\t", "", "\n", "", "\r", "")
)

// variableName reduces a DSN key to the variable it sets on the server,
// which takes it in any case, quoted in backticks, with "@@", "session.",
// "local." or "global." before it.
func variableName(key string) string {
	if u, err := url.QueryUnescape(key); err == nil {
		key = u // the driver sends keys as written; name them as meant
	}
	k := strings.ToLower(variableTrim.Replace(key))
	k = strings.TrimPrefix(k, "@@")
	for _, scope := range []string{"session.", "local.", "global.", "session", "local", "global"} {
		if rest, ok := strings.CutPrefix(k, scope); ok && forcedVariables[rest] {
			return rest
		}
	}
	return k
}

// Config parses dsn with the driver's own parser and returns the
// configuration every session of a pool p gets. It refuses, with a
// *ParamError naming the parameter and before any connection is made:
//
//   - a parameter that sets a session variable mend forces (autocommit,
//     sql_mode, time_zone, the character set and collation variables, the
//     isolation and lock wait variables, ...), in any spelling or quoting;
//   - any other session variable except net_read_timeout,
//     net_write_timeout and long_query_time, whose values must be plain
//     numbers: the driver writes a value into its SET statement unchanged,
//     so "1,sql_mode=”" would be a second assignment;
//   - charset other than utf8mb4, collation other than a utf8mb4_ one;
//   - clientFoundRows=true (a no-op upsert would read as an insert),
//     columnsWithAlias=true (result columns renamed table.column),
//     timeTruncate (every time sent truncated), allowAllFiles=true, and
//     multiStatements=true on any pool but the store's. The driver's
//     other parameters that would change what a value means (parseTime,
//     loc, interpolateParams, charset, collation) are forced below.
//
// A DSN without a database, or one the driver cannot parse, is a
// *mend.ValidationError. Then it forces: autocommit=1; character_set_client,
// character_set_results and collation_connection utf8mb4 (with the DSN's
// utf8mb4 collation, else SessionCollation); a strict sql_mode;
// time_zone '+00:00'; parseTime, loc=UTC and client-side interpolation;
// multiStatements exactly as p says; and p's lock wait, idle and I/O
// timeouts. READ COMMITTED, sql_select_limit and the other variables
// whose name or acceptance depends on the server are added by Resolve,
// which Open calls.
func Config(dsn string, p Pool) (*mysql.Config, error) {
	field := p.Field
	if field == "" {
		field = "dsn"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, &mend.ValidationError{Field: field, Reason: "cannot be parsed; expected user:password@tcp(host:port)/database"}
	}
	if cfg.DBName == "" {
		return nil, &mend.ValidationError{Field: field, Reason: "names no database; add /<database> after the address"}
	}
	refuse := func(param, reason string) (*mysql.Config, error) {
		return nil, &ParamError{Field: field, Param: param, Reason: reason}
	}
	if cfg.ClientFoundRows {
		return refuse("clientFoundRows", "is true, which makes create-if-absent unable to tell an insert from a duplicate; remove it")
	}
	if cfg.ColumnsWithAlias {
		return refuse("columnsWithAlias", "is true, which renames every result column to table.column, so mend's reads no longer find their columns; remove it")
	}
	if tt, ok := driverParam(cfg, "timeTruncate"); ok {
		return refuse("timeTruncate", fmt.Sprintf("is %s, which makes the driver truncate every time mend sends (a dead letter's failed_at, a lease's expiry) before the server sees it; remove it", tt))
	}
	if cfg.AllowAllFiles {
		return refuse("allowAllFiles", "is true, which lets a statement read any file of this host; remove it")
	}
	if cfg.MultiStatements && !p.MultiStatements {
		return refuse("multiStatements", "is true; mend keeps multiple statements per query off on this pool, so no value can ever run as a second statement; remove it")
	}
	if cs, ok := driverParam(cfg, "charset"); ok && !utf8mb4First(cs) {
		return refuse("charset", fmt.Sprintf("is %q; mend's sessions always use %s (with another charset the driver's escaping can be turned into SQL); remove it", cs, SessionCharset))
	}
	collation := SessionCollation
	if _, ok := driverParam(cfg, "collation"); ok {
		c := strings.ToLower(cfg.Collation)
		if !collationRE.MatchString(c) {
			return refuse("collation", fmt.Sprintf("is %q; mend's sessions always use a utf8mb4 collation; remove it", cfg.Collation))
		}
		collation = c
	}
	for key, value := range cfg.Params {
		name := variableName(key)
		switch {
		case forcedVariables[name]:
			return refuse(key, fmt.Sprintf("sets %s, which mend sets itself on every session; remove it", name))
		case !plainName.MatchString(key) || !harmlessVariables[strings.ToLower(key)]:
			return refuse(key, "sets a session variable mend does not know to be harmless (only net_read_timeout, net_write_timeout and long_query_time may be set); remove it")
		case !plainNumber.MatchString(value):
			return refuse(key, "must be a plain number: the driver sends the value unchanged, so anything else could carry a second assignment")
		}
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	cfg.MultiStatements = p.MultiStatements
	cfg.Collation = collation // the handshake's character set, too
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["autocommit"] = "1"
	cfg.Params["sql_mode"] = SessionSQLMode
	cfg.Params["time_zone"] = "'" + SessionTimeZone + "'"
	// Not character_set_connection: setting it after collation_connection
	// (the driver sends parameters in map order) would reset the collation
	// to the charset's default. collation_connection sets both.
	cfg.Params["character_set_client"] = SessionCharset
	cfg.Params["character_set_results"] = SessionCharset
	cfg.Params["collation_connection"] = collation
	if p.LockWait > 0 {
		secs := strconv.Itoa(max(1, int(p.LockWait/time.Second)))
		cfg.Params["innodb_lock_wait_timeout"] = secs
		cfg.Params["lock_wait_timeout"] = secs
	}
	if p.IdleTimeout > 0 {
		cfg.Params["wait_timeout"] = strconv.Itoa(int((p.IdleTimeout + time.Second - 1) / time.Second))
	}
	if p.IOTimeout > 0 {
		cfg.ReadTimeout, cfg.WriteTimeout = p.IOTimeout, p.IOTimeout
	}
	applyDSNFile(cfg) // secretfile.go: a DSN read from a file re-reads it on connect
	return cfg, nil
}

// utf8mb4First reports whether a driver charset list is utf8mb4 alone or
// utf8mb4 first with only UTF-8 fallbacks: go-sql-driver's common spelling
// charset=utf8mb4,utf8 tries utf8mb4 (which every supported server has)
// and falls back to utf8; neither has a multibyte character containing
// 0x5c, so the driver's escaping stays safe, and mend sets utf8mb4 on the
// session anyway.
func utf8mb4First(list string) bool {
	for i, cs := range strings.Split(list, ",") {
		cs = strings.ToLower(strings.TrimSpace(cs))
		if (i == 0 && cs != SessionCharset) || (cs != SessionCharset && cs != "utf8" && cs != "utf8mb3") {
			return false
		}
	}
	return true
}

// driverParam returns the value of one of the driver's own DSN parameters
// (charset, collation) as the driver parsed it, and whether the DSN set it.
// The driver keeps charset unexported; its formatter writes it back out.
func driverParam(cfg *mysql.Config, name string) (string, bool) {
	c := cfg.Clone()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName, c.Params = "", "", "", "", "", nil
	dsn := c.FormatDSN()
	i := strings.IndexByte(dsn, '?')
	if i < 0 {
		return "", false
	}
	q, err := url.ParseQuery(dsn[i+1:])
	if err != nil {
		return "", false
	}
	v, ok := q[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// Open opens a pool of p's sessions on dsn (Config, then Resolve), and
// checks one session: every value mend forced must hold there (a proxy or
// server that ignores the SET is refused with a *SessionError). The pool's
// idle connections are capped at maxIdle.
func Open(ctx context.Context, dsn string, p Pool, maxIdle int) (*sql.DB, error) {
	cfg, err := Config(dsn, p)
	if err != nil {
		return nil, err
	}
	field := cmpField(p.Field)
	if err := Resolve(ctx, cfg); err != nil {
		var ve *mend.ValidationError
		if errors.As(err, &ve) {
			ve.Field = field
			return nil, ve
		}
		return nil, fmt.Errorf("connect to %s: %w", cfg.Addr, Translate(err))
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, &mend.ValidationError{Field: field, Reason: err.Error()}
	}
	db := sql.OpenDB(connector)
	if maxIdle > 0 {
		db.SetMaxIdleConns(maxIdle)
	}
	if err := CheckSession(ctx, db, cfg); err != nil {
		return nil, errors.Join(fmt.Errorf("connect to %s: %w", cfg.Addr, Translate(err)), db.Close())
	}
	return db, nil
}

// SelectLimitMax is the largest sql_select_limit, the value that means "no
// limit". mend sets it explicitly: SET SESSION sql_select_limit = DEFAULT
// copies the server's global, which is the very value to escape.
const SelectLimitMax = "18446744073709551615"

// serverForced are the session variables Resolve forces on a MySQL or
// MariaDB server (not through vtgate), beside the isolation level and the
// statement time limit, each with the value every session gets
// (docs/operations.md, "What mend forces on its sessions", says why each).
var serverForced = map[string]string{
	// A global limit cuts every unbounded SELECT short, silently.
	"sql_select_limit": SelectLimitMax,
	// With 0, InnoDB may skip checking a secondary UNIQUE key.
	"unique_checks": "1",
	// Foreign keys of a host's schema hold for mend's writes too.
	"foreign_key_checks": "1",
	// With 1, "col IS NULL" matches the row last inserted.
	"sql_auto_is_null": "0",
	// With 1, an UPDATE or DELETE whose WHERE uses no key column fails.
	"sql_safe_updates": "0",
	// CHAIN would open a transaction after every COMMIT that the
	// following autocommit statements then run in, uncommitted; RELEASE
	// would drop the connection after every COMMIT.
	"completion_type": "'NO_CHAIN'",
	// The lease views' seconds_left divides.
	"div_precision_increment": "4",
	// ORDER BY compares only the first max_sort_length bytes of a string
	// when it sorts without an index; mend's keys are shorter than this.
	"max_sort_length": "1024",
}

// statementTimers are the variables that abort a statement that runs
// longer than their value, by engine: MySQL's max_execution_time (SELECT
// only, milliseconds), MariaDB's max_statement_time (every statement,
// seconds). Resolve sets the one the server has to 0: mend bounds its
// statements with their context and the driver's I/O timeout.
var statementTimers = []string{"max_execution_time", "max_statement_time"}

// Resolve adds to cfg (from Config) what depends on the server it reaches,
// asking it on one connection of its own: READ COMMITTED under the name
// the server's isolation variable has (transaction_isolation on MySQL,
// tx_isolation on MariaDB 10.6-11.0), and, unless the server is vtgate,
// the variables of serverForced and the server's statement time limit set
// to 0. Through vtgate (IsVTGate) only the isolation level is added: vtgate
// keeps or refuses other session variables itself (see VTGateOwn), and
// mend's tested contract there is the one Config forces.
func Resolve(ctx context.Context, cfg *mysql.Config) error {
	probe := cfg.Clone()
	probe.Params = nil // connect as plainly as possible: only read here
	connector, err := mysql.NewConnector(probe)
	if err != nil {
		return &mend.ValidationError{Field: "dsn", Reason: err.Error()}
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(1)
	var version string
	if err := db.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err != nil {
		return err
	}
	iso, err := firstVariable(ctx, db, IsolationVariables)
	if err != nil {
		return err
	}
	if iso == "" {
		return fmt.Errorf("the server knows neither %s", strings.Join(IsolationVariables, " nor "))
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params[iso] = "'READ-COMMITTED'"
	if IsVTGate(version) {
		return nil
	}
	for k, v := range serverForced {
		cfg.Params[k] = v
	}
	for _, name := range statementTimers {
		ok, err := hasVariable(ctx, db, name)
		if err != nil {
			return err
		}
		if ok {
			cfg.Params[name] = "0"
		}
	}
	return nil
}

// firstVariable returns the first of names the server has as a session
// variable, or "" if it has none of them.
func firstVariable(ctx context.Context, db *sql.DB, names []string) (string, error) {
	for _, name := range names {
		ok, err := hasVariable(ctx, db, name)
		if err != nil || ok {
			return name, err
		}
	}
	return "", nil
}

// hasVariable reports whether the server has a session variable name.
func hasVariable(ctx context.Context, db *sql.DB, name string) (bool, error) {
	var v sql.NullString
	err := db.QueryRowContext(ctx, "SELECT @@SESSION."+name).Scan(&v)
	switch {
	case err == nil:
		return true, nil
	case ErrNumber(err) == ErrUnknownSystemVariable:
		return false, nil
	}
	return false, err
}

func cmpField(f string) string {
	if f == "" {
		return "dsn"
	}
	return f
}

// SessionError reports a session on which a setting mend forced does not
// hold: something between mend and the server (a proxy multiplexing
// sessions, an init_connect that runs later) changed it.
type SessionError struct {
	Variable   string
	Got, Want  string
	ServerNote string
}

func (e *SessionError) Error() string {
	return fmt.Sprintf("mysqlx: session variable %s is %q after mend set it to %q%s; mend's guarantees depend on it (look for a proxy or server setting that rewrites sessions)", e.Variable, e.Got, e.Want, e.ServerNote)
}

// VTGateOwn are the session variables mend sets that vtgate, Vitess's
// query router, keeps as its own instead of applying them to the MySQL
// sessions of its tablets (measured on v0.24: the SET is accepted and
// @@SESSION answers the tablet's default), each with what bounds the same
// thing there. Every other variable mend forces (autocommit, sql_mode,
// time_zone, the character sets, the isolation level,
// innodb_lock_wait_timeout) does reach the tablets' sessions, and is
// checked through vtgate like on one server.
var VTGateOwn = map[string]string{
	// A hung client's open transaction is ended by the tablet's
	// transaction killer, not by the server's idle timeout.
	"wait_timeout": "the tablet's --queryserver-config-transaction-timeout ends a hung writer's transaction; keep it under the lease TTL",
	// Metadata lock waits concern DDL; mend's statements are bounded by
	// their context and the driver's I/O timeout as well.
	"lock_wait_timeout": "metadata lock waits are bounded by the statement's context and the driver's I/O timeout",
}

// IsVTGate reports whether a server's @@version is vtgate's ("8.4.6-Vitess").
func IsVTGate(version string) bool { return strings.HasSuffix(version, "-Vitess") }

// CheckSession reads, on one session of db, every variable Config forced
// through cfg's parameters and reports the first that does not hold as a
// *SessionError. It also answers whether the pool can connect at all.
//
// Through vtgate (IsVTGate) the variables of VTGateOwn are not compared,
// and collation_connection need only be a utf8mb4 collation: vtgate
// answers with its own (utf8mb4_0900_ai_ci) whatever the client set, and
// mend's identities live in binary columns, so no comparison mend relies on
// depends on the connection's collation, only on its character set, which
// is checked as everywhere.
func CheckSession(ctx context.Context, db *sql.DB, cfg *mysql.Config) error {
	if !slices.ContainsFunc(IsolationVariables, func(n string) bool { return cfg.Params[n] != "" }) {
		return errors.New("mysqlx: the session configuration names no isolation level: pass it through Resolve first")
	}
	names := make([]string, 0, len(cfg.Params))
	for k := range cfg.Params {
		names = append(names, k)
	}
	// A stable order, so the first mismatch reported is always the same.
	slices.Sort(names)
	cols := make([]string, len(names), len(names)+1)
	for i, n := range names {
		cols[i] = "@@SESSION." + n
	}
	cols = append(cols, "@@version") // vtgate answers this itself; VERSION() would be a tablet's
	got := make([]sql.NullString, len(cols))
	dest := make([]any, len(cols))
	for i := range got {
		dest[i] = &got[i]
	}
	if err := db.QueryRowContext(ctx, "SELECT "+strings.Join(cols, ", ")).Scan(dest...); err != nil {
		return err
	}
	vtgate := IsVTGate(got[len(names)].String)
	for i, n := range names {
		switch {
		case vtgate && VTGateOwn[n] != "":
			continue
		case vtgate && n == "sql_mode":
			if strictMode(got[i].String) {
				continue // vtgate reports the mode in its own normal form
			}
		case vtgate && n == "collation_connection":
			if strings.HasPrefix(strings.ToLower(got[i].String), SessionCharset+"_") {
				continue
			}
		case sameSetting(n, got[i].String, cfg.Params[n]):
			continue
		}
		return &SessionError{Variable: n, Got: got[i].String, Want: strings.Trim(cfg.Params[n], "'")}
	}
	return nil
}

// sameSetting compares a variable as the server reports it with the value
// mend sent.
func sameSetting(name, got, sent string) bool {
	want := strings.Trim(sent, "'")
	switch name {
	case "autocommit":
		return got == "1" || strings.EqualFold(got, "ON")
	case "sql_mode":
		// Every mode mend sent must be among those the session reports
		// (a server may add its own, such as MariaDB's SIMULTANEOUS_ASSIGNMENT).
		have := strings.Split(strings.ToUpper(got), ",")
		for m := range strings.SplitSeq(strings.ToUpper(want), ",") {
			if !slices.Contains(have, m) {
				return false
			}
		}
		return strictMode(got)
	case "transaction_isolation", "tx_isolation":
		return strings.EqualFold(got, want)
	case "net_read_timeout", "net_write_timeout", "long_query_time":
		return true // the DSN's own harmless settings
	}
	if a, err := strconv.ParseUint(got, 10, 64); err == nil {
		// Exactly: as floats, 2^64-1 and 2^64-2 would be the same.
		if b, err := strconv.ParseUint(want, 10, 64); err == nil {
			return a == b
		}
	}
	if a, err := strconv.ParseFloat(got, 64); err == nil {
		b, err := strconv.ParseFloat(want, 64)
		return err == nil && a == b
	}
	return strings.EqualFold(got, want)
}

// strictMode reports whether an sql_mode makes over-long values errors.
func strictMode(mode string) bool {
	for m := range strings.SplitSeq(strings.ToUpper(mode), ",") {
		if m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" {
			return true
		}
	}
	return false
}

// OpenConfig opens a small pool (two connections) of mend's sessions on
// cfg (from Config), resolved for its server as Open resolves every pool's
// (isolation level, sql_select_limit, ...), and pings it: for probes and
// one-off reads (doctor, migrate's checks), not for a service's traffic.
func OpenConfig(ctx context.Context, cfg *mysql.Config) (*sql.DB, error) {
	if err := Resolve(ctx, cfg); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Addr, err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to %s: %w", cfg.Addr, err)
	}
	return db, nil
}

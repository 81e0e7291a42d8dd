package subscribe

// The open-transaction protocol, in one place: what each horizon sample
// learns of the server's transactions still open, when mend's user may
// read them, so that the ledger (ledger.go, horizons) holds a sample for
// as long as a transaction that began before it stays open, past the
// settle window. In order: the reader's state (openReader, readOpen's
// outcomes), the read (readOldest: innodb_trx with its freshness proof,
// the process list's databases), and the InnoDB monitor fallback
// (openFromStatus, parseInnoDBStatus). Its invariants are listed in the
// package doc, "Open transactions".

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mendq/mend/internal/mysqlx"
)

// openReprobe is how often a subscription that may not read the open
// transactions tries again: a grant given while mend runs takes effect
// within it.
const openReprobe = time.Minute

// openReader reads the open transactions for the passes. Whether it may is
// found by trying the read, not from SHOW GRANTS.
type openReader struct {
	mu      sync.Mutex
	visible bool      // the last read succeeded
	hidden  time.Time // when the server last refused it; zero: never
	blind   bool      // tests only: never read them, as without the grant
	// last is how the last read went, for PassStats.OpenRead.
	last string
	// read replaces readOpen in tests (SetOpenRead): the server's
	// answers, a stale view among them, on cue.
	read func(context.Context, *sql.DB) (time.Time, error)
	// sessions is what the reads' process lists tell of when each live
	// session connected: no transaction is older than its session.
	sessions sessionAges
}

// SeesOpen reports whether the subscription's last pass was allowed to
// read the queue database's open transactions (mend's user holds PROCESS):
// then a watermark waits for a transaction that began before its sample
// however long it stays open; otherwise the settle window alone protects a
// late commit. A read that came back stale (innodb_trx's cache predating
// it) was allowed, so it counts: on a busy server other readers keep the
// cache stale for many passes in a row.
func (s *Subscriber) SeesOpen() bool {
	s.open.mu.Lock()
	defer s.open.mu.Unlock()
	return s.open.visible
}

// How a pass's read of the open transactions went (PassStats.OpenRead).
const (
	OpenUsable = "usable" // read, and the view is as new as the read
	OpenStale  = "stale"  // read, but innodb_trx's cache predates the read: other readers kept it from refreshing
	OpenHidden = "hidden" // refused: mend's user lacks PROCESS
	OpenFailed = "failed" // another error
)

// readOpen reads the open transactions for a sample just taken. A refusal
// makes the view openNone (the window alone decides), and the read is
// tried again openReprobe later; any other failure (a stale view among
// them) is openUnknown, and the samples since the last usable read wait
// for the next (see horizons).
func (s *Subscriber) readOpen(ctx context.Context) openView {
	r := &s.open
	r.mu.Lock()
	defer r.mu.Unlock()
	now := s.cfg.NowFunc()
	r.last = ""
	if r.blind || !r.hidden.IsZero() && now.Sub(r.hidden) < openReprobe {
		return openView{state: openNone}
	}
	var oldest time.Time
	var session int64
	var err error
	if r.read != nil {
		oldest, err = r.read(ctx, s.cfg.DB)
	} else {
		var o openTrx
		o, err = readOldestWith(ctx, s.cfg.DB, &r.sessions)
		oldest, session = o.started.Time, o.session
	}
	allowed := func() {
		if !r.visible {
			s.log.InfoContext(ctx, "the subscription sees the queue database's open transactions: a watermark waits for one that began before its sample, however long it stays open")
		}
		r.visible, r.hidden = true, time.Time{}
	}
	switch {
	case err == nil:
		allowed()
		r.last = OpenUsable
		return openView{state: openRead, oldest: oldest, session: session}
	case errors.Is(err, ErrOpenHidden):
		if r.visible || r.hidden.IsZero() {
			s.log.WarnContext(ctx, "the subscription cannot see the queue database's open transactions; a MoveToDLQ held open longer than the settle window can be lost",
				"settle", s.settle.String(), "grant", OpenGrant(""), "err", err)
		}
		r.visible, r.hidden, r.last = false, now, OpenHidden
		return openView{state: openNone}
	case errors.Is(err, errOpenStale):
		// Another reader kept innodb_trx's cache from refreshing: common
		// with several replicas, and harmless while it passes.
		allowed()
		r.last = OpenStale
		s.log.DebugContext(ctx, "the queue database's view of its open transactions predates this read; samples since the last usable one wait", "err", err)
		return openView{state: openUnknown}
	default:
		r.last = OpenFailed
		s.log.WarnContext(ctx, "could not read the queue database's open transactions; samples since the last usable read wait", "err", err)
		return openView{state: openUnknown}
	}
}

// lastRead is how the last read went (PassStats.OpenRead).
func (r *openReader) lastRead() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// The server's open transactions that may hold an offset of
// queue_messages uncommitted, read just after each horizon sample (see
// the package doc, "Open transactions"): how many InnoDB transactions
// that are not read-only are open in sessions whose current database is
// the queue's, and when the oldest of them began, by the server's clock in
// UTC (trx_started is in the server's system time zone, whole seconds).
// information_schema.innodb_trx and SHOW PROCESSLIST show every session's
// only to a user with PROCESS, on MySQL and MariaDB alike. Neither says which
// table a transaction locked, so a long writer on another table of the
// queue's database holds the watermarks too. MySQL's
// performance_schema.data_locks would (SELECT on it alone), but gives no
// start time and is empty while performance_schema is off; MariaDB has
// none, and its innodb_locks lists only locks waited for, not the IX lock
// every insert holds.
//
// InnoDB fills innodb_trx from a cache it refreshes only once nobody has
// read it for 0.1 s, so a view can be older than the statement reading
// it, and a view holding a row of the reader's own session proves
// nothing: the pool reuses sessions, and the previous read's transaction
// on the same session is in a cache that other readers (more replicas, a
// monitoring agent, `watch`) keep from refreshing. The read therefore runs
// in a transaction of its own, begun inside InnoDB first (sqlOpenTouch),
// and the statement reading innodb_trx carries a nonce drawn for this
// read alone: the view is fresh only if the reader's own row shows that
// statement as its current one (trx_query holds the nonce), which it can
// only if the cache was filled while this statement ran. A view that does
// not is stale, and the read falls back to the InnoDB monitor (openFromStatus
// below), which the server prints from its live lists for each
// statement; only if that fails too is the read unusable (openUnknown: the
// samples taken since the last usable read wait for the next; if none
// comes within the settle window, the window alone decides and
// PassStats.OpenLapsed says so).
const (
	sqlOpenTouch = "-- name: SubscribeOpenTouch\n" +
		"SELECT COUNT(*), DATABASE() FROM (SELECT 1 FROM queue_messages LIMIT 1) AS one"
	// The InnoDB transactions that are not read-only: their sessions, one
	// of them the reader's own, and their starts by the server's clock.
	// The third column is the freshness proof: the reader's own row whose
	// current statement is this one (the nonce, formatted in twice, %[1]s,
	// well inside the 1024 characters trx_query keeps).
	sqlOpenTrx = "-- name: SubscribeOpenTrx\n" +
		"SELECT t.trx_mysql_thread_id, t.trx_mysql_thread_id = CONNECTION_ID(), " +
		"t.trx_mysql_thread_id = CONNECTION_ID() AND LOCATE('%[1]s', t.trx_query) > 0, CONVERT_TZ(t.trx_started, 'SYSTEM', '+00:00')\n" +
		"FROM information_schema.innodb_trx t WHERE t.trx_is_read_only = 0"
	// Each session's current database. Not information_schema.processlist:
	// MySQL builds that table with the statement text as utf8mb3, every
	// row before any WHERE applies, so while any session runs a statement
	// holding bytes utf8mb3 cannot hold (a binary ID interpolated into it,
	// as mend's own statements carry) the whole read fails with error 3854.
	// SHOW PROCESSLIST sends the text as it is.
	sqlOpenSessions = "-- name: SubscribeOpenSessions\n" +
		"SHOW PROCESSLIST"
	// The server's clock just before the process list is read (a session
	// it does not list connected after this, see sessionAges), and which
	// server it is: a list says nothing of another server's sessions.
	sqlOpenListed = "-- name: SubscribeOpenListed\n" +
		"SELECT UTC_TIMESTAMP(6), CONCAT_WS(':', @@hostname, @@port, @@server_id)"
)

// sessionAges bounds how long each live session has been connected, from
// the reads' process lists: a session missing from a list read at time t
// (by the server's clock, taken just before the list) and listed later
// connected after t, and none of its transactions began before. This is
// the strongest bound the data a user holding PROCESS may read gives (see
// the package doc, "Open transactions", invariant 2): neither server shows
// such a user a session's connection time, and SHOW PROCESSLIST's Time is
// the current statement's or state's, not the transaction's. A session
// listed in the first list the reader read has no bound (the server's
// uptime alone caps it), and so does every session when the list is of
// another server than the last (a failover, a proxy: by host name, port
// and server_id). The zero value is ready to use; a nil one keeps
// nothing.
type sessionAges struct {
	server string              // which server the last list was of
	listed time.Time           // the clock before the last list; zero: none read yet
	after  map[int64]time.Time // each session of the last list: when it had not yet connected (zero: unknown)
}

// sessionSlack is taken off each bound: the server's clock in whole
// microseconds against the lists' instants, and a clock stepped back a
// little between two lists.
const sessionSlack = time.Second

// add records a process list (ids) of server read just after its clock
// read listed.
func (a *sessionAges) add(server string, listed time.Time, ids []int64) {
	if a == nil {
		return
	}
	if server != a.server {
		*a = sessionAges{server: server} // another server's list bounds none of these
	}
	after := make(map[int64]time.Time, len(ids))
	for _, id := range ids {
		b, ok := a.after[id]
		if !ok && !a.listed.IsZero() {
			b = a.listed.Add(-sessionSlack) // missing from the last list: connected since
		}
		after[id] = b
	}
	a.after, a.listed = after, listed
}

// capped returns others with no transaction counted as older than its
// session: a start before the session is known to have connected is
// raised to that time. It never drops a transaction, and a real one began
// after its session connected, so the start stays no later than the real
// one: made-up monitor text naming a live session holds the watermarks no
// longer than a real transaction of that session could.
func (a *sessionAges) capped(others []openTrx) []openTrx {
	if a == nil || planted.trustSessionAge {
		return others
	}
	out := make([]openTrx, len(others))
	for i, o := range others {
		if b := a.after[o.session]; !b.IsZero() && o.started.Valid && o.started.Time.Before(b) {
			o.started.Time = b
		}
		out[i] = o
	}
	return out
}

// OpenGrant is the grant that lets the subscription see the open
// transactions, on MySQL and MariaDB; account is the user's quoted account
// ('mend'@'%'), or empty for a placeholder.
func OpenGrant(account string) string {
	return fmt.Sprintf("GRANT PROCESS ON *.* TO %s", cmp.Or(account, "<mend's queue user>"))
}

// ErrOpenHidden is returned (wrapped, with the server's refusal) when the
// queue database's user may not read the server's open transactions.
var ErrOpenHidden = errors.New("subscribe: the queue database's open transactions are hidden from this user")

// OpenVisible reports whether db's user may read the server's open
// transactions, by reading them (not from SHOW GRANTS, which misses roles
// and wildcard grants): nil if it may, an error wrapping ErrOpenHidden if
// the server refuses, any other error as is. A read whose view came back
// stale (innodb_trx's cache predating it, common on a busy server) was
// allowed, so it answers nil.
func OpenVisible(ctx context.Context, db *sql.DB) error {
	_, err := readOpen(ctx, db)
	return openAllowed(err)
}

// openAllowed is OpenVisible's answer for a read that returned err.
func openAllowed(err error) error {
	if errors.Is(err, errOpenStale) {
		return nil
	}
	return err
}

// refused reports whether err is the server refusing a read for want of
// a privilege, or because the table does not exist on this engine (a
// proxy's restricted view).
func refused(err error) bool {
	switch mysqlx.ErrNumber(err) {
	case 1044, 1142, 1143, 1227, 1146, 1109:
		return true
	}
	return false
}

// errOpenStale is a view of the open transactions older than the read.
// errStatusInFlux marks a monitor read that caught a transaction between
// states (committing in memory, rolling back): unusable, and the next read
// is likely usable again.
var errStatusInFlux = errors.New("subscribe: a transaction was between states when the InnoDB monitor listed it")

var errOpenStale = errors.New("subscribe: the server's view of its open transactions predates the read (innodb_trx's cache)")

// readOpen reads the open transactions (sqlOpenTrx): the oldest one's
// start, zero when none is open.
func readOpen(ctx context.Context, db *sql.DB) (time.Time, error) {
	o, err := readOldest(ctx, db)
	return o.started.Time, err
}

// readOldest is readOpen with the oldest transaction's session (0 when
// none is open): run --once names it beside the partitions it holds.
func readOldest(ctx context.Context, db *sql.DB) (openTrx, error) {
	return readOldestWith(ctx, db, nil)
}

// readOldestWith is readOldest keeping ages (nil: none kept) up to date
// with this read's process list, and counting no transaction older than
// its session as ages knows it.
func readOldestWith(ctx context.Context, db *sql.DB, ages *sessionAges) (_ openTrx, err error) {
	wrap := func(err error) error {
		if refused(err) {
			return fmt.Errorf("%w: %w", ErrOpenHidden, err)
		}
		return fmt.Errorf("subscribe: read the open transactions: %w", mysqlx.Translate(err))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return openTrx{}, wrap(err)
	}
	defer func() { err = errors.Join(err, tx.Rollback()) }()
	var one int
	var current sql.NullString
	if err := tx.QueryRowContext(ctx, sqlOpenTouch).Scan(&one, &current); err != nil {
		return openTrx{}, wrap(err)
	}
	others, fresh, err := openFromTrx(ctx, tx, newNonce())
	switch {
	case mysqlx.ErrNumber(err) == errCannotConvert:
		// MySQL could not fill innodb_trx (see errCannotConvert): the
		// InnoDB monitor lists the same transactions, live.
		others, err = openFromStatus(ctx, tx)
	case err == nil && !fresh && !planted.trustStaleView:
		// innodb_trx's cache predates this read: the monitor is live.
		if others, err = openFromStatus(ctx, tx); err != nil {
			if refused(err) {
				return openTrx{}, wrap(err)
			}
			return openTrx{}, fmt.Errorf("%w; the InnoDB monitor: %w", errOpenStale, mysqlx.Translate(err))
		}
	}
	if err != nil {
		return openTrx{}, wrap(err)
	}
	o, err := oldestListed(ctx, tx, others, current, ages)
	if err != nil {
		return openTrx{}, wrap(err)
	}
	return o, nil
}

// oldestListed is the oldest of others (see oldestOpen) by the process
// list read now in tx, inside the reader's transaction, which it adds to
// ages (nil: none kept). With none open and no ages kept it reads
// nothing; with none open, a failed process list read only leaves ages
// as they were; a failed read of the server's clock and identity forgets
// them.
func oldestListed(ctx context.Context, tx *sql.Tx, others []openTrx, current sql.NullString, ages *sessionAges) (openTrx, error) {
	var server string
	var listed time.Time
	if ages != nil {
		if err := tx.QueryRowContext(ctx, sqlOpenListed).Scan(&listed, &server); err != nil {
			*ages, ages = sessionAges{}, nil // which server, or when, is unknown: bound nothing
		}
	}
	if len(others) == 0 && ages == nil {
		return openTrx{}, nil
	}
	dbs, ids, err := sessionDatabases(ctx, tx)
	switch {
	case err != nil && len(others) == 0:
		return openTrx{}, nil
	case err != nil:
		return openTrx{}, err
	}
	ages.add(server, listed, ids)
	return oldestOpen(ages.capped(others), dbs, current), nil
}

// oldestOpen is the oldest of the other sessions' open transactions whose
// session's current database (dbs, from the process list) is the
// reader's (current): the one a sample must wait for. None: zero.
func oldestOpen(others []openTrx, dbs map[int64]string, current sql.NullString) openTrx {
	var oldest openTrx
	for _, o := range others {
		db, ok := dbs[o.session]
		switch {
		case !ok || !current.Valid || db != current.String:
			continue // another database's, or its session ended since
		case !o.started.Valid:
			// A start time CONVERT_TZ could not convert: older than any sample.
			return openTrx{session: o.session, started: sql.NullTime{Time: time.Unix(0, 0).UTC(), Valid: true}}
		case !oldest.started.Valid || o.started.Time.Before(oldest.started.Time) != planted.newestOpen:
			oldest = o
		}
	}
	oldest.started.Time = oldest.started.Time.UTC()
	return oldest
}

// openTrx is another session's open transaction: its session and when it
// began by the server's clock in UTC (invalid when it could not be
// converted: older than any sample).
type openTrx struct {
	session int64
	started sql.NullTime
}

// newNonce draws the nonce of one read of innodb_trx: 128 random bits,
// in hex, which no other statement carries.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "mend-read-" + hex.EncodeToString(b[:])
}

// openFromTrx reads the open transactions from innodb_trx (sqlOpenTrx,
// carrying nonce) inside the reader's transaction tx: the other sessions',
// and whether the view was filled while this statement ran (the reader's
// own row shows it as its current statement). A view that was not
// predates the read: a row of the reader's session alone proves nothing,
// as the pool reuses sessions.
func openFromTrx(ctx context.Context, tx *sql.Tx, nonce string) (others []openTrx, fresh bool, err error) {
	rows, err := tx.QueryContext(ctx, fmt.Sprintf(sqlOpenTrx, nonce))
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var o openTrx
		var mine, proof sql.NullInt64
		if err := rows.Scan(&o.session, &mine, &proof, &o.started); err != nil {
			return nil, false, err
		}
		if mine.Int64 == 1 {
			fresh = fresh || proof.Int64 == 1 || planted.selfRowFresh
		} else {
			others = append(others, o)
		}
	}
	return others, fresh, rows.Err()
}

// sessionDatabases reads each session's current database from SHOW
// PROCESSLIST (sqlOpenSessions), by column name: MariaDB adds columns.
// A session without one is left out of the map; ids lists every session.
func sessionDatabases(ctx context.Context, tx *sql.Tx) (_ map[int64]string, ids []int64, err error) {
	rows, err := tx.QueryContext(ctx, sqlOpenSessions)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	id, db := -1, -1
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "id":
			id = i
		case "db":
			db = i
		}
	}
	if id < 0 || db < 0 {
		return nil, nil, fmt.Errorf("SHOW PROCESSLIST has no Id or db column (columns %v)", cols)
	}
	out := map[int64]string{}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		n, err := strconv.ParseInt(string(vals[id]), 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("SHOW PROCESSLIST: session id %q: %w", vals[id], err)
		}
		ids = append(ids, n)
		if vals[db] != nil {
			out[n] = string(vals[db])
		}
	}
	return out, ids, rows.Err()
}

// errCannotConvert is MySQL's error 3854 (ER_CANNOT_CONVERT_STRING). MySQL
// fills information_schema.innodb_trx with every row's current statement
// as utf8mb3 before any WHERE or column list applies, so while any InnoDB
// transaction runs a statement holding bytes utf8mb3 cannot hold (a binary
// ID interpolated into it, as mend's own statements and many hosts' carry)
// the whole read fails with this error. MariaDB replaces such bytes
// instead. readOpen then reads the InnoDB monitor (openFromStatus).
const errCannotConvert = 3854

// The fallback read of the open transactions: the server's clock and the
// reader's session first, then the InnoDB monitor, which prints each
// statement's text as it is and lists only transactions that hold a
// read-write ID (a MoveToDLQ's INSERT is one from its first row on).
const (
	sqlOpenNow = "-- name: SubscribeOpenNow\n" +
		"SELECT CONNECTION_ID(), UTC_TIMESTAMP(6)"
	// The server's uptime: no transaction is older.
	sqlOpenUptime = "-- name: SubscribeOpenUptime\n" +
		"SHOW GLOBAL STATUS LIKE 'Uptime'"
	sqlOpenStatus = "-- name: SubscribeOpenStatus\n" +
		"SHOW ENGINE INNODB STATUS"
)

// statusTrx is one open transaction of the InnoDB monitor: its session
// (0 when the monitor named none, as for a recovered XA transaction) and
// how long it has been open, in whole seconds rounded down.
type statusTrx struct {
	session int64
	active  time.Duration
}

var (
	// "---TRANSACTION 1562, ACTIVE 2 sec inserting" (MySQL), "---TRANSACTION
	// (0x7faa58f34680), ACTIVE 2 sec" (MariaDB, a transaction without a
	// read-write ID), "ACTIVE (PREPARED) 5 sec" for a prepared XA one.
	statusHeader = regexp.MustCompile(`^---TRANSACTION ([^,]+), (.*)$`)
	statusActive = regexp.MustCompile(`^ACTIVE (?:\(PREPARED\) )?([0-9]+) sec`)
	// "MySQL thread id 11, OS thread handle ..." (MariaDB says MariaDB).
	statusThread = regexp.MustCompile(`^(?:MySQL|MariaDB) thread id ([0-9]+),`)
)

// statusLimit is the size of the monitor's text past which the server
// cuts it (MAX_STATUS_SIZE, 1 MiB, on MySQL and MariaDB alike): it then
// omits the beginning of the list of transactions, putting its marker
// ("... truncated...") in its place, and sends exactly statusLimit-1
// bytes (or statusLimit when it cannot omit the list's beginning). A
// marker in a shorter text is a statement's text, not the server's.
const statusLimit = 1 << 20

// statusHeading is the line that begins the list of transactions.
const statusHeading = "LIST OF TRANSACTIONS FOR EACH SESSION:"

// statusSummaryLines bounds the lines of the TRANSACTIONS section before
// its list's heading (Trx id counter, Purge done, History list length).
const statusSummaryLines = 8

// banner reports whether lines[i] is a section heading of the monitor
// named name: a whole line between two lines of dashes.
func banner(lines []string, i int, name string) bool {
	return i > 0 && i+1 < len(lines) && lines[i] == name && rule(lines[i-1]) && rule(lines[i+1])
}

func rule(line string) bool { return len(line) >= 4 && strings.Trim(line, "-") == "" }

// parseInnoDBStatus reads the open transactions from the InnoDB monitor's
// text (the Status column of SHOW ENGINE INNODB STATUS), for a server up
// for uptime (0: unknown). The text holds statement texts as they are,
// which can be anything, dead-letter payloads included, newlines and
// lines that look like the monitor's own among them: in the sections
// before the transactions (LATEST DETECTED DEADLOCK, LATEST FOREIGN KEY
// ERROR) and in the list itself; the sections after it (FILE I/O on)
// hold none. So the text is read by its structure:
//
//   - the list begins at the first TRANSACTIONS banner (three whole
//     lines) whose summary is followed by the list's heading as a whole
//     line: text mimicking the banner can only begin the list earlier,
//     which may add transactions but hides none;
//   - it ends at the last FILE I/O banner: a statement in the list
//     mimicking one ends nothing, since the real one comes after it;
//   - within it, a header starts a transaction, and only the first thread
//     line after a header names its session (the server prints that line
//     before the statement's text), so text mimicking a header can add a
//     transaction but not hide or rename a real one;
//   - an age above the server's uptime (plus a second) is no real
//     transaction's: it is left out, so made-up text cannot hold the
//     watermarks for 46 days;
//   - the text is cut by the server only at statusLimit: a text that long
//     is unusable (an error), and a truncation marker in a shorter one is
//     a statement's text.
//
// A transaction in a state other than active or not started (committing
// in memory, a forced rollback) has no age to read: the read is unusable.
// Unusable reads are tried again on the next pass.
func parseInnoDBStatus(text string, uptime time.Duration) ([]statusTrx, error) {
	if len(text) >= statusLimit-1 && !planted.markerAnywhere {
		return nil, errors.New("the InnoDB monitor's list of transactions is truncated (its text is at the server's limit)")
	}
	lines := strings.Split(text, "\n")
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], "\r")
	}
	list := -1
	if planted.markerAnywhere {
		// The parser before issue 43: the marker and the heading anywhere.
		if strings.Contains(text, "\n... truncated...\n") || strings.Contains(text, "\n...truncated...\n") {
			return nil, errors.New("the InnoDB monitor's list of transactions is truncated")
		}
		for i, l := range lines {
			if strings.Contains(l, statusHeading) {
				list = i + 1
				break
			}
		}
	}
	for i := 0; i < len(lines) && list < 0; i++ {
		if !banner(lines, i, "TRANSACTIONS") {
			continue
		}
		for j := i + 2; j < len(lines) && j < i+2+statusSummaryLines; j++ {
			if lines[j] == statusHeading {
				list = j + 1
				break
			}
		}
	}
	if list < 0 {
		return nil, errors.New("the InnoDB monitor's text has no list of transactions")
	}
	end := len(lines)
	for i := len(lines) - 2; i > list; i-- {
		if banner(lines, i, "FILE I/O") {
			end = i - 1
			break
		}
	}
	var out []statusTrx
	named := true // whether the transaction of the last header has its session
	for _, line := range lines[list:end] {
		if m := statusHeader.FindStringSubmatch(line); m != nil {
			named = true
			state := m[2]
			if strings.HasPrefix(state, "not started") {
				continue
			}
			a := statusActive.FindStringSubmatch(state)
			if a == nil {
				return nil, fmt.Errorf("the InnoDB monitor lists transaction %s as %q, with no age: %w", m[1], state, errStatusInFlux)
			}
			secs, err := strconv.ParseInt(a[1], 10, 64)
			if err != nil || secs > 1<<32 {
				return nil, fmt.Errorf("the InnoDB monitor lists transaction %s as active for %q seconds", m[1], a[1])
			}
			age := time.Duration(secs) * time.Second
			if uptime > 0 && age > uptime+time.Second && !planted.trustAnyAge {
				continue // older than the server: statement text, not a transaction
			}
			out = append(out, statusTrx{active: age})
			named = false
			continue
		}
		if named {
			continue
		}
		if m := statusThread.FindStringSubmatch(line); m != nil {
			id, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("the InnoDB monitor names session %q", m[1])
			}
			out[len(out)-1].session = id
			named = true
		}
	}
	return out, nil
}

// openFromStatus is readOpen's read of the other sessions' open
// transactions from the InnoDB monitor, inside the reader's transaction
// tx: each one's session and the earliest it can have begun by the
// server's clock in UTC (the monitor gives whole seconds of age, rounded
// down, counted after the clock was read, so a second is taken off). The
// monitor reads the server's live lists, not innodb_trx's cache, so the
// view is never stale. Needs PROCESS, as innodb_trx does.
func openFromStatus(ctx context.Context, tx *sql.Tx) ([]openTrx, error) {
	var self int64
	var now time.Time
	if err := tx.QueryRowContext(ctx, sqlOpenNow).Scan(&self, &now); err != nil {
		return nil, err
	}
	var uptime time.Duration
	var uptimeName string
	var uptimeSecs uint64
	if err := tx.QueryRowContext(ctx, sqlOpenUptime).Scan(&uptimeName, &uptimeSecs); err == nil {
		uptime = time.Duration(min(uptimeSecs, 1<<32)) * time.Second
	} // else unknown: no age is left out
	var typ, name, text sql.RawBytes
	rows, err := tx.QueryContext(ctx, sqlOpenStatus)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("SHOW ENGINE INNODB STATUS returned no row")
	}
	if err := rows.Scan(&typ, &name, &text); err != nil {
		return nil, err
	}
	found, err := parseInnoDBStatus(string(text), uptime)
	if err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	return statusStarts(found, self, now), nil
}

// statusStarts turns the monitor's transactions, listed when the server's
// clock read now, into the other sessions' (not self's) open transactions
// with the earliest each can have begun: the monitor gives whole seconds
// of age rounded down, so a second is taken off.
func statusStarts(found []statusTrx, self int64, now time.Time) []openTrx {
	var out []openTrx
	slack := time.Second
	if planted.statusLate {
		slack = 0
	}
	for _, f := range found {
		if f.session == self {
			continue
		}
		out = append(out, openTrx{session: f.session, started: sql.NullTime{Time: now.Add(-f.active - slack), Valid: true}})
	}
	return out
}

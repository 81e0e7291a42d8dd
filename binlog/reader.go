package binlog

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// Why the reader started over from the tables' contents (the first words of
// a reset's reason; storage.BinlogPosition.ResetReason).
const (
	ResetFirstStart = "first start"
	ResetPurged     = "the saved position was purged"
	ResetFailover   = "the server changed and the position has no GTIDs"
	ResetFlavor     = "the server's flavor changed"
)

// Status is what the reader reports of itself (mend status, the console,
// the metrics).
type Status struct {
	Role     string // RoleReader, RoleStandby, RoleRetrying or RoleStopped
	Position storage.BinlogPosition
	// CaughtUp: the server said it had nothing more to send (a heartbeat)
	// since the last event. Lag is how far behind the last event read was
	// when it was read (0 when caught up).
	CaughtUp bool
	Lag      time.Duration
	// Retention is the server's binlog_expire_logs_seconds.
	Retention time.Duration
	// Resets and Purges count start-overs since the process started;
	// Recorded the dead letters recorded (created or already there).
	Resets, Purges, Recorded, Parked int64
	// Statements counts the transactions whose dead-letter inserts were
	// logged as statements (a host session's binlog_format is not ROW):
	// each was followed by an import of the tables.
	Statements int64
	// Heartbeats counts the server's heartbeats: one after another event
	// says the reader has read everything written before it was sent.
	Heartbeats int64
	LastErr    string
	// Failures counts failed terms by FailureReason since the process
	// started; FailingSince is when the failures in a row began (zero once
	// a term has saved a position since).
	Failures     map[string]int64
	FailingSince time.Time
}

// Reader streams the queue database server's binary log and records every
// dead letter committed into queue_messages.
type Reader struct {
	cfg Config
	log interface {
		InfoContext(context.Context, string, ...any)
		WarnContext(context.Context, string, ...any)
		ErrorContext(context.Context, string, ...any)
	}

	mu     sync.Mutex
	status Status

	// failures counts, per dead letter, the recordings in a row that
	// failed for a reason that may pass. It outlives the term (each such
	// failure ends one), so a row that always fails is parked after
	// ParkAfter of them and the reader moves past it. Only the goroutine
	// running a term touches it.
	failures map[mend.SourceID]int

	lastRead storage.BinlogPosition // planted.resumeFromRead only
}

// New checks cfg and returns a Reader. It connects to nothing.
func New(cfg Config) (*Reader, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Reader{cfg: cfg, log: cfg.Log, failures: map[mend.SourceID]int{}}
	r.status.Role = "stopped"
	r.status.Position.Name = LeaseName(cfg.Source)
	return r, nil
}

// Status returns the reader's status now.
func (r *Reader) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	s.Failures = maps.Clone(s.Failures)
	return s
}

func (r *Reader) setStatus(f func(*Status)) {
	r.mu.Lock()
	f(&r.status)
	r.mu.Unlock()
}

// Run reads until ctx ends: it takes the reader's lease (standing by while
// another replica holds it), resumes from the saved position (or starts
// over from the tables, see Reset*), and streams. Anything that goes wrong
// after New (the server, its settings, the credentials, mend's store, the
// lease) ends the term: it is counted by FailureReason, reported through
// Hooks.OnFailed and Status (RoleRetrying, LastErr, Failures,
// FailingSince), and the next term starts after a pause that doubles up to
// a minute. Run returns only ctx's error: no failure stops the reader for
// good while the process runs (see the package doc's invariant).
func (r *Reader) Run(ctx context.Context) error {
	defer r.setStatus(func(s *Status) { s.Role = RoleStopped })
	backoff := r.cfg.StandbyPoll
	for ctx.Err() == nil {
		le, err := r.cfg.Fence.TryAcquire(ctx, LeaseName(r.cfg.Source))
		if err != nil {
			if !errors.Is(err, mend.ErrLeaseHeld) {
				r.failed(ctx, fmt.Errorf("%w: take the reader's lease: %w", errStore, err))
			} else {
				r.setStatus(func(s *Status) { s.Role = RoleStandby })
			}
			sleep(ctx, r.cfg.StandbyPoll)
			continue
		}
		r.setStatus(func(s *Status) { s.Role = RoleReader })
		saved := false
		err = r.lead(ctx, le, &saved)
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = le.Release(relCtx)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if saved {
			backoff = r.cfg.StandbyPoll
		}
		if err == nil {
			r.setStatus(func(s *Status) { s.Role = RoleStandby })
			continue
		}
		r.failed(ctx, err)
		if planted.returnOnProblem && errors.Is(err, errNoBinlog) {
			return err
		}
		sleep(ctx, backoff)
		backoff = min(2*backoff, time.Minute)
	}
	return ctx.Err()
}

// failed records a failed term: counted by reason, the reader retrying.
func (r *Reader) failed(ctx context.Context, err error) {
	reason := FailureReason(err)
	now := r.cfg.Now()
	r.setStatus(func(s *Status) {
		s.Role, s.LastErr = RoleRetrying, err.Error()
		if s.Failures == nil {
			s.Failures = map[string]int64{}
		}
		s.Failures[reason]++
		if s.FailingSince.IsZero() {
			s.FailingSince = now
		}
	})
	r.log.WarnContext(ctx, "binlog reader: will retry", "reason", reason, "err", err)
	if r.cfg.Hooks.OnFailed != nil {
		r.cfg.Hooks.OnFailed(err)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

var errNoBinlog = errors.New("binlog: the queue database server cannot be read in binlog mode")

// term is one lease term's reading: the host connection, the position,
// and the rows committed but not yet recorded.
type term struct {
	r     *Reader
	lease *fence.Lease
	db    *sql.DB // the queue database, for the server's state
	dl    *host.DeadLetters
	srv   Server
	pos   storage.BinlogPosition // what is recorded and saved
	read  storage.BinlogPosition // what has been read (pending rows up to it)

	pending  []dlq.Row
	saved    *bool // set once the term saves a position
	savedAt  time.Time
	flushDue time.Time
	columns  map[uint64][]string
	left     bool // the offset group was left this term (Config.LeaveGroup)
	// catchUp ends the term once it has read to end (CatchUp), the
	// position the server's log had reached when the term began; from and
	// resetWhy say where it started and why it started over, if it did.
	catchUp  bool
	end      storage.BinlogPosition
	from     storage.BinlogPosition
	resetWhy string
	inTxn    bool
	txnRows  []dlq.Row
	// txnStatement: the open transaction inserted into queue_messages by
	// a statement logged as such; importDue: one such has committed, and
	// the tables are imported before the position moves past it.
	txnStatement, importDue bool
	// insertID is the auto-increment value the next statement of the
	// open transaction inserts at (its INSERT_ID event); stmtOffsets the
	// offsets of dead letters logged as statements that an import must see
	// (waitVisible).
	insertID    uint64
	stmtOffsets []uint64
	// inXA: the open transaction is an XA transaction's (XA START), xaID
	// its xid; xaRows the dead letters of prepared XA transactions read
	// this term, by xid, until their XA COMMIT; xaImportDue: an XA COMMIT
	// of a prepare not read this term was read, and the tables are imported
	// before the position moves past it.
	inXA        bool
	xaID        string
	xaRows      map[string][]dlq.Row
	xaImportDue bool
	txnGTID     func() // adds the open transaction's GTID to read's set
	mysqlSet    *mysqlSet
	mariaSet    *gomysql.MariadbGTIDSet

	watermark map[string]uint64 // planted.offsetWatermark only
}

// lead is one lease term.
func (r *Reader) lead(ctx context.Context, le *fence.Lease, saved *bool) error {
	return r.leadWith(ctx, le, saved, nil)
}

// leadWith is lead with the term set up by setup first (CatchUp's).
func (r *Reader) leadWith(ctx context.Context, le *fence.Lease, saved *bool, setup func(*term)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-le.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	dl, err := host.OpenDeadLetters(ctx, r.cfg.Server.FormatDSN())
	if err != nil {
		return fmt.Errorf("%w: %w", errConnect, err)
	}
	defer dl.Close()
	t := &term{r: r, lease: le, db: dl.DB(), dl: dl, columns: map[uint64][]string{}, saved: saved,
		watermark: map[string]uint64{}}
	if setup != nil {
		setup(t)
	}
	err = t.run(ctx)
	if planted.resumeFromRead {
		r.lastRead = t.read
	}
	if planted.parkCountPerTerm {
		clear(r.failures)
	}
	if le.Err() != nil {
		return fmt.Errorf("%w: %w", errLeaseEnded, le.Err())
	}
	return err
}

func (t *term) run(ctx context.Context) error {
	r := t.r
	srv, err := Probe(ctx, t.db)
	if err != nil {
		return err
	}
	if p := srv.Problems(r.cfg.Server.DBName); len(p) > 0 && !planted.skipProblems {
		return fmt.Errorf("%w: %s", errNoBinlog, p[0])
	}
	t.srv = srv
	t.end = storage.BinlogPosition{File: srv.Current, Pos: srv.End}
	r.setStatus(func(s *Status) { s.Retention = srv.Retention })
	saved, err := r.cfg.Store.BinlogPositionGet(ctx, LeaseName(r.cfg.Source))
	switch {
	case errors.Is(err, mend.ErrNotFound):
		return t.reset(ctx, ResetFirstStart, false)
	case err != nil:
		return err
	}
	if planted.resumeFromRead && r.lastRead.File != "" {
		saved.File, saved.Pos, saved.GTIDSet = r.lastRead.File, r.lastRead.Pos, ""
	}
	t.pos, t.from = saved, saved
	r.setStatus(func(s *Status) { s.Position = saved })
	if reason, purged := t.resumable(saved); reason != "" {
		return t.reset(ctx, reason, purged)
	}
	err = t.stream(ctx, saved)
	if isPurged(err) {
		return t.reset(ctx, fmt.Sprintf("%s: %v", ResetPurged, err), true)
	}
	return err
}

// resumable says why the saved position cannot be resumed on this server
// ("" if it can), and whether that is because it was purged.
func (t *term) resumable(p storage.BinlogPosition) (string, bool) {
	srv := t.srv
	switch {
	case p.Flavor != srv.Flavor:
		return fmt.Sprintf("%s: the position was saved on %s, the server is %s", ResetFlavor, p.Flavor, srv.Flavor), false
	case (p.ServerUUID == srv.Identity || planted.resumeFileAnywhere) && p.File != "":
		if !srv.Has(p.File) {
			return fmt.Sprintf("%s: the server no longer has %s (its oldest is %s)", ResetPurged, p.File, first(srv.Files)), true
		}
		// A file of that name is no proof it is the file the position was
		// read in: RESET MASTER (RESET BINARY LOGS AND GTIDS) restarts the
		// numbering and clears the GTID state, and a server rebuilt with the
		// same identity (MariaDB's is its server_id) starts at .000001. A
		// server whose GTID state lacks what was read before the position
		// has not logged it: the offset means nothing there.
		if srv.GTIDs && p.GTIDSet != "" && !planted.trustFileName && !gtidContains(srv.Flavor, srv.Executed, p.GTIDSet) {
			return fmt.Sprintf("%s: the server's GTID state %q lacks the saved position's %q, so its %s is not the file the position was read in (the binary log was reset, or another server has this one's identity)",
				ResetPurged, srv.Executed, p.GTIDSet, p.File), true
		}
		return "", false
	case p.GTIDSet == "" || !srv.GTIDs:
		// A file and offset of another server mean nothing here: never
		// guess where they would be.
		return fmt.Sprintf("%s: the position is %s:%d on %s, the server is %s; a file and offset are not portable between servers (turn gtid_mode=ON to resume across a failover)",
			ResetFailover, p.File, p.Pos, p.ServerUUID, srv.Identity), false
	case srv.Flavor == "mysql" && srv.Purged != "" && !gtidContains(srv.Flavor, p.GTIDSet, srv.Purged):
		return fmt.Sprintf("%s: the server purged GTIDs %s, not all of them in the saved set", ResetPurged, srv.Purged), true
	}
	return "", false
}

func first(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return ss[0]
}

// gtidContains reports whether set contains sub (both in flavor's syntax);
// false when either does not parse.
func gtidContains(flavor, set, sub string) bool { return GTIDContains(flavor, set, sub) }

// isPurged reports the server's answer to a dump from a position it no
// longer has (ER_MASTER_FATAL_ERROR_READING_BINLOG).
func isPurged(err error) bool {
	var me *gomysql.MyError
	return errors.As(err, &me) && me.Code == gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG
}

// reset starts over from the tables: the start of the binary log file the
// server writes now (every transaction before it committed before the file
// began), then an import of every dead letter the tables hold, then the
// stream from that file's start. Nothing committed is skipped: a dead
// letter before the file is in the tables (unless the host collected it,
// which no reader could prevent), one after it is in the stream, and one in
// both is recorded once.
func (t *term) reset(ctx context.Context, reason string, purged bool) error {
	r := t.r
	srv, err := Probe(ctx, t.db)
	if err != nil {
		return err
	}
	t.srv = srv
	if srv.Current == "" {
		return fmt.Errorf("%w: the server lists no binary log file", errNoBinlog)
	}
	if planted.everyResetPurged {
		purged = true
	}
	if purged {
		r.log.ErrorContext(ctx, "binlog reader: the saved position is gone from the server's binary log; dead letters committed and collected while mend was behind are lost. Importing what the tables hold, then reading on",
			"reason", reason, "saved", t.pos.File, "saved_gtids", t.pos.GTIDSet, "retention", srv.Retention)
	} else {
		r.log.WarnContext(ctx, "binlog reader: starting over from the tables", "reason", reason)
	}
	r.setStatus(func(s *Status) {
		s.Resets++
		if purged {
			s.Purges++
		}
	})
	if r.cfg.Hooks.OnReset != nil {
		r.cfg.Hooks.OnReset(reason, purged)
	}
	start := storage.BinlogPosition{Name: LeaseName(r.cfg.Source), Flavor: srv.Flavor, ServerUUID: srv.Identity,
		File: srv.Current, Pos: 4, ResetReason: reason, ResetAt: r.cfg.Now().UTC()}
	if planted.startAtEnd {
		if err := t.endOfLog(ctx, &start); err != nil {
			return err
		}
	}
	if err := t.importTables(ctx); err != nil {
		return err
	}
	// The GTID set at the file's start comes with the stream (its
	// Previous_gtids or Gtid_list event); the position is saved once the
	// stream has read it.
	t.pos, t.from, t.resetWhy = start, start, reason
	return t.stream(ctx, start)
}

// endOfLog moves p to the end of the log (planted.startAtEnd only).
func (t *term) endOfLog(ctx context.Context, p *storage.BinlogPosition) error {
	rows, err := t.db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		var name string
		var size uint64
		vals := make([]any, len(cols))
		vals[0], vals[1] = &name, &size
		for i := 2; i < len(vals); i++ {
			vals[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(vals...); err != nil {
			return err
		}
		p.File, p.Pos = name, size
	}
	return rows.Err()
}

// importTables records every dead letter queue_messages holds now, in
// pages, as mend import does.
func (t *term) importTables(ctx context.Context) error {
	dl := t.dl
	var after uint64
	for {
		page, err := dl.Page(ctx, host.DeadLetterFilter{}, after, t.r.cfg.BatchRows)
		if err != nil {
			return fmt.Errorf("binlog: import the dead letters the tables hold: %w", err)
		}
		if len(page.Rows) > 0 {
			if err := t.record(ctx, page.Rows); err != nil {
				return err
			}
		}
		after = page.Next
		if page.Done || len(page.Rows) == 0 {
			return nil
		}
	}
}

// record records rows (in commit order) durably, parking those the intake
// refuses for good or that failed ParkAfter times in a row. It returns an
// error, recording nothing more, when the whole call failed or a row
// failed for a reason that may pass: the position stays before them and
// they are recorded again (create-if-absent makes that harmless).
func (t *term) record(ctx context.Context, rows []dlq.Row) error {
	r := t.r
	ds := make([]dlq.Delivery, len(rows))
	for i, row := range rows {
		ds[i] = row.Delivery()
	}
	results, err := t.recordChunks(ctx, ds)
	if err != nil {
		return fmt.Errorf("%w: record %d dead letters: %w", errStore, len(rows), err)
	}
	limit := r.cfg.ParkAfter
	if planted.parkOneLate {
		limit++
	}
	parked := 0
	for i, res := range results {
		if res.Err == nil {
			delete(r.failures, ds[i].Source)
			continue
		}
		mismatch := errors.Is(res.Err, mend.ErrIdentityMismatch)
		if !mismatch && !errors.Is(res.Err, mend.ErrInvalid) {
			r.failures[ds[i].Source]++
			if r.failures[ds[i].Source] < limit {
				return fmt.Errorf("%w: record offset %d of %s/%q (failure %d of %d before it is parked): %w",
					errStore, rows[i].Offset, rows[i].Topic, rows[i].PartitionKey, r.failures[ds[i].Source], r.cfg.ParkAfter, res.Err)
			}
		}
		if err := t.park(ctx, rows[i], res.Err); err != nil {
			return err
		}
		delete(r.failures, ds[i].Source)
		parked++
	}
	r.setStatus(func(s *Status) { s.Recorded += int64(len(rows) - parked); s.Parked += int64(parked) })
	if r.cfg.Hooks.OnRecorded != nil {
		r.cfg.Hooks.OnRecorded(rows, parked)
	}
	return nil
}

// recordChunks records ds in chunks of at most BatchRows (a transaction of
// the host may commit more dead letters than one recording transaction
// should take), up to Concurrency of them at once: each chunk is a
// RecordMany of its own, independent of the others (create-if-absent). The
// deliveries are grouped by queue before they are cut, so chunks recording
// at the same time touch different queues' rows (only a queue with more
// than a chunk's worth spans two). An error of any chunk is the whole
// call's: the caller saves nothing, and the next term reads them all again.
func (t *term) recordChunks(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	size := t.r.cfg.BatchRows
	if len(ds) <= size {
		return t.r.cfg.Intake.RecordMany(ctx, ds)
	}
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ds[a].Source.Queue, ds[b].Source.Queue) })
	results := make([]dlq.ManyResult, len(ds))
	errs := make([]error, (len(ds)+size-1)/size)
	sem := make(chan struct{}, t.r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := 0; i < len(order); i += size {
		idx := order[i:min(i+size, len(order))]
		chunk := make([]dlq.Delivery, len(idx))
		for j, k := range idx {
			chunk[j] = ds[k]
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(n int) {
			defer func() { <-sem; wg.Done() }()
			res, err := t.r.cfg.Intake.RecordMany(ctx, chunk)
			if err == nil && len(res) != len(chunk) {
				err = fmt.Errorf("the intake answered %d results for %d deliveries", len(res), len(chunk))
			}
			if err != nil {
				errs[n] = err
				return
			}
			for j, k := range idx {
				results[k] = res[j]
			}
		}(i / size)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

// park records the stand-in of a row the intake could not record.
func (t *term) park(ctx context.Context, row dlq.Row, cause error) error {
	p := standIn(row, cause, t.r.cfg.Actor)
	_, _, err := t.r.cfg.Parker.RecordCreate(ctx, p)
	if err != nil && !errors.Is(err, mend.ErrInvalid) && !errors.Is(err, mend.ErrIdentityMismatch) {
		return fmt.Errorf("binlog: park the stand-in for offset %d of %s/%q: %w", row.Offset, row.Topic, row.PartitionKey, err)
	}
	if err != nil {
		t.r.log.ErrorContext(ctx, "binlog reader: a dead letter could not be recorded, nor its stand-in; passing it",
			"topic", row.Topic, "partition", row.PartitionKey, "offset", row.Offset, "cause", cause, "err", err)
		return nil
	}
	t.r.log.WarnContext(ctx, "binlog reader: a dead letter could not be recorded as itself; recorded a parked stand-in naming its offset",
		"topic", row.Topic, "partition", row.PartitionKey, "offset", row.Offset, "message_id", p.Source.MessageID, "cause", cause)
	return nil
}

// syncerConfig is the replication connection's configuration, built anew
// for every connect: the user, password and TLS files are read as every
// pool reads them at a connect (mysqlx.Current), so a rotated secret is
// used without a restart. The address is the DSN's, TCP or a Unix socket.
func (t *term) syncerConfig() (replication.BinlogSyncerConfig, error) {
	c := mysqlx.Current(t.r.cfg.Server)
	if planted.staleCredentials {
		c = t.r.cfg.Server
	}
	network, addr := c.Net, c.Addr
	var hostname string
	var port uint64
	switch network {
	case "unix":
		hostname = addr
	case "tcp", "tcp4", "tcp6", "":
		network = "tcp"
		h, portText, err := net.SplitHostPort(addr)
		if err != nil {
			return replication.BinlogSyncerConfig{}, fmt.Errorf("%w: the queue database address %q: %v", ErrConfig, addr, err)
		}
		if port, err = strconv.ParseUint(portText, 10, 16); err != nil {
			return replication.BinlogSyncerConfig{}, fmt.Errorf("%w: the queue database port %q: %v", ErrConfig, portText, err)
		}
		hostname = h
	default:
		return replication.BinlogSyncerConfig{}, fmt.Errorf("%w: the queue database DSN's network %q: binlog mode reads over tcp(host:port) or unix(/path/to/socket)", ErrConfig, network)
	}
	var tlsCfg *tls.Config
	if c.TLS != nil {
		tlsCfg = c.TLS.Clone()
	}
	return replication.BinlogSyncerConfig{
		ServerID:  t.r.cfg.ServerID,
		Flavor:    t.srv.Flavor,
		Host:      hostname,
		Port:      uint16(port),
		User:      c.User,
		Password:  c.Passwd,
		TLSConfig: tlsCfg,
		// The DSN's own network, whatever the address looks like (go-mysql
		// would guess it from a slash).
		Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		HeartbeatPeriod:  t.r.cfg.Heartbeat,
		ReadTimeout:      3*t.r.cfg.Heartbeat + 10*time.Second,
		DisableRetrySync: true,
		UseDecimal:       false,
		FillZeroLogPos:   t.srv.Flavor == "mariadb",
		Logger:           discardLogger,
		EventCacheCount:  1024,
		DiscardGTIDSet:   true, // the reader keeps its own set (term.commit)
	}, nil
}

// standIn is the parked record for a row the intake could not record.
func standIn(row dlq.Row, cause error, actor string) mend.CreateParams {
	return subscribe.StandIn(row, cause, "This parked stand-in keeps it visible, and the binary-log reader has read past it", actor)
}

// CatchUpResult is what one CatchUp did.
type CatchUpResult struct {
	// From is where it started reading (the saved position, or a
	// start-over's), To the position it saved at the end.
	From, To storage.BinlogPosition
	// Recorded and Parked count the dead letters it recorded and parked.
	Recorded, Parked int64
	// Reset is why it started over from the tables ("" when it resumed).
	Reset string
}

// CatchUp is one bounded read for mend run --once (a CronJob, a person's
// one-off): under the reader's lease, it reads the binary log from the
// saved position (or starts over, as Run would) to the end the server had
// when it began, records every dead letter committed up to there, saves
// the position and releases the lease. It never joins a consumer group.
// Returns an error matching mend.ErrLeaseHeld, having read nothing, when
// another replica holds the reader's lease (that replica reads: intake is
// its job); any other error is a failed read, counted as Run counts them,
// with the position left where it was.
func (r *Reader) CatchUp(ctx context.Context) (CatchUpResult, error) {
	var res CatchUpResult
	le, err := r.cfg.Fence.TryAcquire(ctx, LeaseName(r.cfg.Source))
	if errors.Is(err, mend.ErrLeaseHeld) {
		return res, fmt.Errorf("binlog: another replica reads %s: %w", r.cfg.Source, err)
	}
	if err != nil {
		err = fmt.Errorf("%w: take the reader's lease: %w", errStore, err)
		r.failed(ctx, err)
		return res, err
	}
	defer func() {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = le.Release(relCtx)
		cancel()
		r.setStatus(func(s *Status) { s.Role = RoleStopped })
	}()
	before := r.Status()
	r.setStatus(func(s *Status) { s.Role = RoleReader })
	saved := false
	var t *term
	err = r.leadWith(ctx, le, &saved, func(tm *term) { tm.catchUp, t = true, tm })
	if errors.Is(err, errCaughtUp) {
		err = nil
	}
	after := r.Status()
	res.Recorded, res.Parked = after.Recorded-before.Recorded, after.Parked-before.Parked
	if t != nil {
		res.From, res.To, res.Reset = t.from, t.pos, t.resetWhy
	}
	if err != nil {
		r.failed(ctx, err)
	}
	return res, err
}

// errCaughtUp ends a CatchUp's term once it has read to its end.
var errCaughtUp = errors.New("binlog: caught up")

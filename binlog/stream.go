package binlog

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// stream reads the binary log from p until ctx ends or something fails:
// file and offset when p is this server's, else its GTID set (a failover;
// resumable checked that there is one). Committed dead letters are
// recorded in batches, and the position after them saved only once they
// are durable.
func (t *term) stream(ctx context.Context, p storage.BinlogPosition) error {
	r := t.r
	cfg, err := t.syncerConfig()
	if err != nil {
		return err
	}
	t.read = p
	t.read.Flavor = t.srv.Flavor
	t.mysqlSet, t.mariaSet = nil, nil
	byFile := (p.ServerUUID == t.srv.Identity || planted.resumeFileAnywhere) && p.File != ""
	if p.GTIDSet != "" {
		if err := t.parseSet(p.GTIDSet); err != nil {
			return err
		}
	}
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	var src events
	var streamer *replication.BinlogStreamer
	switch {
	case byFile:
		streamer, err = syncer.StartSync(gomysql.Position{Name: p.File, Pos: uint32(p.Pos)})
	case t.srv.Flavor == "mariadb":
		r.log.InfoContext(ctx, "binlog reader: resuming by GTID on another server", "gtids", p.GTIDSet, "server", t.srv.Identity, "was", p.ServerUUID)
		// The syncer keeps and grows the set it is given, on its own
		// goroutine: it gets a copy.
		streamer, err = syncer.StartSyncGTID(t.mariaSet.Clone())
	case t.mysqlSet.tagged():
		r.log.InfoContext(ctx, "binlog reader: resuming by GTID on another server (a set with tagged GTIDs)", "gtids", p.GTIDSet, "server", t.srv.Identity, "was", p.ServerUUID)
		var d *taggedDump
		if d, err = startTaggedDump(ctx, cfg, t.mysqlSet); err == nil {
			defer d.Close()
			src = d
		}
	default:
		r.log.InfoContext(ctx, "binlog reader: resuming by GTID on another server", "gtids", p.GTIDSet, "server", t.srv.Identity, "was", p.ServerUUID)
		// go-mysql's own set type, which its syncer grows as it reads.
		var gs gomysql.GTIDSet
		if gs, err = gomysql.ParseMysqlGTIDSet(t.mysqlSet.String()); err == nil {
			streamer, err = syncer.StartSyncGTID(gs)
		}
	}
	if !byFile {
		t.read.ServerUUID, t.read.File, t.read.Pos = t.srv.Identity, "", 0
	}
	if err != nil {
		return fmt.Errorf("%w: start reading the binary log at %s: %w", errConnect, describe(p), err)
	}
	if streamer != nil {
		src = streamer
	}
	r.log.InfoContext(ctx, "binlog reader: reading", "from", describe(p), "server", t.srv.Identity, "flavor", t.srv.Flavor, "server_id", cfg.ServerID)
	t.savedAt = r.cfg.Now()
	t.inTxn, t.txnRows, t.txnGTID, t.txnStatement, t.inXA = false, nil, nil, false, false
	for {
		wait := ctx
		var cancel context.CancelFunc = func() {}
		if len(t.pending) > 0 {
			// flushDue is on the reader's clock (Config.Now), not
			// necessarily the wall clock a deadline is on.
			wait, cancel = context.WithTimeout(ctx, t.flushDue.Sub(r.cfg.Now()))
		}
		ev, err := src.GetEvent(wait)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if err := t.flush(ctx); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%w: read the binary log after %s: %w", errConnect, describe(t.read), err)
		}
		if err := t.handle(ctx, ev, false); err != nil {
			return err
		}
		heartbeat := ev.Header.EventType == replication.HEARTBEAT_EVENT || ev.Header.EventType == replication.HEARTBEAT_LOG_EVENT_V2
		if err := t.after(ctx, heartbeat); err != nil {
			return err
		}
	}
}

// after is the step after each event handled (heartbeat: a server's
// heartbeat, it has nothing more to send now): a full batch is recorded; a
// CatchUp that has read to its end records, saves and ends
// (errCaughtUp); and with nothing pending and no transaction open, the
// position is saved every SaveInterval while it moves, and every
// RefreshInterval on a heartbeat while it does not. A position is never
// saved while dead letters read before it wait to be recorded.
func (t *term) after(ctx context.Context, heartbeat bool) error {
	r := t.r
	if err := t.importStatements(ctx); err != nil {
		return err
	}
	if len(t.pending) >= r.cfg.BatchRows*r.cfg.Concurrency {
		if err := t.flush(ctx); err != nil {
			return err
		}
	}
	if t.catchUp && !t.inTxn && (t.reached() || heartbeat) {
		if err := t.flush(ctx); err != nil {
			return err
		}
		return errCaughtUp
	}
	since := r.cfg.Now().Sub(t.savedAt)
	idle := (len(t.pending) == 0 || planted.saveWhilePending) && !t.inTxn
	if idle && t.read.File != "" && (since >= r.cfg.SaveInterval && t.moved() || heartbeat && since >= r.cfg.RefreshInterval) {
		if heartbeat && !t.moved() {
			// A refresh says someone reads: first make sure the log read
			// is still the server's.
			if err := t.checkLog(ctx); err != nil {
				return err
			}
		}
		return t.save(ctx)
	}
	return nil
}

// errLogGone ends a term whose stream reads a log the server no longer
// writes.
var errLogGone = errors.New("binlog: the binary log read is no longer the server's")

// checkLog ends the term (errLogGone) when the server no longer logs into
// what the stream reads: after RESET MASTER (RESET BINARY LOGS AND GTIDS)
// the stream's dump thread goes on sending heartbeats from the file it had
// open, deleted, until the new file of that name grows past its offset
// (as large as max_binlog_size): caught up by every sign, reading nothing.
// The next term finds the saved position gone and starts over, loudly.
//
// It also ends the term when the queue DSN now reaches another server than
// the one the stream reads: a failover that moved the DNS name or proxy
// the DSN names leaves the replication connection with the old primary,
// which, kept up, goes on sending heartbeats. The check connects afresh
// (the pool's idle connections may still reach the old server).
func (t *term) checkLog(ctx context.Context) error {
	if planted.trustHeartbeats {
		return nil
	}
	conn, err := mysql.NewConnector(mysqlx.Current(t.r.cfg.Server))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxIdleConns(0)
	srv, err := Probe(ctx, db)
	if err != nil {
		return err
	}
	if srv.Identity != t.read.ServerUUID && !planted.trustStreamServer {
		return fmt.Errorf("%w: the queue database DSN now reaches %s, the stream reads %s (a failover moved the name or proxy the DSN names): reading again from the server the DSN reaches",
			errLogGone, srv.Identity, t.read.ServerUUID)
	}
	p := t.read
	p.GTIDSet = t.gtidString()
	if reason, _ := (&term{srv: srv}).resumable(p); reason != "" {
		return fmt.Errorf("%w: %s", errLogGone, reason)
	}
	return nil
}

func describe(p storage.BinlogPosition) string {
	if p.GTIDSet != "" {
		return fmt.Sprintf("%s:%d (GTIDs %s)", p.File, p.Pos, p.GTIDSet)
	}
	return fmt.Sprintf("%s:%d", p.File, p.Pos)
}

func (t *term) parseSet(s string) error {
	set, err := parseGTIDSet(t.srv.Flavor, s)
	if err != nil {
		return fmt.Errorf("binlog: the saved GTID set %q does not parse as %s's: %w", s, t.srv.Flavor, err)
	}
	switch v := set.(type) {
	case *mysqlSet:
		t.mysqlSet = v
	case *gomysql.MariadbGTIDSet:
		t.mariaSet = v
	}
	return nil
}

func (t *term) gtidString() string {
	switch {
	case t.mysqlSet != nil:
		return strings.ReplaceAll(t.mysqlSet.String(), "\n", "")
	case t.mariaSet != nil:
		return t.mariaSet.String()
	}
	return ""
}

// reached reports whether what has been read is at or past t.end (the
// server's end of log when the term began). Files of one server are named
// base.NNNNNN, a longer number after the longest of one length.
func (t *term) reached() bool {
	a, b := t.read.File, t.end.File
	switch {
	case a == "" || b == "":
		return false
	case len(a) != len(b):
		return len(a) > len(b)
	case a != b:
		return a > b
	}
	return t.read.Pos >= t.end.Pos
}

// moved reports whether what has been read is past what was saved: every
// commit moves the offset, so the GTID set need not be compared.
func (t *term) moved() bool {
	return t.read.File != t.pos.File || t.read.Pos != t.pos.Pos
}

// handle takes one event. inner is set for the events of a compressed
// transaction (MySQL's TRANSACTION_PAYLOAD_EVENT), whose positions are the
// payload event's.
func (t *term) handle(ctx context.Context, ev *replication.BinlogEvent, inner bool) error {
	r := t.r
	if r.cfg.Hooks.OnEvent != nil {
		r.cfg.Hooks.OnEvent(ev.Header.EventType.String())
	}
	if planted.saveMidTransaction && !inner && ev.Header.LogPos > 0 {
		defer func() { t.read.Pos = uint64(ev.Header.LogPos) }()
	}
	if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT && !planted.ignoreXA {
		t.xaPrepared(ev, inner)
		return nil
	}
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		t.read.File, t.read.Pos = string(e.NextLogName), e.Position
		return nil
	case *replication.PreviousGTIDsEvent:
		// At a file's start: the set before it, where the reader started
		// from the file (a reset) and has no set yet. Read from the event's
		// bytes (tags kept with their own UUID), else from go-mysql's text.
		if t.mysqlSet == nil && len(ev.RawData) > replication.EventHeaderSize {
			if set, err := decodeSet(ev.RawData[replication.EventHeaderSize:]); err == nil {
				t.mysqlSet = set
				return nil
			}
		}
		if t.mysqlSet == nil && e.GTIDSets != "" {
			return t.parseSet(e.GTIDSets)
		}
		if t.mysqlSet == nil && t.srv.GTIDs {
			return t.parseSet("")
		}
		return nil
	case *replication.MariadbGTIDListEvent:
		if t.mariaSet == nil {
			set := make([]string, 0, len(e.GTIDs))
			for _, g := range e.GTIDs {
				set = append(set, g.String())
			}
			return t.parseSet(strings.Join(set, ","))
		}
		return nil
	case *replication.GTIDEvent:
		if ev.Header.EventType == replication.ANONYMOUS_GTID_EVENT {
			return nil // gtid_mode=OFF: a transaction without a GTID
		}
		return t.mysqlGTID(e)
	case *replication.GtidTaggedLogEvent:
		// MySQL 8.3+: SET gtid_next = 'AUTOMATIC:<tag>'.
		return t.mysqlGTID(&e.GTIDEvent)
	case *replication.MariadbGTIDEvent:
		g := e.GTID
		t.txnGTID = func() {
			if t.mariaSet == nil {
				_ = t.parseSet("")
			}
			if planted.gtidFrozen {
				return
			}
			if planted.gtidPerServer {
				_ = t.mariaSet.AddSet(&g)
				return
			}
			// The connect state: the domain's last transaction, whichever
			// server wrote it.
			t.mariaSet.Sets[g.DomainID] = map[uint32]*gomysql.MariadbGTID{g.ServerID: &g}
		}
		// A GTID without the standalone flag opens a transaction (BEGIN
		// is implied); a standalone one is a DDL or statement that
		// commits by itself.
		t.inTxn = e.Flags&replication.BINLOG_MARIADB_FL_STANDALONE == 0
		t.txnRows, t.txnStatement, t.inXA = t.txnRows[:0], false, false
		return nil
	case *replication.QueryEvent:
		q := bytes.TrimSpace(e.Query)
		if !planted.ignoreXA && t.xa(ev, q, inner) {
			return nil
		}
		switch {
		case bytes.EqualFold(q, []byte("BEGIN")):
			t.inTxn, t.txnRows, t.txnStatement = true, t.txnRows[:0], false
		case bytes.EqualFold(q, []byte("COMMIT")):
			t.commit(ev, inner)
		case bytes.EqualFold(q, []byte("ROLLBACK")) && planted.recordRollbacks:
			t.commit(ev, inner)
		case bytes.EqualFold(q, []byte("ROLLBACK")):
			t.inTxn, t.txnRows, t.txnGTID, t.txnStatement = false, t.txnRows[:0], nil, false
		case t.inTxn:
			// SAVEPOINT and the like inside a transaction, or a statement
			// of a session whose binlog_format is not ROW.
			if !planted.ignoreStatements && t.statementInsert(e) {
				t.txnStatement = true
				if t.insertID > 0 {
					t.stmtOffsets = append(t.stmtOffsets, t.insertID)
				}
			}
			t.insertID = 0
		default:
			// DDL (an ALTER of queue_messages among them): it commits by
			// itself, and the table's next map says its new columns.
			clear(t.columns)
			t.commit(ev, inner)
		}
		return nil
	case *replication.IntVarEvent:
		if e.Type == replication.INSERT_ID {
			t.insertID = e.Value // the offset the statement after it inserts at
		}
		return nil
	case *replication.TableMapEvent:
		return nil
	case *replication.RowsEvent:
		return t.rows(ctx, ev.Header.EventType, e)
	case *replication.XIDEvent:
		t.commit(ev, inner)
		return nil
	case *replication.TransactionPayloadEvent:
		for _, in := range e.Events {
			if err := t.handle(ctx, in, true); err != nil {
				return err
			}
		}
		t.read.Pos = uint64(ev.Header.LogPos)
		return nil
	}
	if ev.Header.EventType == replication.HEARTBEAT_EVENT || ev.Header.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
		r.setStatus(func(s *Status) { s.CaughtUp, s.Lag = true, 0; s.Heartbeats++ })
	}
	return nil
}

// mysqlGTID opens a MySQL transaction with its GTID, tagged or not: the
// GTID joins the set read when the transaction commits.
func (t *term) mysqlGTID(e *replication.GTIDEvent) error {
	sid, err := uuid.FromBytes(e.SID)
	if err != nil {
		return fmt.Errorf("binlog: a GTID event's source id: %w", err)
	}
	gno, tag := e.GNO, e.Tag
	t.txnGTID = func() {
		if t.mysqlSet == nil {
			_ = t.parseSet("")
		}
		if !planted.gtidFrozen {
			t.mysqlSet.addGTID(sid, tag, gno)
		}
	}
	return nil
}

// commit ends the open transaction: its dead letters join the pending batch
// and what has been read moves past it.
func (t *term) commit(ev *replication.BinlogEvent, inner bool) {
	if t.txnGTID != nil {
		t.txnGTID()
		t.txnGTID = nil
	}
	if !inner && ev.Header.LogPos > 0 {
		t.read.Pos = uint64(ev.Header.LogPos)
	}
	if ev.Header.Timestamp > 0 {
		at := time.Unix(int64(ev.Header.Timestamp), 0).UTC()
		t.read.EventAt = at
		lag := max(t.r.cfg.Now().Sub(at), 0)
		t.r.setStatus(func(s *Status) { s.CaughtUp, s.Lag = false, lag })
	}
	if len(t.txnRows) > 0 {
		if len(t.pending) == 0 || planted.flushDeadlineSlides {
			t.flushDue = t.r.cfg.Now().Add(t.r.cfg.FlushInterval)
		}
		t.pending = append(t.pending, t.txnRows...)
	}
	if t.txnStatement {
		t.importDue = true
	}
	t.inTxn, t.txnRows, t.txnStatement = false, nil, false
}

// xa takes q when it is an XA statement (true). A host's XA transaction
// is logged at XA PREPARE (XA START, its rows, XA END, the prepare event),
// and decided later by an XA COMMIT or XA ROLLBACK of its own: its dead
// letters are committed at the XA COMMIT, never at the prepare. The rows
// of a prepare read this term wait in xaRows for their decision; an XA
// COMMIT of a prepare read before (another term's, before the saved
// position) has its dead letters imported from the tables, where the
// commit put them.
func (t *term) xa(ev *replication.BinlogEvent, q []byte, inner bool) bool {
	head := q[:min(len(q), 16)]
	fields := strings.Fields(strings.ToUpper(string(head)))
	if len(fields) < 2 || fields[0] != "XA" {
		return false
	}
	switch fields[1] {
	case "START", "BEGIN":
		t.inTxn, t.txnRows, t.txnStatement = true, t.txnRows[:0], false
		t.inXA, t.xaID = true, xaID(q)
	case "END":
		// MariaDB logs no XA START: the group's GTID event opened it.
		t.inXA, t.xaID = true, xaID(q)
	case "PREPARE":
		t.xaPrepared(ev, inner)
	case "COMMIT":
		if t.inXA { // XA COMMIT ... ONE PHASE: the group commits itself
			t.inXA = false
			t.commit(ev, inner)
			break
		}
		id := xaID(q)
		if rows, ok := t.xaRows[id]; ok {
			delete(t.xaRows, id)
			t.txnRows = append(t.txnRows[:0], rows...)
		} else {
			t.txnRows, t.xaImportDue = t.txnRows[:0], true
		}
		t.commit(ev, inner)
	case "ROLLBACK":
		delete(t.xaRows, xaID(q))
		t.inXA, t.txnRows = false, t.txnRows[:0]
		t.commit(ev, inner)
	default:
		return false
	}
	return true
}

// xaPrepared ends an XA transaction's prepare: its dead letters wait for
// its XA COMMIT, and what has been read moves past it.
//
// Every prepare read is kept, with or without dead letters of the
// reader's, so that only the commit of one prepared before the term
// (another schema's too: the commit does not say) costs an import.
func (t *term) xaPrepared(ev *replication.BinlogEvent, inner bool) {
	if t.xaRows == nil {
		t.xaRows = map[string][]dlq.Row{}
	}
	t.xaRows[t.xaID] = slices.Clone(t.txnRows)
	t.inXA, t.txnRows = false, t.txnRows[:0]
	t.commit(ev, inner)
}

// xaID is the xid of an XA statement as logged (X'..',X'..',n), the words
// after it (ONE PHASE, SUSPEND) left out.
func xaID(q []byte) string {
	fields := strings.Fields(string(q))
	if len(fields) < 3 {
		return ""
	}
	return fields[2]
}

// statementInsert reports whether e, a statement inside a transaction, is
// an INSERT or REPLACE into the reader's queue_messages logged as a
// statement: a host session's binlog_format is STATEMENT or MIXED (a
// session may set its own; one opened before a SET GLOBAL keeps the old),
// and the log carries no row image to record. Matched loosely (a false
// match costs an import, a miss a dead letter).
func (t *term) statementInsert(e *replication.QueryEvent) bool {
	q := bytes.TrimSpace(e.Query)
	for bytes.HasPrefix(q, []byte("/*")) {
		end := bytes.Index(q, []byte("*/"))
		if end < 0 {
			break
		}
		q = bytes.TrimSpace(q[end+2:])
	}
	word, _, _ := bytes.Cut(q, []byte(" "))
	if !bytes.EqualFold(word, []byte("INSERT")) && !bytes.EqualFold(word, []byte("REPLACE")) {
		return false
	}
	lower := bytes.ToLower(q)
	if !bytes.Contains(lower, []byte(strings.ToLower(Table))) {
		return false
	}
	schema := t.r.cfg.Server.DBName
	return t.srv.SameName(string(e.Schema), schema) || bytes.Contains(lower, []byte(strings.ToLower(schema)))
}

// importStatements records, once the transactions read so far include one
// whose dead-letter insert was logged as a statement (statementInsert),
// every dead letter the tables hold: that transaction committed before the
// reader read its commit, so its rows are in the tables unless the host
// collected them since. It runs before the position past that transaction
// is saved, so a failed import reads it again.
func (t *term) importStatements(ctx context.Context) error {
	if !t.importDue && !t.xaImportDue || t.inTxn {
		return nil
	}
	r := t.r
	if t.xaImportDue && !t.importDue {
		r.log.WarnContext(ctx, "binlog reader: an XA transaction prepared before the saved position was committed: its dead letters were logged at its prepare; importing what the tables hold",
			"after", describe(t.read))
		if err := t.importTables(ctx); err != nil {
			return err
		}
		t.xaImportDue = false
		return t.flush(ctx)
	}
	r.log.ErrorContext(ctx, "binlog reader: a dead letter's INSERT was logged as a statement, not as rows (a host session's binlog_format is STATEMENT or MIXED, though the server's global is ROW): importing what the tables hold; a dead letter the host collected before the import is lost. "+
		"Make every host session log rows: SET PERSIST binlog_format=ROW (MariaDB: SET GLOBAL and the config file), then reconnect the host's connection pools (a session keeps the format it opened with), and grant no host user the right to SET SESSION binlog_format",
		"after", describe(t.read))
	r.setStatus(func(s *Status) { s.Statements++ })
	if err := t.waitVisible(ctx); err != nil {
		return err
	}
	if err := t.importTables(ctx); err != nil {
		return err
	}
	t.importDue, t.xaImportDue = false, false
	return t.flush(ctx)
}

// sqlWaitVisible is a locking read of one queue_messages row by its
// offset: it waits for the transaction that inserted it to commit in the
// engine (it holds the row's lock until then), and reads nothing else.
const sqlWaitVisible = "/* name: BinlogWaitVisible */ SELECT 1 FROM queue_messages WHERE `offset` = ? LOCK IN SHARE MODE"

// waitVisible waits until the dead letters logged as statements are
// visible in the tables. The server writes a transaction to the binary log
// (and may send it to the reader) before the engine commits it, so an
// import at once may not see rows the log says committed: a locking read
// of the first row each statement inserted waits for that commit.
func (t *term) waitVisible(ctx context.Context) error {
	for _, off := range t.stmtOffsets {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tx, err := t.db.BeginTx(wctx, nil)
		if err == nil {
			var one int
			err = tx.QueryRowContext(wctx, sqlWaitVisible, off).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				err = nil // collected since, or never there: the import says
			}
			err = errors.Join(err, tx.Rollback())
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%w: wait for offset %d, logged as a statement, to be visible: %w", errConnect, off, err)
		}
	}
	t.stmtOffsets = t.stmtOffsets[:0]
	return nil
}

// flush records the pending dead letters and then saves the position after
// them. On an error nothing more is read: the term ends, and the next reads
// again from the saved position.
func (t *term) flush(ctx context.Context) error {
	if planted.saveBeforeRecord {
		if err := t.save(ctx); err != nil {
			return err
		}
	}
	if len(t.pending) > 0 {
		if err := t.record(ctx, t.pending); err != nil {
			if !planted.dropOnFailure {
				return err
			}
			t.r.failed(ctx, err)
		}
		t.pending = t.pending[:0]
	}
	return t.save(ctx)
}

// planted are deliberately broken variants, each off except while a test
// shows that the tests catch it (export_test.go's Plant).
var planted struct {
	// saveBeforeRecord saves the position before the rows it covers are
	// recorded.
	saveBeforeRecord bool
	// dropOnFailure drops a batch whose recording failed and reads on.
	dropOnFailure bool
	// startAtEnd starts a reset at the end of the log, not at the start
	// of the file being written.
	startAtEnd bool
	// recordRollbacks takes a ROLLBACK in the log as a commit.
	recordRollbacks bool
	// saveMidTransaction saves the position of the last event read, in
	// the middle of a transaction, rather than the last commit's.
	saveMidTransaction bool
	// offsetWatermark takes offsets for commit order, as the offset
	// subscription must not: a row whose offset is not above the highest
	// one read on its topic and partition is skipped as already seen.
	offsetWatermark bool
	// resumeFromRead starts a term after a failure where the last term
	// had read to, not at the saved position: the rows read and not yet
	// recorded are skipped.
	resumeFromRead bool
	// parkCountPerTerm forgets a row's failures when the term ends, so a
	// row that always fails (each failure ends the term) is never parked.
	parkCountPerTerm bool
	// parkOneLate parks a row at ParkAfter+1 failures in a row.
	parkOneLate bool
	// noParkDefault leaves a zero ParkAfter at zero, so a row is parked at
	// its first failure that may pass.
	noParkDefault bool
	// staleCredentials builds the replication connection from the DSN as
	// parsed at start, not as its file holds it now.
	staleCredentials bool
	// exactSchemaName compares the log's schema name byte for byte, as
	// the server does not where lower_case_table_names is set.
	exactSchemaName bool
	// anySchema records inserts into every schema's queue_messages.
	anySchema bool
	// retryPerTerm ends Run for good on a problem found at a later
	// term's start (a setting flipped, a refused credential).
	returnOnProblem bool
	// gtidPerServer keeps one MariaDB GTID per (domain, server_id), not
	// the connect state's one per domain.
	gtidPerServer bool
	// dropTags leaves MySQL's tagged GTIDs out of the set read.
	dropTags bool
	// gtidFrozen never adds a transaction's GTID to the set read: the set
	// saved stays the one at the start of the file.
	gtidFrozen bool
	// saveWhilePending lets the periodic save run while dead letters read
	// before the position wait to be recorded.
	saveWhilePending bool
	// flushDeadlineSlides moves the flush deadline with every commit, so a
	// steady trickle of dead letters never flushes.
	flushDeadlineSlides bool
	// skipProblems reads a server whatever Server.Problems says (a MINIMAL
	// row image among them) when the reader is built directly.
	skipProblems bool
	// resumeFileAnywhere resumes a saved file and offset on whichever
	// server the reader finds.
	resumeFileAnywhere bool
	// everyResetPurged counts every start-over as a purge.
	everyResetPurged bool
	// trustFileName resumes a saved file and offset on the server of
	// that identity whatever its GTID state says (a log reset since).
	trustFileName bool
	// ignoreXA takes XA statements and prepares as any other.
	ignoreXA bool
	// trustStreamServer refreshes the saved position on a heartbeat of
	// the stream's server though the DSN reaches another now.
	trustStreamServer bool
	// trustHeartbeats refreshes the saved position on a heartbeat without
	// checking that the server still logs into the file read.
	trustHeartbeats bool
	// ignoreStatements passes over a dead letter's INSERT logged as a
	// statement (a host session's binlog_format not ROW).
	ignoreStatements bool
	// ignoreFilters takes a binary log filtered to leave the queue schema
	// out for one that logs it.
	ignoreFilters bool
}

// save stores what has been read (everything pending is recorded) as the
// position, fenced by the term's lease.
func (t *term) save(ctx context.Context) error {
	p := t.read
	p.GTIDSet = t.gtidString() // rendered per save, not per commit of every transaction on the server
	p.Name = LeaseName(t.r.cfg.Source)
	p.ResetReason, p.ResetAt = t.pos.ResetReason, t.pos.ResetAt
	if err := t.r.cfg.Store.BinlogPositionSave(ctx, t.lease.Term(), p); err != nil {
		return fmt.Errorf("binlog: save the position %s: %w", describe(p), err)
	}
	t.pos = p
	t.savedAt = t.r.cfg.Now()
	if t.saved != nil {
		*t.saved = true
	}
	t.r.setStatus(func(s *Status) { s.Position, s.FailingSince = p, time.Time{} })
	if !t.left && t.r.cfg.LeaveGroup != "" {
		t.left = true
		t.leaveGroup(ctx)
	}
	if t.r.cfg.Hooks.OnSaved != nil {
		t.r.cfg.Hooks.OnSaved(p)
	}
	return nil
}

// leaveGroup deregisters the offset subscription's group (Config.LeaveGroup)
// from every partition, as mend subscribe --remove does.
func (t *term) leaveGroup(ctx context.Context) {
	group := t.r.cfg.LeaveGroup
	// Asked first, with a SELECT the documented grants allow: most terms
	// find nothing to leave, and say nothing.
	rows, err := subscribe.GroupRows(ctx, t.db, group)
	if err != nil {
		t.r.log.WarnContext(ctx, "binlog reader: could not read the offset subscription's rows in queue_offsets (SELECT on queue_offsets); a group left there would hold the host's GC back",
			"group", group, "err", err)
		return
	}
	if rows == 0 {
		return
	}
	n, err := subscribe.Remove(ctx, t.db, group)
	switch {
	case err != nil:
		t.r.log.WarnContext(ctx, fmt.Sprintf("binlog reader: the offset subscription's consumer group %q still has %d row(s) in queue_offsets, holding the host's GC back, and mend's queue user may not delete them "+
			"(the documented grants give DELETE on queue_offsets only to mend_leave): once no mend run of the group runs in offsets mode, run as that user: mend subscribe --queue-dsn <mend_leave's DSN> --group %s --remove --yes",
			group, rows, group), "group", group, "rows", rows, "err", err)
	case n > 0:
		t.r.log.InfoContext(ctx, "binlog reader: left the offset subscription's consumer group; the host's GC is no longer held back by it",
			"group", group, "partitions", n)
	}
}

// ours reports whether tm is the reader's queue_messages, its names
// compared as the server compares them (lower_case_table_names).
func (t *term) ours(tm *replication.TableMapEvent) bool {
	if !t.srv.SameName(string(tm.Table), Table) {
		return false
	}
	schema := t.r.cfg.Server.DBName
	switch {
	case planted.anySchema:
		return true
	case planted.exactSchemaName:
		return string(tm.Schema) == schema
	}
	return t.srv.SameName(string(tm.Schema), schema)
}

// rows takes a rows event: the inserts into the reader's queue_messages on
// a DLQ topic join the open transaction.
func (t *term) rows(ctx context.Context, kind replication.EventType, e *replication.RowsEvent) error {
	switch kind {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
	default:
		return nil
	}
	tm := e.Table
	if tm == nil || !t.ours(tm) {
		return nil
	}
	cols, err := t.columnNames(ctx, tm)
	if err != nil {
		return err
	}
	for _, vals := range e.Rows {
		row, err := decodeRow(cols, vals)
		if err != nil {
			return fmt.Errorf("binlog: a row of %s.%s after %s: %w", tm.Schema, tm.Table, describe(t.read), err)
		}
		if !strings.HasSuffix(row.Topic, dlq.DLQSuffix) {
			continue
		}
		if planted.offsetWatermark {
			k := row.Topic + "\x00" + row.PartitionKey
			if row.Offset <= t.watermark[k] {
				continue
			}
			t.watermark[k] = row.Offset
		}
		t.txnRows = append(t.txnRows, row)
	}
	return nil
}

package binlog_test

// Attacks on binlog mode: ways a real deployment's server or operator
// makes the reader lose a dead letter, or stop recording while it looks
// healthy, beyond the paths in paths_test.go. A finding not yet fixed is
// skipped with t.Skip("finding: ...") so the suite stays green; remove the
// skip to see it fail.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// A host session whose binlog_format is not ROW: the global setting is
// ROW (Server.Problems passes), but a session may set its own
// (SET SESSION binlog_format, allowed to a user with the privilege; on
// MariaDB, whose default is MIXED, every pooled connection opened before a
// DBA's SET GLOBAL binlog_format=ROW keeps MIXED until it reconnects). The
// dead letter's INSERT is then logged as a statement, not as rows.
func sessionFormat(format string) func(t *testing.T) error {
	return func(t *testing.T) error {
		w := newWorld(t)
		r := w.start(t, "a", nil)
		readThrough(t, r)
		w.inSession(t, "SET SESSION binlog_format = '"+format+"'", "q1", "statement-logged")
		w.deadLetter(t, "q2", "marker")
		until(t, r, "the marker committed after it", w.has(t, "marker"))
		readThrough(t, r)
		st := r.r.Status()
		if !w.has(t, "statement-logged")() {
			return fmt.Errorf("a dead letter inserted by a session with binlog_format=%s was never recorded, and the reader says nothing (role %s, last error %q, failures %v)",
				format, st.Role, st.LastErr, st.Failures)
		}
		if st.Statements == 0 {
			return fmt.Errorf("a dead letter logged as a statement (binlog_format=%s) was recorded, but Status.Statements does not say so", format)
		}
		return nil
	}
}

func TestAttackSessionBinlogFormatStatement(t *testing.T) {
	guards(t, "", sessionFormat("STATEMENT"))
}

func TestAttackSessionBinlogFormatMixed(t *testing.T) {
	guards(t, "", sessionFormat("MIXED"))
}

func TestAttackSessionBinlogFormatNegativeControl(t *testing.T) {
	guards(t, "ignoreStatements", sessionFormat("STATEMENT"))
}

// Two deployments of mend that record into one mend database, each reading
// its own queue database server, under the same source (--binlog-source
// given alike, or left to its default, the schema name, which two host
// clusters easily share). They share one lease and one position row: the
// second stands by for good, its dead letters never recorded, while the
// first's saves keep the position's age (the page alert) fresh.
func sameSource(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	wa := newWorld(t)
	wb := newWorldOn(t, mysqltest.StartPrivate(t))
	a := wa.start(t, "a", func(c *binlog.Config) { c.Source = "queue" })
	wa.deadLetter(t, "q1", "a-1")
	until(t, a, "deployment a's row", wa.has(t, "a-1"))
	b := wa.start(t, "b", func(c *binlog.Config) { c.Server, c.Source = wb.qcfg, "queue" })
	wb.deadLetter(t, "q1", "b-1")
	beats := a.r.Status().Heartbeats
	return outcome(t, b, "deployment b's row recorded, or b saying why not", func() bool {
		return wa.has(t, "b-1")() || b.r.Status().LastErr != ""
	}, func(st binlog.Status) string {
		if n := a.r.Status().Heartbeats; n > beats+50 {
			return fmt.Sprintf("stood by (%s) while deployment a read another server under the same source (%d heartbeats), saying nothing", st.Role, n-beats)
		}
		return ""
	})
}

func TestAttackSameSourceTwoServers(t *testing.T) {
	t.Skip("finding: a second deployment under the same source stands by for good, saying nothing")
	guards(t, "", sameSource)
}

// The same two deployments (one mend database, two queue database servers,
// one source) when the reader of the first stops and the second takes the
// lease: it finds the first's saved position. On MariaDB a server's
// identity is its server_id, which two servers left at the default share
// (1): the second resumes the first server's file and offset in its own
// log, here two logs of the same shape (two servers set up alike, the same
// traffic), so the offset is a transaction boundary in both, and the dead
// letters its own server logged before that offset are passed over, with
// no reset and nothing said. A queue server rebuilt from a backup, or
// reset (RESET MASTER), with the same server_id is the same case.
func sameSourceTakeover(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	wm := newWorld(t) // mend's database, on a server of its own
	wa := newWorldOn(t, mysqltest.StartPrivate(t))
	wb := newWorldOn(t, mysqltest.StartPrivate(t))
	for _, w := range []*world{wa, wb} {
		st, err := binlog.Probe(context.Background(), w.root(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("queue server %s: identity %s, files %v, end %d", w.qcfg.Addr, st.Identity, st.Files, st.End)
	}
	a := wm.start(t, "a", func(c *binlog.Config) { c.Server, c.Source = wa.qcfg, "queue" })
	readThrough(t, a)
	var ids []string
	for i := range 3 {
		wa.deadLetter(t, "q1", fmt.Sprintf("a-%d", i))
		id := fmt.Sprintf("b-%d", i)
		wb.deadLetter(t, "q1", id) // the same shape, on the other server
		ids = append(ids, id)
	}
	until(t, a, "a's rows", wm.has(t, "a-0", "a-1", "a-2"))
	p := saveAfter(t, a)
	a.stop()
	wb.deadLetter(t, "q1", "b-late")
	ids = append(ids, "b-late")
	b := wm.start(t, "b", func(c *binlog.Config) { c.Server, c.Source = wb.qcfg, "queue" })
	if err := outcome(t, b, "b's late row", wm.has(t, "b-late"), failedAgain(binlog.FailGTID, 3)); err != nil {
		return err
	}
	readThrough(t, b)
	resets, purged, _ := b.ev.snapshot()
	if lost := wm.missing(t, ids); len(lost) > 0 {
		return fmt.Errorf("lost %v: b resumed a's position %s on %s's server (resets %q, %d purged, last error %q)",
			lost, describe(p), p.ServerUUID, resets, purged, b.r.Status().LastErr)
	}
	return nil
}

func describe(p storage.BinlogPosition) string {
	return fmt.Sprintf("%s:%d (GTIDs %q)", p.File, p.Pos, p.GTIDSet)
}

func TestAttackSameSourceTakeover(t *testing.T) {
	t.Skip("finding: MariaDB's identity (server_id) resumes another server's file and offset: dead letters passed over in silence")
	guards(t, "", sameSourceTakeover)
}

// resetLog resets the server's binary log (RESET MASTER; RESET BINARY LOGS
// AND GTIDS from MySQL 8.4): every file goes, numbering restarts at
// .000001, and the GTID state is cleared.
func resetLog(t *testing.T, root *sql.DB) {
	t.Helper()
	if _, err := root.Exec("RESET BINARY LOGS AND GTIDS"); err != nil {
		if _, err := root.Exec("RESET MASTER"); err != nil {
			t.Fatal(err)
		}
	}
}

// An operator resets the queue server's binary log while the reader
// streams (RESET MASTER: to reclaim the space, after a restore, before
// setting a replica up). Every dead letter committed after it must be
// recorded, or the reader must say it cannot.
func logReset(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	wm := newWorld(t) // mend's database on another server
	w := newWorldOn(t, mysqltest.StartPrivate(t))
	root := w.root(t)
	r := wm.start(t, "a", func(c *binlog.Config) { c.Server, c.RefreshInterval = w.qcfg, 2*time.Second })
	w.deadLetter(t, "q1", "before")
	until(t, r, "the row before the reset", wm.has(t, "before"))
	saveAfter(t, r)
	resetLog(t, root)
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("after-%d", i)
		w.deadLetter(t, "q1", id)
		ids = append(ids, id)
	}
	w.deadLetter(t, "q2", "marker")
	ids = append(ids, "marker")
	beats := r.r.Status().Heartbeats
	began := time.Now()
	err := outcome(t, r, "the rows after the reset", wm.has(t, ids...), func(st binlog.Status) string {
		for reason, n := range st.Failures {
			if n >= 5 {
				return fmt.Sprintf("failed %d times for %s", n, reason)
			}
		}
		// RefreshInterval (here 2s) is the longest the reader may read a
		// reset log unawares.
		if st.Heartbeats > beats+300 && st.CaughtUp && st.LastErr == "" {
			return fmt.Sprintf("reads on, caught up by %d heartbeats, without them", st.Heartbeats-beats)
		}
		return ""
	})
	t.Logf("recorded or stalled %v after the rows' commits", time.Since(began).Round(time.Second))
	st := r.r.Status()
	resets, purged, _ := r.ev.snapshot()
	t.Logf("after the reset: resets %q (%d purged), failures %v, position %s, last error %q", resets, purged, st.Failures, describe(st.Position), st.LastErr)
	return err
}

func TestAttackLogReset(t *testing.T) { guards(t, "", logReset) }

func TestAttackLogResetNegativeControl(t *testing.T) { guards(t, "trustHeartbeats", logReset) }

// binlogEnd is the size of the file the server writes now.
func binlogEnd(t *testing.T, root *sql.DB) (string, uint64) {
	t.Helper()
	st, err := binlog.Probe(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	return st.Current, st.End
}

// The reset, with the reader stopped across it (a deploy, a node drain)
// and the host busy after it: the new mend-bin.000001 grows past the
// offset saved in the old one, and the saved offset falls on a transaction
// boundary of the new file (here made so with a filler transaction of the
// right size; on a busy server a matter of chance). The reader resumes
// "its" file and offset on "its" server and passes over every dead letter
// the new file holds before that offset, saying nothing.
func logResetAligned(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	wm := newWorld(t) // mend's database on another server: its writes stay out of the queue server's log
	q := newWorldOn(t, mysqltest.StartPrivate(t))
	root := q.root(t)
	if _, err := q.queue.Exec("CREATE TABLE mend_test_fill (id INT AUTO_INCREMENT PRIMARY KEY, b LONGBLOB)"); err != nil {
		t.Fatal(err)
	}
	r := wm.start(t, "a", func(c *binlog.Config) { c.Server = q.qcfg })
	q.deadLetter(t, "q1", "before")
	until(t, r, "the row before the reset", wm.has(t, "before"))
	p := saveAfter(t, r)
	r.stop()
	resetLog(t, root)
	ids := []string{"lost-0", "lost-1", "lost-2"}
	for _, id := range ids {
		q.deadLetter(t, "q1", id)
	}
	// Fill the new file to the saved offset exactly, with transactions of
	// REPEAT('x', n) for n of four digits (a transaction's size is then
	// base + n).
	fill := func(n int) uint64 {
		_, before := binlogEnd(t, root)
		if _, err := q.queue.Exec(fmt.Sprintf("INSERT INTO mend_test_fill (b) VALUES (REPEAT('x', %d))", n)); err != nil {
			t.Fatal(err)
		}
		file, after := binlogEnd(t, root)
		if file != p.File {
			t.Fatalf("the server writes %s now, the saved position is in %s", file, p.File)
		}
		return after - before
	}
	base := fill(1000) - 1000
	if d := fill(2000); d != base+2000 {
		t.Fatalf("a filler transaction of 2000 bytes took %d, want %d", d, base+2000)
	}
	for {
		_, end := binlogEnd(t, root)
		if end+base+1000 > p.Pos {
			t.Fatalf("the new file is at %d, too near the saved offset %d to fill", end, p.Pos)
		}
		n := p.Pos - end - base
		if n <= 9999 {
			fill(int(n))
			break
		}
		fill(5000)
	}
	if _, end := binlogEnd(t, root); end != p.Pos {
		t.Fatalf("filled the new file to %d, not the saved offset %d", end, p.Pos)
	}
	q.deadLetter(t, "q2", "marker")
	ids = append(ids, "marker")
	r2 := wm.start(t, "a", func(c *binlog.Config) { c.Server = q.qcfg })
	if err := outcome(t, r2, "the marker after the reset", wm.has(t, "marker"), failedAgain(binlog.FailGTID, 3)); err != nil {
		return err
	}
	readThrough(t, r2)
	resets, purged, _ := r2.ev.snapshot()
	if lost := wm.missing(t, ids); len(lost) > 0 {
		return fmt.Errorf("lost %v: the reader resumed %s in the file of that name written after the reset (resets %q, %d purged, last error %q)",
			lost, describe(p), resets, purged, r2.r.Status().LastErr)
	}
	if purged == 0 {
		return fmt.Errorf("the dead letters after the reset were recorded, but the reader did not say its position was gone (resets %q)", resets)
	}
	return nil
}

func TestAttackLogResetAligned(t *testing.T) { guards(t, "", logResetAligned) }

func TestAttackLogResetAlignedNegativeControl(t *testing.T) {
	guards(t, "trustFileName", logResetAligned)
}

// switcher forwards each new TCP connection to the address it holds now;
// connections made before a switch stay where they were, as a DNS name or
// a proxy moved to the host's new primary leaves them.
type switcher struct {
	addr   string
	target atomic.Pointer[string]
}

func newSwitcher(t *testing.T, target string) *switcher {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &switcher{addr: l.Addr().String()}
	s.target.Store(&target)
	relay(t, l, func() string { return *s.target.Load() })
	return s
}

func (s *switcher) to(target string) { s.target.Store(&target) }

// The host's primary fails over by moving the name (or the proxy) the
// queue DSN reaches, while the old primary stays up (demoted, fenced off,
// kept for forensics): the reader's replication connection stays with the
// old server, which goes on sending heartbeats. The reader is caught up by
// every sign, refreshes its position (the page alert stays quiet), and
// reads nothing the host commits on the new primary.
func dsnMoved(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	if mysqltest.SharedServer(t).Flavor() != "mariadb" {
		t.Skip("the MySQL test image carries one server_uuid for every container: two of them cannot be told apart")
	}
	ctx := context.Background()
	wm := newWorld(t)
	wa := newWorldOn(t, mysqltest.StartPrivate(t))
	srvB := mysqltest.StartPrivateWith(t, "--server-id=2")
	// The same schema on the new primary, as a replica holds it.
	rootB := (&world{srv: srvB}).root(t)
	if _, err := rootB.Exec("CREATE DATABASE `" + wa.qcfg.DBName + "` CHARACTER SET utf8mb4"); err != nil {
		t.Fatal(err)
	}
	bcfg, err := mysql.ParseDSN(srvB.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	bcfg.DBName = wa.qcfg.DBName
	if err := sqtest.Apply(ctx, bcfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	qb, err := subscribe.Open(ctx, bcfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qb.Close() })
	hostB := &world{queue: qb, host: sqtest.World{App: qb, Queue: qb, NowMS: func() int64 { return time.Now().UnixMilli() }}}

	sw := newSwitcher(t, wa.qcfg.Addr)
	server := wa.qcfg.Clone()
	server.Addr = sw.addr
	r := wm.start(t, "a", func(c *binlog.Config) { c.Server, c.RefreshInterval = server, 2*time.Second })
	wa.deadLetter(t, "q1", "on-old-primary")
	until(t, r, "the row on the old primary", wm.has(t, "on-old-primary"))
	readThrough(t, r)
	sw.to(bcfg.Addr)
	hostB.deadLetter(t, "q1", "on-new-primary")
	beats := r.r.Status().Heartbeats
	return outcome(t, r, "the row on the new primary recorded, or the reader saying why not", func() bool {
		return wm.has(t, "on-new-primary")() || r.r.Status().LastErr != ""
	}, func(st binlog.Status) string {
		if st.Heartbeats > beats+300 && st.CaughtUp {
			return fmt.Sprintf("reads the old primary on, caught up by %d heartbeats, its position refreshed, saying nothing", st.Heartbeats-beats)
		}
		return ""
	})
}

func TestAttackDSNMovedOldPrimaryUp(t *testing.T) { guards(t, "", dsnMoved) }

func TestAttackDSNMovedOldPrimaryUpNegativeControl(t *testing.T) {
	guards(t, "trustStreamServer", dsnMoved)
}

// The host reorders queue_messages' columns (ALTER TABLE ... MODIFY ...
// AFTER: a tidy-up migration) while the reader is behind, on a server
// that logs no column names (binlog_row_metadata MINIMAL, MySQL's default;
// NO_LOG, MariaDB's). The rows logged before the ALTER have as many
// columns as the table has now, so the reader takes the table's names for
// them: a dead letter logged before is recorded with another column's
// value in failed_at, and nothing says so.
func reorderedBehind(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	srv := mysqltest.StartPrivate(t)
	w := newWorldOn(t, srv)
	root := w.root(t)
	if _, err := root.Exec("SET GLOBAL binlog_row_metadata = 'MINIMAL'"); err != nil {
		t.Fatal(err)
	}
	r := w.start(t, "a", nil)
	readThrough(t, r)
	r.stop()
	rawDLQ(t, w.queue, "q1", "logged-before") // created_at 1, failed_at 1760000000000
	if _, err := w.queue.Exec("ALTER TABLE queue_messages MODIFY COLUMN failed_at BIGINT UNSIGNED NOT NULL AFTER metadata"); err != nil {
		t.Fatal(err)
	}
	r2 := w.start(t, "a", nil)
	if err := outcome(t, r2, "the row logged before the ALTER recorded", w.has(t, "logged-before"), failedAgain(binlog.FailColumns, 3)); err != nil {
		return err
	}
	var failedAt sql.NullTime
	if err := w.mend.QueryRow("SELECT failed_at FROM mend_records WHERE message_id = 'logged-before'").Scan(&failedAt); err != nil {
		t.Fatal(err)
	}
	if want := time.UnixMilli(1760000000000).UTC(); !failedAt.Valid || !failedAt.Time.Equal(want) {
		return fmt.Errorf("recorded failed_at %v, the row's is %v: the reader took the table's column order now for a row logged before the ALTER", failedAt.Time, want)
	}
	return nil
}

func TestAttackColumnsReorderedBehind(t *testing.T) {
	t.Skip("finding: without column names in the log, a row logged before a reorder of queue_messages is decoded by the table's order now, silently")
	guards(t, "", reorderedBehind)
}

// A host that writes its dead letters in XA transactions (a transaction
// manager across the queue and another resource): the server logs the
// transaction at XA PREPARE and its outcome later, as a statement of its
// own (XA COMMIT or XA ROLLBACK). A dead letter is committed at XA COMMIT,
// never before, and one rolled back never is.
func xaTransactions(t *testing.T) error {
	w := newWorld(t)
	r := w.start(t, "a", nil)
	readThrough(t, r)
	xa := xaPrepare(t, w)
	xa("mendxa1", "xa-committed")
	xa("mendxa2", "xa-rolled-back")
	w.deadLetter(t, "q2", "marker-1")
	until(t, r, "a marker after the prepares", w.has(t, "marker-1"))
	readThrough(t, r)
	var early []string
	for _, id := range []string{"xa-committed", "xa-rolled-back"} {
		if w.has(t, id)() {
			early = append(early, id)
		}
	}
	for _, s := range []string{"XA COMMIT 'mendxa1'", "XA ROLLBACK 'mendxa2'"} {
		if _, err := w.queue.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	w.deadLetter(t, "q2", "marker-2")
	until(t, r, "a marker after the outcomes", w.has(t, "marker-2"))
	readThrough(t, r)
	switch {
	case len(early) > 0:
		return fmt.Errorf("recorded %v at XA PREPARE, before any commit", early)
	case !w.has(t, "xa-committed")():
		return fmt.Errorf("a dead letter committed by XA COMMIT was never recorded, and the reader says nothing (last error %q)", r.r.Status().LastErr)
	case w.has(t, "xa-rolled-back")():
		return errors.New("a dead letter rolled back by XA ROLLBACK was recorded")
	}
	return nil
}

// xaPrepare returns a function that prepares an XA transaction inserting
// a dead letter, each on a session of its own, which then ends: the
// prepared transaction outlives it, and another session decides it.
func xaPrepare(t *testing.T, w *world) func(xid, id string) {
	ctx := context.Background()
	return func(xid, id string) {
		db, err := sql.Open("mysql", w.qcfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, s := range []string{"XA START '" + xid + "'", "", "XA END '" + xid + "'", "XA PREPARE '" + xid + "'"} {
			if s == "" {
				rawDLQ(t, conn, "q1", id)
				continue
			}
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
}

func TestAttackXATransactions(t *testing.T) {
	guards(t, "", xaTransactions)
}

func TestAttackXATransactionsNegativeControl(t *testing.T) { guards(t, "ignoreXA", xaTransactions) }

// An XA transaction prepared before the reader's saved position and
// committed after it (the reader restarted between): its dead letter was
// logged at the prepare, behind the position; the XA COMMIT says it is
// committed now, and it is imported from the tables.
func xaAcrossRestart(t *testing.T) error {
	w := newWorld(t)
	r := w.start(t, "a", nil)
	readThrough(t, r)
	xaPrepare(t, w)("mendxa3", "xa-across-restart")
	w.deadLetter(t, "q2", "marker-1")
	until(t, r, "a marker after the prepare", w.has(t, "marker-1"))
	saveAfter(t, r)
	r.stop()
	if _, err := w.queue.Exec("XA COMMIT 'mendxa3'"); err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, "q2", "marker-2")
	r2 := w.start(t, "a", nil)
	until(t, r2, "a marker after the commit", w.has(t, "marker-2"))
	readThrough(t, r2)
	if !w.has(t, "xa-across-restart")() {
		return errors.New("a dead letter prepared before the saved position and committed after it was never recorded")
	}
	return nil
}

func TestAttackXAAcrossRestart(t *testing.T) { guards(t, "", xaAcrossRestart) }

// A host session that turns its binary log off (SET SESSION sql_log_bin =
// 0, allowed to a user with SUPER or SYSTEM_VARIABLES_ADMIN: a bulk job, a
// maintenance script, a "fast path") commits a dead letter the log never
// holds. No reader of the log can see it; only a reading of the tables
// (mend import, the start-over's import) finds it.
func unloggedSession(t *testing.T) error {
	w := newWorld(t)
	r := w.start(t, "a", nil)
	readThrough(t, r)
	w.inSession(t, "SET SESSION sql_log_bin = 0", "q1", "never-logged")
	w.deadLetter(t, "q2", "marker")
	until(t, r, "the marker", w.has(t, "marker"))
	readThrough(t, r)
	if !w.has(t, "never-logged")() {
		return fmt.Errorf("a dead letter committed with sql_log_bin=0 was never recorded, and nothing says so (last error %q)", r.r.Status().LastErr)
	}
	return nil
}

func TestAttackUnloggedSession(t *testing.T) {
	t.Skip("finding: a dead letter committed with sql_log_bin=0 is not in the log: binlog mode cannot see it, and says nothing")
	guards(t, "", unloggedSession)
}

// A large host transaction compressed by the server
// (binlog_transaction_compression, MySQL 8.0.20+): thousands of dead
// letters with payloads of some size in one payload event.
func largeCompressed(t *testing.T) error {
	w := newWorld(t)
	ctx := context.Background()
	conn, err := w.queue.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION binlog_transaction_compression = ON"); err != nil {
		t.Skipf("no binlog_transaction_compression here (MariaDB): %v", err)
	}
	r := w.start(t, "a", nil)
	readThrough(t, r)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	pad := strings.Repeat("x", 2000)
	var ids []string
	for i := range n {
		id := fmt.Sprintf("big-%04d", i)
		if _, err := tx.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
			"VALUES ('speculate_dlq', ?, ?, NULL, ?, 1, 1, 1760000000000, 1, 'boom', 'speculate', NULL)", id, fmt.Sprintf(`{"id":%q,"queue":"q%d","pad":%q}`, id, i%50, pad), fmt.Sprintf("q%d", i%50)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, "q1", "after")
	err = outcome(t, r, "every row of the large compressed transaction", w.has(t, append(ids, "after")...), func(st binlog.Status) string {
		for reason, k := range st.Failures {
			if k >= 3 {
				return fmt.Sprintf("failed %d times for %s", k, reason)
			}
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("%w (%d of %d missing)", err, len(w.missing(t, ids)), n)
	}
	return nil
}

func TestAttackLargeCompressedTransaction(t *testing.T) { guards(t, "", largeCompressed) }

// A server that rotates its binary log after every few transactions
// (max_binlog_size at its minimum, 4096 bytes): batches span many files,
// and the reader is stopped and started again in the middle.
func tinyFiles(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	wm := newWorld(t) // mend's database elsewhere: the queue server's log holds the host's writes only
	q := newWorldOn(t, mysqltest.StartPrivateWith(t, "--max-binlog-size=4096"))
	start := func() *running {
		return wm.start(t, "a", func(c *binlog.Config) { c.Server, c.BatchRows, c.Concurrency = q.qcfg, 3, 1 })
	}
	r := start()
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("tiny-%02d", i)
		q.deadLetter(t, fmt.Sprintf("q%d", i%3), id)
		ids = append(ids, id)
		if i == 14 {
			r.stop()
			r = start()
		}
	}
	err := outcome(t, r, "every dead letter across the rotations", wm.has(t, ids...), failedAgain(binlog.FailOther, 3))
	if files := logFiles(t, q.root(t)); len(files) < 10 {
		t.Logf("only %d files: the rotations were fewer than meant", len(files))
	}
	return err
}

func TestAttackTinyBinlogFiles(t *testing.T) { guards(t, "", tinyFiles) }

package binlog_test

// Issue 55's loss and stall paths: each a way binlog mode once lost dead
// letters or stopped recording while every signal stayed green, reproduced
// as a new user would meet it (a server configured another way, a secret
// rotated, a setting flipped for a moment). Each scenario returns nil when
// the dead letters it guards are recorded, and an error once the reader
// shows it will not get there (it returned, or failed the same way again
// and again). Each planted variant (binlog.Plant) of the broken reader runs
// as the scenario's negative control, which must return an error.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// guards runs scenario; without a plant it must record what it guards,
// with one (the broken reader it names) it must not.
func guards(t *testing.T, plant string, scenario func(*testing.T) error) {
	t.Helper()
	if plant == "" {
		if err := scenario(t); err != nil {
			t.Fatal(err)
		}
		return
	}
	// Undone after the scenario's own cleanups (its readers stopped).
	t.Cleanup(binlog.Plant(plant))
	if err := scenario(t); err == nil {
		t.Fatalf("the planted reader %q passed the scenario: the scenario does not catch it", plant)
	} else {
		t.Logf("caught the planted reader %q: %v", plant, err)
	}
}

// outcome waits until ok holds (nil), or until the reader shows it will
// not get there: Run returned, or stalled says why (an error). Bounded only
// to catch a hang.
func outcome(t *testing.T, r *running, what string, ok func() bool, stalled func(binlog.Status) string) error {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		if ok() {
			return nil
		}
		st := r.r.Status()
		if why := stalled(st); why != "" {
			return fmt.Errorf("%s: never, the reader %s (role %s, last error %q)", what, why, st.Role, st.LastErr)
		}
		select {
		case err := <-r.done:
			r.done = nil
			return fmt.Errorf("%s: never, the reader's Run returned (%v) while the process runs", what, err)
		case <-r.ev.changed:
		case <-time.After(100 * time.Millisecond): // ok may read the database
		case <-deadline:
			t.Fatalf("waiting for %s: neither happened nor stalled (reader %s, last error %q, failures %v)", what, st.Role, st.LastErr, st.Failures)
		}
	}
}

// failedAgain is a stalled test: the reader failed for reason at least n
// times.
func failedAgain(reason string, n int64) func(binlog.Status) string {
	return func(st binlog.Status) string {
		if st.Failures[reason] >= n {
			return fmt.Sprintf("failed %d times for %s", st.Failures[reason], reason)
		}
		return ""
	}
}

// root is the administrative connection of the world's server.
func (w *world) root(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", w.srv.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// killDumps ends every replication connection the server serves (the
// reader's stream), as a network blip or a server-side timeout would, so
// the reader connects again.
func killDumps(t *testing.T, root *sql.DB) int {
	t.Helper()
	rows, err := root.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = root.Exec(fmt.Sprintf("KILL %d", id)) // gone already is fine
	}
	return len(ids)
}

// Path 9: the queue user's password is rotated through the DSN file (how
// the shipped Deployment runs) and the replication connection breaks: the
// reader connects again with the password the file holds now, and a dead
// letter committed after the rotation is recorded, with no restart.
func rotated(t *testing.T) error {
	w := newWorld(t)
	root := w.root(t)
	user := fmt.Sprintf("mend_rot_%d", time.Now().UnixNano()%1_000_000_000)
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'first-secret'", user),
		fmt.Sprintf("GRANT SELECT ON `%s`.* TO '%s'@'%%'", w.qcfg.DBName, user),
		fmt.Sprintf("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '%s'@'%%'", user),
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	file := filepath.Join(t.TempDir(), "queue-dsn")
	write := func(pass string) {
		cfg := w.qcfg.Clone()
		cfg.User, cfg.Passwd = user, pass
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(cfg.FormatDSN()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil { // swapped whole, as a Secret's volume is
			t.Fatal(err)
		}
	}
	write("first-secret")
	dsn, err := mysqlx.ReadDSNFile(file, "queue-dsn")
	if err != nil {
		t.Fatal(err)
	}
	server, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	r := w.start(t, "a", func(c *binlog.Config) { c.Server = server })
	w.deadLetter(t, "q1", "before-rotation")
	until(t, r, "the row before the rotation", w.has(t, "before-rotation"))
	if _, err := root.Exec(fmt.Sprintf("ALTER USER '%s'@'%%' IDENTIFIED BY 'second-secret'", user)); err != nil {
		t.Fatal(err)
	}
	write("second-secret")
	if killDumps(t, root) == 0 {
		t.Fatal("no replication connection to break: the reader is not streaming")
	}
	w.deadLetter(t, "q1", "after-rotation")
	return outcome(t, r, "the row after the rotation", w.has(t, "after-rotation"), failedAgain(binlog.FailAuth, 3))
}

func TestPathRotatedCredentials(t *testing.T) { guards(t, "", rotated) }

func TestPathRotatedCredentialsNegativeControl(t *testing.T) { guards(t, "staleCredentials", rotated) }

// forward serves a Unix socket in a temporary directory that forwards
// every connection to addr (the test server's TCP port), for a queue DSN of
// the form a local server is usually reached by, on any backend.
func forward(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "mysqld.sock"))
	if err != nil {
		t.Fatal(err)
	}
	relay(t, l, func() string { return addr })
	return l.Addr().String()
}

// relay forwards each connection l accepts to the TCP address target
// names when it is accepted, until the test ends (then every connection
// is closed and its goroutines are waited for).
func relay(t *testing.T, l net.Listener, target func() string) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target())
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// Path 4: a queue DSN over a Unix socket (the usual form for a local
// server) streams as a TCP one does.
func TestPathUnixSocketDSN(t *testing.T) {
	w := newWorld(t)
	server := w.qcfg.Clone()
	server.Net, server.Addr = "unix", forward(t, w.qcfg.Addr)
	w.deadLetter(t, "q1", "imported")
	r := w.start(t, "a", func(c *binlog.Config) { c.Server = server })
	until(t, r, "the row the import found", w.has(t, "imported"))
	w.deadLetter(t, "q1", "streamed")
	if err := outcome(t, r, "a row from the stream over the socket", w.has(t, "streamed"), failedAgain(binlog.FailConfig, 1)); err != nil {
		t.Fatal(err)
	}
	until(t, r, "a saved position", func() bool { _, _, n := r.ev.snapshot(); return n > 0 })
}

// flaky fails every recording that includes message ID poison for a
// reason that may pass, the first fails times (-1: always), and counts the
// calls that held it.
type flaky struct {
	binlog.Recorder
	poison string
	fails  int64
	calls  atomic.Int64
}

func (f *flaky) RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	res, err := f.Recorder.RecordMany(ctx, ds)
	if err != nil {
		return res, err
	}
	for i, d := range ds {
		if d.Source.MessageID != f.poison {
			continue
		}
		if n := f.calls.Add(1); f.fails < 0 || n <= f.fails {
			res[i] = dlq.ManyResult{Err: fmt.Errorf("record %s: %w", f.poison, mend.ErrBusy)}
		}
	}
	return res, nil
}

// Path 2: a dead letter that fails every time for a reason that may pass
// ends each term; its count must outlive the term, so it is parked after
// ParkAfter failures and the reader moves past it to a later one.
func parkedAcrossTerms(t *testing.T) error {
	w := newWorld(t)
	f := &flaky{Recorder: w.intake, poison: "poison", fails: -1}
	// One row a recording, so the row after it is never recorded in the
	// same call (a backlog past a batch is in the same place).
	r := w.start(t, "a", func(c *binlog.Config) { c.Intake, c.ParkAfter, c.BatchRows, c.Concurrency = f, 3, 1, 1 })
	readThrough(t, r) // streaming: the import is over
	w.deadLetter(t, "q1", "poison")
	w.deadLetter(t, "q1", "after-poison")
	return outcome(t, r, "the row after the poisoned one", w.has(t, "after-poison"), failedAgain(binlog.FailStore, 8))
}

func TestPathParkAfterAcrossTerms(t *testing.T) { guards(t, "", parkedAcrossTerms) }

func TestPathParkAfterAcrossTermsNegativeControl(t *testing.T) {
	guards(t, "parkCountPerTerm", parkedAcrossTerms)
}

// The row is parked at exactly its ParkAfter-th failure in a row, and a
// failure that passes never parks a row when ParkAfter is left at its
// default.
func parkedExactly(t *testing.T) error {
	w := newWorld(t)
	f := &flaky{Recorder: w.intake, poison: "poison", fails: -1}
	r := w.start(t, "a", func(c *binlog.Config) { c.Intake, c.ParkAfter = f, 3 })
	w.deadLetter(t, "q1", "poison")
	until(t, r, "the poisoned row parked", func() bool { return r.r.Status().Parked > 0 })
	if n := f.calls.Load(); n != 3 {
		return fmt.Errorf("the row was parked after %d failed recordings, ParkAfter is 3", n)
	}
	return nil
}

func TestParkAfterExactly(t *testing.T) { guards(t, "", parkedExactly) }

func TestParkAfterExactlyNegativeControl(t *testing.T) { guards(t, "parkOneLate", parkedExactly) }

func passingFailure(t *testing.T) error {
	w := newWorld(t)
	f := &flaky{Recorder: w.intake, poison: "once", fails: 1}
	r := w.start(t, "a", func(c *binlog.Config) { c.Intake = f }) // ParkAfter left at its default
	w.deadLetter(t, "q1", "once")
	until(t, r, "the row recorded or parked", func() bool { return w.has(t, "once")() || r.r.Status().Parked > 0 })
	if st := r.r.Status(); st.Parked > 0 {
		return fmt.Errorf("a row whose recording failed once was parked (ParkAfter left zero: %d parked)", st.Parked)
	}
	return nil
}

func TestParkAfterDefault(t *testing.T) { guards(t, "", passingFailure) }

func TestParkAfterDefaultNegativeControl(t *testing.T) { guards(t, "noParkDefault", passingFailure) }

// Path 7: a setting the reader needs (binlog_row_image) is off at one of
// its reconnects, and restored: the reader says so while it is off (a
// failure, counted by reason), and records again once it is restored; it
// never stops for good.
func settingFlipped(t *testing.T) error {
	w := newWorld(t)
	root := w.root(t)
	r := w.start(t, "a", nil)
	w.deadLetter(t, "q1", "before-flip")
	until(t, r, "the row before the flip", w.has(t, "before-flip"))
	if _, err := root.Exec("SET GLOBAL binlog_row_image = 'MINIMAL'"); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if _, err := root.Exec("SET GLOBAL binlog_row_image = 'FULL'"); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(restore)
	beats := r.r.Status().Heartbeats
	killDumps(t, root)
	if err := outcome(t, r, "the flip reported", func() bool { return r.r.Status().Failures[binlog.FailSetting] > 0 },
		func(st binlog.Status) string {
			if st.Heartbeats > beats+30 {
				return "read on with binlog_row_image=MINIMAL, reporting nothing"
			}
			return ""
		}); err != nil {
		return err
	}
	if st := r.r.Status(); st.Role != binlog.RoleRetrying || !strings.Contains(st.LastErr, "binlog_row_image") {
		return fmt.Errorf("while the setting is off: role %s, last error %q; want retrying, naming binlog_row_image", st.Role, st.LastErr)
	}
	restore()
	w.deadLetter(t, "q1", "after-restore")
	return outcome(t, r, "the row after the setting was restored", w.has(t, "after-restore"), func(binlog.Status) string { return "" })
}

func TestPathSettingFlipped(t *testing.T) { guards(t, "", settingFlipped) }

func TestPathSettingFlippedNegativeControl(t *testing.T) {
	guards(t, "returnOnProblem", settingFlipped)
}

// Path 3: a binary log filtered to leave the queue schema out
// (binlog-do-db naming another schema). The reader must not read on,
// caught up, recording nothing: it reports the filter (a failure that
// says what to fix) on every term.
func filtered(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	srv := mysqltest.StartPrivateWith(t, "--binlog-do-db=some_other_schema")
	w := newWorldOn(t, srv)
	r := w.start(t, "a", nil)
	err := outcome(t, r, "the filter reported", func() bool {
		st := r.r.Status()
		return st.Failures[binlog.FailSetting] > 0 && strings.Contains(st.LastErr, "binlog-do-db")
	}, func(st binlog.Status) string {
		if st.Heartbeats > 5 {
			return fmt.Sprintf("read on, caught up (%d heartbeats), with no failure", st.Heartbeats)
		}
		return ""
	})
	if err != nil {
		return err
	}
	srvState, perr := binlog.Probe(context.Background(), w.root(t))
	if perr != nil {
		t.Fatal(perr)
	}
	if p := srvState.Problems(w.qcfg.DBName); len(p) == 0 || !strings.Contains(strings.Join(p, " "), "binlog-do-db") {
		return fmt.Errorf("Server.Problems (what doctor and auto read) says %q for a filtered log", p)
	}
	return nil
}

func TestPathFilteredLog(t *testing.T) { guards(t, "", filtered) }

func TestPathFilteredLogNegativeControl(t *testing.T) { guards(t, "ignoreFilters", filtered) }

// Path 6: lower_case_table_names=1 and a DSN that spells the schema in
// another case (the server takes it for the same one, and so must the
// reader: the log carries the name as the server stores it).
func otherCase(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	probe := mysqltest.SharedServer(t)
	if probe.Flavor() == "mysql" {
		t.Skip("MySQL fixes lower_case_table_names when it initialises its data directory (the test images are initialised with 0); MariaDB takes it at start")
	}
	srv := mysqltest.StartPrivateWith(t, "--lower-case-table-names=1")
	w := newWorldOn(t, srv)
	server := w.qcfg.Clone()
	server.DBName = strings.ToUpper(server.DBName)
	r := w.start(t, "a", func(c *binlog.Config) { c.Server = server })
	readThrough(t, r)
	w.deadLetter(t, "q1", "spelled-otherwise")
	return outcome(t, r, "a row of the schema the DSN spells in capitals", w.has(t, "spelled-otherwise"), func(st binlog.Status) string {
		if !w.has(t, "spelled-otherwise")() && st.Heartbeats > 20 {
			return fmt.Sprintf("read on, caught up (%d heartbeats), without it", st.Heartbeats)
		}
		return ""
	})
}

func TestPathLowerCaseTableNames(t *testing.T) { guards(t, "", otherCase) }

func TestPathLowerCaseTableNamesNegativeControl(t *testing.T) {
	guards(t, "exactSchemaName", otherCase)
}

// Another schema's queue_messages on the same server (a second queue
// database, a test copy) is not the reader's: its dead letters are never
// recorded.
func otherSchema(t *testing.T) error {
	w := newWorld(t)
	other := newWorldOn(t, w.srv)
	r := w.start(t, "a", nil)
	other.deadLetter(t, "q1", "not-ours")
	w.deadLetter(t, "q1", "ours")
	until(t, r, "our row", w.has(t, "ours"))
	readThrough(t, r)
	if w.has(t, "not-ours")() {
		return errors.New("a dead letter of another schema's queue_messages was recorded")
	}
	return nil
}

func TestOtherSchemaNotRecorded(t *testing.T) { guards(t, "", otherSchema) }

func TestOtherSchemaNotRecordedNegativeControl(t *testing.T) { guards(t, "anySchema", otherSchema) }

// saveAfter waits until the reader has read everything committed so far
// and saved a position after it.
func saveAfter(t *testing.T, r *running) storage.BinlogPosition {
	t.Helper()
	readThrough(t, r)
	_, _, saves := r.ev.snapshot()
	until(t, r, "a position saved after the rows read", func() bool { _, _, n := r.ev.snapshot(); return n > saves })
	r.ev.mu.Lock()
	defer r.ev.mu.Unlock()
	return r.ev.saved[len(r.ev.saved)-1]
}

// resumeElsewhere stops r and makes its saved position look saved on
// another server, so the next reader resumes by its GTID set, as after a
// failover of the host's primary.
func (w *world) resumeElsewhere(t *testing.T, r *running) {
	t.Helper()
	r.stop()
	p := w.position(t, w.qcfg.DBName)
	if _, err := w.mend.Exec("UPDATE mend_binlog_positions SET server_uuid = 'another-server' WHERE name = ?", p.Name); err != nil {
		t.Fatal(err)
	}
}

// inSession runs a dead letter's insert on one session of the queue
// database after setup (session settings of the transaction it writes).
func (w *world) inSession(t *testing.T, setup, q, id string) {
	t.Helper()
	ctx := context.Background()
	conn, err := w.root(t).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range []string{"USE `" + w.qcfg.DBName + "`", setup} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	rawDLQ(t, conn, q, id)
}

// Path 1 (MariaDB): the server's binary log holds transactions of two
// server_ids in domain 0 (a primary that once replicated another, with
// log_slave_updates). The saved connect state must be one GTID per domain,
// or the server refuses it (ERROR 1943) on every resume by GTID.
func twoServerIDs(t *testing.T) error {
	w := newWorld(t)
	if w.srv.Flavor() != "mariadb" {
		t.Skip("MariaDB's GTIDs (domain-server-sequence); MySQL's have no domains")
	}
	r := w.start(t, "a", nil)
	w.deadLetter(t, "q1", "one")
	w.inSession(t, "SET SESSION server_id = 7", "q1", "from-another-server-id")
	w.deadLetter(t, "q1", "three")
	until(t, r, "the rows", w.has(t, "one", "from-another-server-id", "three"))
	saveAfter(t, r)
	w.resumeElsewhere(t, r)
	w.deadLetter(t, "q1", "after-failover")
	r2 := w.start(t, "a", nil)
	err := outcome(t, r2, "the row after the failover", w.has(t, "after-failover"), failedAgain(binlog.FailGTID, 3))
	if err == nil {
		if resets, _, _ := r2.ev.snapshot(); len(resets) > 0 {
			return fmt.Errorf("the reader started over (%q) instead of resuming by GTID", resets)
		}
	}
	return err
}

func TestPathMariaDBTwoServerIDsInDomain(t *testing.T) { guards(t, "", twoServerIDs) }

func TestPathMariaDBTwoServerIDsInDomainNegativeControl(t *testing.T) {
	guards(t, "gtidPerServer", twoServerIDs)
}

// Path 8 (MySQL 8.3+): a tagged GTID (SET gtid_next = 'AUTOMATIC:tag')
// joins the saved set, so after its file is purged a resume by GTID on
// another server finds nothing missing: no false "purged", no start-over.
func taggedGTID(t *testing.T) error {
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server")
	if mysqltest.SharedServer(t).Flavor() != "mysql" {
		t.Skip("tagged GTIDs are MySQL's (8.3+)")
	}
	srv := mysqltest.StartPrivate(t)
	w := newWorldOn(t, srv)
	st, err := binlog.Probe(context.Background(), w.root(t))
	if err != nil {
		t.Fatal(err)
	}
	if !st.GTIDs {
		t.Skipf("gtid_mode=%s: no GTIDs to tag", st.GTIDMode)
	}
	r := w.start(t, "a", nil)
	w.deadLetter(t, "q1", "one")
	w.inSession(t, "SET gtid_next = 'AUTOMATIC:mendtag'", "q1", "tagged")
	w.deadLetter(t, "q1", "three")
	until(t, r, "the rows", w.has(t, "one", "tagged", "three"))
	// The file holding them is read to its end and the position saved in
	// the next; only then is it purged (the reader's own writes after its
	// last save, such as its lease's release, stay in the current file).
	root := w.root(t)
	if _, err := root.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	current := logFiles(t, root)
	until(t, r, "a position saved in the new file", func() bool {
		return w.position(t, w.qcfg.DBName).File == current[len(current)-1]
	})
	if p := w.position(t, w.qcfg.DBName); !strings.Contains(p.GTIDSet, ":mendtag:") {
		t.Logf("the saved set %q holds no tagged GTID", p.GTIDSet)
	}
	w.resumeElsewhere(t, r)
	purgeAllButCurrent(t, root)
	w.deadLetter(t, "q1", "after-purge")
	r2 := w.start(t, "a", nil)
	if err := outcome(t, r2, "the row after the purge", w.has(t, "after-purge"), failedAgain(binlog.FailGTID, 3)); err != nil {
		return err
	}
	if resets, purged, _ := r2.ev.snapshot(); len(resets) > 0 {
		return fmt.Errorf("the reader started over (%q, %d purged) though its set held every transaction the server purged", resets, purged)
	}
	return nil
}

func TestPathTaggedGTID(t *testing.T) { guards(t, "", taggedGTID) }

func TestPathTaggedGTIDNegativeControl(t *testing.T) { guards(t, "dropTags", taggedGTID) }

// The saved GTID set grows with every transaction read: it holds the
// server's executed set as it was after the last dead letter committed.
func setGrows(t *testing.T) error {
	w := newWorld(t)
	r := w.start(t, "a", nil)
	readThrough(t, r)
	w.deadLetter(t, "q1", "one")
	until(t, r, "the row", w.has(t, "one"))
	st, err := binlog.Probe(context.Background(), w.root(t))
	if err != nil {
		t.Fatal(err)
	}
	if !st.GTIDs {
		t.Skipf("gtid_mode=%s: no GTID set to save", st.GTIDMode)
	}
	p := saveAfter(t, r)
	if !binlog.GTIDContains(st.Flavor, p.GTIDSet, st.Executed) {
		return fmt.Errorf("the saved set %q lacks GTIDs the server executed by the row's commit (%q)", p.GTIDSet, st.Executed)
	}
	return nil
}

func TestSavedGTIDSetGrows(t *testing.T) { guards(t, "", setGrows) }

func TestSavedGTIDSetGrowsNegativeControl(t *testing.T) { guards(t, "gtidFrozen", setGrows) }

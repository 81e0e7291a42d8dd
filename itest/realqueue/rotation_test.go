package realqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/sqreal"
)

// TestPasswordRotationBinlog is TestLostWakeupBinlog with mend run in the shipped Deployment's form
// (deploy/kubernetes/deployment.yaml): every DSN from a file (--dsn-file, --host-dsn-file,
// --queue-dsn-file) in a directory laid out as the kubelet lays out a Secret volume, the subscribe mode
// left at its default (auto, which picks binlog on the test server), and the queue database as a user
// of its own with the documented grants (docs/operations.md, "Least-privilege grants"). Once mend reads
// the binary log, that user's password is rotated as a rotation usually lands: on the server first
// (ALTER USER), the file later (a Secret update reaches the pod's volume up to a minute or more after
// it is made), swapped in atomically as the kubelet does. Every session of the user is cut right after
// the ALTER, the reader's replication connection among them: an established session outlives a
// password change, so without the cut nothing would have to log in again. The culprit's dead letters
// are committed while the file is stale: nothing may be recorded then (no session of the user can log
// in); once the file holds the new password, the reader must dial again with it (a new replication
// session of the user, which only the new password can open), resume from its saved position (no
// start over) and record every dead letter, and the dependent land after one wake-up, as
// TestLostWakeupBinlog checks. A second rotation then runs in the other order (the file first, then
// the server, then the cut) and a second culprit's dead letters must all be recorded too. mend run is
// never restarted. Its control is TestLostWakeupSubscription/control.
func TestPasswordRotationBinlog(t *testing.T) {
	requireOptIn(t)
	lostWakeup(t, modeRotation)
}

// TestRunOnceBesideReaderBinlog runs a person's one-off `mend run --once --dsn --host-dsn --queue-dsn`
// (the subscribe mode left at auto) while a Deployment-form mend run (DSN files, auto) reads the queue
// database's binary log and has saved its position: the one-off must exit 0, never join the offsets
// group (no queue_offsets row of group mend is ever inserted: a trigger of the test's own watches) and
// leave none behind (a row at watermark 0 would hold the host's GC of that partition back for good,
// since the reader never advances it), and the running reader must still be the one reading. Issue 55,
// "Silence": run --once on a source with a saved position leaves intake to the replica that holds the
// reader's lease.
func TestRunOnceBesideReaderBinlog(t *testing.T) {
	requireOptIn(t)
	s := sqreal.Start(t, sqreal.Options{Queues: []string{queue}})
	warmUp(t, s)
	watchGroupJoins(t, s)
	m, _ := newRotation(t, s)
	m.doctor(t)
	m.run.Start(t)
	m.waitBinlogSaved(t, s)
	before := m.shown(t)

	out, code := sqreal.Run(t, 2*time.Minute, nil, m.bin, "run", "--once", "--dsn", m.db.DSN, "--host-dsn", s.App.DSN,
		"--queue-dsn", s.Queue.DSN)
	t.Logf("mend run --once beside the reader: exit %d\n%s", code, out)
	if code != 0 {
		t.Errorf("mend run --once beside a binlog reader: exit %d, want 0", code)
	}
	if joins := groupJoins(t, s); len(joins) != 0 {
		t.Errorf("mend run --once joined the offsets group beside a binlog reader (group mend rows inserted: %s); "+
			"want intake left to the reader", strings.Join(joins, ", "))
	}
	if n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'"); n != 0 {
		t.Errorf("mend run --once left %d queue_offsets rows of group mend (holding the host's GC back); want none", n)
	}
	if !m.run.Running() || !m.reading(t) {
		t.Errorf("the Deployment's mend run is not reading the binary log any more after the one-off (running %v)", m.run.Running())
	}
	t.Logf("the reader before the one-off: %s; after: %s", before, m.shown(t))
}

// newRotation prepares mend run in the Deployment's form beside s (not started): mend's binary and
// database, a queue database user with the documented grants, and the three DSN files.
func newRotation(t *testing.T, s *sqreal.Stack) (*mendProc, *rotation) {
	t.Helper()
	m := prepareMend(t)
	u := newQueueUser(t, s)
	sec := newSecretDir(t, map[string]string{"dsn": m.db.DSN, "host-dsn": s.App.DSN, "queue-dsn": u.dsn()})
	m.attachWith(t, s, []string{"--dsn-file", sec.path("dsn"), "--host-dsn-file", sec.path("host-dsn"),
		"--queue-dsn-file", sec.path("queue-dsn")})
	return m, &rotation{s: s, m: m, user: u, secret: sec}
}

// rotation is TestPasswordRotationBinlog's rotations of the queue database user's password.
type rotation struct {
	s      *sqreal.Stack
	m      *mendProc
	user   *queueUser
	secret *secretDir
	dump   int64   // the reader's replication session now (a processlist id)
	resets float64 // mend run's start-overs before the first rotation (its first start's)
}

// serverFirst waits until mend run reads the binary log (by its replication session), then changes the
// queue user's password on the server only and cuts every session of the user.
func (r *rotation) serverFirst(t *testing.T) {
	t.Helper()
	r.m.waitBinlogSaved(t, r.s)
	r.resets = r.m.shown(t).resets
	r.dump = r.user.waitDump(t, 0)
	r.user.alter(t, "rotated-pw-2")
	r.user.cut(t)
	t.Logf("rotation 1: the password changed on the server, the file still holds the old one; every session of %s cut, "+
		"the reader's replication session %d among them", r.user.name, r.dump)
}

// fileLater checks that the reader could not log in while the file was stale (no replication session
// of the user, nothing recorded), then swaps the new DSN into the file and waits until the reader has a
// replication session again: a new one, opened with the new password.
func (r *rotation) fileLater(t *testing.T) {
	t.Helper()
	if id, ok := r.user.dumpSession(t); ok {
		t.Fatalf("replication session %d of %s while the file still holds the old password: the cut did not take", id, r.user.name)
	}
	if all, _ := r.m.records(t, queue); all != 0 {
		t.Fatalf("%d records while no session of the queue user could log in: the reader was not cut off", all)
	}
	r.secret.set(t, "queue-dsn", r.user.dsn())
	old := r.dump
	r.dump = r.user.waitDump(t, old)
	t.Logf("rotation 1: the file updated; the reader logged in again with the new password (replication session %d, was %d)", r.dump, old)
}

// fileFirst is the second rotation, in the other order: the file first (its new password refused until
// the server has it), then the server, then the cut. A culprit of its own then dead-letters, and each
// of its dead letters must be recorded.
func (r *rotation) fileFirst(t *testing.T) {
	t.Helper()
	const pw = "rotated-pw-3"
	r.secret.set(t, "queue-dsn", r.user.dsnWith(pw))
	r.user.alter(t, pw)
	r.user.cut(t)
	old := r.dump
	r.dump = r.user.waitDump(t, old)
	t.Logf("rotation 2: the file first, then the server; the reader logged in again (replication session %d, was %d)", r.dump, old)
	culprit := r.s.Land(t, queue, "fake://realq/culprit-2?sq-fake=trigger-error")
	r.s.WaitRequests(t, landTimeout, queue, []string{culprit}, "error")
	r.waitRecorded(t, batchOf(t, r.s, culprit))
}

// waitRecorded waits until each dead letter observed on build_dlq/batch (observeDeadLetters) is a
// record of mend's (at least one).
func (r *rotation) waitRecorded(t *testing.T, batch string) {
	t.Helper()
	var dead []string
	r.s.Eventually(t, time.Minute, "each dead letter of "+batch+" to be recorded", func() (bool, string) {
		dead = deadLetters(t, r.s, "build_dlq", batch)
		var missing []string
		for _, id := range dead {
			if !r.m.recorded(t, "build_dlq", batch, id) {
				missing = append(missing, id)
			}
		}
		return len(dead) > 0 && len(missing) == 0, fmt.Sprintf("%d dead letters on build_dlq/%s, not recorded: %v", len(dead), batch, missing)
	})
	t.Logf("each of the %d dead letters on build_dlq/%s is recorded", len(dead), batch)
}

// checkResumed checks that the reader resumed from its saved position after each log-in: no start
// over since its first start's.
func (r *rotation) checkResumed(t *testing.T) {
	t.Helper()
	if b := r.m.shown(t); b.resets != r.resets {
		t.Errorf("mend run's reader started over after the rotation (%v start-overs, %v before it); want a resume from the saved position: %s",
			b.resets, r.resets, b)
	}
}

// checkNoRestart checks that mend run is the process started once at the beginning.
func (r *rotation) checkNoRestart(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(r.m.run.Log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), passStart+" at "); n != 1 || !r.m.run.Running() {
		t.Errorf("mend run started %d times (running now: %v); want one start, never restarted", n, r.m.run.Running())
	}
}

// recorded reports whether mend holds a record of the dead letter topic/partition/id.
func (m *mendProc) recorded(t *testing.T, topic, partition, id string) bool {
	t.Helper()
	var n int64
	if err := m.db.SQL(t).QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM mend_records WHERE queue = ? AND topic = ? AND partition_key = ? AND message_id = ?",
		queue, topic, partition, id).Scan(&n); err != nil {
		t.Fatalf("read mend_records: %v", err)
	}
	return n > 0
}

// queueGrants are the runtime user's grants on the queue database in docs/operations.md
// ("Least-privilege grants"), binlog mode's included.
var queueGrants = []string{
	"SELECT, INSERT, UPDATE ON %s.queue_messages",
	"SELECT ON %s.queue_subscriber_heartbeats",
	"SELECT, INSERT, UPDATE ON %s.queue_offsets",
	"SELECT ON %s.queue_delivery_state",
	"PROCESS ON *.*",
	"REPLICATION SLAVE, REPLICATION CLIENT ON *.*",
}

// queueUser is a user of the queue database's server with queueGrants, as mend's runtime user.
type queueUser struct {
	name string
	cfg  *mysql.Config // its DSN, with the password it has now on the server
	root *sql.DB       // the server's administrator
}

func newQueueUser(t *testing.T, s *sqreal.Stack) *queueUser {
	t.Helper()
	cfg, err := mysql.ParseDSN(s.Queue.User(t, queueGrants...))
	if err != nil {
		t.Fatal(err)
	}
	root, err := sql.Open("mysql", s.Queue.Server.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	return &queueUser{name: cfg.User, cfg: cfg, root: root}
}

// dsn is the user's DSN with its password now; dsnWith, with pw.
func (u *queueUser) dsn() string { return u.dsnWith(u.cfg.Passwd) }

func (u *queueUser) dsnWith(pw string) string {
	c := u.cfg.Clone()
	c.Passwd = pw
	return c.FormatDSN()
}

// alter changes the user's password on the server.
func (u *queueUser) alter(t *testing.T, pw string) {
	t.Helper()
	if _, err := u.root.ExecContext(context.Background(), "ALTER USER '"+u.name+"'@'%' IDENTIFIED BY '"+pw+"'"); err != nil {
		t.Fatalf("rotate %s's password: %v", u.name, err)
	}
	u.cfg.Passwd = pw
}

// session is one of the user's sessions in the server's processlist.
type session struct {
	id      int64
	command string
}

func (u *queueUser) sessions(t *testing.T) []session {
	t.Helper()
	rows, err := u.root.QueryContext(context.Background(), "SELECT id, command FROM information_schema.processlist WHERE user = ? ORDER BY id", u.name)
	if err != nil {
		t.Fatalf("read the processlist: %v", err)
	}
	defer rows.Close()
	var out []session
	for rows.Next() {
		var s session
		if err := rows.Scan(&s.id, &s.command); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dumpSession returns the user's replication session (command Binlog Dump or Binlog Dump GTID): the
// binlog reader's.
func (u *queueUser) dumpSession(t *testing.T) (int64, bool) {
	t.Helper()
	for _, s := range u.sessions(t) {
		if strings.HasPrefix(s.command, "Binlog Dump") {
			return s.id, true
		}
	}
	return 0, false
}

// waitDump waits until the user has a replication session other than not, and returns its id. The
// deadline covers the reader's retry pause (it doubles up to a minute) several times over.
func (u *queueUser) waitDump(t *testing.T, not int64) int64 {
	t.Helper()
	var id int64
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var ok bool
		if id, ok = u.dumpSession(t); ok && id != not {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new replication session of %s after 3 minutes (sessions: %v)", u.name, u.sessions(t))
		}
		time.Sleep(200 * time.Millisecond) // polling the processlist, with the deadline above
	}
}

// cut kills every session of the user and waits until none is left of those.
func (u *queueUser) cut(t *testing.T) {
	t.Helper()
	ss := u.sessions(t)
	for _, s := range ss {
		if _, err := u.root.ExecContext(context.Background(), fmt.Sprintf("KILL %d", s.id)); err != nil {
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1094 { // 1094: unknown thread id (it ended meanwhile)
				t.Fatalf("KILL %d: %v", s.id, err)
			}
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, s := range ss {
		for u.alive(t, s.id) {
			if time.Now().After(deadline) {
				t.Fatalf("session %d of %s still there a minute after KILL", s.id, u.name)
			}
			time.Sleep(100 * time.Millisecond) // polling the processlist, with the deadline above
		}
	}
}

func (u *queueUser) alive(t *testing.T, id int64) bool {
	t.Helper()
	for _, s := range u.sessions(t) {
		if s.id == id {
			return true
		}
	}
	return false
}

// secretDir is a directory laid out as the kubelet lays out a Secret volume (its atomic writer): each
// key a symlink to ..data/<key>, ..data a symlink to a directory of the current version's files. An
// update writes the new version's directory, renames a new symlink over ..data (one atomic step: a
// reader sees all the old files or all the new ones, never a partial write) and removes the old
// directory.
type secretDir struct {
	dir   string
	files map[string]string
}

func newSecretDir(t *testing.T, files map[string]string) *secretDir {
	t.Helper()
	d := &secretDir{dir: t.TempDir()}
	d.write(t, files)
	for key := range files {
		if err := os.Symlink(filepath.Join("..data", key), d.path(key)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// path is the file of key, as the pod sees it.
func (d *secretDir) path(key string) string { return filepath.Join(d.dir, key) }

// set updates the Secret with key's new value (the other keys unchanged).
func (d *secretDir) set(t *testing.T, key, value string) {
	t.Helper()
	files := maps.Clone(d.files)
	files[key] = value
	d.write(t, files)
}

func (d *secretDir) write(t *testing.T, files map[string]string) {
	t.Helper()
	version := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	if err := os.Mkdir(filepath.Join(d.dir, version), 0o700); err != nil {
		t.Fatal(err)
	}
	for key, value := range files {
		if err := os.WriteFile(filepath.Join(d.dir, version, key), []byte(value+"\n"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(d.dir, "..data")
	old, _ := os.Readlink(data) // none the first time
	if err := os.Symlink(version, data+"_tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(data+"_tmp", data); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(d.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
	d.files = files
}

// observeDeadLetters installs a trigger on the host's queue_messages (a test's own observer, like
// observeSpeculate) that copies the key of every row inserted on a *_dlq topic into realq_dlq_log:
// rows the host's GC deletes stay there.
func observeDeadLetters(t *testing.T, s *sqreal.Stack) {
	t.Helper()
	for _, q := range []string{
		`CREATE TABLE realq_dlq_log (
			seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			topic VARCHAR(255) NOT NULL,
			partition_key VARCHAR(255) NOT NULL,
			id VARCHAR(255) NOT NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TRIGGER realq_dlq_observer AFTER INSERT ON queue_messages FOR EACH ROW
		BEGIN
			IF NEW.topic LIKE '%\_dlq' THEN
				INSERT INTO realq_dlq_log (topic, partition_key, id) VALUES (NEW.topic, NEW.partition_key, NEW.id);
			END IF;
		END`,
	} {
		if _, err := s.QueueSQL.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("install the dead-letter observer: %v\n%s", err, q)
		}
	}
}

// deadLetters returns the IDs of the rows observed on topic/partition, in insert order.
func deadLetters(t *testing.T, s *sqreal.Stack, topic, partition string) []string {
	t.Helper()
	rows, err := s.QueueSQL.QueryContext(context.Background(),
		"SELECT id FROM realq_dlq_log WHERE topic = ? AND partition_key = ? ORDER BY seq", topic, partition)
	if err != nil {
		t.Fatalf("read realq_dlq_log: %v", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// watchGroupJoins installs a trigger on the host's queue_offsets that logs every row inserted for
// group mend (a join of the offsets group) into realq_group_joins, which keeps them after a leave.
func watchGroupJoins(t *testing.T, s *sqreal.Stack) {
	t.Helper()
	for _, q := range []string{
		`CREATE TABLE realq_group_joins (
			seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			topic VARCHAR(255) NOT NULL,
			partition_key VARCHAR(255) NOT NULL,
			offset_acked BIGINT UNSIGNED NOT NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TRIGGER realq_group_join_observer AFTER INSERT ON queue_offsets FOR EACH ROW
		BEGIN
			IF NEW.consumer_group = 'mend' THEN
				INSERT INTO realq_group_joins (topic, partition_key, offset_acked) VALUES (NEW.topic, NEW.partition_key, NEW.offset_acked);
			END IF;
		END`,
	} {
		if _, err := s.QueueSQL.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("install the group join observer: %v\n%s", err, q)
		}
	}
}

// groupJoins describes the rows group mend inserted into queue_offsets (topic/partition@watermark).
func groupJoins(t *testing.T, s *sqreal.Stack) []string {
	t.Helper()
	rows, err := s.QueueSQL.QueryContext(context.Background(),
		"SELECT CONCAT(topic, '/', partition_key, '@', offset_acked) FROM realq_group_joins ORDER BY seq")
	if err != nil {
		t.Fatalf("read realq_group_joins: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var j string
		if err := rows.Scan(&j); err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

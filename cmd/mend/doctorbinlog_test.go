package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/storage"
)

// savePosition writes a saved binary-log position for the queue
// database's source into mend's table, as a reader that read once leaves.
func savePosition(t *testing.T, x *wakeWorld, file string, pos int) {
	t.Helper()
	if _, err := x.mendDB.SQL(t).ExecContext(context.Background(), `INSERT INTO mend_binlog_positions (name, flavor, server_uuid, binlog_file, binlog_pos, gtid_set, updated_at)
		VALUES (?, 'mysql', 'uuid-a', ?, ?, '', NOW(6))`, binlog.LeaseName(x.queueDB.Name), file, pos); err != nil {
		t.Fatal(err)
	}
}

// TestDoctorAutoSticky: auto mode with binlog mode impossible (the queue
// user lacks REPLICATION SLAVE) reports offsets, in a sentence that reads,
// while no position is saved; beside a saved position it is a FAIL naming
// the position, what offsets mode would lose and the fix, on the queue
// database's user (the failing check's target), and doctor exits non-zero.
func TestDoctorAutoSticky(t *testing.T) {
	t.Parallel()
	x := binlogWorld(t)
	noSlave := x.queueDB.User(t, "SELECT, INSERT, UPDATE ON %s.*", "REPLICATION CLIENT ON *.*")
	qc, err := mysql.ParseDSN(noSlave)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", noSlave}

	checks, _ := doctorChecksCode(t, args...)
	c := checks["subscribe mode"]
	if c.Status != doctor.OK || !strings.HasPrefix(c.Detail, "offsets (auto): binlog mode cannot run here (") ||
		!strings.Contains(c.Detail, "REPLICATION SLAVE") || !strings.Contains(c.Detail, "no binary-log position is saved") {
		t.Errorf("without a saved position: subscribe mode %+v; want ok, offsets, saying why", c)
	}

	savePosition(t, x, "saved-bin.000007", 1234)
	checks, code := doctorChecksCode(t, args...)
	c = checks["subscribe mode"]
	if c.Status != doctor.Fail || code == exitOK {
		t.Fatalf("beside a saved position: subscribe mode %+v, exit %d; want FAIL, exit non-zero", c, code)
	}
	for _, want := range []string{"binlog (auto)", "saved-bin.000007:1234", "never record the dead letters committed after that position", "GRANT REPLICATION SLAVE"} {
		if !strings.Contains(c.Detail, want) {
			t.Errorf("subscribe mode detail lacks %q: %s", want, c.Detail)
		}
	}
	if !strings.Contains(c.Fix, "--subscribe-mode offsets") {
		t.Errorf("subscribe mode fix %q; want the way out named", c.Fix)
	}
	if !strings.Contains(c.Target, "--queue-dsn") || !strings.Contains(c.Target, " as "+qc.User) {
		t.Errorf("subscribe mode target %q; want the queue database as %s", c.Target, qc.User)
	}
	if _, ok := checks["subscription lag"]; ok {
		t.Error("beside a saved position doctor checked the offset mode's group, as if auto ran offsets")
	}

	// mend run's preflight refuses with the same, naming the queue user.
	r := opsRun(t, nil, append([]string{"run", "--once"}, args...)...)
	if r.code == exitOK || !strings.Contains(r.stderr, "saved-bin.000007:1234") || !strings.Contains(r.stderr, "as "+qc.User) {
		t.Errorf("run --once beside a saved position: exit %d\n%s\nwant refused, naming the position and the queue user", r.code, r.stderr)
	}
}

// TestDoctorBinlogPositionsDenied: a mend user that may not read
// mend_binlog_positions is a FAIL of the position table check with the
// GRANT that fixes it.
func TestDoctorBinlogPositionsDenied(t *testing.T) {
	t.Parallel()
	x := binlogWorld(t)
	noPositions := x.mendDB.User(t, "SELECT ON %s.mend_schema_migrations", "SELECT, INSERT, UPDATE, DELETE ON %s.mend_records",
		"SELECT, INSERT, DELETE ON %s.mend_events", "SELECT, INSERT, UPDATE ON %s.mend_leases", "SELECT, INSERT, UPDATE ON %s.mend_lease_history")
	checks, code := doctorChecksCode(t, "--dsn", noPositions, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe-mode", "binlog")
	c := checks["binlog position table"]
	want := "GRANT SELECT, INSERT, UPDATE ON `" + x.mendDB.Name + "`.`mend_binlog_positions`"
	if c.Status != doctor.Fail || !strings.Contains(c.Fix, want) || code == exitOK {
		t.Errorf("position table unreadable: %+v, exit %d; want FAIL with %q", c, code, want)
	}
}

// TestDoctorWakeTopicHeartbeatsDenied: a queue user that may read
// queue_offsets but not queue_subscriber_heartbeats sees the host's group
// reading the wake topic through its offsets rows, and doctor warns (with
// the GRANT) that once the host is quiet only the heartbeats would say so,
// instead of staying quiet.
func TestDoctorWakeTopicHeartbeatsDenied(t *testing.T) {
	t.Parallel()
	x := binlogWorld(t) // the orchestrator has a queue_offsets row on speculate
	noHeartbeats := x.queueDB.User(t, "SELECT, INSERT, UPDATE ON %s.queue_messages", "SELECT, INSERT, UPDATE ON %s.queue_offsets")
	checks, _ := doctorChecksCode(t, "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", noHeartbeats, "--subscribe=false")
	c := checks["host queue wake topic"]
	if c.Status != doctor.Warn || !strings.Contains(c.Detail, "orchestrator") || !strings.Contains(c.Detail, "queue_subscriber_heartbeats cannot be read") ||
		!strings.Contains(c.Fix, "GRANT SELECT ON `"+x.queueDB.Name+"`.queue_subscriber_heartbeats") {
		t.Errorf("wake topic with heartbeats unreadable: %+v; want a warning naming the reader and the GRANT", c)
	}
}

// TestDoctorGroupRowsInBinlogMode: in binlog mode, rows the offset mode's
// group left in queue_offsets are shown (each partition with its
// watermark and the rows the host's GC keeps for it), and the subscribe
// mode check stops saying "no consumer group" while they exist.
func TestDoctorGroupRowsInBinlogMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := binlogWorld(t)
	args := []string{"--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN}
	checks, _ := doctorChecksCode(t, args...)
	if c, ok := checks["subscription group rows"]; ok {
		t.Errorf("group rows check %+v without a row of group mend; want none", c)
	}
	if c := checks["subscribe mode"]; !strings.Contains(c.Detail, "no consumer group") {
		t.Errorf("subscribe mode %+v; want binlog mode's no consumer group while the group has no row", c)
	}
	if err := x.w.Join(ctx, "mend", "speculate_dlq", "q"); err != nil { // at watermark 0, as a run --once leaves it
		t.Fatal(err)
	}
	checks, _ = doctorChecksCode(t, args...)
	c := checks["subscription group rows"]
	if c.Status != doctor.Warn || !strings.Contains(c.Detail, "speculate_dlq/q at offset_acked 0 (1 row(s) above)") ||
		!strings.Contains(c.Detail, "holding the host's GC") || !strings.Contains(c.Fix, "--remove --yes") {
		t.Errorf("group rows check %+v; want a warning listing speculate_dlq/q at watermark 0 with the GC it holds back", c)
	}
	if c := checks["subscribe mode"]; strings.Contains(c.Detail, "no consumer group") || !strings.Contains(c.Detail, `"mend" still has 1 row(s)`) {
		t.Errorf("subscribe mode %+v; want it to stop saying no consumer group", c)
	}
}

// TestStatusGroupRowsInBinlogMode: mend status --queue-dsn, while a
// binlog reader reads, shows the rows the offset mode's group left in
// queue_offsets (each partition's offset_acked and the rows the host's GC
// keeps for it), in text and --json; nothing while the group has none.
func TestStatusGroupRowsInBinlogMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := binlogWorld(t)
	savePosition(t, x, "saved-bin.000007", 1234)
	st, err := storage.Open(ctx, x.mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.LeaseAcquire(ctx, binlog.LeaseName(x.queueDB.Name), "replica-reading", time.Hour); err != nil {
		t.Fatal(err)
	}
	args := []string{"status", "--dsn", x.mendDB.DSN, "--queue-dsn", x.queueDB.DSN}
	if r := opsMust(t, args...); strings.Contains(r.stdout, "queue_offsets") {
		t.Errorf("status shows group rows while the group has none:\n%s", r.stdout)
	}
	if err := x.w.Join(ctx, "mend", "speculate_dlq", "q"); err != nil {
		t.Fatal(err)
	}
	r := opsMust(t, args...)
	if !strings.Contains(r.stdout, `offsets group "mend" still has 1 row(s) in queue_offsets`) || !strings.Contains(r.stdout, "GC of 1 dead-letter row(s) back") ||
		!regexp.MustCompile(`"speculate_dlq/q"\s+0\s+1`).MatchString(r.stdout) {
		t.Errorf("status in binlog mode with the group's row left:\n%s\nwant the line and the partition at offset_acked 0, 1 row held", r.stdout)
	}
	r = opsMust(t, append(args, "--json")...)
	var js struct {
		Subscription struct {
			Mode      string         `json:"mode"`
			GroupRows []groupRowJSON `json:"group_rows"`
		} `json:"subscription"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js.Subscription.Mode != "binlog" || len(js.Subscription.GroupRows) != 1 ||
		js.Subscription.GroupRows[0] != (groupRowJSON{Topic: "speculate_dlq", Partition: "q", Watermark: 0, Behind: 1}) {
		t.Errorf("status --json: %+v (%v)\n%s", js, err, r.stdout)
	}
}

package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/storage"
)

// SHOW GRANTS lines as MySQL 9 and MariaDB 10.11 print them: REPLICATION
// SLAVE on *.* (or ALL) is found, the same words on a schema or in a role's
// name are not.
func TestGrantsReplicationSlave(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		line string
		want bool
	}{
		{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `mend`@`%`", true},
		{"GRANT SELECT, INSERT, REPLICATION SLAVE ON *.* TO `u`@`%` WITH GRANT OPTION", true},
		{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION", true},
		{"GRANT BINLOG MONITOR, REPLICATION SLAVE ON *.* TO `mend`@`%`", true},
		{"GRANT REPLICATION CLIENT ON *.* TO `mend`@`%`", false},
		{"GRANT SELECT ON `queue`.* TO `mend`@`%`", false},
		{"GRANT `replication slave`@`%` TO `mend`@`%`", false},
		{"GRANT USAGE ON *.* TO `mend`@`%`", false},
	} {
		if got := grantsReplicationSlave(tt.line); got != tt.want {
			t.Errorf("grantsReplicationSlave(%q) = %v; want %v", tt.line, got, tt.want)
		}
	}
}

// The saved position against the server: purged is FAIL (a warning when
// mend run is about to recover it), older than half the retention a
// warning, in the file the server writes now never at risk.
func TestPositionCheck(t *testing.T) {
	t.Parallel()
	srv := binlog.Server{Flavor: "mysql", Identity: "uuid-a", LogBin: true, Format: "ROW", RowImage: "FULL",
		Files: []string{"b.000002", "b.000003"}, Current: "b.000003", Retention: time.Hour}
	pos := func(file string, age time.Duration) storage.BinlogPosition {
		return storage.BinlogPosition{Flavor: "mysql", ServerUUID: "uuid-a", File: file, Pos: 4, Age: age}
	}
	for _, tt := range []struct {
		name     string
		p        storage.BinlogPosition
		starting bool
		want     Status
		words    string
	}{
		{"purged", pos("b.000001", time.Minute), false, Fail, "dead letters collected meanwhile are lost"},
		{"purged, before run recovers it", pos("b.000001", time.Minute), true, Warn, "run re-imports what the tables hold"},
		{"past half the retention", pos("b.000002", 40*time.Minute), false, Warn, "past half the retention"},
		{"within half the retention", pos("b.000002", 20*time.Minute), false, OK, "at risk of a purge for 20m"},
		{"in the current file however old", pos("b.000003", 50*time.Minute), false, OK, "not at risk"},
		{"another server without GTIDs", storage.BinlogPosition{Flavor: "mysql", ServerUUID: "uuid-b", File: "b.000009", Pos: 4}, false, Warn, "starts over from the tables"},
	} {
		c := positionCheck(tt.p, srv, true, tt.starting)
		if c.Status != tt.want || !strings.Contains(c.Detail, tt.words) {
			t.Errorf("%s: %s %q; want %s with %q", tt.name, c.Status, c.Detail, tt.want, tt.words)
		}
		if c.Status != OK && c.Fix == "" && tt.want != Warn {
			t.Errorf("%s: no fix", tt.name)
		}
	}
}

// The server's settings as checks: what stops binlog mode is FAIL with its
// fix, what costs a start-over (no GTIDs on MySQL) or stops the reader on a
// schema change (row metadata) is WARN with its fix; MariaDB always has
// GTIDs.
func TestBinlogSettings(t *testing.T) {
	t.Parallel()
	byName := func(cs []Check) map[string]Check {
		m := map[string]Check{}
		for _, c := range cs {
			m[c.Name] = c
		}
		return m
	}
	mysqlOff := byName(binlogSettings(binlog.Server{Flavor: "mysql", LogBin: true, Format: "MIXED", RowImage: "MINIMAL", GTIDMode: "OFF", RowMetadata: "MINIMAL"}))
	for name, want := range map[string]struct {
		status Status
		words  string
	}{
		"binlog format":       {Fail, "SET PERSIST binlog_format=ROW"},
		"binlog row image":    {Fail, "SET PERSIST binlog_row_image=FULL"},
		"binlog GTIDs":        {Warn, "gtid_mode=ON"},
		"binlog row metadata": {Warn, "SET PERSIST binlog_row_metadata=FULL"},
	} {
		if c := mysqlOff[name]; c.Status != want.status || !strings.Contains(c.Fix, want.words) {
			t.Errorf("MySQL %s: %+v; want %s with fix %q", name, c, want.status, want.words)
		}
	}
	if c := mysqlOff["binlog GTIDs"]; !strings.Contains(c.Detail, "a failover of the host's primary makes the reader start over from the tables") {
		t.Errorf("GTIDs warning %q does not say what a failover costs", c.Detail)
	}
	maria := byName(binlogSettings(binlog.Server{Flavor: "mariadb", LogBin: true, Format: "ROW", RowImage: "FULL", GTIDs: true, RowMetadata: "FULL"}))
	for _, name := range []string{"binlog log_bin", "binlog format", "binlog row image", "binlog GTIDs", "binlog row metadata"} {
		if maria[name].Status != OK {
			t.Errorf("MariaDB %s: %+v; want ok", name, maria[name])
		}
	}
	off := binlogSettings(binlog.Server{Flavor: "mariadb"})
	if len(off) != 1 || off[0].Status != Fail || !strings.Contains(off[0].Fix, "log_bin") {
		t.Errorf("binary log off: %+v; want one FAIL naming log_bin", off)
	}
}

// A warning among binlog mode's prerequisites (no GTIDs on MySQL, row
// metadata not FULL) leaves the report Ready: auto still reads the binary
// log, and Why stays empty; the first failure makes it not Ready and is
// Why, with its fix and where it ran.
func TestBinlogReportReady(t *testing.T) {
	t.Parallel()
	var r BinlogReport
	r.add(Check{Name: "binlog log_bin", Status: OK}, true)
	r.add(Check{Name: "binlog GTIDs", Status: Warn, Detail: "gtid_mode=OFF", Fix: "turn gtid_mode=ON"}, true)
	r.add(Check{Name: "binlog row metadata", Status: Warn, Detail: "binlog_row_metadata=MINIMAL"}, true)
	r.add(Check{Name: "binlog position", Status: Fail, Detail: "purged"}, false) // not a prerequisite
	r.finish()
	if !r.Ready || r.Why != "" {
		t.Fatalf("warnings alone: Ready %v, Why %q; want ready", r.Ready, r.Why)
	}
	r.add(Check{Name: "binlog REPLICATION SLAVE", Status: Fail, Detail: "no REPLICATION SLAVE", Fix: "GRANT REPLICATION SLAVE", Target: "--queue-dsn q"}, true)
	r.add(Check{Name: "binlog server id", Status: Fail, Detail: "same server_id"}, true)
	r.finish()
	if r.Ready || r.Why != "no REPLICATION SLAVE (fix: GRANT REPLICATION SLAVE)" || r.WhyTarget != "--queue-dsn q" {
		t.Fatalf("a failed prerequisite: Ready %v, Why %q, WhyTarget %q; want not ready, the first failure", r.Ready, r.Why, r.WhyTarget)
	}
}

// A binary log filtered to leave the queue schema out fails the check
// (auto must not pick binlog mode there); one that logs it, or a filter on
// other schemas only, passes; names compare as the server compares them.
func TestBinlogFilter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		srv  binlog.Server
		want Status
	}{
		{"no filters", binlog.Server{FiltersKnown: true}, OK},
		{"do-db names it", binlog.Server{FiltersKnown: true, DoDB: []string{"other", "queue_db"}}, OK},
		{"do-db leaves it out", binlog.Server{FiltersKnown: true, DoDB: []string{"other"}}, Fail},
		{"ignore-db names it", binlog.Server{FiltersKnown: true, IgnoreDB: []string{"queue_db"}}, Fail},
		{"ignore-db names another", binlog.Server{FiltersKnown: true, IgnoreDB: []string{"scratch"}}, OK},
		{"do-db in another case, case-sensitive names", binlog.Server{FiltersKnown: true, DoDB: []string{"QUEUE_DB"}}, Fail},
		{"do-db in another case, lower_case_table_names=1", binlog.Server{FiltersKnown: true, DoDB: []string{"QUEUE_DB"}, LowerCaseNames: 1}, OK},
		{"filters unknown", binlog.Server{}, Warn},
	} {
		if got := binlogFilter(tt.srv, "queue_db"); got.Status != tt.want {
			t.Errorf("%s: %v (%s); want %v", tt.name, got.Status, got.Detail, tt.want)
		}
	}
}

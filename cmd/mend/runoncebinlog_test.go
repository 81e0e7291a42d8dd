package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/storage"
)

// TestRunOnceBinlog: mend run --once on a source that has a saved
// binary-log position (the CronJob beside, or after, a binlog deployment)
// never joins the offset mode's consumer group: it reads the binary log
// to its end under the reader's lease and records what it finds, or, while
// another replica holds that lease, says intake is left to it and exits 0
// after draining the reconciler. Before, --once ran offsets mode and left
// the group's rows in queue_offsets, one at watermark 0, holding the
// host's GC back.
func TestRunOnceBinlog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	offsetRows := func(t *testing.T, x *wakeWorld) int {
		t.Helper()
		var n int
		if err := x.queueDB.SQL(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	store := func(t *testing.T, x *wakeWorld) *storage.DB {
		t.Helper()
		s, err := storage.Open(ctx, x.mendDB.DSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	onceArgs := func(x *wakeWorld) []string {
		return []string{"run", "--once", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe-settle", "1s"}
	}

	t.Run("binlog asked for starts the source, auto then reads on from its position", func(t *testing.T) {
		t.Parallel()
		x := binlogWorld(t)
		st := store(t, x)
		r := opsRun(t, nil, append(onceArgs(x), "--subscribe-mode", "binlog")...)
		if r.code != exitOK || !strings.Contains(r.stderr, "binlog caught up") {
			t.Fatalf("run --once --subscribe-mode binlog: exit %d; want the log read:\n%s", r.code, r.stderr)
		}
		if _, err := st.BinlogPositionGet(ctx, binlog.LeaseName(x.queueDB.Name)); err != nil {
			t.Fatalf("no position saved by run --once --subscribe-mode binlog: %v", err)
		}
		first := mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"}
		if _, err := st.RecordGet(ctx, first); err != nil {
			t.Errorf("the dead letter the tables held is not recorded: %v", err)
		}
		// A dead letter committed after the saved position: auto --once
		// reads it from the binary log, not as a consumer group.
		if err := x.w.Publish(ctx, "speculate", "q", "q/batch/2", []byte(`{"id":"q/batch/2","queue":"q"}`), nil); err != nil {
			t.Fatal(err)
		}
		if err := x.w.MoveToDLQ(ctx, "speculate", "q", "q/batch/2", sqtest.Failure{Count: 3, LastError: "again"}); err != nil {
			t.Fatal(err)
		}
		r = opsRun(t, nil, onceArgs(x)...)
		if n := offsetRows(t, x); n != 0 {
			t.Errorf("%d queue_offsets rows of group mend after run --once beside a saved position; want none (it holds the host's GC back)", n)
		}
		if r.code != exitOK || !regexp.MustCompile(`msg="subscribe mode: binlog" .*why="auto with --once: the source has a saved binary-log position`).MatchString(r.stderr) {
			t.Fatalf("run --once beside a saved position: exit %d; want binlog mode, saying why:\n%s", r.code, r.stderr)
		}
		second := first
		second.MessageID = "q/batch/2"
		if _, err := st.RecordGet(ctx, second); err != nil {
			t.Errorf("the dead letter committed after the saved position is not recorded: %v\n%s", err, r.stderr)
		}
	})

	t.Run("another replica holds the reader's lease: intake is left to it", func(t *testing.T) {
		t.Parallel()
		x := binlogWorld(t)
		st := store(t, x)
		if _, err := x.mendDB.SQL(t).ExecContext(ctx, `INSERT INTO mend_binlog_positions (name, flavor, server_uuid, binlog_file, binlog_pos, gtid_set, updated_at)
			VALUES (?, 'mysql', 'uuid-a', 'saved-bin.000007', 1234, '', NOW(6))`, binlog.LeaseName(x.queueDB.Name)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.LeaseAcquire(ctx, binlog.LeaseName(x.queueDB.Name), "replica-reading", time.Hour); err != nil {
			t.Fatal(err)
		}
		r := opsRun(t, nil, onceArgs(x)...)
		if n := offsetRows(t, x); n != 0 {
			t.Errorf("%d queue_offsets rows of group mend; want none", n)
		}
		if r.code != exitOK || !strings.Contains(r.stderr, "another replica reads the binary log (it holds the reader's lease): intake is left to it") {
			t.Fatalf("run --once beside another replica's reader: exit %d; want 0, saying intake is left to it:\n%s", r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, `msg="pass done"`) {
			t.Errorf("run --once did not drain the reconciler beside another replica's reader:\n%s", r.stderr)
		}
		saved, err := st.BinlogPositionGet(ctx, binlog.LeaseName(x.queueDB.Name))
		if err != nil || saved.File != "saved-bin.000007" || saved.Pos != 1234 {
			t.Errorf("position %+v (%v); want the holder's untouched", saved, err)
		}
		if _, err := st.RecordGet(ctx, mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"}); !errors.Is(err, mend.ErrNotFound) {
			t.Errorf("run --once recorded the dead letter (%v); intake is the lease holder's", err)
		}
	})

	t.Run("auto without a saved position drains the offset mode's group", func(t *testing.T) {
		t.Parallel()
		x := binlogWorld(t)
		r := opsRun(t, nil, onceArgs(x)...)
		if r.code != exitOK || !regexp.MustCompile(`msg="subscribe mode: offsets" .*why="auto with --once: no binary-log position is saved`).MatchString(r.stderr) {
			t.Fatalf("run --once, no saved position: exit %d; want offsets, saying why:\n%s", r.code, r.stderr)
		}
	})
}

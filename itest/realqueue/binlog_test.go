package realqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/sqreal"
)

// TestLostWakeupBinlog is TestLostWakeupSubscription in binlog mode (issue 44): mend learns of the
// culprit's dead letters from the queue database server's binary log, not by reading queue_messages by
// offset, so it registers no consumer group and holds none of the host's GC back. mend runs as shipped,
// `mend run --queue-dsn ... --subscribe-mode binlog`, and is observed through its metrics and its saved
// position. The dependent must land after one wake-up naming it, every record must have come through
// the binary log, no queue_offsets row of group mend may exist, and the host's GC must collect the
// culprit's dead letters once its own DLQ group has acknowledged them. Its control is
// TestLostWakeupSubscription/control.
func TestLostWakeupBinlog(t *testing.T) {
	requireOptIn(t)
	lostWakeup(t, modeBinlog)
}

// TestDeadLetterWhileMendDownBinlog is TestDeadLetterWhileMendDown in binlog mode: mend run
// --subscribe-mode binlog read the binary log and saved its position, then stopped; the culprit's dead letter is committed, the host's DLQ
// group acknowledges it and the host's GC collects it while mend is down (binlog mode holds nothing back:
// no queue_offsets row of mend's). mend run started again resumes from its saved position (no start over
// from the tables, which no longer hold the row) and records the dead letter from the binary log; the
// dependent lands after exactly one wake-up. Its control is TestDeadLetterWhileMendDown/control.
func TestDeadLetterWhileMendDownBinlog(t *testing.T) {
	requireOptIn(t)
	deadLetterWhileDown(t, true, false, 0, true)
}

// TestReaderKilledBinlog is TestLostWakeupBinlog with two replicas of mend run in binlog mode: once one
// of them reads the binary log and has saved its position, that one is SIGKILLed (no shutdown: its lease
// is not released, its connections are cut), before the culprit's dead letters are committed. The other
// replica must take the reader's lease when it lapses and resume from the saved position (no start over:
// its own mend_binlog_resets_total stays 0), record every dead letter from the log and repair the queue,
// with the same checks as TestLostWakeupBinlog.
func TestReaderKilledBinlog(t *testing.T) {
	requireOptIn(t)
	lostWakeup(t, modeBinlogKilled)
}

// replica is a second `mend run` beside m's: the same binary, database and flags, its own metrics address
// and log, stopped at t's cleanup.
func (m *mendProc) replica(t *testing.T, s *sqreal.Stack, name string) *mendProc {
	t.Helper()
	addr := freeAddr(t)
	r := &mendProc{bin: m.bin, db: m.db, dsns: m.dsns, run: &sqreal.Service{Name: name, Bin: m.bin, Args: withMetricsAddr(m.run.Args, addr), Addr: addr,
		Log: filepath.Join(s.Dir, "logs", name+".log")}}
	r.stopAtCleanup(t)
	return r
}

// reading reports whether m's run is the replica reading the binary log (only the reader exports
// mend_binlog_lag_seconds).
func (m *mendProc) reading(t *testing.T) bool {
	t.Helper()
	_, ok := scrape(t, m.run.Addr)["mend_binlog_lag_seconds"]
	return ok
}

// killReader waits until one of two replicas in binlog mode reads the log and has saved its position,
// SIGKILLs it and returns the other.
func killReader(t *testing.T, s *sqreal.Stack, a, b *mendProc) *mendProc {
	t.Helper()
	var reader, other *mendProc
	s.Eventually(t, time.Minute, "one replica reading the binary log, its position saved", func() (bool, string) {
		ra, rb := a.reading(t), b.reading(t)
		switch {
		case ra && !rb:
			reader, other = a, b
		case rb && !ra:
			reader, other = b, a
		default:
			return false, fmt.Sprintf("reading: %v and %v", ra, rb)
		}
		shown := reader.shown(t)
		return shown.file != "", shown.String()
	})
	before := reader.shown(t)
	reader.run.Kill()
	t.Logf("SIGKILLed the binlog reader %s at %s; %s stands by", reader.run.Name, before, other.run.Name)
	return other
}

// binlogMode is mend run's flag for binlog mode, as an operator deploys it beside the queue.
var binlogMode = []string{"--subscribe-mode", "binlog"}

// binlogShown is what mend run in binlog mode shows an operator: its metrics (the process's own
// counts: they start at zero with each process) and the reader's saved position (mend's database).
type binlogShown struct {
	mode     float64 // mend_subscribe_mode{mode="binlog"}
	recorded float64 // mend_binlog_recorded_total
	resets   float64 // mend_binlog_resets_total, every reason
	file     string  // mend_binlog_positions.binlog_file, "" before the first save
	pos      int64
	gtids    string
}

// shown reads m's binlog mode from its /metrics and mend_binlog_positions.
func (m *mendProc) shown(t *testing.T) binlogShown {
	t.Helper()
	var b binlogShown
	for k, v := range scrape(t, m.run.Addr) {
		switch {
		case k == `mend_subscribe_mode{mode="binlog"}`:
			b.mode = v
		case k == "mend_binlog_recorded_total":
			b.recorded = v
		case strings.HasPrefix(k, "mend_binlog_resets_total{"):
			b.resets += v
		}
	}
	err := m.db.SQL(t).QueryRowContext(context.Background(),
		"SELECT binlog_file, binlog_pos, gtid_set FROM mend_binlog_positions").Scan(&b.file, &b.pos, &b.gtids)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("read mend_binlog_positions: %v", err)
	}
	return b
}

func (b binlogShown) String() string {
	return fmt.Sprintf("mode gauge %v, %v recorded, %v start-overs, saved position %q:%d (GTIDs %q)", b.mode, b.recorded, b.resets, b.file, b.pos, b.gtids)
}

// waitBinlogSaved waits until m's run reads the binary log and has saved a position (after its first
// start's import). It does not wait for the reader to be caught up at one instant: the busy host's
// processes commit often enough that the server seldom sends a heartbeat, and a clean-clone CI run
// timed out waiting for one.
func (m *mendProc) waitBinlogSaved(t *testing.T, s *sqreal.Stack) {
	t.Helper()
	s.Eventually(t, time.Minute, "mend run to read the binary log and save its position", func() (bool, string) {
		b := m.shown(t)
		return b.mode == 1 && b.file != "", b.String()
	})
}

// checkBinlogMode asserts what binlog mode promises beside the real queue once the dependent has landed:
// mend run read the binary log, every record of mend's on the queue came through its reader (the only
// way in here: no consumer group, and the stuck-queue scan woke nothing), mend has no queue_offsets row
// (the host's GC held by nothing of mend's), and the host's GC collects the culprit's dead letters.
// took says m's run took the reader's lease over from a killed replica: it must not have started over.
func checkBinlogMode(t *testing.T, s *sqreal.Stack, m *mendProc, culpritBatch string, took bool) {
	t.Helper()
	all, _ := m.records(t, queue)
	// The reader's count moves after its recording returns; a recording that stored some chunks and
	// failed on another counts them when the term that follows records them again, so the count is
	// waited for, not read at one instant.
	s.Eventually(t, time.Minute, "every record of mend's to have come through the binlog reader", func() (bool, string) {
		b := m.shown(t)
		return b.mode == 1 && all > 0 && b.recorded >= float64(all), fmt.Sprintf("mend holds %d records of %s; %s", all, queue, b)
	})
	if n := m.stuckRecords(t, queue); n != 0 {
		t.Errorf("%d stuck-queue records of %s: the scan, not the binary log, woke the queue", n, queue)
	}
	if n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'"); n != 0 {
		t.Errorf("%d queue_offsets rows of group mend: binlog mode must register no consumer group", n)
	}
	s.Eventually(t, time.Minute, "the host's GC to collect the culprit's dead letters (mend holds nothing back)", func() (bool, string) {
		n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'build_dlq' AND partition_key = ?", culpritBatch)
		return n == 0, fmt.Sprintf("%d rows left\n%s", n, s.Snapshot(t, queue))
	})
	shown := m.shown(t)
	if took && shown.resets != 0 {
		t.Errorf("the replica that took over started over %v times; want a resume from the saved position", shown.resets)
	}
	t.Logf("mend run in binlog mode: %s; build_dlq rows collected by the host's GC, no queue_offsets row of mend's", shown)
}

package realqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/sqreal"
	"github.com/mendq/mend/storage"
)

// TestLostWakeupBinlog is TestLostWakeupSubscription in binlog mode (issue 44): mend learns of the
// culprit's dead letters from the queue database server's binary log, not by reading queue_messages by
// offset, so it registers no consumer group and holds none of the host's GC back. mend run runs with
// --subscribe=false (its reconciler repairs what is recorded); the reader is a binlog.Reader built in the
// test on mend's store and the queue's DSN, as `mend run --subscribe-mode binlog` will wire it (that flag
// is being built apart). The dependent must land after one wake-up naming it, every dead letter must have
// come through the reader, no queue_offsets row of group mend may exist, and the host's GC must collect
// the culprit's dead letters once its own DLQ group has acknowledged them. Its control is
// TestLostWakeupSubscription/control.
func TestLostWakeupBinlog(t *testing.T) {
	requireOptIn(t)
	lostWakeup(t, modeBinlog)
}

// TestDeadLetterWhileMendDownBinlog is TestDeadLetterWhileMendDown in binlog mode: the reader ran and
// saved its position, then it and mend run stopped; the culprit's dead letter is committed, the host's DLQ
// group acknowledges it and the host's GC collects it while mend is down (binlog mode holds nothing back:
// no queue_offsets row of mend's). The reader started again resumes from its saved position (no start over
// from the tables, which no longer hold the row) and records the dead letter from the binary log; the
// dependent lands after exactly one wake-up. Its control is TestDeadLetterWhileMendDown/control.
func TestDeadLetterWhileMendDownBinlog(t *testing.T) {
	requireOptIn(t)
	deadLetterWhileDown(t, true, false, 0, true)
}

// binlogReader is a binlog.Reader running beside a stack, and what its hooks saw.
type binlogReader struct {
	r        *binlog.Reader
	stop     func()
	mu       sync.Mutex
	recorded map[string]int // dead letters recorded, by topic
	failures []string
}

// startBinlogReader runs a binlog.Reader on m's database and s's queue database until t's cleanup.
func startBinlogReader(t *testing.T, s *sqreal.Stack, m *mendProc) *binlogReader {
	t.Helper()
	ctx := context.Background()
	store, err := storage.Open(ctx, m.db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	intake, err := dlq.New(store, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fence.New(store, fence.Config{Holder: "realqueue-binlog"})
	if err != nil {
		t.Fatal(err)
	}
	qcfg, err := mysql.ParseDSN(s.Queue.DSN)
	if err != nil {
		t.Fatal(err)
	}
	br := &binlogReader{recorded: map[string]int{}}
	br.r, err = binlog.New(binlog.Config{Server: qcfg, Intake: intake, Parker: store, Store: store, Fence: f,
		Hooks: binlog.Hooks{
			OnRecorded: func(rows []dlq.Row, _ int) {
				br.mu.Lock()
				for _, row := range rows {
					br.recorded[row.Topic]++
				}
				br.mu.Unlock()
			},
			OnFailed: func(err error) {
				br.mu.Lock()
				br.failures = append(br.failures, err.Error())
				br.mu.Unlock()
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- br.r.Run(runCtx) }()
	var once sync.Once
	br.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("the binlog reader: %v", err)
			}
			if fs := br.failed(); len(fs) > 0 {
				t.Logf("the binlog reader retried after %d failures:\n%s", len(fs), strings.Join(fs, "\n"))
			}
		})
	}
	t.Cleanup(br.stop)
	return br
}

// waitSaved waits until the reader has saved a position (after its start-over's import). It does not
// wait for the reader to be caught up at one instant: the busy host's processes commit often enough that
// the server seldom sends a heartbeat (CaughtUp is true only from a heartbeat to the next commit), and a
// clean-clone CI run timed out waiting for one.
func (br *binlogReader) waitSaved(t *testing.T, s *sqreal.Stack) {
	t.Helper()
	s.Eventually(t, time.Minute, "the binlog reader to save its position", func() (bool, string) {
		st := br.r.Status()
		return st.Position.File != "", fmt.Sprintf("%s, caught up %v, position %q, last error %q", st.Role, st.CaughtUp, st.Position.File, st.LastErr)
	})
}

// count is how many dead letters of topic the reader has recorded.
func (br *binlogReader) count(topic string) int {
	br.mu.Lock()
	defer br.mu.Unlock()
	return br.recorded[topic]
}

func (br *binlogReader) failed() []string {
	br.mu.Lock()
	defer br.mu.Unlock()
	return append([]string(nil), br.failures...)
}

// checkBinlogMode asserts what binlog mode promises beside the real queue once the dependent has landed:
// every record of the culprit's dead letters came through the reader, the stuck-queue scan woke nothing,
// mend has no queue_offsets row (no consumer group, the host's GC held by nothing of mend's), and the
// host's GC collects the culprit's dead letters.
func checkBinlogMode(t *testing.T, s *sqreal.Stack, m *mendProc, br *binlogReader, culpritBatch string) {
	t.Helper()
	var records int64
	if err := m.db.SQL(t).QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM mend_records WHERE queue = ? AND topic = 'build_dlq'", queue).Scan(&records); err != nil {
		t.Fatal(err)
	}
	// The reader's hook runs after its recording returns; a recording that stored some chunks and failed
	// on another returns no rows to the hook until the term that follows records them again (already
	// recorded, counted then), so the count is waited for, not read at one instant.
	s.Eventually(t, time.Minute, "every build_dlq record of mend's to have come through the binlog reader", func() (bool, string) {
		got := br.count("build_dlq")
		st := br.r.Status()
		return records > 0 && int64(got) >= records, fmt.Sprintf("mend holds %d build_dlq records of %s, the reader recorded %d (want at least one, all through the reader); reader %s, last error %q, failures %q",
			records, queue, got, st.Role, st.LastErr, br.failed())
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
	st := br.r.Status()
	t.Logf("binlog reader: %s at %s:%d (GTIDs %s), %d recorded, %d parked, %d resets; build_dlq rows collected by the host's GC, no queue_offsets row of mend's",
		st.Role, st.Position.File, st.Position.Pos, st.Position.GTIDSet, st.Recorded, st.Parked, st.Resets)
}

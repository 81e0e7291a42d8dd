package realqueue

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/sqreal"
)

// queue is the one queue each scenario's stack serves. The orchestrator's fake profile gives it the
// "all" analyzer: every batch depends on the one before it, so the second request waits on the first.
const queue = "realq"

// landTimeout bounds one request's trip through the real pipeline (about 10-20 s in fake mode here).
const landTimeout = 2 * time.Minute

// stuckHeartbeats is how many beats of the orchestrator's speculate subscriber (one per 10 s lease
// renewal) a control must stay stuck across.
const stuckHeartbeats = 3

// warmUp lands one request and waits until it landed: the host's groups have then joined the queue's
// partitions (queue_offsets), which `mend run` checks before it starts (the wake topic) and the
// subscription registers ahead from. It returns the request's ID.
func warmUp(t *testing.T, s *sqreal.Stack) string {
	t.Helper()
	id := s.Land(t, queue, "fake://realq/warm-up")
	s.WaitRequests(t, landTimeout, queue, []string{id}, "landed")
	return id
}

// batchOf waits until request id is enrolled in a batch and returns the batch's ID (its newest).
func batchOf(t *testing.T, s *sqreal.Stack, id string) string {
	t.Helper()
	var batch string
	s.Eventually(t, landTimeout, "request "+id+" to be batched", func() (bool, string) {
		err := s.AppSQL.QueryRowContext(context.Background(),
			"SELECT batch_id FROM request_batch WHERE queue = ? AND request_id = ? ORDER BY batch_id DESC LIMIT 1", queue, id).Scan(&batch)
		return err == nil, fmt.Sprintf("%v\n%s", err, s.Snapshot(t, queue))
	})
	return batch
}

// builtAndWaiting reports whether every build of batch has succeeded and its signal has been read on
// speculate, the batch speculating and speculate/<queue> all acknowledged: the batch then waits on the
// outcome of the one it depends on, and only a wake-up moves it.
func builtAndWaiting(t *testing.T, s *sqreal.Stack, batch string) (bool, string) {
	t.Helper()
	builds := s.QueueInt(t, "SELECT COUNT(*) FROM "+"`"+s.App.Name+"`"+".build WHERE queue = ? AND batch_id = ?", queue, batch)
	unsignalled := s.QueueInt(t, "SELECT COUNT(*) FROM "+"`"+s.App.Name+"`"+`.build b WHERE b.queue = ? AND b.batch_id = ? AND (b.status <> 'succeeded'
		OR NOT EXISTS (SELECT 1 FROM realq_speculate_log l WHERE l.partition_key = ? AND l.id = CONCAT(?, '/build-signal/', CONVERT(b.id USING utf8mb4) COLLATE utf8mb4_bin, '/succeeded')))`,
		queue, batch, queue, batch)
	ok := builds > 0 && unsignalled == 0 && s.BatchState(t, queue, batch) == "speculating" &&
		acked(t, s, sqreal.GroupOrchestrator, "speculate", queue)
	return ok, fmt.Sprintf("%d builds of %s, %d not succeeded or not signalled\n%s", builds, batch, unsignalled, s.Snapshot(t, queue))
}

// acked reports whether group has acknowledged every row of topic/partition (true when there are none).
func acked(t *testing.T, s *sqreal.Stack, group, topic, partition string) bool {
	t.Helper()
	return s.QueueInt(t, `SELECT COUNT(*) FROM queue_messages m WHERE m.topic = ? AND m.partition_key = ?
		AND m.offset > COALESCE((SELECT o.offset_acked FROM queue_offsets o
			WHERE o.consumer_group = ? AND o.topic = m.topic AND o.partition_key = m.partition_key), 0)`,
		topic, partition, group) == 0
}

// TestLostWakeupSubscription is the lost wake-up produced with the queue's own mechanisms: a build that
// cannot be triggered (the fake build runner's sq-fake=trigger-error marker) dead-letters on build_dlq,
// whose DLQ controller fails the batch and wakes nothing (submitqueue.md §6). The host's DLQ consumers are
// held by the queue's consumer gate until the dependent batch has finished its builds, so the culprit's
// failure is the only thing left that could wake the queue. With mend subscribed (mend run --queue-dsn)
// the dependent lands after one wake-up naming it; without mend (control) the queue stays stuck.
func TestLostWakeupSubscription(t *testing.T) {
	requireOptIn(t)
	t.Run("mend", func(t *testing.T) { lostWakeup(t, modeSubscribed) })
	t.Run("control", func(t *testing.T) { lostWakeup(t, modeControl) })
}

// TestLostWakeupLinked is TestLostWakeupSubscription with mend linked into the queue instead of
// subscribed: testdata/link-mend.patch is the smallest change an adopting team makes to the queue's DLQ
// wiring (README, "Link it into a dead-letter consumer"): a pipeline option that wraps every DLQ
// controller, and a wrapper that records the dead letter through mend's front door (client.Open, then
// Client.Record, which also tries the repair inline) before the queue's own controller runs. The patched orchestrator is built from the unpacked
// source (cached apart, keyed by the patch and mend's source) and mend run beside it with
// --subscribe=false, as integration.md says for a host that links the intake in. Its control is
// TestLostWakeupSubscription/control.
func TestLostWakeupLinked(t *testing.T) {
	requireOptIn(t)
	lostWakeup(t, modeLinked)
}

// TestStuckBeforeAdoption is the control of TestLostWakeupSubscription carried on: the queue stuck before
// mend came, its dead letters acknowledged by the host and collected by its GC, so neither mend import nor
// the subscription can see them. mend is then adopted as operations.md says (migrate, doctor, mend adopt,
// mend run): the stuck-queue scan must find the queue and wake it, and the dependent land. The first half
// is the control, run in the same test: without mend the queue stays stuck (as
// TestLostWakeupSubscription/control). mend adopt runs with --stuck-bound 15s (adoptBound), not the
// default 3 minutes, to keep the suite short: the scan's two looks are then 16 s apart.
func TestStuckBeforeAdoption(t *testing.T) {
	requireOptIn(t)
	lostWakeup(t, modeAdopt)
}

// adoptBound is the --stuck-bound TestStuckBeforeAdoption gives mend adopt (the default is 3 minutes).
const adoptBound = "15s"

// How a lost-wake-up scenario runs mend.
const (
	modeControl      = iota // without mend
	modeSubscribed          // mend run --queue-dsn beside the unmodified queue
	modeLinked              // the queue patched to call mend's intake; mend run --subscribe=false
	modeAdopt               // without mend until the queue is stuck, then mend adopt and mend run
	modeBinlog              // mend run --queue-dsn --subscribe-mode binlog beside the unmodified queue
	modeBinlogKilled        // two replicas in binlog mode; the reader SIGKILLed before the culprit fails
	modeRotation            // mend run as the Deployment runs it (DSN files, auto: binlog); the queue user's password rotated
)

func lostWakeup(t *testing.T, mode int) {
	sqreal.RequireMySQL(t) // before building a patched orchestrator for nothing
	inBinlog := mode == modeBinlog || mode == modeBinlogKilled || mode == modeRotation
	withMend, adopt := mode == modeSubscribed || mode == modeLinked || inBinlog, mode == modeAdopt
	opts := sqreal.Options{Queues: []string{queue}}
	var m *mendProc
	var rot *rotation // modeRotation's
	if mode == modeLinked {
		tree := sqreal.Source(t)
		tree.Apply(t, "testdata/link-mend.patch")
		root := sqreal.ModuleRoot(t)
		tree.Replace(t, "github.com/mendq/mend", root)
		opts.Orchestrator = tree.Build(t, sqreal.SourceHash(t, root), "orchestrator")["orchestrator"]
		m = prepareMend(t)
		opts.OrchestratorEnv = []string{"MEND_DSN=" + m.db.DSN}
	}
	s := sqreal.Start(t, opts)
	observeSpeculate(t, s)
	if mode == modeRotation {
		observeDeadLetters(t, s)
	}
	warm := warmUp(t, s)
	switch mode {
	case modeSubscribed:
		m = newMend(t, s)
	case modeLinked:
		m.attach(t, s, "--subscribe=false")
	case modeBinlog, modeBinlogKilled:
		m = newMend(t, s, binlogMode...)
	case modeRotation:
		m, rot = newRotation(t, s)
	}
	if withMend {
		m.doctor(t)
		m.run.Start(t)
	}
	if rot != nil {
		// The culprit's dead letters will be committed while mend's file holds the old password.
		rot.serverFirst(t)
	}
	if mode == modeBinlogKilled {
		second := m.replica(t, s, "mend-2")
		second.run.Start(t)
		m = killReader(t, s, m, second)
	}

	s.CloseGate(t, sqreal.GroupDLQ, "", "realq: fail the culprit only after its dependent has built")
	culprit := s.Land(t, queue, "fake://realq/culprit?sq-fake=trigger-error")
	dependent := s.Land(t, queue, "fake://realq/dependent")
	if mode == modeSubscribed {
		// The typo'd wake topic is refused on the busy host too: both requests on their way, mend running.
		refuseTypo(t, s, m, "busy")
	}
	culpritBatch, dependentBatch := batchOf(t, s, culprit), batchOf(t, s, dependent)
	// Settled: the culprit has dead-lettered, and every build of the dependent has succeeded and its
	// signal has been read on speculate (the dependent waits on the culprit's outcome). Checked twice, a
	// heartbeat of the orchestrator apart, so no build of a late path is still on its way.
	settled := func() (bool, string) {
		if withMend && (s.RequestState(t, queue, dependent) == "landed" || len(wakes(t, s, queue, "mend/")) > 0) {
			// mend repaired, or is repairing (its wake-up is on speculate, the dependent on its way
			// through new builds to merging), while the host's DLQ consumers were held: the check a
			// heartbeat later must not take that progress for a dependent that did not stay settled.
			return true, ""
		}
		dead := s.QueueInt(t, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'build_dlq' AND partition_key = ?", culpritBatch)
		built, desc := builtAndWaiting(t, s, dependentBatch)
		return dead > 0 && built, fmt.Sprintf("%d build_dlq rows, %s", dead, desc)
	}
	s.Eventually(t, landTimeout, "the culprit's dead letter and the dependent's builds", settled)
	hb := s.Heartbeat(t, sqreal.GroupOrchestrator, "speculate")
	s.Eventually(t, time.Minute, "a heartbeat of the orchestrator", func() (bool, string) {
		return s.Heartbeat(t, sqreal.GroupOrchestrator, "speculate") > hb, "waiting"
	})
	if ok, desc := settled(); !ok {
		t.Fatalf("the dependent did not stay settled for a heartbeat: %s", desc)
	}
	if rot != nil {
		rot.fileLater(t)
	}
	s.OpenGate(t, sqreal.GroupDLQ, "")

	if withMend {
		s.WaitRequests(t, landTimeout, queue, []string{dependent, warm}, "landed")
		s.WaitRequests(t, landTimeout, queue, []string{culprit}, "error")
		// Each build that could not be triggered (one per speculation path, per attempt) is a dead letter
		// of its own: mend holds a record per row; a repair covering several wakes once.
		// A dead letter recorded after the repair that landed the dependent is repaired on a later pass.
		var all, done int64
		s.Eventually(t, time.Minute, "mend to finish every record", func() (bool, string) {
			all, done = m.records(t, queue)
			return all > 0 && done == all, fmt.Sprintf("%d records, %d done", all, done)
		})
		n := checkMendWakes(t, s, m, queue)
		t.Logf("mend: %d records, %d wake-ups; the dependent landed", all, n)
		if inBinlog {
			checkBinlogMode(t, s, m, culpritBatch, mode == modeBinlogKilled)
		}
		if rot != nil {
			rot.checkResumed(t)
			rot.waitRecorded(t, culpritBatch)
			rot.fileFirst(t)
			rot.checkResumed(t)
			rot.checkNoRestart(t)
		}
		return
	}

	// Control: the host's DLQ controller fails the culprit and fans out, and nothing wakes the dependent.
	s.WaitRequests(t, landTimeout, queue, []string{culprit}, "error")
	s.Eventually(t, landTimeout, "the host's DLQ group to acknowledge the dead letters", func() (bool, string) {
		return acked(t, s, sqreal.GroupDLQ, "build_dlq", culpritBatch), s.Snapshot(t, queue)
	})
	held := s.StaysStuck(t, queue, stuckHeartbeats)
	if st := s.RequestState(t, queue, dependent); st != "batched" {
		t.Fatalf("control: the dependent is %q, want it stuck at batched\n%s", st, held)
	}
	if ws := wakes(t, s, queue, "mend/"); len(ws) != 0 {
		t.Fatalf("control: %d mend wake-ups without mend: %+v", len(ws), ws)
	}
	t.Logf("control: stuck across %d heartbeats of the orchestrator's speculate subscriber:\n%s", stuckHeartbeats, held)
	if !adopt {
		hostFactsQuiet(t, s, dependentBatch, dependent)
		return
	}

	// Adoption: the dead letters are gone (acknowledged, then collected), mend comes now.
	s.Eventually(t, time.Minute, "the host's GC to collect the culprit's dead letters", func() (bool, string) {
		n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'build_dlq' AND partition_key = ?", culpritBatch)
		return n == 0, fmt.Sprintf("%d rows left", n)
	})
	m = newMend(t, s)
	m.doctor(t)
	out, code := sqreal.Run(t, 2*time.Minute, nil, m.bin, "adopt", "--dsn", m.db.DSN, "--host-dsn", s.App.DSN, "--queue-dsn", s.Queue.DSN,
		"--stuck-bound", adoptBound)
	if code != 0 || !strings.Contains(out, queue+": woken") {
		t.Fatalf("mend adopt: exit %d, want 0 and %s woken\n%s", code, queue, out)
	}
	t.Logf("mend adopt:\n%s", out)
	if n := m.stuckRecords(t, queue); n != 1 {
		t.Fatalf("mend adopt left %d stuck-queue records of %s, want 1", n, queue)
	}
	m.run.Start(t)
	s.WaitRequests(t, landTimeout, queue, []string{dependent}, "landed")
	// The scan's wake-up may be recorded under a reason of its own, so only what the host saw is checked
	// here: one wake-up, naming a live batch.
	ws := wakes(t, s, queue, "mend/")
	if len(ws) != 1 || !liveStates[ws[0].BatchState] {
		t.Fatalf("mend's wake-ups after adoption: %+v; want one, naming a live batch", ws)
	}
	checkRead(t, s, []string{ws[0].ID})
}

// hostFactsQuiet establishes, on a stuck and otherwise quiet host, what the wake-topic rule (issue 42,
// branch wake42) has to go on: how long until the orchestrator releases speculate/<queue> (its offsets
// and lease rows gone), what queue_subscriber_heartbeats and queue_partition_leases hold meanwhile, and
// whether a row inserted on speculate/<queue> with no offsets row present is consumed, and how fast. The
// insert is what mend's wake-up is: it also proves the control was stuck only for want of one.
func hostFactsQuiet(t *testing.T, s *sqreal.Stack, liveBatch, stuckRequest string) {
	t.Helper()
	ctx := context.Background()
	var lastAck int64
	if err := s.QueueSQL.QueryRowContext(ctx, "SELECT COALESCE(MAX(updated_at), 0) FROM queue_offsets WHERE consumer_group = ? AND topic = 'speculate' AND partition_key = ?",
		sqreal.GroupOrchestrator, queue).Scan(&lastAck); err != nil {
		t.Fatal(err)
	}
	waited := s.WaitReleased(t, 4*time.Minute, sqreal.GroupOrchestrator, "speculate", queue)
	released := time.Now()
	t.Logf("FACT idle release: the orchestrator's speculate/%s offsets and lease rows went %v after its last ack (waited %v here)",
		queue, released.Sub(time.UnixMilli(lastAck)).Round(time.Second), waited.Round(time.Second))

	for _, q := range []string{
		"SELECT CONCAT('heartbeats: ', COUNT(*), ' rows, ', COUNT(DISTINCT consumer_group), ' groups, ', SUM(deregistered_at = 0), ' not deregistered, newest ', " +
			"CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED) - MAX(heartbeat_at), ' ms old, oldest ', CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED) - MIN(heartbeat_at), ' ms old') FROM queue_subscriber_heartbeats",
		"SELECT CONCAT('speculate heartbeats: ', COALESCE(GROUP_CONCAT(CONCAT(consumer_group, '/', subscriber_name) ORDER BY consumer_group), '(none)')) FROM queue_subscriber_heartbeats WHERE topic = 'speculate'",
		"SELECT CONCAT('leases: ', COUNT(*), ' rows: ', COALESCE(GROUP_CONCAT(CONCAT(consumer_group, ' ', topic, '/', partition_key) ORDER BY topic), '')) FROM queue_partition_leases",
		"SELECT CONCAT('offsets: ', COUNT(*), ' rows: ', COALESCE(GROUP_CONCAT(CONCAT(consumer_group, ' ', topic, '/', partition_key) ORDER BY topic), '')) FROM queue_offsets",
	} {
		var line string
		if err := s.QueueSQL.QueryRowContext(ctx, q).Scan(&line); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		t.Logf("FACT quiet host: %s", line)
	}

	// A wake-up by hand, shaped as the queue's own retrigger: {"id","queue"}, no metadata.
	const id = "realq/hand-wake"
	now := time.Now().UnixMilli()
	res, err := s.QueueSQL.ExecContext(ctx, `INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at,
		published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES ('speculate', ?, ?, NULL, ?, ?, ?, 0, 0, '', '', NULL)`,
		id, fmt.Sprintf(`{"id":%q,"queue":%q}`, liveBatch, queue), queue, now, now)
	if err != nil {
		t.Fatal(err)
	}
	offset, _ := res.LastInsertId()
	inserted := time.Now()
	s.Eventually(t, time.Minute, "the orchestrator to consume the hand wake-up", func() (bool, string) {
		n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = ? AND topic = 'speculate' AND partition_key = ? AND offset_acked >= ?",
			sqreal.GroupOrchestrator, queue, offset)
		return n == 1, "not acknowledged"
	})
	t.Logf("FACT discovery: a row inserted on speculate/%s with no queue_offsets row present was acknowledged %v later",
		queue, time.Since(inserted).Round(10*time.Millisecond))
	s.WaitRequests(t, landTimeout, queue, []string{stuckRequest}, "landed")
	t.Logf("FACT: the stuck request %s landed %v after the hand wake-up", stuckRequest, time.Since(inserted).Round(100*time.Millisecond))

	// A clean stop (SIGTERM) and a start of the orchestrator: what its rows say meanwhile.
	if err := s.Orchestrator.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := s.QueueInt(t, "SELECT COUNT(*) FROM queue_subscriber_heartbeats WHERE consumer_group IN (?, ?)", sqreal.GroupOrchestrator, sqreal.GroupDLQ)
	leases := s.QueueInt(t, "SELECT COUNT(*) FROM queue_partition_leases WHERE consumer_group IN (?, ?)", sqreal.GroupOrchestrator, sqreal.GroupDLQ)
	offsets := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group IN (?, ?)", sqreal.GroupOrchestrator, sqreal.GroupDLQ)
	t.Logf("FACT stopped orchestrator (SIGTERM): %d heartbeat rows, %d lease rows and %d offsets rows of its two groups left", stopped, leases, offsets)
	began := time.Now()
	s.Orchestrator.Start(t)
	s.Eventually(t, time.Minute, "the restarted orchestrator's speculate heartbeat", func() (bool, string) {
		return s.Heartbeat(t, sqreal.GroupOrchestrator, "speculate") > 0, "none"
	})
	t.Logf("FACT restarted orchestrator: its speculate heartbeat row is back %v after the start; %d offsets rows on speculate",
		time.Since(began).Round(10*time.Millisecond), s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE topic = 'speculate'"))
}

// TestDeadLetterWhileMendDown: mend ran (its group registered ahead on merge-signal_dlq/<queue>), then
// stopped; a merge signal the orchestrator cannot apply (a test trigger on the host's batch table refuses
// the culprit's transition to succeeded) dead-letters on merge-signal_dlq, whose DLQ controller fails the
// batch (ignoring the SUCCEEDED outcome) and wakes nothing. The host's DLQ group acknowledges at once;
// mend's row holds the host's GC back, so mend started afterwards records it: nothing lost, exactly one
// wake-up, the dependent lands. Control: without mend the dead letter is collected and the queue stays stuck.
func TestDeadLetterWhileMendDown(t *testing.T) {
	requireOptIn(t)
	t.Run("mend", func(t *testing.T) { deadLetterWhileDown(t, true, false, 0, false) })
	t.Run("control", func(t *testing.T) { deadLetterWhileDown(t, false, false, 0, false) })
}

// TestRestartAfterQuietSpell is TestDeadLetterWhileMendDown with the host quiet for longer than 2 × its
// lease duration before mend starts again: the orchestrator has released speculate/<queue> (no
// queue_offsets row of any host group is left on it), the state every lost wake-up leads to. mend doctor
// must pass there and the restarted mend must wake the queue within one pass (checkWokeInOnePass: the
// first pass that ran the queue woke it, by mend's log and its database clock) and register ahead on
// the *_dlq partitions of a second queue it never saw (queueUnseen), from the quiet host's evidence
// alone (subscriber heartbeats and the queue's request row); a typo'd wake topic
// (--wake-topic speculat) is still refused there by doctor and run (the rule: a live subscriber heartbeat
// on the topic, or a group's queue_offsets row on it; host.CheckWakeTopic). Control: the same without
// mend stays stuck.
//
// The quiet spell is the release (about 75 s after the last acknowledgement on speculate/<queue>) by
// default; MEND_TEST_REALQUEUE_QUIET=3m holds the host quiet for at least that long from the dead
// letter's acknowledgement (issue 42: "a queue quiet for 3 minutes"). The two halves run in parallel,
// each on a stack of its own: both are dominated by that wait.
func TestRestartAfterQuietSpell(t *testing.T) {
	requireOptIn(t)
	quiet := time.Duration(0)
	if v := os.Getenv(envQuiet); v != "" {
		var err error
		if quiet, err = time.ParseDuration(v); err != nil || quiet < 0 {
			t.Fatalf("%s=%q: want a Go duration", envQuiet, v)
		}
	}
	t.Run("mend", func(t *testing.T) { t.Parallel(); deadLetterWhileDown(t, true, true, quiet, false) })
	t.Run("control", func(t *testing.T) { t.Parallel(); deadLetterWhileDown(t, false, true, quiet, false) })
}

// envQuiet sets TestRestartAfterQuietSpell's least quiet spell (a Go duration; unset: until the release).
const envQuiet = "MEND_TEST_REALQUEUE_QUIET"

// deadLetterWhileDown runs the scenario; with inBinlog (and withMend, not quiet) mend run runs in binlog
// mode (TestDeadLetterWhileMendDownBinlog).
func deadLetterWhileDown(t *testing.T, withMend, quiet bool, quietFor time.Duration, inBinlog bool) {
	ctx := context.Background()
	// aheadCheck: after the quiet spell, the restarted mend must register ahead on a queue it never saw.
	aheadCheck := withMend && quiet
	queues := []string{queue}
	if aheadCheck {
		queues = append(queues, queueUnseen)
	}
	s := sqreal.Start(t, sqreal.Options{Queues: queues})
	observeSpeculate(t, s)
	warm := warmUp(t, s)
	var m *mendProc
	switch {
	case withMend && inBinlog:
		m = newMend(t, s, binlogMode...)
		m.doctor(t)
		m.run.Start(t)
		m.waitBinlogSaved(t, s)
		if err := m.run.Stop(); err != nil {
			t.Fatal(err)
		}
	case withMend:
		m = newMend(t, s)
		m.doctor(t)
		m.run.Start(t)
		s.Eventually(t, time.Minute, "mend to register ahead on merge-signal_dlq/"+queue, func() (bool, string) {
			return groupRows(t, s, "merge-signal_dlq", queue) == 1, "no row of group mend"
		})
		if err := m.run.Stop(); err != nil {
			t.Fatal(err)
		}
	}

	// The culprit is the queue's second request (request IDs are <queue>/<counter>).
	culpritID := queue + "/2"
	if _, err := s.AppSQL.ExecContext(ctx, fmt.Sprintf(`CREATE TRIGGER realq_refuse_success BEFORE UPDATE ON batch FOR EACH ROW
		BEGIN
			IF NEW.state = 'succeeded' AND JSON_CONTAINS(NEW.contains, JSON_QUOTE(%q)) THEN
				SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'realq: the culprit batch may not succeed';
			END IF;
		END`, culpritID)); err != nil {
		t.Fatal(err)
	}
	// The host's DLQ consumers are held until the dependent has built and waits on the culprit: a
	// dependent whose build signal came after the culprit failed would re-speculate by itself (seen on a
	// loaded machine), and nothing would be lost.
	s.CloseGate(t, sqreal.GroupDLQ, "", "realq: fail the culprit only after its dependent has built")
	culprit := s.Land(t, queue, "fake://realq/culprit")
	if culprit != culpritID {
		t.Fatalf("the culprit is %s, want %s (the trigger names it)", culprit, culpritID)
	}
	dependent := s.Land(t, queue, "fake://realq/dependent")
	culpritBatch, dependentBatch := batchOf(t, s, culprit), batchOf(t, s, dependent)
	settled := func() (bool, string) {
		dead := s.QueueInt(t, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'merge-signal_dlq' AND partition_key = ?", queue)
		built, desc := builtAndWaiting(t, s, dependentBatch)
		return dead > 0 && built, fmt.Sprintf("%d merge-signal_dlq rows, %s", dead, desc)
	}
	s.Eventually(t, landTimeout, "the culprit's dead letter and the dependent's builds", settled)
	hb := s.Heartbeat(t, sqreal.GroupOrchestrator, "speculate")
	s.Eventually(t, time.Minute, "a heartbeat of the orchestrator", func() (bool, string) {
		return s.Heartbeat(t, sqreal.GroupOrchestrator, "speculate") > hb, "waiting"
	})
	if ok, desc := settled(); !ok {
		t.Fatalf("the dependent did not stay settled for a heartbeat: %s", desc)
	}
	s.OpenGate(t, sqreal.GroupDLQ, "")
	s.WaitRequests(t, landTimeout, queue, []string{culprit}, "error")
	if st := s.BatchState(t, queue, culpritBatch); st != "failed" {
		t.Fatalf("the culprit's batch is %q, want failed by the host's merge-signal_dlq controller\n%s", st, s.Snapshot(t, queue))
	}
	if _, err := s.AppSQL.ExecContext(ctx, "DROP TRIGGER realq_refuse_success"); err != nil {
		t.Fatal(err)
	}
	s.Eventually(t, landTimeout, "the host's DLQ group to acknowledge the dead letter", func() (bool, string) {
		return acked(t, s, sqreal.GroupDLQ, "merge-signal_dlq", queue), s.Snapshot(t, queue)
	})
	if aheadCheck {
		// A queue mend has never seen: a request row, landed while mend is down, before the quiet spell.
		unseen := s.Land(t, queueUnseen, "fake://realq/unseen")
		s.WaitRequests(t, landTimeout, queueUnseen, []string{unseen}, "landed")
	}
	quietFrom := time.Now()

	dlqRows := func() int64 {
		return s.QueueInt(t, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'merge-signal_dlq' AND partition_key = ?", queue)
	}
	if quiet {
		waited := s.WaitReleased(t, 4*time.Minute, sqreal.GroupOrchestrator, "speculate", queue)
		t.Logf("the orchestrator released speculate/%s after %v of quiet", queue, waited.Round(time.Second))
		if n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE topic = 'speculate' AND partition_key = ?", queue); n != 0 {
			t.Fatalf("%d queue_offsets rows left on speculate/%s after the release", n, queue)
		}
		if rest := quietFor - time.Since(quietFrom); rest > 0 {
			// The longer quiet spell: the queue must not move, nor a host group come back to speculate/<queue>.
			before := s.Snapshot(t, queue)
			s.Eventually(t, rest+time.Minute, fmt.Sprintf("%v of quiet", quietFor), func() (bool, string) {
				if now := s.Snapshot(t, queue); now != before {
					t.Fatalf("the queue moved in its quiet spell:\nbefore:\n%s\nnow:\n%s", before, now)
				}
				if n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE topic = 'speculate' AND partition_key = ?", queue); n != 0 {
					t.Fatalf("%d queue_offsets rows came back on speculate/%s in the quiet spell", n, queue)
				}
				return time.Since(quietFrom) >= quietFor, "quiet"
			})
		}
		t.Logf("the host was quiet %v (since the dead letter's acknowledgement)", time.Since(quietFrom).Round(time.Second))
	}
	if !withMend {
		// The host's GC deletes an acknowledged partition's rows after about 10 s idle.
		s.Eventually(t, time.Minute, "the host's GC to collect the dead letter", func() (bool, string) {
			return dlqRows() == 0, fmt.Sprintf("%d rows left", dlqRows())
		})
		held := s.StaysStuck(t, queue, stuckHeartbeats)
		if st := s.RequestState(t, queue, dependent); st != "batched" {
			t.Fatalf("control: the dependent is %q, want it stuck at batched\n%s", st, held)
		}
		t.Logf("control: the dead letter was collected and the queue stayed stuck across %d heartbeats:\n%s", stuckHeartbeats, held)
		return
	}

	// Give the host's GC two heartbeats (20 s: twice its 10 s idle) to try, then check mend's row held it
	// (after a quiet spell it had longer than that already).
	if !quiet {
		hb := s.Heartbeat(t, sqreal.GroupOrchestrator, "speculate")
		s.Eventually(t, time.Minute, "two heartbeats of the orchestrator", func() (bool, string) {
			return s.Heartbeat(t, sqreal.GroupOrchestrator, "speculate") >= hb+15000, "waiting"
		})
	}
	if inBinlog {
		// Binlog mode holds nothing back: the host's GC collects the acknowledged dead letter.
		s.Eventually(t, time.Minute, "the host's GC to collect the dead letter while mend is down", func() (bool, string) {
			return dlqRows() == 0, fmt.Sprintf("%d rows left", dlqRows())
		})
		if n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'"); n != 0 {
			t.Fatalf("%d queue_offsets rows of group mend in binlog mode, want none", n)
		}
	} else if n := dlqRows(); n != 1 {
		t.Fatalf("%d merge-signal_dlq rows of %s left while mend was down, want 1 (held by mend's group)", n, queue)
	}
	if st := s.RequestState(t, queue, dependent); st != "batched" {
		t.Fatalf("the dependent is %q before mend restarts, want it stuck at batched\n%s", st, s.Snapshot(t, queue))
	}
	if quiet {
		refuseTypo(t, s, m, "quiet")
		m.doctor(t)
	}
	if aheadCheck {
		// The unseen queue's partitions are as quiet as the stuck one's: no host group holds a row on
		// them, and mend none on their *_dlq partitions, so a row of mend's there is new.
		s.WaitReleased(t, time.Minute, sqreal.GroupOrchestrator, "speculate", queueUnseen)
		for _, topic := range aheadTopics {
			if n := groupRows(t, s, topic, queueUnseen); n != 0 {
				t.Fatalf("mend's group has %d rows on %s/%s before it restarts, want none (it never saw the queue)", n, topic, queueUnseen)
			}
		}
	}
	restarted := time.Now()
	m.run.Start(t)
	if quiet {
		s.Eventually(t, 30*time.Second, "the restarted mend's wake-up", func() (bool, string) {
			return len(wakes(t, s, queue, "mend/")) > 0, "none yet"
		})
		t.Logf("the restarted mend woke the quiet queue %v after it started", time.Since(restarted).Round(100*time.Millisecond))
		m.checkWokeInOnePass(t, queue)
	}
	if aheadCheck {
		// Register ahead on the quiet host: from the orchestrator's live heartbeats on the topic (no host
		// group has a queue_offsets row there) and the queue's request row (host.DB.Queues).
		s.Eventually(t, time.Minute, "mend to register ahead on the unseen queue's *_dlq partitions", func() (bool, string) {
			var missing []string
			for _, topic := range aheadTopics {
				if groupRows(t, s, topic, queueUnseen) != 1 {
					missing = append(missing, topic+"/"+queueUnseen)
				}
			}
			return len(missing) == 0, "no row of group mend on " + strings.Join(missing, ", ")
		})
		t.Logf("the restarted mend had registered ahead on %v of %s (a queue it never saw, host quiet) at the latest %v after it started",
			aheadTopics, queueUnseen, time.Since(restarted).Round(100*time.Millisecond))
	}
	s.WaitRequests(t, landTimeout, queue, []string{dependent, warm}, "landed")
	s.Eventually(t, time.Minute, "mend to finish its record", func() (bool, string) {
		all, done := m.records(t, queue)
		return all == 1 && done == 1, fmt.Sprintf("%d records, %d done", all, done)
	})
	if n := checkMendWakes(t, s, m, queue); n != 1 {
		t.Errorf("mend woke the queue %d times for one dead letter, want once", n)
	}
	if inBinlog {
		// The restarted process's counts: the dead letter (collected before it started, so not in the
		// tables an import would read) recorded from the binary log at the saved position, no start over.
		// (Waited for: the count moves just after the recording returns, which a pass may beat.)
		var b binlogShown
		s.Eventually(t, time.Minute, "the restarted mend run's reader to count the dead letter", func() (bool, string) {
			b = m.shown(t)
			return b.mode == 1 && b.recorded >= 1, b.String()
		})
		if b.resets != 0 {
			t.Errorf("the restarted mend run: %s; want the dead letter recorded from its saved position, no start over", b)
		}
		if n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'"); n != 0 {
			t.Errorf("%d queue_offsets rows of group mend in binlog mode, want none", n)
		}
		t.Logf("mend run restarted in binlog mode: resumed at the saved position, recorded the collected dead letter from the log; %s", b)
	}
	if ws := wakes(t, s, queue, ""); len(ws) > 0 {
		var ids []string
		for _, w := range ws {
			ids = append(ids, w.ID+"→"+w.Batch+"("+w.BatchState+")")
		}
		t.Logf("speculate rows seen: %s", strings.Join(ids, ", "))
	}
}

// queueUnseen is TestRestartAfterQuietSpell's second queue: one request landed while mend was down,
// before the quiet spell, so mend's first sight of it is after its restart on the quiet host.
const queueUnseen = "realq-unseen"

// aheadTopics are *_dlq topics the restarted mend must register ahead on queueUnseen: those of
// queue-partitioned topics the orchestrator reads (subscribe.AheadTopicsDefault).
var aheadTopics = []string{"speculate_dlq", "merge-signal_dlq"}

// typoTopic is issue 30's typo of the wake topic: no group of the host reads it.
const typoTopic = "speculat"

// refuseTypo checks that mend doctor fails and mend run refuses to start with --wake-topic speculat
// (the same flags as m's run otherwise, but a metrics address of its own, since m's run may be
// running), naming the topic. host says which host it is ("quiet", "busy") for the messages.
func refuseTypo(t *testing.T, s *sqreal.Stack, m *mendProc, host string) {
	t.Helper()
	out, code := sqreal.Run(t, time.Minute, nil, m.bin, "doctor", "--dsn", m.db.DSN, "--host-dsn", s.App.DSN, "--queue-dsn", s.Queue.DSN,
		"--wake-topic", typoTopic)
	if code == 0 || !strings.Contains(out, typoTopic) {
		t.Fatalf("mend doctor --wake-topic %s on the %s host: exit %d, want a failure naming the topic\n%s", typoTopic, host, code, out)
	}
	args := append(withMetricsAddr(m.run.Args, freeAddr(t)), "--wake-topic", typoTopic)
	out, code = sqreal.Run(t, time.Minute, nil, m.bin, args...)
	if code <= 0 || !strings.Contains(out, typoTopic) {
		t.Fatalf("mend run --wake-topic %s on the %s host: exit %d, want it refused naming the topic\n%s", typoTopic, host, code, out)
	}
	t.Logf("--wake-topic %s refused on the %s host by doctor and run (run exit %d): %s", typoTopic, host, code, lastLine(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

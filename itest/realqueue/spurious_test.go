package realqueue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/sqreal"
	"github.com/mendq/mend/planner"
)

// groupRunwayMerge is the real runway's consumer group on submitqueue-merge (partition: the queue).
const groupRunwayMerge = "runway-merge"

// spuriousTraffic is how many requests TestSpuriousWakeupHarmless lands after the held merge, one per
// soakEvery, each tick also publishing a wake-up.
const spuriousTraffic = 4

// TestSpuriousWakeupHarmless answers issue 42's "prove with the real orchestrator that a spurious
// wake-up is either impossible by the rule or harmless, and say which": it is harmless. On a healthy
// queue with requests landing through the real gateway, wake-ups are published exactly as mend's
// planner publishes them (host.DB.Wake, opened as mend run opens it; the batch LiveBatches(queue, 1)
// names; the ID planner.WakeMessageID gives) at moments when the named batch is speculating, merging
// (held there by the queue's own consumer gate on runway's merge consumer) and whatever it is while
// traffic flows. Then, from the real tables, the services' logs and observer triggers: every wake-up
// was processed by the orchestrator's speculate consumer without error, every request landed, each in
// exactly one succeeded batch, no batch moved backwards or left a terminal state, no batch was
// dispatched to merge or merged twice, and no request's landing was recorded at two versions.
//
// Why it holds (submitqueue.md §4): the speculate consumer re-plans the whole queue from the stored
// state whatever message woke it, and the queue publishes such nudges itself (its recovery signal,
// UniqueID-named, "a duplicate is harmless — Speculate tolerates any batch state", finalize.go). A
// merging batch's re-dispatch uses the stable ID <batch>/merge-dispatch, which the store's dedupe
// swallows while the first dispatch is unconsumed.
func TestSpuriousWakeupHarmless(t *testing.T) {
	requireOptIn(t)
	ctx := context.Background()
	s := sqreal.Start(t, sqreal.Options{Queues: []string{queue}})
	observeSpeculate(t, s)
	observeOutcomes(t, s)
	ids := []string{warmUp(t, s)}

	// mend's host adapter, opened as mend run opens it (the wake-topic check on).
	h, err := host.Open(ctx, s.App.DSN, s.Queue.DSN, host.Options{RequireWakeConsumer: true, WakeConsumerIgnore: []string{"mend"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	var sent []string
	// wake publishes one wake-up as the planner's wake does (planner/wake.go): the queue's smallest live
	// batch, a fresh record's first ID. It returns the named batch's state when the row was inserted (the
	// observer's reading), "" when the queue had no live batch.
	// With want set, it publishes only while the batch is in that state by a read just before.
	wake := func(want string) string {
		t.Helper()
		live, err := h.LiveBatches(ctx, queue, 1)
		if err != nil {
			t.Fatalf("LiveBatches: %v", err)
		}
		if len(live) == 0 || want != "" && s.BatchState(t, queue, live[0]) != want {
			return ""
		}
		rec := mend.NewRecordID()
		w := mend.WakeUp{Queue: queue, MessageID: planner.WakeMessageID(rec, 1), BatchID: live[0], Epoch: 1, RecordID: rec}
		if err := h.Wake(ctx, w); err != nil {
			t.Fatalf("Wake: %v", err)
		}
		sent = append(sent, w.MessageID)
		ws := wakes(t, s, queue, w.MessageID)
		if len(ws) != 1 {
			t.Fatalf("the observer saw %d rows of wake-up %s, want 1", len(ws), w.MessageID)
		}
		return ws[0].BatchState
	}
	// wakeWhile publishes wake-ups until one lands while the named batch is in state.
	wakeWhile := func(state string) {
		t.Helper()
		s.Eventually(t, landTimeout, "a wake-up naming a "+state+" batch", func() (bool, string) {
			got := wake(state)
			return got == state, fmt.Sprintf("the last named a batch in state %q\n%s", got, s.Snapshot(t, queue))
		})
	}

	// Runway's merge consumer is held on the queue's partition: the head batch stays merging.
	s.CloseGate(t, groupRunwayMerge, queue, "realq: hold the head batch in merging")
	for i := range 2 {
		ids = append(ids, s.Land(t, queue, fmt.Sprintf("fake://realq/held-%d", i)))
	}
	wakeWhile("speculating")
	wakeWhile("merging")
	merging := wakes(t, s, queue, sent[len(sent)-1])[0].Batch
	// A second one after the first was consumed: the re-dispatch it causes must coalesce.
	waitConsumed(t, s, sent)
	if got := wake(""); got != "merging" {
		t.Fatalf("the second wake-up named a %q batch; want %s still merging (held)", got, merging)
	}
	waitConsumed(t, s, sent)
	if n := s.QueueInt(t, "SELECT COUNT(*) FROM realq_merge_log WHERE topic = 'submitqueue-merge' AND batch_id = ?", merging); n != 1 {
		t.Errorf("batch %s was dispatched to merge %d times while held, want once (the re-dispatch coalesces)", merging, n)
	}
	s.OpenGate(t, groupRunwayMerge, queue)

	// Traffic: a request every soakEvery, and a wake-up naming whatever batch is then the smallest live.
	tick := time.NewTicker(soakEvery) // the traffic's pace, not a synchronisation
	defer tick.Stop()
	for i := range spuriousTraffic {
		ids = append(ids, s.Land(t, queue, fmt.Sprintf("fake://realq/busy-%d", i)))
		<-tick.C
		wake("")
	}
	s.WaitRequests(t, 3*landTimeout, queue, ids, "landed")
	for range 2 { // and on the queue at rest: nothing live, nothing published
		if got := wake(""); got != "" {
			t.Errorf("a wake-up on the queue at rest named a %q batch", got)
		}
	}

	// Every wake-up was read and processed by the real speculate consumer, and none was refused.
	waitConsumed(t, s, sent)
	checkNoLoggedErrors(t, s, "speculate", sent)
	if n := s.QueueInt(t, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'speculate_dlq' AND id LIKE 'mend/%'"); n != 0 {
		t.Errorf("%d of the wake-ups dead-lettered on speculate_dlq", n)
	}
	checkHealthyOutcome(t, s, ids)
	states := map[string]int{}
	for _, w := range wakes(t, s, queue, "mend/") {
		states[w.BatchState]++
	}

	// Negative control of the log checks: a wake-up naming a batch that does not exist (which mend never
	// sends: it names the batch LiveBatches read just before) is refused by the speculate consumer, and
	// the checks above see it.
	bad := mend.WakeUp{Queue: queue, MessageID: planner.WakeMessageID(mend.NewRecordID(), 1), BatchID: queue + "/batch/none", Epoch: 1}
	if err := h.Wake(ctx, bad); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	var refused []string
	s.Eventually(t, time.Minute, "the orchestrator to log its refusal of a wake-up naming no batch", func() (bool, string) {
		refused = loggedErrors(t, s, "speculate", []string{bad.MessageID})
		return len(refused) > 0, "no error line names " + bad.MessageID
	})
	if l := processedLine(t, s, bad.MessageID); l != "" {
		t.Errorf("a wake-up naming no batch was logged as processed: %s", l)
	}
	t.Logf("negative control: %s", refused[0])

	t.Logf("%d wake-ups published as mend's planner publishes them, %d requests landed; the named batch's state at each insert: %v; "+
		"all processed by the orchestrator without error, e.g.:\n%s\n%s",
		len(sent), len(ids), states, processedLine(t, s, sent[0]), s.Snapshot(t, queue))
}

// observeOutcomes installs two more observer triggers (a test's own: they change nothing the queue
// reads): every transition of the host's batch table into realq_batch_log in the application database,
// and every row inserted on submitqueue-merge or merge-signal (the merge's dispatch and its result) into
// realq_merge_log in the queue database.
func observeOutcomes(t *testing.T, s *sqreal.Stack) {
	t.Helper()
	ctx := context.Background()
	app := []string{
		`CREATE TABLE realq_batch_log (
			seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			batch_id VARCHAR(255) NOT NULL,
			old_state VARCHAR(255) NOT NULL,
			new_state VARCHAR(255) NOT NULL,
			old_version INT NOT NULL,
			new_version INT NOT NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TRIGGER realq_batch_observer AFTER UPDATE ON batch FOR EACH ROW
			INSERT INTO realq_batch_log (batch_id, old_state, new_state, old_version, new_version)
			VALUES (NEW.id, OLD.state, NEW.state, OLD.version, NEW.version)`,
	}
	for _, q := range app {
		if _, err := s.AppSQL.ExecContext(ctx, q); err != nil {
			t.Fatalf("install the batch observer: %v\n%s", err, q)
		}
	}
	queueStmts := []string{
		`CREATE TABLE realq_merge_log (
			seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			topic VARCHAR(255) NOT NULL,
			id VARCHAR(255) NOT NULL,
			batch_id VARCHAR(255) NULL
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TRIGGER realq_merge_observer AFTER INSERT ON queue_messages FOR EACH ROW
		BEGIN
			IF NEW.topic IN ('submitqueue-merge', 'merge-signal') THEN
				INSERT INTO realq_merge_log (topic, id, batch_id) VALUES (NEW.topic, NEW.id,
					IF(JSON_VALID(CONVERT(NEW.payload USING utf8mb4)),
						JSON_UNQUOTE(JSON_EXTRACT(CONVERT(NEW.payload USING utf8mb4), '$.id')), NULL));
			END IF;
		END`,
	}
	for _, q := range queueStmts {
		if _, err := s.QueueSQL.ExecContext(ctx, q); err != nil {
			t.Fatalf("install the merge observer: %v\n%s", err, q)
		}
	}
}

// batchRank orders the batch states a transition may only move forward through (submitqueue.md §2);
// cancelling sits beside merging, and the terminal states last.
var batchRank = map[string]int{"creating": 0, "created": 1, "speculating": 2, "merging": 3, "cancelling": 3,
	"succeeded": 4, "failed": 4, "cancelled": 4}

// checkHealthyOutcome checks, from the real tables and the observers, that on a healthy queue every
// request of ids landed exactly once: each is a member of exactly one succeeded batch and its landing
// was recorded at one request version; no batch failed, moved backwards or out of a terminal state;
// and no batch was dispatched to merge or reported merged more than once.
func checkHealthyOutcome(t *testing.T, s *sqreal.Stack, ids []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if n := s.AppInt(t, `SELECT COUNT(*) FROM request_batch rb JOIN batch b ON b.queue = rb.queue AND b.id = rb.batch_id
			WHERE rb.queue = ? AND rb.request_id = ? AND b.state = 'succeeded'`, queue, id); n != 1 {
			t.Errorf("request %s is a member of %d succeeded batches, want 1\n%s", id, n, s.Snapshot(t, queue))
		}
	}
	if n := s.AppInt(t, "SELECT COUNT(*) FROM batch WHERE queue = ? AND state IN ('failed', 'cancelled', 'cancelling')", queue); n != 0 {
		t.Errorf("%d batches failed or were cancelled on a healthy queue\n%s", n, s.Snapshot(t, queue))
	}
	// The gateway materializes every log entry it consumes into request_log (asynchronously, from topic
	// log): one landing is one request version (a republished entry of the same transition carries the
	// same version).
	landed := map[string]int64{}
	s.Eventually(t, time.Minute, "the gateway to record every landing in request_log", func() (bool, string) {
		rows, err := s.AppSQL.QueryContext(ctx, `SELECT request_id, COUNT(DISTINCT request_version) FROM request_log
			WHERE queue = ? AND status = 'landed' GROUP BY request_id`, queue)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		clear(landed)
		for rows.Next() {
			var id string
			var n int64
			if err := rows.Scan(&id, &n); err != nil {
				t.Fatal(err)
			}
			landed[id] = n
		}
		for _, id := range ids {
			if landed[id] == 0 {
				return false, "no landed entry for " + id
			}
		}
		return true, ""
	})
	for _, id := range ids {
		if landed[id] != 1 {
			t.Errorf("request %s's landing is in request_log at %d request versions, want 1", id, landed[id])
		}
	}

	rows, err := s.AppSQL.QueryContext(ctx, "SELECT batch_id, old_state, new_state, old_version, new_version FROM realq_batch_log ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	var moves []string
	for rows.Next() {
		var id, from, to string
		var vf, vt int64
		if err := rows.Scan(&id, &from, &to, &vf, &vt); err != nil {
			t.Fatal(err)
		}
		moves = append(moves, fmt.Sprintf("%s %s→%s v%d→v%d", id, from, to, vf, vt))
		if batchRank[from] == 4 && from != to || batchRank[to] < batchRank[from] || vt < vf {
			t.Errorf("batch %s regressed: %s v%d → %s v%d", id, from, vf, to, vt)
		}
	}
	rows.Close()
	t.Logf("batch transitions: %s", strings.Join(moves, "; "))

	rows, err = s.QueueSQL.QueryContext(ctx, "SELECT topic, COALESCE(batch_id, ''), COUNT(*), GROUP_CONCAT(id ORDER BY seq) FROM realq_merge_log GROUP BY topic, batch_id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var topic, batch, msgIDs string
		var n int64
		if err := rows.Scan(&topic, &batch, &n, &msgIDs); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("batch %s has %d rows on %s, want 1: %s", batch, n, topic, msgIDs)
		}
	}
	rows.Close()
}

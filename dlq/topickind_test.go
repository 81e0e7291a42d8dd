package dlq_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/storage"
)

// Issue 57: runway's dead letters (merge-conflict-check_dlq,
// runway-merge_dlq) share the orchestrator's queue database and are
// repaired by runway's own DLQ controller; request topics are recorded for
// the audit. Recorded through the intake on a real server, neither counts
// as parked anywhere a person or an alert reads it (Status, which the
// metric mend_records reads; the console's totals, queues, parked page and
// would-page line), while a topic mend has never seen, and a dead letter
// of a topic mend repairs that it could not decode, still are.
func TestRecordedNotParked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, dlq.Config{})
	type want struct {
		kind   mend.TopicKind
		reason string
	}
	recs := map[mend.RecordID]want{}
	add := func(topic, partition, id, payload string, w want) {
		t.Helper()
		r := b.record(t, b.deadLetter(t, topic, partition, id, payload, sqtest.Failure{Count: 3, LastError: "conflict <script>"}))
		if r.State != mend.StateParked {
			t.Fatalf("%s: state %s; want parked (stored parked, whatever its kind)", topic, r.State)
		}
		if got := mend.KindOfTopic(r.Source.Topic, r.Snapshot.OriginalTopic); got != w.kind {
			t.Errorf("%s: kind %q; want %q", topic, got, w.kind)
		}
		if !strings.Contains(r.LastError, w.reason) {
			t.Errorf("%s: reason %q; want it to say %q", topic, r.LastError, w.reason)
		}
		recs[r.ID] = w
	}
	host := want{mend.TopicHost, "repaired by its host's own DLQ controller"}
	add(dlq.TopicRunwayMerge, "q", "q/batch/1/runway-merge", `{"id":"q/batch/1","queue":"q"}`, host)
	add(dlq.TopicRunwayMergeConflictCheck, "q", "q/batch/2/mcc", `{"id":"q/batch/2","queue":"q"}`, host)
	add(dlq.TopicStart, "q", "q/req/1/start", `{"id":"q/req/1","queue":"q"}`, want{mend.TopicAudit, "recorded for the audit"})
	add("mystery", "q", "q/m/1", `{"id":"q/batch/3","queue":"q"}`, want{mend.TopicUnknown, "unknown topic"})
	add(dlq.TopicConclude, "q", "q/batch/4/conclude", `{"id":7,"queue":"q"}`, want{mend.TopicRepaired, `"id" is a number`})
	parked := func(w want) bool { return !w.kind.Recorded() }

	t.Run("status", func(t *testing.T) {
		st, err := b.store.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var parkedN int64
		rec := map[mend.TopicKind]int64{}
		for _, q := range st {
			parkedN += q.Counts[mend.StateParked]
			for k, n := range q.Recorded {
				rec[k] += n
			}
		}
		if parkedN != 2 || rec[mend.TopicHost] != 2 || rec[mend.TopicAudit] != 1 {
			t.Errorf("status: %d parked, recorded %v; want 2 parked (the unknown topic, the undecodable conclude), host 2, audit 1", parkedN, rec)
		}
	})

	t.Run("console totals and queues", func(t *testing.T) {
		tot, err := b.store.ConsoleTotals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot.Parked != 2 || tot.Recorded != 3 {
			t.Errorf("totals: %d parked, %d recorded; want 2 and 3", tot.Parked, tot.Recorded)
		}
		// Runway's and the unknown topic's name no queue mend reads: filed
		// under the placeholder; the request and the conclude under q.
		qs, _, err := b.store.ConsoleQueueStatus(ctx, []string{dlq.QueueUnresolved, "q"})
		if err != nil {
			t.Fatal(err)
		}
		u, q := qs[0], qs[1]
		if u.Counts[mend.StateParked] != 1 || u.Recorded[mend.TopicHost] != 2 || u.Recorded[mend.TopicAudit] != 0 {
			t.Errorf("queue %s: %+v; want 1 parked (the unknown topic), recorded host 2", u.Queue, u)
		}
		if q.Counts[mend.StateParked] != 1 || q.Recorded[mend.TopicHost] != 0 || q.Recorded[mend.TopicAudit] != 1 {
			t.Errorf("queue q: %+v; want 1 parked (the conclude), recorded audit 1", q)
		}
	})

	t.Run("console parked page and recorded page", func(t *testing.T) {
		for _, recorded := range []bool{false, true} {
			got, err := b.store.ConsoleParked(ctx, storage.ParkedFilter{Recorded: recorded, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			m, err := b.store.ConsoleParkedMatching(ctx, storage.ParkedFilter{Recorded: recorded, ReasonContains: "dlq", Limit: 100}, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, list := range [][]mend.Record{got, m.Records} {
				var ids []mend.RecordID
				for _, r := range list {
					ids = append(ids, r.ID)
					if parked(recs[r.ID]) == recorded {
						t.Errorf("recorded=%v lists %s (%s, kind %s)", recorded, r.ID, r.Source.Topic, recs[r.ID].kind)
					}
				}
				for id, w := range recs {
					if parked(w) != recorded && !slices.Contains(ids, id) {
						t.Errorf("recorded=%v misses %s (kind %s)", recorded, id, w.kind)
					}
				}
			}
			if len(got) != map[bool]int{false: 2, true: 3}[recorded] {
				t.Errorf("recorded=%v: %d records; want %d", recorded, len(got), map[bool]int{false: 2, true: 3}[recorded])
			}
		}
	})

	t.Run("would page", func(t *testing.T) {
		al, err := b.store.ConsoleAlerts(ctx, storage.ConsoleAlertParams{OverdueAfter: time.Minute, SLOWindow: time.Minute, SLOBound: time.Minute, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, a := range al.Parked {
			n += a.Count
		}
		if len(al.Parked) != 2 || n != 2 {
			t.Errorf("parked alerts = %+v; want the two queues with one parked record each", al.Parked)
		}
	})
}

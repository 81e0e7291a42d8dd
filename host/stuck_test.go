package host_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
)

// explainRows runs EXPLAIN on query and returns, per row, the columns by
// name, in the traditional format (MySQL 9 defaults to the tree).
func explainRows(t *testing.T, b *bundle, query string, args ...any) []map[string]string {
	t.Helper()
	rows, err := b.w.App.Query("EXPLAIN FORMAT=TRADITIONAL "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []map[string]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for i, v := range vals {
			if bs, ok := v.([]byte); ok {
				v = string(bs)
			}
			m[strings.ToLower(cols[i])] = fmt.Sprint(v)
		}
		out = append(out, m)
	}
	return out
}

// The scan's read of every queue's live batches touches the live-state
// ranges of the membership index only, never the terminal rows the host
// accumulates forever: each read of queue_batch_state m is a ref on the
// (queue, state) prefix. The control, the same join with state IN (...),
// uses the queue alone, on both engines.
func TestStuckScanReadsOnlyLiveRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for q := range 20 {
		qn := fmt.Sprintf("q%02d", q)
		for i := range 60 {
			state := "succeeded"
			if i == 0 {
				state = "speculating"
			}
			b.seed(t, qn, fmt.Sprintf("%s/batch/%d", qn, i), state)
		}
	}
	b.exec(t, "ANALYZE TABLE queue_batch_state")
	b.exec(t, "ANALYZE TABLE batch")
	states := []any{"created", "speculating", "merging", "cancelling"}
	refsOfM := func(query string, args ...any) []string {
		var refs []string
		for _, r := range explainRows(t, b, query, args...) {
			if r["table"] == "m" {
				refs = append(refs, r["type"]+" "+r["key"]+" "+r["ref"])
			}
		}
		return refs
	}
	got := refsOfM(host.SQLStuckLive, states...)
	if len(got) != 4 {
		t.Fatalf("reads of the membership rows = %v; want one per live state", got)
	}
	for _, r := range got {
		if !strings.HasPrefix(r, "ref PRIMARY ") || !strings.HasSuffix(r, ",const") {
			t.Fatalf("reads of the membership rows = %v; want each a ref on (queue, state)", got)
		}
	}
	control := refsOfM(`SELECT m.queue FROM (SELECT DISTINCT queue FROM queue_batch_state) q
JOIN queue_batch_state m ON m.queue = q.queue AND m.state IN (?, ?, ?, ?)
JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id`, states...)
	if len(control) != 1 || strings.HasSuffix(control[0], ",const") {
		t.Fatalf("control = %v; want the queue alone (the check would not tell)", control)
	}

	scan, err := b.h.StuckScan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(scan.Queues) != 20 || len(scan.Queues[0].Live) != 1 || fmt.Sprint(scan.Queues[0].Live[0]) != fmt.Sprint(mend.Batch{Queue: "q00", ID: "q00/batch/0", State: mend.BatchSpeculating, Version: 1}) {
		t.Fatalf("scan = %d queues, first %+v; want 20, each with its one live batch", len(scan.Queues), scan.Queues[0])
	}
}

// The scan is byte-exact on the host's case-insensitive tables: a
// membership row whose batch the collation matches under another spelling
// is not a live batch, and a queue spelled two ways is two queues.
func TestStuckScanIsByteExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.seed(t, "q", "q/batch/1", "speculating")
	b.seed(t, "Q", "Q/batch/9", "created")
	// A membership row spelled differently from its batch.
	b.exec(t, "INSERT INTO queue_batch_state (queue, state, batch_id) VALUES ('q', 'created', 'Q/BATCH/1')")
	scan, err := b.h.StuckScan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range scan.Queues {
		for _, l := range q.Live {
			got = append(got, q.Queue+":"+l.ID+":"+string(l.State))
		}
	}
	if fmt.Sprint(got) != "[Q:Q/batch/9:created q:q/batch/1:speculating]" {
		t.Fatalf("live = %v", got)
	}
}

package itest

import (
	"context"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
)

// TestReconcilerLoopWakesEveryShard is the reconciler end-to-end as `mend
// run` runs it: two replicas' reconcile loops (Start, not RunOnce) find the
// due records of four queues by themselves, with no inline repair, fail
// each dead-lettered batch on the real host tables and wake its queue. On
// the Vitess backend the queues lie on both shards of mend's keyspace, so
// the idle pass's due listing (QueuesDue) scatters and merges there, every
// planner transaction runs in vtgate's SINGLE mode (one that touched a
// second shard would fail), and the host's tables are a plain MySQL
// database beside the cluster.
func TestReconcilerLoopWakesEveryShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorldWith(t, worldOpts{splitQueue: true})
	queues := []string{"loop-0", "loop-1", "loop-2", "loop-5"}
	w.requireBothShards(t, queues...)
	in := w.intake(t, nil)
	var srcs []mend.SourceID
	for _, q := range queues {
		b1, b2 := q+"/batch/1", q+"/batch/2"
		w.seed(t, q, b1, mend.BatchSpeculating, q+"/1", q+"/2")
		w.seed(t, q, b2, mend.BatchCreated, q+"/3")
		d := w.deadLetter(t, dead{topic: "speculate", partition: q, id: b1, payload: batchMsg(q, b1), blame: []string{b1}})
		res, err := in.Record(ctx, d)
		if err != nil || !res.Created {
			t.Fatalf("intake of %s: created %v, %v", q, res.Created, err)
		}
		srcs = append(srcs, res.Record.Source)
	}
	for _, holder := range []string{"a", "b"} {
		if err := w.actor(t, actorOpts{holder: holder}).rec.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	err := pollUntil(ctx, 60*time.Second, 10*time.Millisecond, func() (bool, error) {
		for _, s := range srcs {
			rec, err := w.store.RecordGet(ctx, s)
			if err != nil || rec.State != mend.StateDone {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the reconcile loops did not finish every record: %v", err)
	}
	for i, q := range queues {
		rec := w.record(t, srcs[i])
		ups := w.wakeUps(t, q, true)
		if len(ups) != 1 || ups[0].Batch.ID != q+"/batch/2" || ups[0].Meta[host.MetaRecordID] != rec.ID.String() {
			t.Errorf("queue %s: wake-ups %+v; want one, for batch 2, from record %s", q, ups, rec.ID)
		}
		if got := w.batchState(t, q, q+"/batch/1"); got != mend.BatchFailed {
			t.Errorf("queue %s: batch 1 is %s; want failed", q, got)
		}
		w.requireFannedOut(t, q, q+"/batch/1", host.RequestError)
	}
}

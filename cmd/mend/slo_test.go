package main

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

// preChangeStatusLatency is mend status's repair latency as it was before
// issue 47 (every done record, resolved ones too, from failed_at): the
// negative control the agreement must fail against.
const preChangeStatusLatency = `SELECT COUNT(*), COALESCE(MAX(GREATEST(TIMESTAMPDIFF(MICROSECOND, failed_at, updated_at), 0)), 0)
FROM mend_records WHERE state = 'done' AND updated_at >= NOW(6) - INTERVAL 1 HOUR AND failed_at IS NOT NULL`

// Issue 47: one SLO. On one store, three endings: a dead letter repaired
// 2 s after it failed; one parked at intake two hours ago and retried by an
// operator now, then repaired (it counts from the retry); and an
// undecodable one an operator resolved 10 minutes after it failed (not a
// repair: it does not count). The planner's histogram (what MendRepairSLO
// reads), storage.RepairLatency and mend status agree: two repairs, none
// near the 10-minute bound. The pre-change status read disagrees (three,
// the slowest two hours), which is the page after the fix the issue saw.
func TestOneSLO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	for _, seed := range []func() error{
		func() error { return w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
		func() error { return w.SeedBatch(ctx, "q", "q/batch/2", "speculating", "q/2") },
		func() error { return w.Join(ctx, "orchestrator", "speculate", "q") },
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}
	store, err := storage.Open(ctx, mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	create := func(msg, batch string, failedAgo time.Duration, state mend.State) mend.Record {
		t.Helper()
		rec, _, err := store.RecordCreate(ctx, mend.CreateParams{
			Source:   mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: msg},
			Snapshot: mend.Snapshot{Payload: []byte(`{"id":"` + batch + `","queue":"q"}`), FailureCount: 1, LastError: "boom", FailedAt: time.Now().Add(-failedAgo)},
			Target:   mend.Target{BatchID: batch, Desired: mend.OutcomeFailed},
			State:    state, Reason: map[mend.State]string{mend.StateParked: "test: parked"}[state],
			OpID: mend.NewOpID(), Actor: "test",
		})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	create("q/batch/1", "q/batch/1", 2*time.Second, mend.StatePending)
	late := create("q/batch/2", "q/batch/2", 2*time.Hour, mend.StateParked)
	if _, err := store.RecordRetry(ctx, storage.RetryParams{ID: late.ID, Actor: "operator/test", OpID: mend.NewOpID()}); err != nil {
		t.Fatal(err)
	}
	undecodable := create("garbage", "", 10*time.Minute, mend.StateParked)
	if _, err := store.RecordResolve(ctx, storage.ResolveParams{ID: undecodable.ID, Actor: "operator/test", OpID: mend.NewOpID(), Reason: "nothing to repair"}); err != nil {
		t.Fatal(err)
	}

	hdb, err := host.Open(ctx, appDB.DSN, queueDB.DSN, host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hdb.Close()
	m := newMetrics()
	p, err := planner.New(planner.Config{Store: store, Batches: hdb, Waker: hdb, Hooks: m.plannerHooks(),
		BackoffFunc: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fence.New(store, fence.Config{Holder: "slo-test", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	le, err := f.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(ctx, le); err != nil {
		t.Fatal(err)
	}
	_ = le.Release(ctx)

	var hist *dto.Histogram
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() == "mend_repair_latency_seconds" {
			hist = fam.GetMetric()[0].GetHistogram()
		}
	}
	if hist == nil || hist.GetSampleCount() != 2 {
		t.Fatalf("mend_repair_latency_seconds = %v; want 2 repairs (the resolved letter is not one)", hist)
	}
	var over10m uint64 = hist.GetSampleCount()
	for _, b := range hist.GetBucket() {
		if b.GetUpperBound() == 600 {
			over10m -= b.GetCumulativeCount()
		}
	}
	if over10m != 0 {
		t.Errorf("the histogram has %d repairs over 10 minutes; want 0 (the retried one counts from its retry): MendRepairSLO would page", over10m)
	}

	l, err := store.RepairLatency(ctx, time.Hour, 5)
	if err != nil {
		t.Fatal(err)
	}
	// Two repairs: p50 is the faster, max the slower; their sum is the
	// histogram's, to the microsecond (the same SQL computed both).
	if got := (l.P50 + l.Max).Seconds(); l.Count != 2 || math.Abs(got-hist.GetSampleSum()) > 2e-6 || l.Max > time.Minute {
		t.Errorf("RepairLatency = %+v (sum %v s); histogram count %d sum %v s: they disagree", l, got, hist.GetSampleCount(), hist.GetSampleSum())
	}
	if out := opsMust(t, "status", "--dsn", mendDB.DSN).stdout; !strings.Contains(out, ": 2 repairs,") {
		t.Errorf("mend status does not report the 2 repairs:\n%s", out)
	}

	// The console (issue 46 beside 47): its latency for the queue and the
	// hour, and its MendRepairSLO condition (slower than 10 minutes), read
	// the same definition: two repairs, none slow.
	act, err := store.ConsoleActivity(ctx, 60, []string{"q"})
	if err != nil {
		t.Fatal(err)
	}
	if ql := act.Latency.Queues["q"]; act.Latency.Count != 2 || act.Latency.Max > time.Minute || ql.Count != 2 || ql.P99 > time.Minute {
		t.Errorf("console latency = %+v, queue q %+v; want 2 repairs, none over a minute, as the histogram", act.Latency, ql)
	}
	alerts, err := store.ConsoleAlerts(ctx, storage.ConsoleAlertParams{OverdueAfter: 10 * time.Minute, SLOWindow: time.Hour, SLOBound: 10 * time.Minute, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts.SlowRepairs) != 0 {
		t.Errorf("the console's MendRepairSLO condition lists %+v; want none (the resolved letter is no repair, the retried one counts from its retry)", alerts.SlowRepairs)
	}

	// The negative control: the pre-change status read on the same store.
	var n int64
	var maxUS int64
	if err := mendDB.SQL(t).QueryRowContext(ctx, preChangeStatusLatency).Scan(&n, &maxUS); err != nil {
		t.Fatal(err)
	}
	if uint64(n) == hist.GetSampleCount() && time.Duration(maxUS)*time.Microsecond < 10*time.Minute {
		t.Errorf("the pre-change status read (%d repairs, max %s) agrees with the histogram: the test cannot tell the definitions apart", n, time.Duration(maxUS)*time.Microsecond)
	}
}

package bench

import (
	"context"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
)

// TestLimitStormRepairs holds the limit storm to the obligations it stands
// for (bench/scale_limit_test.go): every branch of the decision table on the
// host's real tables, one wake-up naming the live batch that the real
// consumer's strict decoder accepts, a RequestLog per finished member, and a
// second pass (the repeat after a crash before LimitDone) that changes
// nothing and publishes nothing new.
func TestLimitStormRepairs(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
	raw := db.SQL(t)
	w := sqtest.World{App: raw, Queue: raw}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.ExecContext(ctx, limitStormTable); err != nil {
		t.Fatal(err)
	}
	must(w.SeedBatch(ctx, "q", "q/batch/b1", "speculating", "q/r1", "q/r2")) // failed, fanned out
	must(w.SeedBatch(ctx, "q", "q/batch/b2", "merging", "q/r3"))             // a merge may be in flight: left alone
	must(w.SeedBatch(ctx, "q", "q/batch/b3", "merging", "q/r4"))             // succeeded: never failed, finished as landed
	if ok, err := w.Transition(ctx, "q", "q/batch/b3", 1, "merging", "succeeded"); err != nil || !ok {
		t.Fatalf("transition b3: %v %v", ok, err)
	}
	must(w.SeedBatch(ctx, "q", "q/batch/z-live", "created", "q/live"))

	var deliveries []dlq.Delivery
	for _, b := range []string{"q/batch/b1", "q/batch/b2", "q/batch/b3", "q/batch/gone"} {
		deliveries = append(deliveries, dlq.Delivery{Source: mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: b},
			Payload: []byte(`{"id":"` + b + `","queue":"q"}`), FailureCount: 1, LastError: "boom"})
	}
	pool := openLimitPool(t, db.DSN, nil)
	for _, d := range deliveries {
		args, err := limitStormRecord(d)
		must(err)
		_, err = pool.ExecContext(ctx, limitStormIntake+"(?, ?, ?, ?, ?, ?)"+limitStormIntakeTail, args...)
		must(err)
	}
	st := &limitStormStats{firstW: map[string]time.Time{}, want: 1 << 30, all: make(chan struct{})}
	l := &limitStorm{mendDB: pool, appDB: pool, queueDB: pool, workers: 2, interval: time.Hour, st: st, nowMS: func() int64 { return 1 }}
	must(l.pass(ctx))

	state := func(id string) string {
		t.Helper()
		b, err := w.Batch(ctx, "q", id)
		must(err)
		return b.State
	}
	for id, want := range map[string]string{"q/batch/b1": "failed", "q/batch/b2": "merging", "q/batch/b3": "succeeded", "q/batch/z-live": "created"} {
		if got := state(id); got != want {
			t.Errorf("batch %s is %s; want %s", id, got, want)
		}
	}
	for id, want := range map[string]string{"q/r1": "error", "q/r2": "error", "q/r3": "batched", "q/r4": "landed", "q/live": "batched"} {
		r, err := w.Request(ctx, "q", id)
		must(err)
		if r.State != want {
			t.Errorf("request %s is %s; want %s", id, r.State, want)
		}
	}
	if n := count(t, raw, "SELECT COUNT(*) FROM bench_limit_dl WHERE done = 0"); n != 1 {
		t.Errorf("%d dead letters undone; want 1 (the merging batch's)", n)
	}
	wakes, err := w.ConsumeSpeculate(ctx, "q", true)
	must(err)
	if len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/b2" {
		t.Fatalf("wake-ups = %+v; want one naming q/batch/b2, the smallest live (merging) batch", wakes)
	}
	for _, rid := range []string{"q/r1", "q/r2", "q/r4"} {
		logs, err := w.ConsumeLog(ctx, rid)
		must(err)
		if len(logs) != 1 {
			t.Errorf("request %s: %d RequestLogs; want 1", rid, len(logs))
		}
	}
	messages := count(t, raw, "SELECT COUNT(*) FROM queue_messages")

	// The repeat of the page, as after a crash before LimitDone.
	_, err = raw.ExecContext(ctx, "UPDATE bench_limit_dl SET done = 0")
	must(err)
	must(l.pass(ctx))
	if n := count(t, raw, "SELECT COUNT(*) FROM queue_messages"); n != messages {
		t.Errorf("the repeated page published %d messages more; want none (IDs coalesce)", n-messages)
	}
	if got := state("q/batch/b2"); got != "merging" {
		t.Errorf("after the repeat the merging batch is %s", got)
	}
}

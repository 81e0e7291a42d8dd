package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// Issue 30: a merging batch is waited on for --grace by design, yet
// mend_oldest_due_seconds read 669 at 11 minutes (it was the oldest open
// record's age) and MendRepairStuck pages on it. Two queues: "merging"
// holds a waiting record 11 minutes old whose next attempt is 5 minutes
// away (an intended wait), "stuck" a pending record due for 11 minutes
// that nobody repaired. The due gauge pages only on stuck; the open gauge
// shows both; status --json says the same.
func TestOldestDueIsTheDueOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, q := range []string{"merging", "stuck"} {
		if _, _, err := store.RecordCreate(ctx, mend.CreateParams{
			Source: mend.SourceID{Queue: q, Topic: "merge-signal_dlq", Partition: q, MessageID: q + "/batch/1"},
			Target: mend.Target{BatchID: q + "/batch/1", Desired: mend.OutcomeFailed}, OpID: mend.NewOpID(), Actor: "test",
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, stmt := range []string{
		"UPDATE mend_records SET state = 'waiting', created_at = NOW(6) - INTERVAL 11 MINUTE, next_attempt_at = NOW(6) + INTERVAL 5 MINUTE WHERE queue = 'merging'",
		"UPDATE mend_records SET created_at = NOW(6) - INTERVAL 11 MINUTE, next_attempt_at = NOW(6) - INTERVAL 11 MINUTE WHERE queue = 'stuck'",
	} {
		if _, err := db.SQL(t).ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 60 }

	reg := prometheus.NewRegistry()
	reg.MustRegister(newSQLCollector(ctx, store, slog.New(slog.DiscardHandler)))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauge := map[string]map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					if gauge[f.GetName()] == nil {
						gauge[f.GetName()] = map[string]float64{}
					}
					gauge[f.GetName()][l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	due, open := gauge["mend_oldest_due_seconds"], gauge["mend_oldest_open_seconds"]
	if v, ok := due["merging"]; !ok || v != 0 {
		t.Errorf("mend_oldest_due_seconds{queue=merging} = %v (present %v); want 0: a record waiting on a merge within grace is not due", v, ok)
	}
	if v := due["stuck"]; !near(v, 660) {
		t.Errorf("mend_oldest_due_seconds{queue=stuck} = %v; want about 660", v)
	}
	if v := open["merging"]; !near(v, 660) {
		t.Errorf("mend_oldest_open_seconds{queue=merging} = %v; want about 660 (the intended wait shows here)", v)
	}
	if v := open["stuck"]; !near(v, 660) {
		t.Errorf("mend_oldest_open_seconds{queue=stuck} = %v; want about 660", v)
	}

	var st []queueStatusJSON
	if err := json.Unmarshal([]byte(opsMust(t, "status", "--dsn", db.DSN, "--json").stdout), &st); err != nil || len(st) != 2 {
		t.Fatalf("status --json = %+v, %v; want two queues", st, err)
	}
	for _, q := range st {
		wantDue := map[string]float64{"merging": 0, "stuck": 660}[q.Queue]
		if !near(q.OldestDueSeconds, wantDue) || (wantDue == 0 && q.OldestDueSeconds != 0) || !near(q.OldestOpenSeconds, 660) {
			t.Errorf("status --json %s: oldest_due_seconds %v, oldest_open_seconds %v; want %v and about 660, as the metrics", q.Queue, q.OldestDueSeconds, q.OldestOpenSeconds, wantDue)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// Issue 30: status listed mend-reconcile/replica/04 and
// mend-subscribe/mend/replica/00 as queues, and /metrics carried series
// such as mend_records{queue="mend-reconcile/replica/04"}. With two slot
// leases held beside queue q's record, status (table and JSON) and the
// metrics' queue labels show q alone; lease list shows all three, the
// slots marked internal.
func TestSlotLeasesStayInternal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	slots := []string{reconcile.ReplicaSlotName(4), subscribe.SlotName(subscribe.GroupDefault, 0)}
	for _, name := range slots {
		if _, err := store.LeaseAcquire(ctx, name, "replica-a", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...)

	var st []queueStatusJSON
	if err := json.Unmarshal([]byte(opsMust(t, "status", "--dsn", db.DSN, "-o", "json").stdout), &st); err != nil || len(st) != 1 || st[0].Queue != "q" {
		t.Errorf("status -o json = %+v, %v; want queue q alone", st, err)
	}
	if out := opsMust(t, "status", "--dsn", db.DSN).stdout; strings.Contains(out, "mend-") {
		t.Errorf("status lists a slot lease:\n%s", out)
	}

	m := newMetrics()
	col := newSQLCollector(ctx, store, slog.New(slog.DiscardHandler))
	col.onQueue = m.touchQueue
	m.reg.MustRegister(col)
	for _, name := range slots { // the fence's hooks see the slot terms too
		m.fenceHooks().OnAcquired(mend.Term{Queue: name, Holder: "replica-a", Epoch: 1})
		m.fenceHooks().OnLost(mend.Term{Queue: name, Holder: "replica-a", Epoch: 1}, nil)
	}
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sawQ := false
	for _, f := range families {
		for _, mm := range f.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() != "queue" {
					continue
				}
				sawQ = sawQ || l.GetValue() == "q"
				if storage.SlotLease(l.GetValue()) {
					t.Errorf("%s has a series for the slot lease %s", f.GetName(), l.GetValue())
				}
			}
		}
	}
	if !sawQ {
		t.Error("no metric has a series for queue q")
	}

	var leases []map[string]any
	if err := json.Unmarshal([]byte(opsMust(t, "lease", "list", "--dsn", db.DSN, "-o", "json").stdout), &leases); err != nil || len(leases) != 2 {
		t.Fatalf("lease list -o json = %v, %v; want the two slot leases (q was never leased)", leases, err)
	}
	for _, l := range leases {
		if l["internal"] != true {
			t.Errorf("lease list: %v is not marked internal", l)
		}
	}
	if out := opsMust(t, "lease", "list", "--dsn", db.DSN).stdout; strings.Count(out, "internal") != 2 || !strings.Contains(out, "KIND") {
		t.Errorf("lease list =\n%s\nwant both slot leases marked internal in the KIND column", out)
	}
	for name, want := range map[string]bool{"q": false, "mend-reconcile/replica/x": false, "mend-subscribe/g/replica/15": true, reconcile.ReplicaSlotName(15): true} {
		if got := storage.SlotLease(name); got != want {
			t.Errorf("SlotLease(%q) = %v; want %v", name, got, want)
		}
	}
}

// Issue 30: mend_subscribe_unrecordable_total was absent until first
// incremented, although every counter is documented to exist at 0.
func TestSubscribeCountersStartAtZero(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	m.subscribeHooks()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, f := range families {
		seen[f.GetName()] += len(f.GetMetric())
	}
	if n := seen["mend_subscribe_unrecordable_total"]; n != len(dlqTopics()) {
		t.Errorf("mend_subscribe_unrecordable_total has %d series; want one per DLQ topic (%d), at 0", n, len(dlqTopics()))
	}
	if n := seen["mend_subscribe_rows_total"]; n != 4 {
		t.Errorf("mend_subscribe_rows_total has %d series; want 4 results at 0", n)
	}
}

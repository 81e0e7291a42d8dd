package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// Issue 57: a runway dead letter recorded through the intake is not
// counted in mend_records{state="parked"} (what MendRecordsParked reads)
// nor in mend status's PARKED column; mend_records_recorded and the
// RECORDED column show it apart. A dead letter of a topic mend has never
// seen, in the same queue, is parked and counted, as before.
func TestRecordedNotCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	in, err := dlq.New(store, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []dlq.Row{
		{Topic: "runway-merge_dlq", OriginalTopic: "runway-merge", PartitionKey: "q", ID: "q/batch/1/merge", Payload: []byte(`{"id":"q/batch/1"}`), LastError: "merge conflict"},
		{Topic: "merge-conflict-check_dlq", OriginalTopic: "merge-conflict-check", PartitionKey: "q", ID: "q/batch/2/mcc", Payload: []byte(`{"id":"q/batch/2"}`), LastError: "x"},
		{Topic: "mystery_dlq", OriginalTopic: "mystery", PartitionKey: "q", ID: "q/m/1", Payload: []byte(`{}`), LastError: "x"},
	} {
		if _, err := in.Record(ctx, d.Delivery()); err != nil {
			t.Fatal(err)
		}
	}
	q := dlq.QueueUnresolved

	reg := prometheus.NewRegistry()
	reg.MustRegister(newSQLCollector(ctx, store, slog.New(slog.DiscardHandler)))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["queue"] != q {
				continue
			}
			switch f.GetName() {
			case "mend_records":
				got["records/"+labels["state"]] = m.GetGauge().GetValue()
			case "mend_records_recorded":
				got["recorded/"+labels["kind"]] = m.GetGauge().GetValue()
			}
		}
	}
	if got["records/parked"] != 1 || got["recorded/host"] != 2 || got["recorded/audit"] != 0 {
		t.Errorf("metrics for %s = %v; want records/parked 1 (the unknown topic), recorded/host 2", q, got)
	}

	code, out, errOut := mendCmd(t, "status", "--dsn", db.DSN)
	if code != 0 {
		t.Fatalf("status: exit %d: %s %s", code, out, errOut)
	}
	lines := strings.Split(out, "\n")
	header := strings.Fields(lines[0])
	if header[4] != "PARKED" || !strings.HasSuffix(lines[0], "FAILING  RECORDED") {
		t.Fatalf("status header %q; want PARKED fifth and RECORDED last", lines[0])
	}
	var row []string
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == q {
			row = f
		}
	}
	if row == nil || row[4] != "1" || !strings.HasSuffix(strings.Join(row, " "), "2 (host 2)") {
		t.Errorf("status row of %s = %q; want PARKED 1 and RECORDED \"2 (host 2)\"\n%s", q, row, out)
	}
}

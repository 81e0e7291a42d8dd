package main

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/subscribe"
)

// mend run alone, with no linked-in code, beside the host's own DLQ group
// and GC: the stuck queue of the original bug is recorded from the DLQ,
// repaired and woken, and the group's watermark then lets the GC collect
// the dead letter. mend subscribe, status and doctor show the group.
func TestRunSubscribes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	mendRun := func(args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Main(ctx, args, &out, &errOut, func(string) string { return "" }); code != exitOK {
			t.Fatalf("mend %s: exit %d\n%s\n%s", strings.Join(args[:1], " "), code, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	run := []string{"run", "--once", "--dsn", mendDB.DSN, "--host-dsn", appDB.DSN, "--queue-dsn", queueDB.DSN,
		"--subscribe-settle", "1s", "--subscribe-interval", "50ms"}

	for _, seed := range []func() error{
		func() error { return w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
		func() error { return w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/2") },
		func() error {
			return w.Publish(ctx, "speculate", "q", "q/batch/1", []byte(`{"id":"q/batch/1","queue":"q"}`), nil)
		},
		func() error { return w.Join(ctx, "orchestrator", "speculate", "q") }, // the host reads speculate/q
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}
	mendRun(run...) // joins speculate_dlq/q ahead: the orchestrator has joined speculate/q

	// The speculate message fails for good; the host's DLQ group acks it at
	// once and its GC runs: mend's row, still at 0, holds the GC back.
	if err := w.MoveToDLQ(ctx, "speculate", "q", "q/batch/1", sqtest.Failure{Count: 3, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
		t.Fatal(err)
	}
	if n, err := w.GC(ctx, "speculate_dlq"); err != nil || n != 0 {
		t.Fatalf("GC deleted %d (%v) before mend recorded the dead letter", n, err)
	}
	out, _ := mendRun("status", "--dsn", mendDB.DSN, "--queue-dsn", queueDB.DSN)
	if !strings.Contains(out, `group "mend"`) || !strings.Contains(out, "speculate_dlq") {
		t.Errorf("status shows no lag:\n%s", out)
	}
	out, _ = mendRun("status", "--dsn", mendDB.DSN, "--queue-dsn", queueDB.DSN, "--json")
	if !strings.Contains(out, `"subscription"`) || !strings.Contains(out, `"rows": 1`) {
		t.Errorf("status --json shows no lag of one row:\n%s", out)
	}

	mendRun(run...)
	var state string
	if err := mendDB.SQL(t).QueryRow("SELECT state FROM mend_records WHERE message_id = 'q/batch/1'").Scan(&state); err != nil || state != "done" {
		t.Fatalf("record: %q, %v; want done", state, err)
	}
	if b, _ := w.Batch(ctx, "q", "q/batch/1"); b.State != "failed" {
		t.Errorf("batch 1 = %s; want failed", b.State)
	}
	wakes, err := w.ConsumeSpeculate(ctx, "q", true)
	if err != nil || len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/2" {
		t.Fatalf("speculate = %+v, %v; want one wake-up naming q/batch/2", wakes, err)
	}
	if n, err := w.GC(ctx, "speculate_dlq"); err != nil || n != 1 {
		t.Fatalf("GC deleted %d (%v) after mend released the dead letter; want 1", n, err)
	}

	out, _ = mendRun("subscribe", "--queue-dsn", queueDB.DSN)
	if !strings.Contains(out, "speculate_dlq") {
		t.Errorf("mend subscribe:\n%s", out)
	}
	// As run --once runs it: offsets (auto would read the binary log here).
	out, _ = mendRun("doctor", "--dsn", mendDB.DSN, "--host-dsn", appDB.DSN, "--queue-dsn", queueDB.DSN, "--subscribe-mode", "offsets")
	if !strings.Contains(out, "subscription queue_offsets") || !strings.Contains(out, "subscription lag") {
		t.Errorf("doctor checks no subscription:\n%s", out)
	}
	out, _ = mendRun("subscribe", "--queue-dsn", queueDB.DSN, "--remove")
	if !strings.Contains(out, "add --yes") {
		t.Errorf("subscribe --remove without --yes:\n%s", out)
	}
	if _, ok, _ := w.Acked(ctx, "mend", "speculate_dlq", "q"); !ok {
		t.Fatal("--remove without --yes removed the group")
	}
	out, _ = mendRun("subscribe", "--queue-dsn", queueDB.DSN, "--remove", "--yes")
	if !strings.Contains(out, "left 1 partition") {
		t.Errorf("subscribe --remove --yes:\n%s", out)
	}
	if _, ok, _ := w.Acked(ctx, "mend", "speculate_dlq", "q"); ok {
		t.Fatal("the group is still registered")
	}

	// --subscribe=false: run joins nothing.
	mendRun(append(run, "--subscribe=false")...)
	if _, ok, _ := w.Acked(ctx, "mend", "speculate_dlq", "q"); ok {
		t.Fatal("run --subscribe=false joined the group")
	}
}

func TestSubscribeMetrics(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	h := m.subscribeHooks()
	h.OnPass(subscribe.PassStats{Recorded: 3, Already: 1, Dropped: 2, Duration: time.Millisecond, OpenRead: subscribe.OpenStale, OpenLapsed: true,
		Lag:         []subscribe.TopicLag{{Topic: "speculate_dlq", Partitions: 2, Rows: 5, Oldest: time.Now().Add(-time.Minute)}},
		Failing:     1,
		FailingRows: []subscribe.Failing{{Topic: "buildsignal_dlq", Partition: "b-1", Offset: 9, Attempts: 4, LastError: "boom", ParkAfter: 10}}})
	h.OnUnrecordable("speculate_dlq", "q", 7, errors.New("boom"))
	rec := httptest.NewRecorder()
	newHTTPHandler(m, func(context.Context) error { return nil }, &scrubber{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`mend_subscribe_rows_total{result="recorded"} 3`,
		`mend_subscribe_rows_total{result="dropped"} 2`,
		`mend_subscribe_unrecordable_total{topic="speculate_dlq"} 1`,
		`mend_subscribe_lag_rows{topic="speculate_dlq"} 5`,
		`mend_subscribe_lag_seconds{topic="speculate_dlq"} 6`, // about 60 s
		`mend_subscribe_pass_seconds_count 1`,
		`mend_subscribe_failing_row_attempts{partition="b-1",topic="buildsignal_dlq"} 4`,
		`mend_subscribe_open_reads_total{result="stale"} 1`,
		`mend_subscribe_open_reads_total{result="usable"} 0`,
		`mend_subscribe_open_view_lapsed 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestDoctorOpenTransactions: doctor tries the read a pass makes of the
// queue database's open transactions: with PROCESS the line is ok, without
// it a warning names what is at risk and the grant.
func TestDoctorOpenTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	base := []string{"SELECT ON %s.queue_messages", "SELECT, INSERT, UPDATE ON %s.queue_offsets"}
	for _, c := range []struct {
		name   string
		grants []string
		status doctor.Status
		want   []string
	}{
		{"with PROCESS", append(append([]string(nil), base...), "PROCESS ON *.*"), doctor.OK, []string{"however long"}},
		{"without PROCESS", base, doctor.Warn, []string{"held open longer than the window", "GRANT PROCESS ON *.* TO '"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checks := doctor.Subscription(ctx, doctor.SubscriptionParams{QueueDSN: queueDB.User(t, c.grants...), Group: "mend", WarnAge: time.Hour})
			var got *doctor.Check
			for i := range checks {
				if checks[i].Name == "subscription open transactions" {
					got = &checks[i]
				}
			}
			if got == nil {
				t.Fatalf("no open-transactions line in %+v", checks)
			}
			if got.Status != c.status {
				t.Fatalf("status %s, want %s: %+v", got.Status, c.status, *got)
			}
			for _, w := range c.want {
				if !strings.Contains(got.Detail+" "+got.Fix, w) {
					t.Errorf("line %+v lacks %q", *got, w)
				}
			}
		})
	}
}

// TestSubscribeShowsHeld: mend subscribe and mend status name each
// partition whose watermark has waited long on a row, with that row's
// offset, message ID and the host's last error, escaped: the error quotes
// a payload that carries terminal control bytes.
func TestSubscribeShowsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	old := time.Now().Add(-time.Hour)
	w := sqtest.World{Queue: queueDB.SQL(t), NowMS: func() int64 { return old.UnixMilli() }}
	if err := w.Join(ctx, "mend", "buildsignal_dlq", "b-1"); err != nil {
		t.Fatal(err)
	}
	if err := w.Publish(ctx, "buildsignal", "b-1", "sig-1", []byte(`{"build_id":"b-1"}`), nil); err != nil {
		t.Fatal(err)
	}
	evil := "lookup of build \x1b[2J\nFAKE LINE failed"
	if err := w.MoveToDLQ(ctx, "buildsignal", "b-1", "sig-1", sqtest.Failure{Count: 3, LastError: evil}); err != nil {
		t.Fatal(err)
	}
	mendRun := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Main(ctx, args, &out, &errOut, func(string) string { return "" }); code != exitOK {
			t.Fatalf("mend %s: exit %d\n%s\n%s", args[0], code, out.String(), errOut.String())
		}
		return out.String()
	}
	for _, out := range []string{
		mendRun("subscribe", "--queue-dsn", queueDB.DSN),
		mendRun("status", "--dsn", mendDB.DSN, "--queue-dsn", queueDB.DSN),
	} {
		for _, want := range []string{"partitions held longer than", `"buildsignal_dlq/b-1"`, `"sig-1"`, `\x1b[2J\nFAKE LINE`} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "\x1b") || strings.Contains(out, "\nFAKE LINE") {
			t.Errorf("the host's error reached the output unescaped:\n%q", out)
		}
	}
	out := mendRun("subscribe", "--queue-dsn", queueDB.DSN, "--json")
	if !strings.Contains(out, `"held"`) || !strings.Contains(out, `"message_id": "sig-1"`) {
		t.Errorf("--json lacks the held partition:\n%s", out)
	}
}

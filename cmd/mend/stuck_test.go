package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
)

// mend main with args, its output and exit code.
func mendMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, &out, &errOut, func(string) string { return "" })
	return code, out.String(), errOut.String()
}

// The day mend is adopted: a queue stuck before it came (live batches, no
// dead letter left, nothing on speculate) is found by mend import --stuck,
// woken by mend run under the fence with the real wake-up, and shown by
// mend status and mend inspect.
func TestImportStuckWakesAQueueStuckBeforeAdoption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupImport(t)
	for _, s := range [][2]string{{"q/batch/1", "failed"}, {"q/batch/2", "speculating"}, {"q/batch/3", "created"}} {
		if err := b.world.SeedBatch(ctx, "q", s[0], s[1], s[0]+"/r"); err != nil {
			t.Fatal(err)
		}
	}
	// The host's planner group holds the queue's partition (run's
	// wake-topic check wants a group of the host on speculate).
	if err := b.world.Join(ctx, "orchestrator", "speculate", "q"); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := mendMain(t, "import", "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--host-dsn", b.queueDSN, "--stuck", "--stuck-bound", "1s")
	if code != 0 || !strings.Contains(out, "1 queue(s) with live batches: 1 woken") || !strings.Contains(out, "q: woken") {
		t.Fatalf("import --stuck = %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := mendMain(t, "run", "--once", "--dsn", b.mendDSN, "--host-dsn", b.queueDSN); code != 0 {
		t.Fatalf("run --once = %d\n%s\n%s", code, out, errOut)
	}
	wakes, err := b.world.ConsumeSpeculate(ctx, "q", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/2" || wakes[0].Meta["mend.record_id"] == "" {
		t.Fatalf("speculate = %+v; want one wake-up naming q/batch/2", wakes)
	}

	// Pending on speculate now: a second import finds the queue busy.
	code, out, errOut = mendMain(t, "import", "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--host-dsn", b.queueDSN, "--stuck", "--stuck-bound", "1s")
	if code != 0 || !strings.Contains(out, "0 woken") || !strings.Contains(out, "1 busy") {
		t.Fatalf("second import --stuck = %d\n%s\n%s", code, out, errOut)
	}

	code, out, _ = mendMain(t, "status", "--dsn", b.mendDSN, "--json")
	var st []queueStatusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 1 || st[0].StuckWakes == nil ||
		st[0].StuckWakes.Total != 1 || st[0].StuckWakes.Open != 0 {
		t.Fatalf("status --json = %d %s; want q with one stuck wake-up, none open", code, out)
	}
	if code, out, _ := mendMain(t, "status", "--dsn", b.mendDSN); code != 0 || !strings.Contains(out, "stuck-queue wake-ups: q 1 (0 open") {
		t.Fatalf("status = %d\n%s", code, out)
	}
	if code, out, _ := mendMain(t, "inspect", "--dsn", b.mendDSN, "--queue", "q"); code != 0 || !strings.Contains(out, "mend/stuck") {
		t.Fatalf("inspect = %d\n%s", code, out)
	}
	code, out, _ = mendMain(t, "inspect", "--dsn", b.mendDSN, "--record", wakes[0].Meta["mend.record_id"])
	for _, want := range []string{"mend/stuck", "created", "import/stuck", "queue stuck: 2 live batch(es)", "settled", "queue found stuck", "woken", wakes[0].ID} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("inspect --record = %d, no %q in\n%s", code, want, out)
		}
	}
}

// --stuck without the host's application database is a usage error.
func TestImportStuckNeedsHostDSN(t *testing.T) {
	t.Parallel()
	code, _, errOut := mendMain(t, "import", "--dsn", "u@tcp(127.0.0.1:1)/m", "--queue-dsn", "u@tcp(127.0.0.1:1)/q", "--stuck")
	if code != 2 || !strings.Contains(errOut, "--stuck needs --host-dsn") {
		t.Fatalf("= %d %s", code, errOut)
	}
}

// mend run scans beside the reconciler: a queue stuck in databases of
// their own (application and queue databases apart) is woken once, by the
// next pass after the scan records it, and not again while the scan goes on.
func TestRunScansForStuckQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	if err := w.SeedBatch(ctx, "q", "q/batch/7", "speculating", "q/7"); err != nil {
		t.Fatal(err)
	}
	if err := w.Join(ctx, "orchestrator", "speculate", "q"); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		var out bytes.Buffer
		done <- Main(runCtx, []string{"run", "--dsn", mendDB.DSN, "--host-dsn", appDB.DSN, "--queue-dsn", queueDB.DSN, "--subscribe=false",
			"--interval", "100ms", "--stuck-every", "1s", "--stuck-bound", "1s"}, &out, &errOut, func(string) string { return "" })
	}()
	var wakes []sqtest.Wake
	deadline := time.Now().Add(60 * time.Second)
	for len(wakes) == 0 && time.Now().Before(deadline) {
		var err error
		if wakes, err = w.ConsumeSpeculate(ctx, "q", true); err != nil {
			stop()
			<-done
			t.Fatal(err)
		}
		select {
		case code := <-done:
			t.Fatalf("mend run exited %d\n%s", code, errOut.String())
		case <-time.After(100 * time.Millisecond): // poll interval, not synchronisation
		}
	}
	// Three more scan periods while the wake-up is pending: no second one.
	seen := 0
	for range 30 {
		ws, err := w.ConsumeSpeculate(ctx, "q", true)
		if err != nil {
			t.Fatal(err)
		}
		seen = max(seen, len(ws))
		<-time.After(100 * time.Millisecond)
	}
	stop()
	if code := <-done; code != exitOK {
		t.Fatalf("mend run exit %d\n%s", code, errOut.String())
	}
	if len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/7" || seen != 1 {
		t.Fatalf("speculate = %+v (at most %d seen later); want one wake-up naming q/batch/7\n%s", wakes, seen, errOut.String())
	}
	if !strings.Contains(errOut.String(), "queue stuck: wake-up recorded") {
		t.Errorf("the log does not say the queue was found stuck:\n%s", errOut.String())
	}
}

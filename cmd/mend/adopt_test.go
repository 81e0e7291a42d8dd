package main

import (
	"context"
	"strings"
	"testing"
)

// mend adopt is mend import and mend import --stuck in one command: a
// dead letter still in the host's DLQ (queue d) is recorded, and a queue
// stuck without one (s: live batches, nothing in flight) gets a stuck-queue
// record; run again, it records nothing new (s is busy then: its record
// is open).
func TestAdoptImportsAndScans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupImport(t)
	b.deadLetter(t, "speculate", "d", "d/batch/1", `{"id":"d/batch/1","queue":"d"}`)
	for _, s := range [][2]string{{"s/batch/1", "failed"}, {"s/batch/2", "speculating"}} {
		if err := b.world.SeedBatch(ctx, "s", s[0], s[1], s[0]+"/r"); err != nil {
			t.Fatal(err)
		}
	}
	adopt := []string{"adopt", "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--host-dsn", b.queueDSN, "--stuck-bound", "1s"}

	code, out, errOut := mendMain(t, adopt...)
	for _, want := range []string{"mend adopt: recorded 1 /", "mend adopt --stuck: 1 queue(s) with live batches: 1 woken", "s: woken"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("adopt = %d, no %q in\n%s\n%s", code, want, out, errOut)
		}
	}
	rows := map[string]string{}
	r, err := b.mend.QueryContext(ctx, "SELECT queue, topic FROM mend_records ORDER BY queue")
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var q, topic string
		if err := r.Scan(&q, &topic); err != nil {
			t.Fatal(err)
		}
		rows[q] = topic
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows["d"] != "speculate_dlq" || rows["s"] != "mend/stuck" {
		t.Fatalf("records %v; want d's dead letter (speculate_dlq) and s's stuck-queue record (mend/stuck)", rows)
	}

	code, out, errOut = mendMain(t, adopt...)
	for _, want := range []string{"already recorded 1", "0 woken"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("second adopt = %d, no %q in\n%s\n%s", code, want, out, errOut)
		}
	}
}

// adopt scans the host's batches, so it needs --host-dsn.
func TestAdoptNeedsHostDSN(t *testing.T) {
	t.Parallel()
	code, _, errOut := mendMain(t, "adopt", "--dsn", "u@tcp(127.0.0.1:1)/m", "--queue-dsn", "u@tcp(127.0.0.1:1)/q")
	if code != 2 || !strings.Contains(errOut, "--stuck needs --host-dsn") {
		t.Fatalf("= %d %s", code, errOut)
	}
}

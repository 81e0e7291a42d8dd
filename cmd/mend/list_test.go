package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// Issue 19, Why "Smaller" and What 4: status had no --queue (614 lines at
// 613 queues), lease list ignored --queue, list commands had no -o or
// --no-headers, a record needed its whole ID, and with the server paused
// status hung 60 s with no --timeout.
func TestListCommandsOutputsAndFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	for _, q := range []string{"q", "other"} {
		opsMust(t, "record", "--dsn", db.DSN, "--queue", q, "--topic", "speculate_dlq", "--partition", q, "--message-id", "m",
			"--payload", `{"id":"`+q+`/batch/1","queue":"`+q+`"}`)
	}
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, q := range []string{"q", "other"} {
		if _, err := store.LeaseAcquire(ctx, q, "h-"+q, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	lines := func(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

	t.Run("--queue filters status and lease list", func(t *testing.T) {
		t.Parallel()
		for _, cmd := range [][]string{{"status"}, {"lease", "list"}} {
			r := opsMust(t, append(cmd, "--dsn", db.DSN, "--queue", "q")...)
			if l := lines(r.stdout); len(l) != 2 || !strings.HasPrefix(l[1], "q ") {
				t.Errorf("mend %v --queue q =\n%s; want the header and queue q only", cmd, r.stdout)
			}
			var rows []map[string]any
			r = opsMust(t, append(cmd, "--dsn", db.DSN, "--queue", "q", "-o", "json")...)
			if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0]["queue"] != "q" {
				t.Errorf("mend %v --queue q -o json = %s, %v", cmd, r.stdout, err)
			}
		}
	})
	t.Run("--no-headers and -o wide", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			args       []string
			header     string
			wideColumn string
		}{
			{[]string{"status"}, "QUEUE", "HOLDER"},
			{[]string{"lease", "list"}, "QUEUE", "TRANSITIONS"},
			{[]string{"lease", "history", "--queue", "q"}, "EPOCH", "LASTED"},
			{[]string{"inspect", "--state", "pending"}, "RECORD", "PARTITION"},
		} {
			args := append(c.args, "--dsn", db.DSN)
			if r := opsMust(t, append(args, "--no-headers")...); strings.Contains(r.stdout, c.header) {
				t.Errorf("mend %v --no-headers printed a header:\n%s", c.args, r.stdout)
			}
			if r := opsMust(t, args...); strings.Contains(r.stdout, c.wideColumn) {
				t.Errorf("mend %v shows the wide column %s:\n%s", c.args, c.wideColumn, r.stdout)
			}
			if r := opsMust(t, append(args, "-o", "wide")...); !strings.Contains(r.stdout, c.wideColumn) {
				t.Errorf("mend %v -o wide lacks %s:\n%s", c.args, c.wideColumn, r.stdout)
			}
		}
		for _, bad := range [][]string{{"-o", "yaml"}, {"--json", "-o", "table"}} {
			if r := opsRun(t, nil, append([]string{"status", "--dsn", db.DSN}, bad...)...); r.code != exitUsage {
				t.Errorf("status %v = exit %d; want 2", bad, r.code)
			}
		}
	})
	t.Run("record ID prefixes", func(t *testing.T) {
		t.Parallel()
		r := opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q", "-o", "json")
		var recs []recordJSON
		if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 1 {
			t.Fatalf("inspect --queue q = %s, %v", r.stdout, err)
		}
		id := recs[0].ID
		if r := opsMust(t, "inspect", "--dsn", db.DSN, "--record", strings.ToUpper(id[:7])); !strings.Contains(r.stdout, "record "+id) {
			t.Errorf("inspect --record %s =\n%s; want record %s", id[:7], r.stdout, id)
		}
		if r := opsRun(t, nil, "retry", "--dsn", db.DSN, "--record", "abc"); r.code != exitUsage || !strings.Contains(r.stderr, "4 or more") {
			t.Errorf("a 3-character prefix = exit %d %q; want 2", r.code, r.stderr)
		}
		if r := opsRun(t, nil, "inspect", "--dsn", db.DSN, "--record", "0000000"); r.code != exitFailure || !strings.Contains(r.stderr, "no record ID starts with") {
			t.Errorf("an unknown prefix = exit %d %q; want 1", r.code, r.stderr)
		}
	})
	t.Run("an ambiguous prefix names two", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		for i, m := range []string{"m1", "m2"} {
			opsMust(t, recordArgs(db.DSN, m, speculatePayload)...)
			id := "abcd00000000000000000000000000" + []string{"01", "02"}[i]
			for _, table := range []string{"mend_records", "mend_events"} {
				if _, err := db.SQL(t).Exec("UPDATE "+table+" SET record_id = UNHEX(?) WHERE record_id NOT LIKE 'abcd%' AND HEX(record_id) NOT LIKE 'ABCD%'", id); err != nil {
					t.Fatal(err)
				}
			}
		}
		r := opsRun(t, nil, "inspect", "--dsn", db.DSN, "--record", "abcd")
		if r.code != exitUsage || !strings.Contains(r.stderr, "ambiguous") || !strings.Contains(r.stderr, "abcd0000000000000000000000000001") {
			t.Fatalf("inspect --record abcd = exit %d %q; want 2 naming both", r.code, r.stderr)
		}
		if r := opsMust(t, "inspect", "--dsn", db.DSN, "--record", "abcd0000000000000000000000000001"); !strings.Contains(r.stdout, "m1") {
			t.Fatalf("a longer prefix = %s", r.stdout)
		}
	})
	t.Run("--timeout when the server does not answer", func(t *testing.T) {
		t.Parallel()
		// A listener that accepts and never speaks: a paused server.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		dsn := "u:silent-pw@tcp(" + ln.Addr().String() + ")/mend"
		for _, args := range [][]string{{"status"}, {"run", "--once", "--host-dsn=same"}, {"lease", "list"}} {
			began := time.Now()
			r := opsRun(t, nil, append(args, "--dsn", dsn, "--timeout", "300ms")...)
			if r.code != exitFailure || !strings.Contains(r.stderr, "gave up after 300ms (--timeout)") || time.Since(began) > 20*time.Second {
				t.Fatalf("%v against a silent server = exit %d after %s, %q; want 1 naming --timeout", args, r.code, time.Since(began), r.stderr)
			}
		}
	})
}

// Issue 19, Why "Smaller": ATTEMPTS showed 1 after three failures, because
// the planner's per-step counter starts again when the outcome settles.
// Listings now show FAILED REPAIRS (FAILURES before issue 57), every failed attempt of the record's life
// (from its events), and -o wide the step's TRIES beside it.
func TestFailuresCountEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	out := opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...)
	id := recordIDRE.FindString(out.stdout)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	term, err := store.LeaseAcquire(ctx, "q", "planner", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := store.RecordsList(ctx, "q", 1)
	if err != nil || len(recs) != 1 {
		t.Fatalf("RecordsList = %v, %v", recs, err)
	}
	rec := recs[0]
	// What the planner writes for: the batch read failing twice, the
	// outcome settling, then the wake-up's publish failing once.
	for _, step := range []struct {
		kind     mend.EventKind
		state    mend.State
		attempts int
	}{
		{mend.EventAttemptFailed, mend.StatePending, 1},
		{mend.EventAttemptFailed, mend.StatePending, 2},
		{mend.EventSettled, mend.StateSettled, 0},
		{mend.EventWakeFailed, mend.StateSettled, 1},
	} {
		v, err := store.RecordAppend(ctx, mend.AppendParams{Source: rec.Source, RecordID: rec.ID, Version: rec.Version, Fence: &term,
			Kind: step.kind, Actor: "planner", OpID: mend.NewOpID(), Epoch: term.Epoch, State: step.state, Attempts: step.attempts,
			LastError: "boom"})
		if err != nil {
			t.Fatal(err)
		}
		rec.Version = v
	}

	t.Run("list", func(t *testing.T) {
		t.Parallel()
		r := opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q")
		head, row := fieldsOf(t, r.stdout)
		if got := row[indexOf(head, "FAILED_REPAIRS")]; got != "3" {
			t.Errorf("FAILED REPAIRS = %q; want 3 (two batch reads and one publish failed)\n%s", got, r.stdout)
		}
		r = opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q", "-o", "wide")
		head, row = fieldsOf(t, r.stdout)
		if f, tr := row[indexOf(head, "FAILED_REPAIRS")], row[indexOf(head, "STEP_TRIES")]; f != "3" || tr != "1" {
			t.Errorf("-o wide FAILED REPAIRS, STEP TRIES = %q, %q; want 3, 1\n%s", f, tr, r.stdout)
		}
		var rows []map[string]any
		r = opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q", "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0]["failures"] != 3.0 || rows[0]["attempts"] != 1.0 {
			t.Errorf("-o json = %s, %v; want failures 3, attempts 1", r.stdout, err)
		}
	})
	t.Run("one record", func(t *testing.T) {
		t.Parallel()
		r := opsMust(t, "inspect", "--dsn", db.DSN, "--record", id)
		// Issue 57: "1 tries", and "failures" that could be the host's.
		if !strings.Contains(r.stdout, "failures:   3 failed repair attempts of mend's in all; 1 try in this step") {
			t.Errorf("inspect --record =\n%s; want the failures line", r.stdout)
		}
	})
}

// fieldsOf splits a two-line table (header, one row) into columns; the
// columns used by the caller hold no spaces, and the header's multi-word
// names are joined first.
func fieldsOf(t *testing.T, table string) (head, row []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one row:\n%s", table)
	}
	h := strings.NewReplacer("MESSAGE ID", "MESSAGE_ID", "CREATED (UTC)", "CREATED", "NEXT TRY (UTC)", "NEXT_TRY", "LAST ERROR", "LAST_ERROR",
		"FAILED REPAIRS", "FAILED_REPAIRS", "STEP TRIES", "STEP_TRIES").Replace(lines[0])
	return strings.Fields(h), strings.Fields(lines[1])
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return len(list) // out of range: the caller's lookup fails loudly
}

// Issue 47: a 250-byte message ID ran inspect --queue's rows hundreds of
// columns wide; the table clips identities as the console does, and -o
// wide and -o json still show them whole.
func TestInspectQueueClipsLongIdentities(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	long := "q/batch/" + strings.Repeat("x", 242)
	opsMust(t, recordArgs(db.DSN, long, speculatePayload)...)
	out := opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q").stdout
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if len(line) > 250 || strings.Contains(line, long) {
			t.Errorf("inspect --queue row is %d bytes wide, holding the whole message ID:\n%s", len(line), line)
		}
	}
	if !strings.Contains(out, "…") {
		t.Errorf("inspect --queue did not mark the clipped message ID:\n%s", out)
	}
	if wide := opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q", "-o", "wide").stdout; !strings.Contains(wide, long) {
		t.Errorf("-o wide clipped the message ID:\n%s", wide)
	}
	if js := opsMust(t, "inspect", "--dsn", db.DSN, "--queue", "q", "-o", "json").stdout; !strings.Contains(js, long) {
		t.Errorf("-o json clipped the message ID:\n%s", js)
	}
}

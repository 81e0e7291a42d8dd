package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

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

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// Issue 30: verify --record refused the 4+ character prefixes every other
// command takes.
func TestVerifyTakesARecordPrefix(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	id := recordIDRE.FindString(opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...).stdout)
	if id == "" {
		t.Fatal("record printed no ID")
	}
	r := opsMust(t, "verify", "--dsn", db.DSN, "--record", id[:6])
	if !strings.Contains(r.stdout, "verified 1 records") {
		t.Fatalf("verify --record %s = %q; want the one record verified", id[:6], r.stdout)
	}
	if r := opsRun(t, nil, "verify", "--dsn", db.DSN, "--record", "abc"); r.code != exitUsage {
		t.Fatalf("verify --record abc = exit %d; want 2 (too short)", r.code)
	}
}

// Issue 30: a runtime user running migrate up got a raw "CREATE command
// denied ... in line 0", and verify on an older schema a raw "Unknown
// column"; both now name the fix.
func TestRefusalsNameTheFix(t *testing.T) {
	t.Parallel()
	t.Run("migrate up as the runtime user", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
		runtime := opsUser(t, db, runtimeGrants...)
		opsMust(t, "migrate", "down", "1", "--yes", "--dsn", db.DSN)
		r := opsRun(t, nil, "migrate", "up", "--dsn", runtime)
		if r.code != exitFailure || !strings.Contains(r.stderr, "run mend migrate as the DDL user") {
			t.Fatalf("migrate up as the runtime user = exit %d\n%s\nwant 1 naming the DDL user", r.code, r.stderr)
		}
	})
	t.Run("verify on an older schema", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...)
		// Down to the schema before this binary's oldest (0013's events lose
		// their projection columns), however many migrations came since.
		latest, err := migrations.Mend.Latest()
		if err != nil {
			t.Fatal(err)
		}
		steps := latest - storage.SchemaOldest + 1
		opsMust(t, "migrate", "down", fmt.Sprint(steps), "--yes", "--force", "--dsn", db.DSN)
		r := opsRun(t, nil, "verify", "--dsn", db.DSN)
		if r.code != exitFailure || !strings.Contains(r.stderr, "run mend migrate up") {
			t.Fatalf("verify on an older schema = exit %d\n%s\nwant 1 naming mend migrate up", r.code, r.stderr)
		}
	})
}

// Issue 30: the scrubber took --host-dsn=same for a secret, so a hint read
// "mend doctor with the ***** flags lists them all".
func TestScrubberKeepsTheWordSame(t *testing.T) {
	t.Parallel()
	s := &scrubber{}
	s.addDSN(hostDSNSame)
	s.addDSN("u:pw-30@tcp(127.0.0.1:1)/db")
	const hint = "mend doctor with the same flags lists them all (pw-30)"
	if got := s.clean(hint); got != "mend doctor with the same flags lists them all ("+redacted+")" {
		t.Fatalf("clean(%q) = %q", hint, got)
	}
}

// Issue 30: subscribe --remove --yes did not notice live replicas (they
// rejoin within seconds), and as the runtime user failed with a bare
// "Error 1142 DELETE command denied" naming no grant.
func TestSubscribeRemoveChecksFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	queueDB := mysqltest.NewDB(t, sqtest.Apply)
	w := sqtest.World{Queue: queueDB.SQL(t)}
	if err := w.Join(ctx, subscribe.GroupDefault, "speculate_dlq", "q"); err != nil {
		t.Fatal(err)
	}
	rows := func() int {
		var n int
		if err := queueDB.SQL(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	store, err := storage.Open(ctx, mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	term, err := store.LeaseAcquire(ctx, subscribe.SlotName(subscribe.GroupDefault, 3), "replica-a/subscribe", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	remove := []string{"subscribe", "--queue-dsn", queueDB.DSN, "--remove", "--yes", "--dsn", mendDB.DSN}
	if r := opsRun(t, nil, remove...); r.code != exitFailure || !strings.Contains(r.stderr, "replica-a/subscribe") || rows() != 1 {
		t.Fatalf("--remove --yes with a live replica = exit %d %q, %d row(s) left; want 1 naming the replica, nothing removed", r.code, r.stderr, rows())
	}
	if err := store.LeaseRelease(ctx, term); err != nil {
		t.Fatal(err)
	}
	noDelete := opsUser(t, queueDB, "SELECT, INSERT, UPDATE ON %s.queue_offsets", "SELECT ON %s.queue_messages")
	r := opsRun(t, nil, "subscribe", "--queue-dsn", noDelete, "--remove", "--yes", "--dsn", mendDB.DSN)
	if r.code != exitFailure || !strings.Contains(r.stderr, "GRANT DELETE ON") || rows() != 1 {
		t.Fatalf("--remove --yes without DELETE = exit %d %q; want 1 naming the GRANT", r.code, r.stderr)
	}
	if r := opsMust(t, remove...); !strings.Contains(r.stdout, "left 1 partition") || rows() != 0 {
		t.Fatalf("--remove --yes with no replica left = %q, %d row(s); want the group gone", r.stdout, rows())
	}
	if r := opsMust(t, "subscribe", "--queue-dsn", queueDB.DSN, "-o", "json"); !strings.Contains(r.stdout, `"group"`) {
		t.Fatalf("subscribe -o json = %q", r.stdout)
	}
}

// Issue 30: inspect said a waiting record "parks at --max-attempts"; it
// parks when --grace runs out. And run -h said --subscribe (default true)
// although it is on only with --queue-dsn.
func TestInspectAndHelpSayWhatHappens(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	id := recordIDRE.FindString(opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...).stdout)
	if _, err := db.SQL(t).Exec("UPDATE mend_records SET state = 'waiting'"); err != nil {
		t.Fatal(err)
	}
	if out := opsMust(t, "inspect", "--dsn", db.DSN, "--record", id).stdout; !strings.Contains(out, "parks when --grace runs out") || strings.Contains(out, "parks at --max-attempts") {
		t.Errorf("inspect of a waiting record =\n%s\nwant it to park at --grace", out)
	}
	for _, cmd := range []string{"run", "doctor"} {
		if out := opsMust(t, cmd, "-h").stdout; strings.Contains(out, "(default true)") || !strings.Contains(out, "on when --queue-dsn is given") {
			t.Errorf("mend %s -h says a default that is not the rule:\n%s", cmd, out)
		}
	}
}

package main

import (
	"strings"
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
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
		opsMust(t, "migrate", "down", "1", "--yes", "--force", "--dsn", db.DSN) // the events lose their projection columns
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

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// TestVerifyCatchesAndRebuilds: mend verify passes on what mend wrote,
// catches a projection changed behind the events' back (exit 1, the
// column named), lists without writing on --rebuild, and rewrites it on
// --rebuild --yes, after which it verifies clean.
func TestVerifyCatchesAndRebuilds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _, rec := verifyWorld(t)
	verify := func(extra ...string) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Main(ctx, append([]string{"verify", "--dsn", db.DSN}, extra...), &out, &errOut, func(string) string { return "" })
		return code, out.String() + errOut.String()
	}
	if code, out := verify(); code != exitOK || !strings.Contains(out, "verified 1 records") {
		t.Fatalf("verify on a clean database: exit %d\n%s", code, out)
	}
	if _, err := db.SQL(t).ExecContext(ctx, "UPDATE mend_records SET attempts = 5 WHERE record_id = ?", rec.ID[:]); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(); code != exitFailure || !strings.Contains(out, "attempts: projection 5, events 0") {
		t.Fatalf("verify on a corrupted projection: exit %d; want 1 naming attempts\n%s", code, out)
	}
	if code, out := verify("--rebuild"); code != exitFailure || !strings.Contains(out, "dry run") {
		t.Fatalf("verify --rebuild: exit %d; want 1, a dry run\n%s", code, out)
	}
	if code, _ := verify(); code != exitFailure {
		t.Fatalf("the dry run wrote something")
	}
	if code, out := verify("--rebuild", "--yes"); code != exitOK || !strings.Contains(out, "rebuilt 1 record(s)") {
		t.Fatalf("verify --rebuild --yes: exit %d\n%s", code, out)
	}
	if code, out := verify("--record", rec.ID.String()); code != exitOK {
		t.Fatalf("verify after the rebuild: exit %d\n%s", code, out)
	}
	if code, _ := verify("--record", "nothex"); code != exitUsage {
		t.Fatalf("verify --record nothex: exit %d; want 2", code)
	}
}

// verifyWorld is a fresh mend database with one recorded dead letter, and a
// store on it, closed when the test ends.
func verifyWorld(t *testing.T) (*mysqltest.DB, *storage.DB, mend.Record) {
	t.Helper()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	rec, _, err := store.RecordCreate(ctx, mend.CreateParams{
		Source: mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"},
		Target: mend.Target{BatchID: "q/batch/1", Desired: mend.OutcomeFailed},
		OpID:   mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return db, store, rec
}

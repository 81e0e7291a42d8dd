package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/mendq/mend/storage"
)

// Every mend verify that reads records leaves a run row (mend console's
// overview shows the newest): a clean run, a divergent one, a rebuild.
func TestVerifyRecordsRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, store, rec := verifyWorld(t)
	verify := func(extra ...string) storage.VerifyRun {
		t.Helper()
		var out bytes.Buffer
		Main(ctx, append([]string{"verify", "--dsn", db.DSN}, extra...), &out, &out, func(string) string { return "" })
		run, ok, err := store.VerifyRunLast(ctx)
		if err != nil || !ok {
			t.Fatalf("verify %v: no run recorded (%v)\n%s", extra, err, out.String())
		}
		return run
	}
	if r := verify(); r.Records != 1 || r.Divergent != 0 || r.Error != "" || r.Queue != "" {
		t.Errorf("clean run = %+v", r)
	}
	if _, err := db.SQL(t).ExecContext(ctx, "UPDATE mend_records SET attempts = 5 WHERE record_id = ?", rec.ID[:]); err != nil {
		t.Fatal(err)
	}
	if r := verify("--queue", "q"); r.Divergent != 1 || r.Queue != "q" || r.Error != "" {
		t.Errorf("divergent run = %+v", r)
	}
	if r := verify("--rebuild", "--yes"); r.Divergent != 1 || r.Rebuilt != 1 {
		t.Errorf("rebuild run = %+v", r)
	}
	if r := verify("--record", rec.ID.String()); r.Divergent != 0 || r.Record != rec.ID {
		t.Errorf("run after the rebuild = %+v", r)
	}
}

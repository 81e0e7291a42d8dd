package storage_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// A verify run is recorded and read back as the newest; on a schema
// without migration 0015's table both say so with ErrNoVerifyRuns.
func TestVerifyRuns(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	if _, ok, err := b.store.VerifyRunLast(ctx); ok || err != nil {
		t.Fatalf("no run yet: ok %v err %v", ok, err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := storage.VerifyRun{Started: now.Add(-time.Hour), Finished: now.Add(-59 * time.Minute), Records: 10, Events: 30}
	id := mend.RecordID{1, 2, 3}
	newest := storage.VerifyRun{Queue: "monorepo/main", Record: id, Since: 24 * time.Hour, Started: now.Add(-time.Minute), Finished: now.Add(-30 * time.Second),
		Records: 1000, Events: 4000, Divergent: 2, Legacy: 1, Rebuilt: 0, Error: "", Host: "ops-1"}
	for _, r := range []storage.VerifyRun{newest, old} {
		if err := b.store.VerifyRunRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := b.store.VerifyRunLast(ctx)
	if err != nil || !ok {
		t.Fatalf("last: %v %v", ok, err)
	}
	if got.Queue != newest.Queue || got.Record != id || got.Since != newest.Since || got.Records != 1000 || got.Divergent != 2 || got.Legacy != 1 ||
		got.Host != "ops-1" || !got.Finished.Equal(newest.Finished) || got.Age < 25*time.Second || got.Age > 10*time.Minute {
		t.Errorf("last = %+v, want the newest run %+v", got, newest)
	}
	if _, err := b.db.SQL(t).Exec("DROP TABLE mend_verify_runs"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.VerifyRunLast(ctx); !errors.Is(err, storage.ErrNoVerifyRuns) {
		t.Errorf("last without the table: %v, want ErrNoVerifyRuns", err)
	}
	if err := b.store.VerifyRunRecord(ctx, old); !errors.Is(err, storage.ErrNoVerifyRuns) {
		t.Errorf("record without the table: %v, want ErrNoVerifyRuns", err)
	}
}

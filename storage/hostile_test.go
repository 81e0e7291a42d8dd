package storage_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// TestStoreUnderGlobalSelectLimit: mend's store reads every row whatever
// the server's sql_select_limit. Reproduced through the binary on MySQL 9.7
// and MariaDB before the store forced it: with a global
// sql_select_limit=2, status, inspect and lease list showed 2 queues and
// verify reported divergences on a healthy store (it read 2 of a record's
// events). A private server (the global would reach every other test's
// sessions); the store is opened after the global is set.
func TestStoreUnderGlobalSelectLimit(t *testing.T) {
	mysqltest.SkipVitess(t, "sets server globals on a private server")
	srv := mysqltest.StartPrivate(t)
	d := mysqltest.NewDBOn(t, srv, migrations.Up)
	ctx := t.Context()
	seed := openStore(t, d.DSN, storage.Options{})
	b := &bundle{db: d, store: seed}
	for i := range 4 {
		q := fmt.Sprintf("q%d", i)
		rec := b.create(t, src(q, "m"))
		// Four events: created and three attempts.
		for range 3 {
			p := appendParams(rec, mend.EventAttemptFailed, mend.StatePending)
			p.Attempts++
			v, err := seed.RecordAppend(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			rec.Version, rec.Attempts = v, p.Attempts
		}
		if _, err := seed.LeaseAcquire(ctx, q, "h", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := seed.Close(); err != nil {
		t.Fatal(err)
	}

	srv.SetGlobal(t, "sql_select_limit", "2")
	store := openStore(t, d.DSN, storage.Options{})

	st, err := store.Status(ctx)
	if err != nil || len(st) != 4 {
		t.Errorf("status: %d queues (%v); want 4", len(st), err)
	}
	leases, err := store.LeaseList(ctx)
	if err != nil || len(leases) != 4 {
		t.Errorf("lease list: %d leases (%v); want 4", len(leases), err)
	}
	recs, err := store.RecordsSelect(ctx, storage.RecordFilter{State: mend.StatePending, Limit: 100})
	if err != nil || len(recs) != 4 {
		t.Errorf("inspect: %d records (%v); want 4", len(recs), err)
	}
	var div []storage.Divergence
	vs, err := store.Verify(ctx, storage.VerifyParams{}, func(x storage.Divergence) error { div = append(div, x); return nil })
	if err != nil || vs.Records != 4 || vs.Events != 16 || vs.Divergent != 0 {
		t.Errorf("verify: %+v, %v (%v); want 4 records, 16 events, none divergent", vs, div, err)
	}
}

package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// Issue 19, Why 3: MEND_YES=1 mend migrate down dropped every table with
// nothing on the command line, and migrate down --yes while a replica ran
// deleted every record, a waiting queue's among them. Now confirmations
// come only from the command line, and reverting or resolving open work
// refuses, saying what would be lost, unless --force.
func TestDestructiveCommandsRefuseByAccident(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// setup: a migrated database with one open (pending) record in queue q.
	setup := func(t *testing.T) (*mysqltest.DB, *storage.DB) {
		t.Helper()
		db := mysqltest.NewDB(t, migrations.Up)
		opsMust(t, recordArgs(db.DSN, "q/batch/1", speculatePayload)...)
		store, err := storage.Open(ctx, db.DSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		return db, store
	}
	hasRecords := func(t *testing.T, db *mysqltest.DB) bool {
		t.Helper()
		return slices.Contains(db.Tables(t), "mend_records")
	}

	t.Run("MEND_YES is not a confirmation", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		r := opsRun(t, []string{"MEND_DSN=" + db.DSN, "MEND_YES=1", "MEND_FORCE=1"}, "migrate", "down")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") || !hasRecords(t, db) {
			t.Fatalf("MEND_YES=1 migrate down = exit %d %q; want 2 asking for --yes, tables kept", r.code, r.stderr)
		}
	})

	t.Run("migrate down refuses while a lease is live", func(t *testing.T) {
		t.Parallel()
		db, store := setup(t)
		if _, err := store.LeaseAcquire(ctx, "q", "replica-1", time.Hour); err != nil {
			t.Fatal(err)
		}
		r := opsRun(t, nil, "migrate", "down", "--yes", "--dsn", db.DSN)
		if r.code != exitFailure || !strings.Contains(r.stderr, `held by "replica-1"`) || !strings.Contains(r.stderr, "1 open record(s)") ||
			!strings.Contains(r.stderr, "--force") || !hasRecords(t, db) {
			t.Fatalf("migrate down --yes with a live lease = exit %d\n%s; want 1 naming the lease and the open record, tables kept", r.code, r.stderr)
		}
		if r := opsMust(t, "migrate", "down", "--yes", "--force", "--dsn", db.DSN); !strings.Contains(r.stdout, "version 0 of") || hasRecords(t, db) {
			t.Fatalf("migrate down --yes --force = %s; want everything reverted", r.stdout)
		}
	})

	t.Run("goto a lower version refuses while records are open", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		r := opsRun(t, nil, "migrate", "goto", "3", "--yes", "--dsn", db.DSN)
		if r.code != exitFailure || !strings.Contains(r.stderr, "0 live lease(s)") || !strings.Contains(r.stderr, "1 open record(s) in 1 queue(s)") {
			t.Fatalf("migrate goto 3 --yes with an open record = exit %d\n%s", r.code, r.stderr)
		}
		if v, _, err := storage.ReadSchemaVersion(ctx, db.SQL(t)); err != nil || v < 4 {
			t.Fatalf("the refused goto changed the schema: version %d, %v", v, err)
		}
	})

	t.Run("a nothing-to-lose revert needs no --force", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		if r := opsMust(t, "migrate", "goto", "3", "--yes", "--dsn", db.DSN); !strings.Contains(r.stderr, "at stake: 0 live lease(s); 0 open record(s)") {
			t.Fatalf("migrate goto 3 on an idle database: %s", r.stderr)
		}
	})

	// A rollback reverts the expand step the new binary brought while the
	// old binary's records are open and its leases live: nothing of them is
	// dropped, so it is not refused (issue 31).
	t.Run("reverting an expand step is not refused", func(t *testing.T) {
		t.Parallel()
		db, store := setup(t)
		if _, err := store.LeaseAcquire(ctx, "q", "replica-1", time.Hour); err != nil {
			t.Fatal(err)
		}
		r := opsMust(t, "migrate", "down", "1", "--yes", "--dsn", db.DSN)
		if !strings.Contains(r.stderr, "drops mend_binlog_positions (migration 0019)") || strings.Contains(r.stderr, "drops no table") || !hasRecords(t, db) {
			t.Fatalf("migrate down 1 with an open record and a live queue lease: %s; want 0019 reverted, saying the table it drops", r.stderr)
		}
	})

	// Issue 55: reverting 0019 dropped mend_binlog_positions under a
	// reader holding its lease, printing "drops no table".
	t.Run("dropping the binlog positions refuses while a reader holds its lease", func(t *testing.T) {
		t.Parallel()
		db, store := setup(t)
		if _, err := store.LeaseAcquire(ctx, binlog.LeaseName("queue"), "replica-1", time.Hour); err != nil {
			t.Fatal(err)
		}
		r := opsRun(t, nil, "migrate", "down", "1", "--yes", "--dsn", db.DSN)
		if r.code != exitFailure || !strings.Contains(r.stderr, "refusing to drop mend_binlog_positions") ||
			!strings.Contains(r.stderr, `mend-binlog/queue held by "replica-1"`) || !slices.Contains(db.Tables(t), "mend_binlog_positions") {
			t.Fatalf("migrate down 1 --yes under a reader's lease = exit %d\n%s; want refused, naming the reader, the table kept", r.code, r.stderr)
		}
		r = opsMust(t, "migrate", "down", "1", "--yes", "--force", "--dsn", db.DSN)
		if !strings.Contains(r.stderr, "--force: dropping mend_binlog_positions") || slices.Contains(db.Tables(t), "mend_binlog_positions") || !hasRecords(t, db) {
			t.Fatalf("migrate down 1 --yes --force under a reader's lease: %s; want 0019 reverted, records kept", r.stderr)
		}
	})

	// Issue 47: a replica's clean stop releases its lease; the at-risk read
	// counted released leases as live, so migrate down was refused after
	// any clean run.
	t.Run("a released lease is not live", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t, migrations.Up)
		store, err := storage.Open(ctx, db.DSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		term, err := store.LeaseAcquire(ctx, "q", "replica-1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.LeaseRelease(ctx, term); err != nil {
			t.Fatal(err)
		}
		r := opsRun(t, nil, "migrate", "down", "--yes", "--dsn", db.DSN)
		if r.code != exitOK || !strings.Contains(r.stderr, "at stake: 0 live lease(s)") || hasRecords(t, db) {
			t.Fatalf("migrate down --yes after a released lease = exit %d\n%s; want it done, no live lease at stake", r.code, r.stderr)
		}
	})

	// Issue 47: the refusal without --yes says what the revert does, as the
	// run with --yes then reports it.
	t.Run("the refusal says what the revert drops", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"migrate", "down", "1"}, "which drops mend_binlog_positions"},
			{[]string{"migrate", "down"}, "dropping mend's tables"},
			{[]string{"migrate", "goto", "3"}, "dropping mend's tables"},
		} {
			r := opsRun(t, nil, append(tt.args, "--dsn", db.DSN)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "--yes") {
				t.Errorf("%v without --yes = exit %d %q; want 2 saying %q", tt.args, r.code, r.stderr, tt.want)
			}
		}
	})

	t.Run("resolve of a selection with open records", func(t *testing.T) {
		t.Parallel()
		db, store := setup(t)
		if _, err := store.LeaseAcquire(ctx, "q", "replica-1", time.Hour); err != nil {
			t.Fatal(err)
		}
		// The listing needs no --reason, and says what is at stake.
		r := opsMust(t, "resolve", "--dsn", db.DSN, "--queue", "q", "--state", "pending")
		if !strings.Contains(r.stdout, "would resolve 1 of 1") || !strings.Contains(r.stdout, "at stake: 1 open record(s)") || !strings.Contains(r.stdout, `held by "replica-1"`) {
			t.Fatalf("resolve listing = %s", r.stdout)
		}
		args := []string{"resolve", "--dsn", db.DSN, "--queue", "q", "--state", "pending", "--reason", "r", "--yes"}
		if r := opsRun(t, []string{"MEND_FORCE=1"}, args...); r.code != exitFailure || !strings.Contains(r.stderr, "refusing") {
			t.Fatalf("resolve --yes of an open record = exit %d %q; want 1 refusing", r.code, r.stderr)
		}
		if st, _ := store.Status(ctx); len(st) != 1 || st[0].Counts["pending"] != 1 {
			t.Fatalf("the refused resolve changed records: %+v", st)
		}
		if r := opsMust(t, append(args, "--force")...); !strings.Contains(r.stdout, "is resolved") {
			t.Fatalf("resolve --yes --force = %s", r.stdout)
		}
		// Issue 47: without --actor the event named "operator", whoever
		// ran the command; it names the OS user now.
		recs, err := store.RecordsList(ctx, "q", 1)
		if err != nil || len(recs) != 1 {
			t.Fatalf("RecordsList = %v, %v", recs, err)
		}
		evs, err := store.RecordHistory(ctx, "q", recs[0].ID)
		if want := defaultActor(); err != nil || len(evs) == 0 || evs[len(evs)-1].Actor != want || want == "operator" {
			t.Fatalf("resolve's event = %+v, %v; want the actor %q (operator/ and the OS user)", evs, err, want)
		}
	})
}

package host_test

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// uncommitted runs fn's statements in a transaction of their own on srv's
// database d and leaves it open until t ends, then rolls it back: what
// another session reads meanwhile must not include them. World's statements
// go to a pool of exactly one connection, on which BEGIN was sent.
func uncommitted(t *testing.T, d *mysqltest.DB, fn func(w sqtest.World)) {
	t.Helper()
	one := d.SQL(t)
	one.SetMaxOpenConns(1)
	if _, err := one.ExecContext(t.Context(), "BEGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = one.Exec("ROLLBACK") })
	fn(sqtest.World{App: one, Queue: one, NowMS: func() int64 { return testNow.UnixMilli() }})
}

// TestHostPoolsUnderHostileGlobals: the host's application and queue pools
// hold mend's session whatever the server's globals say. Reproduced on
// MariaDB 10.11 and MySQL 9.7 before every pool got the whole contract:
// with a global sql_select_limit=2 the live-batch read saw 2 membership
// rows and the planner woke batch b2 instead of the smallest live batch
// b1; with a global READ UNCOMMITTED it read a batch, and import read a
// dead letter, whose insert was later rolled back. One private server
// (the globals would reach every other test's sessions), each global
// restored when its subtest ends.
func TestHostPoolsUnderHostileGlobals(t *testing.T) {
	mysqltest.SkipVitess(t, "sets server globals on a private server")
	srv := mysqltest.StartPrivate(t)
	d := mysqltest.NewDBOn(t, srv, sqtest.Apply)
	seed := d.SQL(t)
	w := sqtest.World{App: seed, Queue: seed, NowMS: func() int64 { return testNow.UnixMilli() }}
	openHost := func(t *testing.T) *host.DB {
		return open(t, d.DSN, d.DSN, host.Options{NowFunc: func() time.Time { return testNow }, Logger: slog.New(slog.DiscardHandler)})
	}
	isolation := func(t *testing.T) {
		if !srv.SetGlobal(t, "transaction_isolation", "'READ-UNCOMMITTED'") && !srv.SetGlobal(t, "tx_isolation", "'READ-UNCOMMITTED'") {
			t.Fatal("the server has no isolation variable")
		}
	}

	t.Run("sql_select_limit: the smallest live batch", func(t *testing.T) {
		ctx := t.Context()
		// b1 is the smallest, but its membership row sorts after the
		// others' in the table's key (queue, state, batch_id).
		for _, b := range []struct{ id, state string }{{"b1", "speculating"}, {"b2", "created"}, {"b3", "created"}, {"b4", "created"}} {
			if err := w.SeedBatch(ctx, "limit-q", b.id, b.state); err != nil {
				t.Fatal(err)
			}
		}
		srv.SetGlobal(t, "sql_select_limit", "2")
		h := openHost(t)
		got, err := h.LiveBatches(ctx, "limit-q", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"b1"}) {
			t.Errorf("smallest live batch %v; want [b1] (the server's sql_select_limit cut the read short)", got)
		}
		all, err := h.LiveBatches(ctx, "limit-q", 10)
		if err != nil || len(all) != 4 {
			t.Errorf("live batches %v (%v); want all 4", all, err)
		}
	})

	t.Run("READ UNCOMMITTED: a batch whose insert is not committed", func(t *testing.T) {
		ctx := t.Context()
		if err := w.SeedBatch(ctx, "dirty-q", "b2", "created"); err != nil {
			t.Fatal(err)
		}
		uncommitted(t, d, func(w sqtest.World) {
			if err := w.SeedBatch(ctx, "dirty-q", "b1", "created"); err != nil {
				t.Fatal(err)
			}
		})
		isolation(t)
		h := openHost(t)
		got, err := h.LiveBatches(ctx, "dirty-q", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"b2"}) {
			t.Errorf("smallest live batch %v; want [b2]: b1's insert is not committed (and will be rolled back)", got)
		}
		if _, err := h.BatchGet(ctx, "dirty-q", "b1"); err == nil {
			t.Errorf("BatchGet read batch b1, whose insert is not committed")
		}
	})

	t.Run("READ UNCOMMITTED: a dead letter whose move is not committed", func(t *testing.T) {
		ctx := t.Context()
		uncommitted(t, d, func(w sqtest.World) {
			// The copy MoveToDLQ inserts, in a transaction that has not
			// committed (the real store's move may still roll back).
			if _, err := w.Queue.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
				"VALUES ('speculate_dlq', 'm-dirty', '{}', NULL, 'p0', 1, 1, ?, 3, 'boom', 'speculate', NULL)", testNow.UnixMilli()); err != nil {
				t.Fatal(err)
			}
		})
		isolation(t)
		dl, err := host.OpenDeadLetters(ctx, d.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer dl.Close()
		page, err := dl.Page(ctx, host.DeadLetterFilter{}, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) != 0 {
			t.Errorf("import read %d dead letters whose move is not committed (%+v)", len(page.Rows), page.Rows[0])
		}
	})
}

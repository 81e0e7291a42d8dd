package subscribe_test

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// TestSubscriptionUnderHostileGlobals: the subscription's pool holds
// mend's session whatever the server's globals say. Reproduced on MariaDB
// 10.11 before every pool got the whole contract: with a global
// sql_select_limit=2 the subscription joined 2 of 4 DLQ partitions and
// left the others' dead letters to the host's GC; with a global READ
// UNCOMMITTED it recorded a dead letter whose move was later rolled back.
// Each subtest has a private server (the globals would reach every other
// test's sessions); the pools are opened after the global is set, so they
// would inherit it.
func TestSubscriptionUnderHostileGlobals(t *testing.T) {
	mysqltest.SkipVitess(t, "sets server globals on a private server")
	srv := mysqltest.StartPrivate(t)
	// setup makes mend's store and the queue database on srv and the raw
	// pools the test seeds and asserts through: one session each, opened
	// before any hostile global, so they keep the server's defaults.
	setup := func(t *testing.T) (*bundle, *mysqltest.DB, *mysqltest.DB) {
		t.Helper()
		m := mysqltest.NewDBOn(t, srv, migrations.Up)
		q := mysqltest.NewDBOn(t, srv, sqtest.Apply)
		rawM, rawQ := m.SQL(t), q.SQL(t)
		for _, db := range []*sql.DB{rawM, rawQ} {
			db.SetMaxOpenConns(1)
			if err := db.PingContext(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		c := &clock{now: time.UnixMilli(1_760_000_000_000).UTC()}
		return &bundle{mend: rawM, qdsn: q.DSN, clock: c,
			world: sqtest.World{App: rawQ, Queue: rawQ, NowMS: func() int64 { return c.Now().UnixMilli() }}}, m, q
	}
	// pools opens mend's pools (the store and the subscription's), after
	// the hostile globals were set: they would inherit them.
	pools := func(t *testing.T, b *bundle, m, q *mysqltest.DB) {
		t.Helper()
		ctx := t.Context()
		store, err := storage.Open(ctx, m.DSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		qdb, err := subscribe.Open(ctx, q.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = qdb.Close() })
		in, err := dlq.New(store, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		b.store, b.queue, b.intake = store, qdb, in
	}

	t.Run("sql_select_limit: every partition is joined", func(t *testing.T) {
		b, m, q := setup(t)
		b.queue = b.world.Queue // deadLetter reads offsets through it
		for i := range 4 {
			b.deadLetter(t, fmt.Sprintf("q%d", i), fmt.Sprintf("m%d", i))
		}
		srv.SetGlobal(t, "sql_select_limit", "2")
		pools(t, b, m, q)
		s := b.sub(t, subscribe.Config{})
		if _, err := s.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			b.acked(t, subscribe.GroupDefault, "speculate_dlq", fmt.Sprintf("q%d", i))
		}
		if got := b.ids(t); len(got) != 4 {
			t.Errorf("recorded %v; want the dead letters of all 4 partitions", got)
		}
	})

	t.Run("READ UNCOMMITTED: a move that is not committed", func(t *testing.T) {
		b, m, q := setup(t)
		b.queue = b.world.Queue
		b.deadLetter(t, "q0", "committed")
		holder := q.SQL(t)
		tx, err := holder.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		rawDLQ(t, tx, "speculate_dlq", "q1", "rolled-back", `{"id":"rolled-back","queue":"q1"}`)
		if !srv.SetGlobal(t, "transaction_isolation", "'READ-UNCOMMITTED'") && !srv.SetGlobal(t, "tx_isolation", "'READ-UNCOMMITTED'") {
			t.Fatal("the server has no isolation variable")
		}
		pools(t, b, m, q)
		s := b.sub(t, subscribe.Config{})
		if _, err := s.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := b.ids(t); len(got) != 1 || got[0] != "committed" {
			t.Errorf("recorded %v; want only the committed dead letter", got)
		}
	})
}

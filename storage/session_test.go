package storage_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// sessionsHold opens n sessions of pool at once (so each is a different
// connection) and checks that every one carries what mend forces:
// autocommit on, utf8mb4, a strict sql_mode, UTC, the lock waits.
func sessionsHold(t *testing.T, pool *sql.DB, n int, lockWait int) {
	t.Helper()
	ctx := t.Context()
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range n {
		c, err := pool.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var autocommit, rowWait, mdlWait int
		var mode, tz, client, conn, results, coll, version string
		err = c.QueryRowContext(ctx, `SELECT @@SESSION.autocommit, @@SESSION.sql_mode, @@SESSION.time_zone,
			@@SESSION.character_set_client, @@SESSION.character_set_connection, @@SESSION.character_set_results,
			@@SESSION.collation_connection, @@SESSION.innodb_lock_wait_timeout, @@SESSION.lock_wait_timeout, @@version`).
			Scan(&autocommit, &mode, &tz, &client, &conn, &results, &coll, &rowWait, &mdlWait, &version)
		if err != nil {
			t.Fatal(err)
		}
		if mysqlx.IsVTGate(version) {
			mdlWait = lockWait // vtgate keeps lock_wait_timeout as its own (mysqlx.VTGateOwn)
		}
		if autocommit != 1 || !strings.Contains(mode, "STRICT_ALL_TABLES") || tz != "+00:00" ||
			client != "utf8mb4" || conn != "utf8mb4" || results != "utf8mb4" || !strings.HasPrefix(coll, "utf8mb4_") ||
			rowWait != lockWait || mdlWait != lockWait {
			t.Fatalf("session %d of %d: autocommit %d, sql_mode %q, time_zone %q, charset %s/%s/%s (%s), lock waits %d/%d; want 1, strict, +00:00, utf8mb4, %d",
				i+1, n, autocommit, mode, tz, client, conn, results, coll, rowWait, mdlWait, lockWait)
		}
	}
}

// TestDSNCannotChangeSessions: a DSN that would set what mend forces, in
// any spelling or quoting, or smuggle a second assignment through a
// value, is refused before any connection with an error naming the
// parameter. Before, the backticked key survived the name-matching strip
// and the smuggled values reached the driver's SET unchanged: 13 of 60
// sessions ran non-strict, 8 of 60 on +05:00.
func TestDSNCannotChangeSessions(t *testing.T) {
	t.Parallel()
	db := setup(t).db
	for _, tt := range []struct{ query, param string }{
		{"autocommit=0", "autocommit"},
		{"`sql_mode`=%27%27", "`sql_mode`"},
		{"`time_zone`=%27%2B05:00%27", "`time_zone`"},
		{"net_read_timeout=30,sql_mode%3D%27%27", "net_read_timeout"},
		{"net_write_timeout=30,time_zone%3D%27%2B05:00%27", "net_write_timeout"},
		{"long_query_time=10,autocommit%3D0", "long_query_time"},
		{"innodb_lock_wait_timeout=50", "innodb_lock_wait_timeout"},
		{"charset=gbk", "charset"},
		{"charset=sjis", "charset"},
		{"charset=big5", "charset"},
		{"charset=cp932", "charset"},
	} {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			store, err := storage.Open(t.Context(), db.DSN+"&"+tt.query, storage.Options{})
			var pe *mysqlx.ParamError
			if errors.As(err, &pe) && pe.Param == tt.param {
				return
			}
			if err == nil {
				// Show what the DSN did to the sessions.
				defer store.Close()
				sessionsHold(t, store.SQL(), 60, 5)
			}
			t.Fatalf("Open with %s = %v; want a ParamError naming %s", tt.query, err, tt.param)
		})
	}
	t.Run("every session of a pool of 60 is mend's", func(t *testing.T) {
		t.Parallel()
		store := openStore(t, db.DSN+"&net_read_timeout=30", storage.Options{LeaseTTL: 9 * time.Second})
		sessionsHold(t, store.SQL(), 60, 3)
	})
}

// TestAutocommitOff: with autocommit=0 set globally on the server (some
// shops run that way) every write of the store still commits and is seen
// by another session, and so is a lease renew: mend sets autocommit=1 on
// each session it opens. The server is private: the global would disturb
// other tests. The negative control is a pool without mend's settings on
// the same server, whose write nobody else sees.
func TestAutocommitOff(t *testing.T) {
	t.Parallel()
	srv := mysqltest.StartPrivate(t)
	db := mysqltest.NewDBOn(t, srv, migrations.Up)
	admin := db.SQL(t)
	ctx := t.Context()
	if _, err := admin.ExecContext(ctx, "SET GLOBAL autocommit = 0"); err != nil {
		t.Fatal(err)
	}
	t.Run("negative control: a session that does not set it", func(t *testing.T) {
		raw, err := sql.Open("mysql", db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if _, err := raw.ExecContext(ctx, "CREATE TABLE ac_probe (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.ExecContext(ctx, "INSERT INTO ac_probe VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		other, err := sql.Open("mysql", db.DSN+"&autocommit=1")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		var n int
		if err := other.QueryRowContext(ctx, "SELECT COUNT(*) FROM ac_probe").Scan(&n); err != nil || n != 0 {
			t.Fatalf("the control's uncommitted insert is visible (%d rows, %v): the server does not reproduce autocommit=0", n, err)
		}
	})
	store := openStore(t, db.DSN, storage.Options{})
	sessionsHold(t, store.SQL(), 60, 5)
	// What mend doctor reports for the global (mysqlx.CheckServer): a warning,
	// since mend's own sessions are safe.
	warned := false
	for _, f := range mysqlx.CheckServer(ctx, store.SQL()) {
		if f.Name == "autocommit" {
			warned = f.Level == mysqlx.LevelWarn && f.Fix != ""
		}
	}
	if !warned {
		t.Errorf("CheckServer did not warn about the global autocommit=0: %+v", mysqlx.CheckServer(ctx, store.SQL()))
	}
	rec, created, err := store.RecordCreate(ctx, createParams(src("q", "m"), `{}`))
	if err != nil || !created {
		t.Fatalf("create = %v, %v", created, err)
	}
	term, err := store.LeaseAcquire(ctx, "q", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.LeaseRenew(ctx, term, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// Another session (committed reads, its own autocommit) sees both.
	other, err := sql.Open("mysql", db.DSN+"&autocommit=1")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var version int64
	var left float64
	if err := other.QueryRowContext(ctx, "SELECT version FROM mend_records WHERE record_id = ?", rec.ID[:]).Scan(&version); err != nil {
		t.Fatalf("another session does not see the created record: %v", err)
	}
	if err := other.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(SECOND, NOW(6), expires_at) FROM mend_leases WHERE queue = 'q'").Scan(&left); err != nil || left < 90 {
		t.Fatalf("another session sees the lease expire in %v s (%v); want the renewed ~120 s", left, err)
	}
}

// TestCraftedPayloadUnderMultibyteCharsets: under gbk, sjis or big5 the
// driver's client-side escaping turns a payload byte 0xbf before a quote
// into 0xbf 0x5c 0x27, which the server reads as one character and a
// closing quote; with multiStatements on (the store's pool) the rest of the
// payload runs as SQL. The negative control shows it on a raw pool: the
// payload creates a table. mend refuses those charsets in a DSN, and on
// its own utf8mb4 sessions the same payload is stored byte for byte and
// runs nothing.
func TestCraftedPayloadUnderMultibyteCharsets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	admin := b.db.SQL(t)
	payload := func(table string) []byte { return []byte("\xbf'); CREATE TABLE " + table + " (x INT); -- ") }
	tableExists := func(name string) bool {
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	t.Run("negative control: a raw gbk pool runs the payload", func(t *testing.T) {
		mysqltest.SkipVitess(t, "vtgate parses every query itself and sends the tablets its own rendering, so the gbk byte trick never reaches a server as a second statement: the control cannot reproduce the injection there (mend's own pools are checked above and below as everywhere)")
		if _, err := admin.ExecContext(ctx, "CREATE TABLE probe (b VARBINARY(200))"); err != nil {
			t.Fatal(err)
		}
		raw, err := sql.Open("mysql", b.db.DSN+"&charset=gbk&multiStatements=true&interpolateParams=true")
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_, _ = raw.ExecContext(ctx, "INSERT INTO probe (b) VALUES (?)", payload("pwned_raw"))
		if !tableExists("pwned_raw") {
			t.Fatal("the crafted payload did not run under gbk: the control no longer reproduces the injection")
		}
	})
	for _, cs := range []string{"gbk", "sjis", "big5"} {
		_, err := storage.Open(ctx, b.db.DSN+"&charset="+cs, storage.Options{})
		var pe *mysqlx.ParamError
		if !errors.As(err, &pe) || pe.Param != "charset" {
			t.Errorf("Open with charset=%s = %v; want a ParamError naming charset", cs, err)
		}
	}
	p := createParams(src("q", "crafted"), "")
	p.Snapshot.Payload = payload("pwned_mend")
	rec, _, err := b.store.RecordCreate(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil || string(got.Snapshot.Payload) != string(payload("pwned_mend")) {
		t.Fatalf("stored payload %q, %v; want it byte for byte", got.Snapshot.Payload, err)
	}
	if tableExists("pwned_mend") {
		t.Fatal("the crafted payload ran as SQL on mend's session")
	}
}

package host

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/internal/sqtest"
)

// hostSessionsHold checks n sessions of pool at once: each is mend's
// (autocommit on, utf8mb4, strict, UTC, the lock waits) and refuses a
// second statement in one query (multiStatements off).
func hostSessionsHold(t *testing.T, pool *sql.DB, n, lockWait int) {
	t.Helper()
	ctx := t.Context()
	var conns []*sql.Conn
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
		var mode, tz, client, results string
		if err := c.QueryRowContext(ctx, `SELECT @@SESSION.autocommit, @@SESSION.sql_mode, @@SESSION.time_zone,
			@@SESSION.character_set_client, @@SESSION.character_set_results,
			@@SESSION.innodb_lock_wait_timeout, @@SESSION.lock_wait_timeout`).
			Scan(&autocommit, &mode, &tz, &client, &results, &rowWait, &mdlWait); err != nil {
			t.Fatal(err)
		}
		if autocommit != 1 || !strings.Contains(mode, "STRICT_ALL_TABLES") || tz != "+00:00" || client != "utf8mb4" || results != "utf8mb4" || rowWait != lockWait || mdlWait != lockWait {
			t.Fatalf("host session %d of %d: autocommit %d, sql_mode %q, time_zone %q, charset %s/%s, lock waits %d/%d; want mend's (lock wait %d)",
				i+1, n, autocommit, mode, tz, client, results, rowWait, mdlWait, lockWait)
		}
		if _, err := c.ExecContext(ctx, "SELECT 1; SELECT 2"); err == nil {
			t.Fatalf("host session %d of %d ran two statements in one query: multiStatements is on", i+1, n)
		}
	}
}

// TestHostSessions: every session of both host pools (application and
// queue) of an adapter with default Options is mend's, on 60 sessions at
// once; a DSN that would change them is refused naming the parameter;
// multiStatements is off although the DSN cannot turn it on. Before, the
// host pools forced neither autocommit nor the charset nor a lock wait, and
// left multiStatements to the DSN.
func TestHostSessions(t *testing.T) {
	t.Parallel()
	app := mysqltest.NewDB(t, sqtest.Apply)
	queue := mysqltest.NewDB(t, sqtest.Apply)
	h, err := Open(t.Context(), app.DSN, queue.DSN, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	hostSessionsHold(t, h.app, 60, 5)
	hostSessionsHold(t, h.queue, 60, 5)
	for _, tt := range []struct{ query, param string }{
		{"autocommit=0", "autocommit"},
		{"charset=gbk", "charset"},
		{"charset=sjis", "charset"},
		{"charset=big5", "charset"},
		{"multiStatements=true", "multiStatements"},
		{"`sql_mode`=%27%27", "`sql_mode`"},
		{"net_write_timeout=30,time_zone%3D%27%2B05:00%27", "net_write_timeout"},
	} {
		_, err := Open(t.Context(), app.DSN, queue.DSN+"&"+tt.query, Options{})
		var pe *mysqlx.ParamError
		if !errors.As(err, &pe) || pe.Param != tt.param || pe.Field != "queue_dsn" {
			t.Errorf("Open with a queue DSN setting %s = %v; want a queue_dsn ParamError naming %s", tt.query, err, tt.param)
		}
	}
	// A batch ID that, under gbk, would have closed the literal early and
	// forged a second row into another partition lands once, as written.
	crafted := "\xe4\xb8\xad'), ('speculate', 'forged', 'x', 'other'"
	if err := h.Wake(t.Context(), mend.WakeUp{Queue: "q", MessageID: "mend/wake/x/v2", BatchID: crafted, Epoch: 1, RecordID: mend.NewRecordID()}); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := queue.SQL(t).QueryRow("SELECT COUNT(*) FROM queue_messages").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("queue_messages holds %d rows (%v); want the one wake-up", rows, err)
	}
}

// TestHostAutocommitOffGlobally: on a server running SET GLOBAL
// autocommit=0 (a private one: the global would disturb other tests), a
// transition through the adapter is seen by another session at once.
// Before, it ran in an implicit transaction nobody committed: "another
// session sees batch state=speculating version=1".
func TestHostAutocommitOffGlobally(t *testing.T) {
	t.Parallel()
	srv := mysqltest.StartPrivate(t)
	db := mysqltest.NewDBOn(t, srv, sqtest.Apply)
	admin := db.SQL(t)
	ctx := context.Background()
	w := sqtest.World{App: admin, Queue: admin}
	if err := w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "SET GLOBAL autocommit = 0"); err != nil {
		t.Fatal(err)
	}
	h, err := Open(ctx, db.DSN, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchFailed); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("mysql", db.DSN+"&autocommit=1")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var state string
	var version int
	if err := other.QueryRowContext(ctx, "SELECT state, version FROM batch WHERE queue = 'q' AND id = 'q/batch/1'").Scan(&state, &version); err != nil {
		t.Fatal(err)
	}
	if state != "failed" || version != 2 {
		t.Fatalf("another session sees batch state=%s version=%d; want failed at 2", state, version)
	}
}

package main

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
)

// killSessions kills every session on db's server that is in one of the
// databases, as a password rotation or a server's wait_timeout does.
func killSessions(t *testing.T, root *sql.DB, dbs ...string) int {
	t.Helper()
	n := 0
	for _, name := range dbs {
		rows, err := root.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()", name)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		_ = rows.Close()
		for _, id := range ids {
			if _, err := root.Exec("KILL ?", id); err == nil {
				n++
			}
		}
	}
	return n
}

// SIGTERM (the cancelled context main gives Main) after the server killed
// mend run's idle sessions exits 0: the stop was clean, whatever the
// server did to connections mend was not using (issue 45: a password
// rotation's KILL made it exit 1, "bad connection", which Kubernetes and
// systemd read as a failure). TestSIGTERMAfterKilledSessionsControl shows
// it fails on the old mapping.
func TestSIGTERMAfterKilledSessions(t *testing.T) {
	t.Parallel()
	if code, logs := sigtermAfterKilledSessions(t); code != exitOK {
		t.Fatalf("SIGTERM after the server killed mend's sessions: exit %d; want 0\n%s", code, logs)
	}
}

// The negative control: shutdown mapped as it was (every error closing a
// pool fails the run) with a driver that reports the killed idle session
// on close, as the "bad connection" did: the same steps exit 1.
// Not parallel: it replaces shutdownErr for the whole package while it runs.
func TestSIGTERMAfterKilledSessionsControl(t *testing.T) {
	saved := shutdownErr
	t.Cleanup(func() { shutdownErr = saved })
	shutdownErr = func(_, closeErr error) error {
		return errors.Join(closeErr, fmt.Errorf("close a pool's idle session the server killed: %w", driver.ErrBadConn))
	}
	if code, logs := sigtermAfterKilledSessions(t); code != exitFailure || !strings.Contains(logs, "bad connection") {
		t.Fatalf("planted: exit %d; want 1 naming the bad connection (the test would not catch the old exit status)\n%s", code, logs)
	}
}

func TestDropKilledSessions(t *testing.T) {
	t.Parallel()
	other := errors.New("close: something else")
	for _, tt := range []struct {
		name      string
		err, want error
	}{
		{"nil", nil, nil},
		{"bad connection", driver.ErrBadConn, nil},
		{"invalid connection", mysql.ErrInvalidConn, nil},
		{"wrapped", fmt.Errorf("close: %w", driver.ErrBadConn), nil},
		{"other", other, other},
		{"joined", errors.Join(driver.ErrBadConn, other, errors.Join(mysql.ErrInvalidConn)), other},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := dropKilledSessions(tt.err)
			if (got == nil) != (tt.want == nil) || (got != nil && got.Error() != tt.want.Error()) {
				t.Fatalf("dropKilledSessions(%v) = %v; want %v", tt.err, got, tt.want)
			}
		})
	}
	if err := shutdownErr(other, driver.ErrBadConn); !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("after a failed run a close error is kept; got %v", err)
	}
}

// sigtermAfterKilledSessions starts mend run with its DSNs from files (as
// the Deployment gives them) and the subscription on, waits until it is
// ready and past start-up, has the server kill every session in its
// databases, then cancels its context (SIGTERM) and returns the exit code
// and the run's stderr.
func sigtermAfterKilledSessions(t *testing.T) (int, string) {
	t.Helper()
	mysqltest.SkipVitess(t, "kills sessions by database on the server under vtgate")
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewHostDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewHostDB(t, onDSN(sqtest.CreateQueue))
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	if err := w.Join(context.Background(), "orchestrator", "speculate", "q"); err != nil {
		t.Fatal(err)
	}
	// As the Deployment gives them: from files (a connector that re-reads
	// them before each new connection).
	dir := t.TempDir()
	files := map[string]string{}
	for name, dsn := range map[string]string{"dsn": mendDB.DSN, "host-dsn": appDB.DSN, "queue-dsn": queueDB.DSN} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(dsn), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	errOut := &passLog{passes: make(chan bool, 1<<16)} // safe to read while run writes
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"run", "--dsn-file", files["dsn"], "--host-dsn-file", files["host-dsn"], "--queue-dsn-file", files["queue-dsn"],
			"--metrics-addr", addr, "--lease-ttl", "5s"},
			&out, errOut, func(string) string { return "" })
	}()
	ready := func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		// Ready, and past start-up: the subscription is the last thing
		// run opens before its passes (either mode: binlog on the test
		// servers, where auto finds every prerequisite).
		return resp.StatusCode == http.StatusOK && strings.Contains(errOut.String(), `msg="subscribe mode: `)
	}
	if !until(60*time.Second, 100*time.Millisecond, ready) {
		cancel()
		<-done
		t.Fatalf("mend run never ready:\n%s", errOut.String())
	}
	root := mendDB.SQL(t)
	if n := killSessions(t, root, mendDB.Name, appDB.Name, queueDB.Name); n == 0 {
		t.Fatal("no session of mend run to kill")
	}
	cancel() // SIGTERM
	select {
	case code := <-done:
		return code, errOut.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("mend run did not stop within 60s of SIGTERM:\n%s", errOut.String())
	}
	return 0, ""
}

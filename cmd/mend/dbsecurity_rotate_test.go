package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
)

// passLog is mend run's stderr (JSON logs): it keeps every line, and sends
// each pass's outcome (true: "pass done", false: "pass failed") on passes.
type passLog struct {
	mu     sync.Mutex
	all    bytes.Buffer
	part   []byte
	passes chan bool
}

func (l *passLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		var line struct{ Msg string }
		if json.Unmarshal(l.part[:i], &line) == nil {
			switch line.Msg {
			case "pass done":
				l.passes <- true
			case "pass failed":
				l.passes <- false
			}
		}
		l.part = l.part[i+1:]
	}
}

func (l *passLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// TestDSNFileRotation rotates mend run's password on the server and in
// its --dsn-file while run works, and cuts every session the user has so
// that the pools must dial again: no more than one pass fails before a
// pass succeeds on the new password (run --interval bounds a pass, so no
// pass fails for longer than an interval), and neither password is ever
// printed. The negative control is the same rotation under --dsn: every
// pass after the cut fails.
func TestDSNFileRotation(t *testing.T) {
	t.Parallel()
	for _, fromFile := range []bool{true, false} {
		name := "dsn-file"
		if !fromFile {
			name = "dsn (control: never re-read)"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := mysqltest.NewDB(t, migrations.Up, onDSN(sqtest.CreateApp), onDSN(sqtest.CreateQueue))
			// The host's planner reads the wake topic: run refuses one nobody reads.
			if err := (sqtest.World{App: db.SQL(t), Queue: db.SQL(t)}).Join(ctx, "orchestrator", "speculate", "q"); err != nil {
				t.Fatal(err)
			}
			root, err := sql.Open("mysql", db.Server.RootDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			root.SetMaxOpenConns(1)
			user := "rot_" + strings.TrimPrefix(db.Name, "mend_t_")
			const oldPW, newPW = "first-secret-41", "second-secret-42"
			for _, q := range []string{
				"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + oldPW + "'",
				"GRANT ALL ON `" + db.Name + "`.* TO '" + user + "'@'%'",
			} {
				if _, err := root.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { _, _ = root.ExecContext(ctx, "DROP USER '"+user+"'@'%'") })
			cfg, err := mysql.ParseDSN(db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			dsnWith := func(pw string) string {
				return user + ":" + pw + "@" + cfg.Net + "(" + cfg.Addr + ")/" + db.Name
			}
			file := filepath.Join(t.TempDir(), "dsn")
			write := func(content string) { // as a Kubernetes Secret volume does: a new file swapped in
				tmp := file + ".new"
				if err := os.WriteFile(tmp, []byte(content+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, file); err != nil {
					t.Fatal(err)
				}
			}
			write(dsnWith(oldPW))
			args := []string{"run", "--host-dsn", "same", "--interval", "20ms", "--log-format", "json", "--log-level", "debug"}
			if fromFile {
				args = append(args, "--dsn-file", file)
			} else {
				args = append(args, "--dsn", dsnWith(oldPW))
			}
			log := &passLog{passes: make(chan bool, 1<<16)}
			runCtx, stop := context.WithCancel(ctx)
			exited := make(chan int, 1)
			go func() { exited <- Main(runCtx, args, &bytes.Buffer{}, log, func(string) string { return "" }) }()
			defer func() {
				stop()
				select {
				case <-exited:
				case <-time.After(time.Minute):
					t.Error("mend run did not stop within a minute of its context ending")
				}
				if out := log.String(); strings.Contains(out, oldPW) || strings.Contains(out, newPW) {
					t.Errorf("a password was printed:\n%s", out)
				}
			}()
			next := func() bool { t.Helper(); return log.next(t, exited) }
			for !next() { // the first good pass on the old password
			}

			if _, err := root.ExecContext(ctx, "ALTER USER '"+user+"'@'%' IDENTIFIED BY '"+newPW+"'"); err != nil {
				t.Fatal(err)
			}
			write(dsnWith(newPW))
			readsBefore := mysqlx.DSNFileReads(dsnWith(oldPW))
			// The old sessions would go on working: cut them, so every
			// pool must dial with whatever credentials it has.
			rows, err := root.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE user = ?", user)
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
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				_, _ = root.ExecContext(ctx, "KILL ?", id) // a session may end on its own meanwhile
			}
			// Drop the outcomes of passes that may have begun before the cut.
			for len(log.passes) > 0 {
				<-log.passes
			}

			failed, good := 0, 0
			for good < 3 && failed < 3 {
				if next() {
					good++
				} else {
					failed++
					good = 0
				}
			}
			if fromFile {
				if failed > 1 || good < 3 {
					t.Fatalf("after the rotation: %d failed pass(es) before three good ones; want at most one:\n%s", failed, log.String())
				}
				if reads := mysqlx.DSNFileReads(dsnWith(oldPW)); reads <= readsBefore {
					t.Fatalf("the DSN file was re-read %d times before the cut and %d after: the pools did not dial through it", readsBefore, reads)
				}
				return
			}
			if failed < 3 {
				t.Fatalf("control: with --dsn the rotated password cannot be known, yet passes succeeded after the cut (%d failed, %d good)", failed, good)
			}
		})
	}
}

// next waits for the run's next pass and reports whether it succeeded,
// failing t if the run exits first or no pass comes within a minute (a
// hang, not a timing assertion).
func (l *passLog) next(t *testing.T, exited <-chan int) bool {
	t.Helper()
	select {
	case ok := <-l.passes:
		return ok
	case code := <-exited:
		t.Fatalf("mend run exited %d:\n%s", code, l.String())
	case <-time.After(time.Minute):
		t.Fatalf("no pass within a minute:\n%s", l.String())
	}
	return false
}

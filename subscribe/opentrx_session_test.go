package subscribe_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/subscribe"
)

// TestOpenSessionAgeCapsCraftedDeadlock: a real deadlock whose statement
// text, stored in the monitor's LATEST DETECTED DEADLOCK section, mimics
// the TRANSACTIONS banner and lists a transaction as old as the server in
// a live session that connected after the reader's first process list.
// The uptime cap lets that age through; the reader counts it from no
// earlier than the session could have connected (its previous list, less
// a second), and the session's real transaction still holds from no
// later than it began. Read through the InnoDB monitor on both engines
// (MariaDB reads innodb_trx first; the monitor is its fallback).
func TestOpenSessionAgeCapsCraftedDeadlock(t *testing.T) {
	t.Parallel()
	if p := sessionAgeProblems(t); len(p) > 0 {
		t.Fatal(p)
	}
}

// TestOpenSessionAgeCapsCraftedDeadlockCatchesSlip: counting a monitor
// transaction older than its session fails the test above.
func TestOpenSessionAgeCapsCraftedDeadlockCatchesSlip(t *testing.T) {
	defer subscribe.Plant("trustSessionAge")()
	p := sessionAgeProblems(t)
	if len(p) == 0 {
		t.Fatal("the planted slip passed the test meant to catch it")
	}
	t.Logf("caught: %v", p)
}

func sessionAgeProblems(t *testing.T) (problems []string) {
	t.Helper()
	mysqltest.SkipVitess(t, "reads the InnoDB monitor of one server")
	ctx := context.Background()
	b := setup(t)
	if _, err := b.queue.ExecContext(ctx, "CREATE TABLE crafted (id INT PRIMARY KEY, v TEXT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.queue.ExecContext(ctx, "INSERT INTO crafted VALUES (1, ''), (2, '')"); err != nil {
		t.Fatal(err)
	}
	var before time.Time
	var uptimeName string
	var uptime int64
	if err := b.queue.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := b.queue.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&uptimeName, &uptime); err != nil {
		t.Fatal(err)
	}
	var ages subscribe.SessionAges
	if _, _, err := subscribe.StatusOldest(ctx, b.queue, &ages); err != nil {
		t.Fatalf("the first read: %v", err)
	}
	// The session the crafted text names: connected after that read (a
	// pool of its own), holding a real transaction open.
	pool := b.qsrv.SQL(t)
	conn, err := pool.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	var session int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&session); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rawDLQ(t, tx, "speculate_dlq", "q", "q/batch/held", `{"id":"q/batch/held","queue":"q"}`)
	var held time.Time
	if err := b.queue.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&held); err != nil {
		t.Fatal(err)
	}
	// As old as the server: the uptime cap lets it through.
	claimed := before.Add(-time.Duration(uptime) * time.Second)
	if !claimed.Before(before.Add(-3 * time.Second)) {
		t.Skipf("the server has been up %d s: a crafted age it allows is no older than the session", uptime)
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	mark := "crafted-" + hex.EncodeToString(nonce)
	text := fmt.Sprintf("\n------------\nTRANSACTIONS\n------------\nLIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 9, ACTIVE %d sec\nMySQL thread id %d, %s\n", uptime, session, mark)
	craftDeadlock(t, b.qsrv.SQL(t), text, mark)
	got, began, err := subscribe.StatusOldest(ctx, b.queue, &ages)
	var after time.Time
	if err := b.queue.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&after); err != nil {
		t.Fatal(err)
	}
	switch floor := before.Add(-2 * time.Second); {
	case err != nil:
		problems = append(problems, fmt.Sprintf("the read beside the crafted deadlock: %v", err))
	case got != session:
		problems = append(problems, fmt.Sprintf("the oldest open transaction is session %d's from %v; want session %d's", got, began, session))
	case began.Before(floor):
		problems = append(problems, fmt.Sprintf("session %d, connected after %v, counted from %v: the crafted age (%d s) was trusted", session, before, began, uptime))
	case began.After(held):
		problems = append(problems, fmt.Sprintf("session %d's real transaction, open by %v, counted from %v (read at %v)", session, held, began, after))
	}
	return problems
}

// craftDeadlock makes the server's latest detected deadlock one whose
// statement text holds text (and mark, to find it), in crafted's rows:
// two transactions each wait on the other's row. It retries while
// another deadlock on the server (another test's) replaced it before the
// monitor showed it.
func craftDeadlock(t *testing.T, db *sql.DB, text, mark string) {
	t.Helper()
	ctx := context.Background()
	for range 5 {
		var wg sync.WaitGroup
		var errs [2]error
		begun := make(chan struct{}, 2)
		hold := make(chan struct{})
		for i, first := range []int{1, 2} {
			wg.Go(func() {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					errs[i] = err
					begun <- struct{}{}
					return
				}
				defer func() { _ = tx.Rollback() }()
				_, err = tx.ExecContext(ctx, fmt.Sprintf("UPDATE crafted SET v = 'first' WHERE id = %d", first))
				begun <- struct{}{}
				if err != nil {
					errs[i] = err
					return
				}
				<-hold
				_, errs[i] = tx.ExecContext(ctx, fmt.Sprintf("UPDATE crafted SET v = '%s' WHERE id = %d", text, 3-first))
			})
		}
		<-begun
		<-begun
		close(hold)
		wg.Wait()
		deadlocks := 0
		for _, err := range errs {
			var me *mysql.MySQLError
			switch {
			case errors.As(err, &me) && me.Number == 1213:
				deadlocks++
			case err != nil:
				t.Fatalf("the crafted deadlock: %v", err)
			}
		}
		if deadlocks != 1 {
			t.Fatalf("the crafted statements ended with %v: want one deadlock", errs)
		}
		var typ, name, status string
		if err := db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(status, mark) {
			return
		}
	}
	t.Fatal("the monitor never showed the crafted deadlock: another deadlock replaced it each time")
}

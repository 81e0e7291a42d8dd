package storage_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// renewStatementsAtServer counts this database's renew statements the
// server is running now (the processlist is live; innodb_trx is a cache).
func renewStatementsAtServer(ctx context.Context, db *sql.DB) (int, error) {
	// The server shows a packet's statement running now, not the rest of the
	// packet: a renewal waiting for the row is its locking SELECT.
	return mysqltest.CountStatements(ctx, db, "AS renew_holder FROM mend_leases")
}

// TestLeaseRenewWaitingOutItsTerm is issue 35's interleaving, made
// deterministic: a renewal sent while its term is live waits for the lease
// row (here behind a fenced write of the same term paused before its
// COMMIT; in the proof, behind any writer's shared lock stalled by a
// network fault), the term runs out by the database clock meanwhile and a
// reader sees it expired, then the lock is freed. The renewal must be
// refused: a term once expired stays expired. Before the fix the renew's
// "still live" test used NOW(6) of the statement's start, taken before the
// lock wait, so it extended the expired term, and a write under it was
// accepted again after the term had been seen to end.
func TestLeaseRenewWaitingOutItsTerm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	writer := openStore(t, b.db.DSN, storage.Options{})
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unpause := func() { once.Do(func() { close(proceed) }) }
	t.Cleanup(unpause)
	storage.SetBeforeCommit(writer, func(op string) {
		if op == "RecordAppend" {
			close(entered)
			<-proceed
		}
	})
	// Long enough that the renew surely starts inside the term on a
	// loaded machine (checked below); the test then waits for it to end.
	term, err := b.store.LeaseAcquire(ctx, "q", "a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := appendParams(rec, mend.EventSettled, mend.StateSettled)
	p.Fence = &term
	writeDone := make(chan error, 1)
	go func() {
		_, err := writer.RecordAppend(ctx, p)
		writeDone <- err
	}()
	select {
	case <-entered:
	case err := <-writeDone:
		t.Fatalf("the fenced append returned %v before reaching its commit", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the fenced append did not reach its commit in 10s")
	}

	renewDone := make(chan error, 1)
	go func() { renewDone <- b.store.LeaseRenew(ctx, term, time.Hour) }()
	raw := b.db.SQL(t)
	// The renew's statement is at the server while the write holds the
	// lease row shared: it can only be waiting for that lock.
	poll(t, 10*time.Second, func() error {
		select {
		case err := <-renewDone:
			t.Fatalf("renew returned %v while a fenced write held the lease row", err)
		default:
		}
		if n, err := renewStatementsAtServer(ctx, raw); err != nil || n == 0 {
			return fmt.Errorf("no renew statement at the server (%d, %v); statements: %s", n, err, mysqltest.DescribeStatements(ctx, raw))
		}
		return nil
	})
	if st, err := b.store.LeaseGet(ctx, "q"); err != nil || !st.Live() {
		t.Fatalf("precondition: the term ended (%+v, %v) before its renew was seen waiting; the renew may have started too late to test anything", st, err)
	}
	// The term runs out by the database clock while the renew waits, and a
	// reader sees that.
	poll(t, 10*time.Second, func() error {
		if st, err := b.store.LeaseGet(ctx, "q"); err != nil || st.Live() {
			return fmt.Errorf("term still live: %+v, %v", st, err)
		}
		return nil
	})
	unpause()
	if err := <-writeDone; err != nil {
		t.Fatalf("the in-flight fenced append = %v; want it committed (it was checked inside its term)", err)
	}
	if err := <-renewDone; !errors.Is(err, mend.ErrLeaseLost) {
		t.Fatalf("a renew that got the lease row after its term was seen expired = %v; want ErrLeaseLost", err)
	}
	if st, err := b.store.LeaseGet(ctx, "q"); err != nil || st.Live() || st.Term != term {
		t.Fatalf("after the refused renew: %+v, %v; want term %v still expired", st, err, term)
	}
	cur, err := b.store.RecordGetByID(ctx, "q", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	late := appendParams(cur, mend.EventParked, mend.StateParked)
	late.Fence = &term
	if _, err := b.store.RecordAppend(ctx, late); !errors.Is(err, mend.ErrFenced) {
		t.Fatalf("a write under the term after it was seen expired = %v; want ErrFenced", err)
	}
}

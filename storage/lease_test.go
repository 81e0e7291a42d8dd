package storage_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// historyRow is a mend_lease_history row.
type historyRow struct {
	Epoch      int64
	Holder     string
	AcquiredAt time.Time
	EndedAt    sql.NullTime
	EndedHow   sql.NullString
}

func leaseHistory(t *testing.T, db *sql.DB, queue string) []historyRow {
	t.Helper()
	rows, err := db.Query("SELECT epoch, holder, acquired_at, ended_at, ended_how FROM mend_lease_history WHERE queue = ? ORDER BY epoch", queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []historyRow
	for rows.Next() {
		var r historyRow
		if err := rows.Scan(&r.Epoch, &r.Holder, &r.AcquiredAt, &r.EndedAt, &r.EndedHow); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// hang bounds this package's waits: it catches a hang and nothing else,
// so a loaded machine cannot fail a test by being slow. What each test
// decides on comes from hooks or the database clock.
const hang = 2 * time.Minute

// poll calls f until it returns nil or the deadline passes, and fails the
// test with f's last error then.
func poll(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not true after %s: %v", timeout, err)
		}
		tick := time.NewTimer(5 * time.Millisecond)
		<-tick.C
	}
}

// acquireWhenFree takes the lease as soon as the database lets holder in.
func acquireWhenFree(t *testing.T, store *storage.DB, queue, holder string, ttl time.Duration) mend.Term {
	t.Helper()
	var term mend.Term
	poll(t, hang, func() error {
		var err error
		term, err = store.LeaseAcquire(context.Background(), queue, holder, ttl)
		return err
	})
	return term
}

func TestLeaseSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := map[string]string{
		"mend_leases.queue": "varbinary", "mend_leases.holder": "varbinary", "mend_leases.expires_at": "datetime",
		"mend_lease_history.queue": "varbinary", "mend_lease_history.holder": "varbinary", "mend_lease_history.ended_at": "datetime",
	}
	conn := b.db.SQL(t)
	for col, typ := range want {
		table, name, _ := strings.Cut(col, ".")
		var got string
		err := conn.QueryRow("SELECT data_type FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?", table, name).Scan(&got)
		if err != nil || got != typ {
			t.Errorf("%s is %q (%v); want %s", col, got, err, typ)
		}
	}
}

func TestLeaseAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a free queue gets epoch 1 and an open history row", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		term, err := b.store.LeaseAcquire(ctx, "q", "a", time.Minute)
		if want := (mend.Term{Queue: "q", Holder: "a", Epoch: 1}); err != nil || term != want {
			t.Fatalf("LeaseAcquire = %v, %v; want %v", term, err, want)
		}
		st, err := b.store.LeaseGet(ctx, "q")
		if err != nil || st.Term != term || !st.Live() || st.Remaining > time.Minute || st.Remaining < 50*time.Second || st.Transitions != 1 {
			t.Fatalf("LeaseGet = %+v, %v; want %v live for about a minute, 1 transition", st, err, term)
		}
		h := leaseHistory(t, b.db.SQL(t), "q")
		if len(h) != 1 || h[0].Epoch != 1 || h[0].Holder != "a" || !h[0].AcquiredAt.Equal(st.AcquiredAt) || h[0].EndedAt.Valid {
			t.Fatalf("history = %+v; want one open row for epoch 1 acquired at %v", h, st.AcquiredAt)
		}
	})

	t.Run("a held lease names its holder and time left by the database clock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		term, err := b.store.LeaseAcquire(ctx, "q", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, holder := range []string{"b", "a"} { // the holder itself does not re-enter
			_, err := b.store.LeaseAcquire(ctx, "q", holder, time.Minute)
			var held *mend.HeldError
			if !errors.As(err, &held) || !errors.Is(err, mend.ErrLeaseHeld) || !mend.IsRetryable(err) {
				t.Fatalf("acquire by %s = %v; want a retryable *mend.HeldError", holder, err)
			}
			if held.Queue != "q" || held.Holder != "a" || held.Epoch != term.Epoch || held.Remaining <= 50*time.Second || held.Remaining > time.Minute || held.ExpiresAt.IsZero() {
				t.Fatalf("held = %+v; want holder a, epoch %d, about a minute left", held, term.Epoch)
			}
		}
		if st, _ := b.store.LeaseGet(ctx, "q"); st.Term != term || st.Transitions != 1 {
			t.Fatalf("after refused acquires the lease is %+v; want %v unchanged", st, term)
		}
	})

	t.Run("an expired term is taken with the next epoch and closed as expired", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if _, err := b.store.LeaseAcquire(ctx, "q", "a", 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		old, err := b.store.LeaseGet(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		term := acquireWhenFree(t, b.store, "q", "b", time.Minute)
		if want := (mend.Term{Queue: "q", Holder: "b", Epoch: 2}); term != want {
			t.Fatalf("takeover = %v; want %v", term, want)
		}
		h := leaseHistory(t, b.db.SQL(t), "q")
		if len(h) != 2 || h[0].EndedHow.String != storage.LeaseCodeExpired || !h[0].EndedAt.Time.Equal(old.ExpiresAt) || h[1].EndedAt.Valid {
			t.Fatalf("history = %+v; want epoch 1 expired at %v, epoch 2 open", h, old.ExpiresAt)
		}
		if h[1].AcquiredAt.Before(h[0].EndedAt.Time) {
			t.Fatalf("epoch 2 acquired at %v, before epoch 1 ended at %v", h[1].AcquiredAt, h[0].EndedAt.Time)
		}
	})

	t.Run("epochs are never reused after a release", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for want := int64(1); want <= 3; want++ {
			term, err := b.store.LeaseAcquire(ctx, "q", "a", time.Minute)
			if err != nil || term.Epoch != want {
				t.Fatalf("acquire %d = %v, %v; want epoch %d", want, term, err, want)
			}
			if err := b.store.LeaseRelease(ctx, term); err != nil {
				t.Fatal(err)
			}
		}
		h := leaseHistory(t, b.db.SQL(t), "q")
		for i, r := range h {
			if r.Epoch != int64(i+1) || r.EndedHow.String != storage.LeaseCodeReleased || r.EndedAt.Time.Before(r.AcquiredAt) {
				t.Errorf("history[%d] = %+v; want epoch %d released", i, r, i+1)
			}
		}
		if st, _ := b.store.LeaseGet(ctx, "q"); st.Live() || st.Term.Epoch != 3 || st.Transitions != 6 {
			t.Fatalf("lease = %+v; want released epoch 3 after 6 transitions", st)
		}
	})

	t.Run("bad input is refused before the database", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tt := range []struct {
			queue, holder string
			ttl           time.Duration
		}{
			{"", "a", time.Second},
			{"q", "", time.Second},
			{"q", strings.Repeat("h", 256), time.Second},
			{"q", "\xff", time.Second},
			{"q", "a", 0},
			{"q", "a", 25 * time.Hour},
		} {
			if _, err := b.store.LeaseAcquire(ctx, tt.queue, tt.holder, tt.ttl); !errors.Is(err, mend.ErrInvalid) {
				t.Errorf("LeaseAcquire(%q, %q, %v) = %v; want ErrInvalid", tt.queue, tt.holder, tt.ttl, err)
			}
		}
		if _, err := b.store.LeaseGet(ctx, "q"); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("LeaseGet after refused input = %v; want ErrNotFound", err)
		}
	})
}

func TestLeaseRenewRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("renew moves the expiry of the current term", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		term, err := b.store.LeaseAcquire(ctx, "q", "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.LeaseRenew(ctx, term, time.Hour); err != nil {
			t.Fatalf("renew = %v", err)
		}
		st, _ := b.store.LeaseGet(ctx, "q")
		if st.Term != term || st.Remaining < 59*time.Minute || st.RenewedAt.Before(st.AcquiredAt) {
			t.Fatalf("after renew: %+v; want %v with about an hour left", st, term)
		}
	})

	t.Run("an old term's renew and release change nothing of the new term", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old, err := b.store.LeaseAcquire(ctx, "q", "a", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		cur := acquireWhenFree(t, b.store, "q", "b", time.Minute)
		before, _ := b.store.LeaseGet(ctx, "q")
		if err := b.store.LeaseRenew(ctx, old, time.Hour); !errors.Is(err, mend.ErrLeaseLost) {
			t.Fatalf("renew by the old term = %v; want ErrLeaseLost", err)
		}
		if err := b.store.LeaseRelease(ctx, old); !errors.Is(err, mend.ErrLeaseLost) {
			t.Fatalf("release by the old term = %v; want ErrLeaseLost", err)
		}
		// The same epoch under another holder's name is not the term either.
		if err := b.store.LeaseRelease(ctx, mend.Term{Queue: "q", Holder: "a", Epoch: cur.Epoch}); !errors.Is(err, mend.ErrLeaseLost) {
			t.Fatalf("release by a wrong holder = %v; want ErrLeaseLost", err)
		}
		after, _ := b.store.LeaseGet(ctx, "q")
		if after.Term != cur || !after.ExpiresAt.Equal(before.ExpiresAt) || !after.RenewedAt.Equal(before.RenewedAt) || after.Transitions != before.Transitions {
			t.Fatalf("lease changed from %+v to %+v", before, after)
		}
		h := leaseHistory(t, b.db.SQL(t), "q")
		if len(h) != 2 || h[0].EndedHow.String != storage.LeaseCodeExpired || h[1].EndedAt.Valid {
			t.Fatalf("history = %+v; want epoch 1 expired and epoch 2 open", h)
		}
	})

	t.Run("a term that ran out cannot be renewed or released", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		term, err := b.store.LeaseAcquire(ctx, "q", "a", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		poll(t, hang, func() error {
			if st, err := b.store.LeaseGet(ctx, "q"); err != nil || st.Live() {
				return fmt.Errorf("lease still live: %+v, %v", st, err)
			}
			return nil
		})
		if err := b.store.LeaseRenew(ctx, term, time.Hour); !errors.Is(err, mend.ErrLeaseLost) {
			t.Fatalf("renew after expiry = %v; want ErrLeaseLost", err)
		}
		if err := b.store.LeaseRelease(ctx, term); !errors.Is(err, mend.ErrLeaseLost) {
			t.Fatalf("release after expiry = %v; want ErrLeaseLost", err)
		}
		if h := leaseHistory(t, b.db.SQL(t), "q"); len(h) != 1 || h[0].EndedAt.Valid {
			t.Fatalf("history = %+v; want the term left for the next acquire to close", h)
		}
	})

	t.Run("release lets the next holder in at once", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		term, err := b.store.LeaseAcquire(ctx, "q", "a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.LeaseRelease(ctx, term); err != nil {
			t.Fatal(err)
		}
		if err := b.store.LeaseRelease(ctx, term); !errors.Is(err, mend.ErrLeaseLost) {
			t.Fatalf("second release = %v; want ErrLeaseLost", err)
		}
		next, err := b.store.LeaseAcquire(ctx, "q", "b", time.Hour)
		if err != nil || next.Epoch != 2 {
			t.Fatalf("acquire after release = %v, %v; want epoch 2", next, err)
		}
	})
}

func TestFencedAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	fenced := func(rec mend.Record, term mend.Term) storage.AppendParams {
		p := appendParams(rec, mend.EventSettled, mend.StateSettled)
		p.Fence = &term
		return p
	}

	t.Run("the current term writes with its epoch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		term, err := b.store.LeaseAcquire(ctx, "q", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := b.store.RecordAppend(ctx, fenced(rec, term)); err != nil || v != 2 {
			t.Fatalf("fenced append = %d, %v; want 2", v, err)
		}
		got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
		evs, _ := b.store.RecordHistory(ctx, "q", rec.ID)
		if got.Epoch != term.Epoch || len(evs) != 2 || evs[1].Epoch != term.Epoch {
			t.Fatalf("record epoch %d, events %+v; want epoch %d on both", got.Epoch, evs, term.Epoch)
		}
	})

	t.Run("a replaced term is fenced, writes nothing, and is not retryable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		old, err := b.store.LeaseAcquire(ctx, "q", "a", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		acquireWhenFree(t, b.store, "q", "b", time.Minute)
		p := fenced(rec, old)
		_, err = b.store.RecordAppend(ctx, p)
		if !errors.Is(err, mend.ErrFenced) || mend.Classify(err) != mend.ClassFenced || !strings.Contains(err.Error(), "epoch 2") {
			t.Fatalf("append by the replaced term = %v; want ErrFenced naming epoch 2", err)
		}
		got, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
		if _, lookErr := b.store.OpLookup(ctx, "q", p.OpID); got.Version != 1 || !errors.Is(lookErr, mend.ErrNotFound) {
			t.Fatalf("after a fenced append: version %d, op lookup %v; want 1 and not found", got.Version, lookErr)
		}
		// Negative control: the same write without the fence lands, so the
		// fence is what stopped it.
		p.Fence, p.OpID = nil, mend.NewOpID()
		if _, err := b.store.RecordAppend(ctx, p); err != nil {
			t.Fatalf("unfenced append by the zombie = %v; want it to succeed", err)
		}
	})

	t.Run("an expired term is fenced even with nobody else in", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		term, err := b.store.LeaseAcquire(ctx, "q", "a", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		poll(t, hang, func() error {
			_, err := b.store.RecordAppend(ctx, fenced(rec, term))
			if errors.Is(err, mend.ErrFenced) && strings.Contains(err.Error(), "expired") {
				return nil
			}
			return fmt.Errorf("append = %v; want fenced as expired", err)
		})
	})

	t.Run("a queue never leased is fenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		_, err := b.store.RecordAppend(ctx, fenced(rec, mend.Term{Queue: "q", Holder: "a", Epoch: 1}))
		if !errors.Is(err, mend.ErrFenced) {
			t.Fatalf("append on an unleased queue = %v; want ErrFenced", err)
		}
	})

	t.Run("a term of another queue or a contradicting epoch is invalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		other := fenced(rec, mend.Term{Queue: "other", Holder: "a", Epoch: 1})
		if _, err := b.store.RecordAppend(ctx, other); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("append fenced by another queue's term = %v; want ErrInvalid", err)
		}
		clash := fenced(rec, mend.Term{Queue: "q", Holder: "a", Epoch: 1})
		clash.Epoch = 2
		if _, err := b.store.RecordAppend(ctx, clash); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("append with epoch 2 fenced by epoch 1 = %v; want ErrInvalid", err)
		}
	})
}

// leaseStatementsAtServer counts this database's statements of a lease
// acquire that the server is running now (see mysqltest.Statements: live,
// and not failed by other tests' binary statements). The acquire is one
// packet of several statements (sqlLeaseLock); the server shows each as
// the text from that statement on, so the one waiting for the lease row,
// the INSERT, no longer carries the packet's name comment: it is matched
// by its own text. The earlier version counted LOCK WAIT rows of
// information_schema.innodb_trx, a cache InnoDB refreshes only after 100 ms
// without a reader: polled every 5 ms it stayed frozen on a snapshot taken
// before the acquire began to wait, and the test stalled until its deadline
// (1 run in 4).
func leaseStatementsAtServer(ctx context.Context, db *sql.DB) (int, error) {
	// "into mend_leases", not "INSERT INTO": through vtgate the tablet's text
	// carries an optimizer hint between the two words.
	return mysqltest.CountStatements(ctx, db, "name: LeaseLock", "into mend_leases")
}

// TestFencedWriteInFlight holds a fenced append open just before its commit,
// past the end of its term, and shows a takeover waits for it: the old
// term's write lands first and the new term's after.
func TestFencedWriteInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	writerA := openStore(t, b.db.DSN, storage.Options{})
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	t.Cleanup(release)
	storage.SetBeforeCommit(writerA, func(op string) {
		if op == "RecordAppend" {
			close(entered)
			<-proceed
		}
	})
	// Long enough that A's fence check runs inside the term unless the
	// machine stalls this goroutine for seconds; the test then waits for
	// it to run out by the database clock.
	termA, err := b.store.LeaseAcquire(ctx, "q", "a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pa := appendParams(rec, mend.EventSettled, mend.StateSettled)
	pa.Fence = &termA
	aDone := make(chan error, 1)
	go func() {
		_, err := writerA.RecordAppend(ctx, pa)
		aDone <- err
	}()
	select {
	case <-entered:
	case err := <-aDone:
		t.Fatalf("A's fenced append returned %v before reaching its commit", err)
	case <-time.After(hang):
		t.Fatalf("A's fenced append did not reach its commit in %s", hang)
	}
	// A's transaction holds the lease row shared; let its term run out.
	poll(t, hang, func() error {
		if st, err := b.store.LeaseGet(ctx, "q"); err != nil || st.Live() {
			return fmt.Errorf("term still live: %+v, %v", st, err)
		}
		return nil
	})
	type result struct {
		term mend.Term
		err  error
	}
	bDone := make(chan result, 1)
	go func() {
		term, err := b.store.LeaseAcquire(ctx, "q", "b", time.Minute)
		bDone <- result{term, err}
	}()
	raw := b.db.SQL(t)
	// The acquire's statement is at the server while A holds the lease row
	// shared: it can only be waiting for that lock.
	poll(t, hang, func() error {
		select {
		case r := <-bDone:
			t.Fatalf("acquire returned %v, %v while a fenced write of the old term was in flight", r.term, r.err)
		default:
		}
		if n, err := leaseStatementsAtServer(ctx, raw); err != nil || n == 0 {
			return fmt.Errorf("no acquire statement at the server (%d, %v); statements: %s", n, err, mysqltest.DescribeStatements(ctx, raw))
		}
		return nil
	})
	select {
	case r := <-bDone:
		t.Fatalf("acquire returned %v, %v while a fenced write of the old term was in flight", r.term, r.err)
	default:
	}
	release()
	if err := <-aDone; err != nil {
		t.Fatalf("the in-flight fenced append = %v; want it committed", err)
	}
	r := <-bDone
	if r.err != nil || r.term.Epoch != termA.Epoch+1 {
		t.Fatalf("takeover = %v, %v; want epoch %d", r.term, r.err, termA.Epoch+1)
	}
	cur, _ := b.store.RecordGetByID(ctx, "q", rec.ID)
	pb := appendParams(cur, mend.EventWoken, mend.StateDone)
	pb.Fence = &r.term
	if _, err := b.store.RecordAppend(ctx, pb); err != nil {
		t.Fatal(err)
	}
	cur, _ = b.store.RecordGetByID(ctx, "q", rec.ID)
	late := appendParams(cur, mend.EventParked, mend.StateParked)
	late.Fence = &termA
	if _, err := writerA.RecordAppend(ctx, late); !errors.Is(err, mend.ErrFenced) {
		t.Fatalf("a later append by the old term = %v; want ErrFenced", err)
	}
	evs, _ := b.store.RecordHistory(ctx, "q", rec.ID)
	var epochs []int64
	for _, e := range evs {
		epochs = append(epochs, e.Epoch)
	}
	if fmt.Sprint(epochs) != fmt.Sprint([]int64{0, termA.Epoch, r.term.Epoch}) {
		t.Fatalf("event epochs in log order = %v; want [0 %d %d]", epochs, termA.Epoch, r.term.Epoch)
	}
}

// TestLeaseGetMany: the leases of several queues in one read, each as
// LeaseGet reads it (live, released, never contended: absent), and only
// those asked for.
func TestLeaseGetMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	live, err := b.store.LeaseAcquire(ctx, "a", "h1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ended, err := b.store.LeaseAcquire(ctx, "b", "h2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.LeaseRelease(ctx, ended); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.LeaseAcquire(ctx, "other", "h3", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.LeaseGetMany(ctx, []string{"a", "b", "never"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("LeaseGetMany = %+v; want the leases of a and b alone", got)
	}
	for _, st := range got {
		want, err := b.store.LeaseGet(ctx, st.Term.Queue)
		if err != nil {
			t.Fatal(err)
		}
		if isLive := st.Term == live; isLive != st.Live() {
			t.Errorf("%q: live %v; want %v", st.Term.Queue, st.Live(), isLive)
		}
		st.Remaining, want.Remaining = 0, 0
		if st != want {
			t.Errorf("LeaseGetMany's %q = %+v; LeaseGet reads %+v", st.Term.Queue, st, want)
		}
	}
	if _, err := b.store.LeaseGetMany(ctx, []string{"a", ""}); !errors.Is(err, mend.ErrInvalid) {
		t.Errorf("an empty queue name: %v; want ErrInvalid", err)
	}
}

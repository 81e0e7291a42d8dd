package storage_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// atServer counts this database's statements named name (by their "--
// name:" comment) that the server is running now (see
// mysqltest.Statements: live, unlike information_schema.innodb_trx, and
// not failed by other tests' binary statements).
func atServer(ctx context.Context, db *sql.DB, name string) (int, error) {
	return mysqltest.CountStatements(ctx, db, "name: "+name)
}

// holdCommit makes store stop just before committing op, once, until the
// returned release is called; entered closes when it stops.
func holdCommit(t *testing.T, store *storage.DB, op string) (entered <-chan struct{}, release func()) {
	t.Helper()
	in, proceed := make(chan struct{}), make(chan struct{})
	var inOnce, outOnce sync.Once
	release = func() { outOnce.Do(func() { close(proceed) }) }
	t.Cleanup(release)
	storage.SetBeforeCommit(store, func(got string) {
		if got == op {
			inOnce.Do(func() {
				close(in)
				<-proceed
			})
		}
	})
	return in, release
}

func waitOrFail(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hang):
		t.Fatalf("%s: not after %s", what, hang)
	}
}

// TestOpLookupWaitsForACommitInFlight: while an append's COMMIT is held
// open, a lookup of its op ID must not answer "not found" (the op is about
// to land); it waits and then finds it. If the writer stays undecided past
// the lock wait timeout, the answer is ErrBusy ("unknown yet"), never
// ErrNotFound.
func TestOpLookupWaitsForACommitInFlight(t *testing.T) {
	mysqltest.SkipVitess(t, "the test watches the server's processlist for the lookup; through vtgate the statement runs on a tablet's pooled connection, rewritten, under the tablet's account")
	t.Parallel()
	for _, tt := range []struct {
		name     string
		lockWait time.Duration // the lookup's innodb_lock_wait_timeout
		want     error         // nil: found after the writer commits
	}{
		{"the lookup waits and finds the op", 50 * time.Second, nil},
		{"a writer undecided past the lock wait is unknown yet", time.Second, mend.ErrBusy},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(t)
			rec := b.create(t, src("q", "m"))
			writer := openStore(t, b.db.DSN, storage.Options{})
			entered, release := holdCommit(t, writer, "RecordAppend")
			p := appendParams(rec, mend.EventSettled, mend.StateSettled)
			wDone := make(chan error, 1)
			go func() {
				_, err := writer.RecordAppend(ctx, p)
				wDone <- err
			}()
			waitOrFail(t, entered, "the append reaching its commit")
			looker := openStore(t, b.db.DSN, storage.Options{LockWait: tt.lockWait})
			type result struct {
				ev  mend.Event
				err error
			}
			lDone := make(chan result, 1)
			go func() {
				ev, err := looker.OpLookup(ctx, "q", p.OpID)
				lDone <- result{ev, err}
			}()
			if tt.want != nil {
				r := <-lDone
				release()
				if !errors.Is(r.err, tt.want) || errors.Is(r.err, mend.ErrNotFound) {
					t.Fatalf("lookup while the commit is held = %+v, %v; want %v", r.ev, r.err, tt.want)
				}
				if err := <-wDone; err != nil {
					t.Fatal(err)
				}
				return
			}
			raw := b.db.SQL(t)
			poll(t, hang, func() error {
				select {
				case r := <-lDone:
					t.Fatalf("lookup answered %+v, %v while the op's commit was in flight", r.ev, r.err)
				default:
				}
				if n, err := atServer(ctx, raw, "OpLookup"); err != nil || n == 0 {
					return fmt.Errorf("lookup not at the server yet (%d, %v)", n, err)
				}
				return nil
			})
			release()
			if err := <-wDone; err != nil {
				t.Fatal(err)
			}
			if r := <-lDone; r.err != nil || r.ev.Seq != 2 || r.ev.RecordID != rec.ID {
				t.Fatalf("lookup after the commit = %+v, %v; want seq 2 of %s", r.ev, r.err, rec.ID)
			}
		})
	}
}

// TestRecordCreateTyped: reusing an op ID is ErrInvalid and writes nothing;
// a failure count beyond the column is clamped with a note, never refused.
func TestRecordCreateTyped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("an op id already used is ErrInvalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := createParams(src("q", "m1"), "{}")
		if _, _, err := b.store.RecordCreate(ctx, first); err != nil {
			t.Fatal(err)
		}
		second := createParams(src("q", "m2"), "{}")
		second.OpID = first.OpID
		_, _, err := b.store.RecordCreate(ctx, second)
		var ve *mend.ValidationError
		if !errors.As(err, &ve) || ve.Field != "op_id" {
			t.Fatalf("create reusing an op id = %v; want a ValidationError on op_id", err)
		}
		if _, err := b.store.RecordGet(ctx, second.Source); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("the refused create left a record: %v", err)
		}
	})

	t.Run("a huge failure count is clamped with a note", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := createParams(src("q", "m"), "{}")
		p.Snapshot.FailureCount = 1 << 40
		rec, created, err := b.store.RecordCreate(ctx, p)
		if err != nil || !created {
			t.Fatalf("create with failure count 2^40 = %v, %v; want created", created, err)
		}
		if rec.Snapshot.FailureCount != math.MaxInt32 {
			t.Fatalf("stored failure count %d; want %d", rec.Snapshot.FailureCount, math.MaxInt32)
		}
		evs, err := b.store.RecordHistory(ctx, "q", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		var data struct {
			Note     string `json:"note"`
			Reported int64  `json:"failure_count_reported"`
		}
		if err := json.Unmarshal(evs[0].Data, &data); err != nil || data.Reported != 1<<40 || data.Note == "" {
			t.Fatalf("created event data %s (%v); want the reported count and a note", evs[0].Data, err)
		}
	})
}

// TestRecordCreateIsOneTransaction: the created event carries the create's
// op ID, and a create whose commit fails leaves neither the record nor its
// event behind.
func TestRecordCreateIsOneTransaction(t *testing.T) {
	t.Parallel()

	t.Run("the created event carries the op id", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := createParams(src("q", "m"), "{}")
		rec, _, err := b.store.RecordCreate(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := b.store.OpLookup(t.Context(), "q", p.OpID)
		if err != nil || ev.RecordID != rec.ID || ev.Seq != 1 || ev.Kind != mend.EventCreated {
			t.Fatalf("OpLookup(create's op) = %+v, %v; want the created event of %s", ev, err, rec.ID)
		}
	})

	t.Run("a create cut off before its commit leaves nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		writer := openStore(t, b.db.DSN, storage.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		storage.SetBeforeCommit(writer, func(op string) {
			if op == "RecordCreate" {
				cancel() // the caller gives up just before COMMIT
			}
		})
		p := createParams(src("q", "m"), "{}")
		if _, _, err := writer.RecordCreate(ctx, p); err == nil {
			t.Fatal("create with its context cancelled before commit succeeded")
		}
		var records, events int
		raw := b.db.SQL(t)
		if err := raw.QueryRow("SELECT (SELECT COUNT(*) FROM mend_records), (SELECT COUNT(*) FROM mend_events)").Scan(&records, &events); err != nil {
			t.Fatal(err)
		}
		if records != 0 || events != 0 {
			t.Fatalf("after a create that never committed: %d records, %d events; want none", records, events)
		}
		// Negative control: the same create committed leaves both.
		if _, _, err := b.store.RecordCreate(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		if err := raw.QueryRow("SELECT (SELECT COUNT(*) FROM mend_records), (SELECT COUNT(*) FROM mend_events)").Scan(&records, &events); err != nil || records != 1 || events != 1 {
			t.Fatalf("after a committed create: %d records, %d events (%v); want 1 and 1", records, events, err)
		}
	})
}

// TestStoredIdentityBytesAreCompared damages a stored identity column while
// keeping its source key: every read by source must report the mismatch,
// not hand out a record for an identity it does not hold.
func TestStoredIdentityBytesAreCompared(t *testing.T) {
	t.Parallel()
	for _, col := range []string{"topic", "partition_key", "message_id"} {
		t.Run(col, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(t)
			s := src("q", "m")
			rec := b.create(t, s)
			if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET "+col+" = CONCAT("+col+", 'x') WHERE record_id = ?", rec.ID[:]); err != nil {
				t.Fatal(err)
			}
			if _, err := b.store.RecordGet(ctx, s); !errors.Is(err, mend.ErrIdentityMismatch) {
				t.Fatalf("RecordGet after damaging %s = %v; want ErrIdentityMismatch", col, err)
			}
			if _, _, err := b.store.RecordCreate(ctx, createParams(s, "{}")); !errors.Is(err, mend.ErrIdentityMismatch) {
				t.Fatalf("RecordCreate read-back after damaging %s = %v; want ErrIdentityMismatch", col, err)
			}
		})
	}
}

// TestSameHolderNewTerm: one holder loses a queue (its term runs out) and
// takes it again under the same name. The old term's late write and release
// must be refused while the new term is live: the fence compares the epoch,
// not just the holder.
func TestSameHolderNewTerm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	old, err := b.store.LeaseAcquire(ctx, "q", "a", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	cur := acquireWhenFree(t, b.store, "q", "a", time.Minute)
	if cur.Holder != old.Holder || cur.Epoch != old.Epoch+1 {
		t.Fatalf("second term %v after %v; want the same holder at the next epoch", cur, old)
	}
	late := appendParams(rec, mend.EventSettled, mend.StateSettled)
	late.Fence = &old
	if _, err := b.store.RecordAppend(ctx, late); !errors.Is(err, mend.ErrFenced) {
		t.Fatalf("late write of the old term = %v; want ErrFenced", err)
	}
	before, _ := b.store.LeaseGet(ctx, "q")
	if err := b.store.LeaseRelease(ctx, old); !errors.Is(err, mend.ErrLeaseLost) {
		t.Fatalf("release of the old term = %v; want ErrLeaseLost", err)
	}
	after, _ := b.store.LeaseGet(ctx, "q")
	if !after.Live() || after.Term != cur || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("the new term after the old one's release: %+v; want %v live and unchanged", after, cur)
	}
	// Negative control: the new term writes.
	now := appendParams(rec, mend.EventSettled, mend.StateSettled)
	now.Fence = &cur
	if _, err := b.store.RecordAppend(ctx, now); err != nil {
		t.Fatalf("write of the new term = %v", err)
	}
}

// TestLeaseEndedShowsExpiry: a term that runs out without a release is
// shown as expired by its expires_at, in LeaseGet, Status and the views,
// before any later acquire closes it in history; a released one as
// released.
func TestLeaseEndedShowsExpiry(t *testing.T) {
	mysqltest.SkipVitess(t, "mend's views are not in the vschema: vtgate routes no view of a sharded keyspace (Vitess views are experimental, --enable-views)")
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	lost, err := b.store.LeaseAcquire(ctx, "lost", "a", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := b.store.LeaseAcquire(ctx, "rel", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.LeaseRelease(ctx, rel); err != nil {
		t.Fatal(err)
	}
	live, err := b.store.LeaseAcquire(ctx, "live", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, hang, func() error {
		if st, err := b.store.LeaseGet(ctx, "lost"); err != nil || st.Live() {
			return fmt.Errorf("term still live: %+v, %v", st, err)
		}
		return nil
	})
	want := map[string]string{"lost": storage.LeaseEndedExpired, "rel": storage.LeaseEndedHolder, "live": ""}
	for q, w := range want {
		st, err := b.store.LeaseGet(ctx, q)
		if err != nil || st.Ended != w {
			t.Errorf("LeaseGet(%s).Ended = %q, %v; want %q", q, st.Ended, err, w)
		}
	}
	all, err := b.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, qs := range all {
		if qs.Lease == nil || qs.Lease.Ended != want[qs.Queue] {
			t.Errorf("Status of %s: lease %+v; want ended %q", qs.Queue, qs.Lease, want[qs.Queue])
		}
	}
	raw := b.db.SQL(t)
	views := map[string]string{"lost": "expired", "rel": "holder released", "live": "held"}
	for q, w := range views {
		var status string
		if err := raw.QueryRow("SELECT status FROM mend_lease_status WHERE queue = ?", q).Scan(&status); err != nil || status != w {
			t.Errorf("mend_lease_status of %s = %q, %v; want %q", q, status, err, w)
		}
	}
	var how string
	var endedAt sql.NullTime
	if err := raw.QueryRow("SELECT ended_how, ended_at FROM mend_lease_terms WHERE queue = 'lost' AND epoch = ?", lost.Epoch).Scan(&how, &endedAt); err != nil ||
		how != "expired" || !endedAt.Valid {
		t.Errorf("mend_lease_terms for the lost term = %q at %v, %v; want expired with its expires_at", how, endedAt, err)
	}
	if err := raw.QueryRow("SELECT ended_how FROM mend_lease_terms WHERE queue = 'live' AND epoch = ?", live.Epoch).Scan(&how); err != nil || how != "current" {
		t.Errorf("mend_lease_terms for the live term = %q, %v; want current", how, err)
	}
}

// TestTopology: the detection on injected server variables (no Galera or
// Group Replication here), and the real server's own values.
func TestTopology(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		vars map[string]string
		ok   bool
	}{
		{"MySQL single primary", map[string]string{"log_bin": "ON", "binlog_format": "ROW"}, true},
		{"MariaDB without binlog", map[string]string{"wsrep_on": "OFF", "log_bin": "OFF", "binlog_format": "MIXED"}, true},
		{"Galera", map[string]string{"wsrep_on": "ON", "log_bin": "ON", "binlog_format": "ROW"}, false},
		{"Group Replication single primary", map[string]string{"group_replication_group_name": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "group_replication_single_primary_mode": "ON", "log_bin": "ON", "binlog_format": "ROW"}, true},
		{"Group Replication multi-primary", map[string]string{"group_replication_group_name": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "group_replication_single_primary_mode": "OFF", "log_bin": "ON", "binlog_format": "ROW"}, false},
		{"statement binlog", map[string]string{"log_bin": "ON", "binlog_format": "STATEMENT"}, false},
		{"statement format with binlog off", map[string]string{"log_bin": "OFF", "binlog_format": "STATEMENT"}, true},
	} {
		err := storage.CheckTopologyVars(tt.vars)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, storage.ErrTopology)) {
			t.Errorf("%s: %v; want ok %v or ErrTopology", tt.name, err, tt.ok)
		}
	}
	b := setup(t)
	if err := b.store.CheckTopology(t.Context()); err != nil {
		t.Fatalf("the test server (single primary): %v", err)
	}
}

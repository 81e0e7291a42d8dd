package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

func TestRecordResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setupParked := func(t *testing.T) (*bundle, mend.Record) {
		t.Helper()
		b := setup(t)
		rec := b.create(t, src("q", "m1"))
		p := appendParams(rec, mend.EventParked, mend.StateParked)
		p.LastError = "gave up after 10 attempts"
		if _, err := b.store.RecordAppend(ctx, p); err != nil {
			t.Fatal(err)
		}
		rec, err := b.store.RecordFind(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		return b, rec
	}

	t.Run("a parked record becomes done with a resolved event, and is pruned like done ones", func(t *testing.T) {
		t.Parallel()
		b, rec := setupParked(t)
		got, err := b.store.RecordResolve(ctx, storage.ResolveParams{ID: rec.ID, Actor: "alice", OpID: mend.NewOpID(), Reason: "settled by hand"})
		if err != nil {
			t.Fatal(err)
		}
		if got.State != mend.StateDone || got.NextAttemptAt != nil {
			t.Fatalf("resolved record = %s (next %v); want done and not due", got.State, got.NextAttemptAt)
		}
		evs, err := b.store.RecordHistory(ctx, "q", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Kind != mend.EventResolved || last.Actor != "alice" || string(last.Data) == "{}" {
			t.Fatalf("last event = %+v; want resolved by alice with the reason", last)
		}
		// Pruning measures time since the last change; push it into the past.
		if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET updated_at = updated_at - INTERVAL 2 HOUR"); err != nil {
			t.Fatal(err)
		}
		if n, err := b.store.PruneDone(ctx, time.Hour, 10); err != nil || n != 1 {
			t.Fatalf("PruneDone = %d, %v; want the resolved record pruned", n, err)
		}
	})

	t.Run("at a version it is not at, it is refused with ErrConflict and nothing changes", func(t *testing.T) {
		t.Parallel()
		b, rec := setupParked(t)
		got, err := b.store.RecordResolve(ctx, storage.ResolveParams{ID: rec.ID, Actor: "alice", OpID: mend.NewOpID(), Reason: "x", Version: rec.Version - 1})
		if !errors.Is(err, mend.ErrConflict) || got.Version != rec.Version {
			t.Fatalf("RecordResolve(version %d) = %d, %v; want ErrConflict and the record at %d", rec.Version-1, got.Version, err, rec.Version)
		}
		if now, err := b.store.RecordFind(ctx, rec.ID); err != nil || now.Version != rec.Version || now.State != mend.StateParked {
			t.Fatalf("after a refused resolve: %s at %d (%v); want parked at %d", now.State, now.Version, err, rec.Version)
		}
		if _, err := b.store.RecordResolve(ctx, storage.ResolveParams{ID: rec.ID, Actor: "alice", OpID: mend.NewOpID(), Reason: "x", Version: -1}); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("RecordResolve(version -1) = %v; want ErrInvalid", err)
		}
		if got, err := b.store.RecordResolve(ctx, storage.ResolveParams{ID: rec.ID, Actor: "alice", OpID: mend.NewOpID(), Reason: "x", Version: rec.Version}); err != nil || got.State != mend.StateDone {
			t.Fatalf("RecordResolve(its version) = %s, %v; want done", got.State, err)
		}
	})

	t.Run("a done record and a missing reason are refused", func(t *testing.T) {
		t.Parallel()
		b, rec := setupParked(t)
		if _, err := b.store.RecordResolve(ctx, storage.ResolveParams{ID: rec.ID, Actor: "alice", OpID: mend.NewOpID()}); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("resolve without a reason = %v; want ErrInvalid", err)
		}
		p := storage.ResolveParams{ID: rec.ID, Actor: "alice", OpID: mend.NewOpID(), Reason: "x"}
		if _, err := b.store.RecordResolve(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.OpID = mend.NewOpID()
		if _, err := b.store.RecordResolve(ctx, p); !errors.Is(err, storage.ErrResolveDone) {
			t.Fatalf("resolve twice = %v; want ErrResolveDone", err)
		}
	})
}

func TestRecordsSelect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	park := func(queue, msg, reason string) {
		rec := b.create(t, src(queue, msg))
		p := appendParams(rec, mend.EventParked, mend.StateParked)
		p.LastError = reason
		if _, err := b.store.RecordAppend(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	park("a", "1", "dlq: cannot decode payload")
	park("b", "2", "wake-up failed 10 times")
	park("b", "3", "dlq: cannot decode payload")
	b.create(t, src("a", "pending"))
	for _, tc := range []struct {
		f    storage.RecordFilter
		want int
	}{
		{storage.RecordFilter{State: mend.StateParked, Limit: 10}, 3},
		{storage.RecordFilter{State: mend.StateParked, Queue: "b", Limit: 10}, 2},
		{storage.RecordFilter{State: mend.StateParked, ReasonContains: "cannot decode", Limit: 10}, 2},
		{storage.RecordFilter{State: mend.StateParked, ReasonContains: "Cannot decode", Limit: 10}, 0},
		{storage.RecordFilter{State: mend.StateParked, Queue: "b", ReasonContains: "decode", Limit: 10}, 1},
		{storage.RecordFilter{State: mend.StatePending, Limit: 10}, 1},
		{storage.RecordFilter{State: mend.StateParked, Limit: 2}, 2},
	} {
		got, err := b.store.RecordsSelect(ctx, tc.f)
		if err != nil || len(got) != tc.want {
			t.Errorf("RecordsSelect(%+v) = %d records, %v; want %d", tc.f, len(got), err, tc.want)
		}
	}
	if _, err := b.store.RecordsSelect(ctx, storage.RecordFilter{State: "stuck", Limit: 1}); !errors.Is(err, mend.ErrInvalid) {
		t.Errorf("unknown state = %v; want ErrInvalid", err)
	}
}

// An operator ends a dead holder's term by its epoch: the holder's renew
// and fenced writes are refused from then on, history says the operator
// ended it, a stale epoch changes nothing, and the next term gets a higher
// epoch at once.
func TestLeaseEndByOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	term, err := b.store.LeaseAcquire(ctx, "q", "dead-host", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.LeaseEndByOperator(ctx, "q", term.Epoch+1); !errors.Is(err, mend.ErrLeaseLost) {
		t.Fatalf("end a term that does not exist = %v; want ErrLeaseLost", err)
	}
	ended, err := b.store.LeaseEndByOperator(ctx, "q", term.Epoch)
	if err != nil || ended != term {
		t.Fatalf("LeaseEndByOperator = %v, %v; want %v", ended, err, term)
	}
	if err := b.store.LeaseRenew(ctx, term, time.Hour); !errors.Is(err, mend.ErrLeaseLost) {
		t.Fatalf("the old holder's renew = %v; want ErrLeaseLost", err)
	}
	rec := b.create(t, src("q", "m"))
	p := appendParams(rec, mend.EventSettled, mend.StateSettled)
	p.Fence = &term
	if _, err := b.store.RecordAppend(ctx, p); !errors.Is(err, mend.ErrFenced) {
		t.Fatalf("the old holder's fenced write = %v; want ErrFenced", err)
	}
	if _, err := b.store.LeaseEndByOperator(ctx, "q", term.Epoch); !errors.Is(err, mend.ErrLeaseLost) {
		t.Fatalf("ending it twice = %v; want ErrLeaseLost", err)
	}
	hist, err := b.store.LeaseHistory(ctx, "q", 10)
	if err != nil || len(hist) != 1 || hist[0].EndedHow != storage.LeaseEndedOperator || hist[0].EndedAt == nil {
		t.Fatalf("history = %+v, %v; want the term ended by the operator", hist, err)
	}
	if st, err := b.store.LeaseGet(ctx, "q"); err != nil || st.Live() || st.Ended != storage.LeaseEndedOperator {
		t.Fatalf("LeaseGet after the operator ended the term = %+v, %v; want ended by the operator, not expired", st, err)
	}
	next, err := b.store.LeaseAcquire(ctx, "q", "new-host", time.Hour)
	if err != nil || next.Epoch != term.Epoch+1 {
		t.Fatalf("next acquire = %v, %v; want epoch %d at once", next, err, term.Epoch+1)
	}
	leases, err := b.store.LeaseList(ctx)
	if err != nil || len(leases) != 1 || leases[0].Term != next || !leases[0].Live() {
		t.Fatalf("LeaseList = %+v, %v; want the new term, live", leases, err)
	}
}

// The version is read without creating the bookkeeping table.
func TestSchemaVersionWritesNothing(t *testing.T) {
	mysqltest.SkipVitess(t, "every keyspace of the cluster holds mend's schema from the start (a sharded keyspace cannot be created through vtgate), so there is no empty database")
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t) // no migrations
	conn := db.SQL(t)
	v, dirty, err := storage.ReadSchemaVersion(ctx, conn)
	if err != nil || v != 0 || dirty {
		t.Fatalf("ReadSchemaVersion on an empty database = %d %v %v; want 0", v, dirty, err)
	}
	if tables := db.Tables(t); len(tables) != 0 {
		t.Fatalf("reading the version created %v", tables)
	}
	b := setup(t)
	v, dirty, err = b.store.SchemaVersion(ctx)
	if err != nil || v == 0 || dirty {
		t.Fatalf("SchemaVersion after migrate up = %d %v %v", v, dirty, err)
	}
}

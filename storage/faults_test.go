package storage_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// TestAmbiguousCommit cuts the connection while COMMIT is in flight. The
// caller cannot know the outcome, so it must get ErrAmbiguous, and the op ID
// lookup must tell what really happened.
func TestAmbiguousCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	cases := []struct {
		name    string
		fault   func(t *testing.T, p *mysqltest.Proxy)
		applied bool
	}{
		{
			// The COMMIT reaches the server, its reply is swallowed and the
			// connection closed: committed, but the caller never heard.
			name: "reply lost",
			fault: func(t *testing.T, p *mysqltest.Proxy) {
				if err := p.AddToxic("swallow", "timeout", "downstream", 1, map[string]any{"timeout": 300}); err != nil {
					t.Error(err)
				}
			},
			applied: true,
		},
		{
			// The connection is gone before COMMIT leaves: the server rolls
			// back, but the caller cannot tell this case from the other.
			name:    "request lost",
			fault:   func(_ *testing.T, p *mysqltest.Proxy) { p.Cut() },
			applied: false,
		},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rec := b.create(t, src("q", "m"))
			proxy := mysqltest.NewProxy(t, b.db.Server.Addr())
			viaProxy := openStore(t, b.db.DSNVia(proxy.Addr()), storage.Options{})
			var once sync.Once
			storage.SetBeforeCommit(viaProxy, func(string) { once.Do(func() { tt.fault(t, proxy) }) })

			p := appendParams(rec, mend.EventSettled, mend.StateSettled)
			_, err := viaProxy.RecordAppend(ctx, p)
			var amb *mend.AmbiguousError
			if !errors.As(err, &amb) || amb.OpID != p.OpID || mend.Classify(err) != mend.ClassAmbiguous {
				t.Fatalf("append with the commit cut = %v; want an AmbiguousError for op %s", err, p.OpID)
			}

			// Resolve through a healthy connection.
			_, lookErr := b.store.OpLookup(ctx, "q", p.OpID)
			got, err := b.store.RecordGetByID(ctx, "q", rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if tt.applied {
				if lookErr != nil || got.Version != 2 {
					t.Fatalf("lookup = %v, version %d; want the op found and version 2", lookErr, got.Version)
				}
				return
			}
			if !errors.Is(lookErr, mend.ErrNotFound) || got.Version != 1 {
				t.Fatalf("lookup = %v, version %d; want not found and version 1", lookErr, got.Version)
			}
			// Not applied: the same change can be made again.
			retry := appendParams(got, mend.EventSettled, mend.StateSettled)
			if _, err := b.store.RecordAppend(ctx, retry); err != nil {
				t.Fatalf("retry after a resolved ambiguity: %v", err)
			}
		})
	}
}

// TestAmbiguousCreate is TestAmbiguousCommit for RecordCreate, whose COMMIT
// travels in the same packet as its insert: a packet lost on the way or
// whose answer is lost is ambiguous, never a plain failure, and repeating
// the create resolves it either way (the record exists once, with its one
// created event).
func TestAmbiguousCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name    string
		fault   func(t *testing.T, p *mysqltest.Proxy)
		applied bool
	}{
		{name: "reply lost", applied: true, fault: func(t *testing.T, p *mysqltest.Proxy) {
			if err := p.AddToxic("swallow", "timeout", "downstream", 1, map[string]any{"timeout": 300}); err != nil {
				t.Error(err)
			}
		}},
		{name: "request lost", applied: false, fault: func(_ *testing.T, p *mysqltest.Proxy) { p.Cut() }},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			proxy := mysqltest.NewProxy(t, b.db.Server.Addr())
			viaProxy := openStore(t, b.db.DSNVia(proxy.Addr()), storage.Options{})
			var once sync.Once
			var ops []string
			storage.SetBeforeCommit(viaProxy, func(op string) {
				ops = append(ops, op)
				once.Do(func() { tt.fault(t, proxy) })
			})
			p := createParams(src("q", "m"), `{"batch_id":"b1"}`)
			_, _, err := viaProxy.RecordCreate(ctx, p)
			var amb *mend.AmbiguousError
			if !errors.As(err, &amb) || amb.OpID != p.OpID || mend.Classify(err) != mend.ClassAmbiguous {
				t.Fatalf("create with its packet cut = %v; want an AmbiguousError for op %s", err, p.OpID)
			}
			if len(ops) != 1 || ops[0] != "RecordCreate" {
				t.Fatalf("before-commit hook ran for %q; want once, for RecordCreate", ops)
			}
			_, lookErr := b.store.OpLookup(ctx, "q", p.OpID)
			if tt.applied != (lookErr == nil) {
				t.Fatalf("op lookup after the fault = %v; want found %v", lookErr, tt.applied)
			}
			// Repeating the create through a healthy connection settles it.
			rec, created, err := b.store.RecordCreate(ctx, p)
			if err != nil || created == tt.applied {
				t.Fatalf("repeat = created %v, %v; want created %v", created, err, !tt.applied)
			}
			evs, err := b.store.RecordHistory(ctx, "q", rec.ID)
			if err != nil || len(evs) != 1 || evs[0].Kind != mend.EventCreated {
				t.Fatalf("history = %v, %v; want the one created event", evs, err)
			}
		})
	}
}

// TestLockWaitTimeout shows a lock wait timeout (1205), which on its own rolls
// back only the statement, leaves nothing half applied: the whole transaction
// is rolled back and the caller gets a retryable ErrBusy.
func TestLockWaitTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	impatient := openStore(t, b.db.DSN, storage.Options{LockWait: time.Second})

	holder, err := b.db.SQL(t).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v int64
	if err := holder.QueryRow("SELECT version FROM mend_records WHERE record_id = ? FOR UPDATE", rec.ID[:]).Scan(&v); err != nil {
		t.Fatal(err)
	}
	p := appendParams(rec, mend.EventSettled, mend.StateSettled)
	_, err = impatient.RecordAppend(ctx, p)
	if !errors.Is(err, mend.ErrBusy) || !mend.IsRetryable(err) {
		t.Fatalf("append behind a held lock = %v; want retryable ErrBusy", err)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Nothing of the failed attempt remains, so the identical call succeeds.
	if v, err := impatient.RecordAppend(ctx, p); err != nil || v != 2 {
		t.Fatalf("retry = %d, %v; want version 2", v, err)
	}
	evs, _ := b.store.RecordHistory(ctx, "q", rec.ID)
	if len(evs) != 2 {
		t.Fatalf("%d events; want 2", len(evs))
	}
}

// TestServerDownIsUnavailable: with the server unreachable, a write fails as
// retryable ErrUnavailable, not as a conflict or an ambiguity.
func TestServerDownIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := setup(t)
	rec := b.create(t, src("q", "m"))
	proxy := mysqltest.NewProxy(t, b.db.Server.Addr())
	viaProxy := openStore(t, b.db.DSNVia(proxy.Addr()), storage.Options{})
	viaProxy.SQL().SetMaxIdleConns(0) // every call dials anew
	proxy.Cut()
	_, err := viaProxy.RecordAppend(ctx, appendParams(rec, mend.EventSettled, mend.StateSettled))
	if !errors.Is(err, mend.ErrUnavailable) || errors.Is(err, mend.ErrAmbiguous) || !mend.IsRetryable(err) {
		t.Fatalf("append with the server unreachable = %v; want retryable ErrUnavailable", err)
	}
}

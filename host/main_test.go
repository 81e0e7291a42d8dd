package host_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/planner"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// The adapter satisfies the ports exactly.
var (
	_ planner.Batches = (*host.DB)(nil)
	_ planner.Waker   = (*host.DB)(nil)
)

// The clock of every bundle: a fixed instant, so log and message times can
// be checked exactly.
var testNow = time.UnixMilli(1_760_000_000_123).UTC()

type dangling struct{ queue, batchID, state string }

// bundle is one test's submit queue (its real-shaped tables in a fresh
// database, the application and queue databases being the same one) and
// the adapter over it.
type bundle struct {
	db *mysqltest.DB
	h  *host.DB
	w  sqtest.World

	mu       sync.Mutex
	dangling []dangling
}

// padSpace reports whether table's collation ignores trailing spaces, as the
// server answers it (see sqtest.World.PadSpace).
func (b *bundle) padSpace(t *testing.T, table string) bool {
	t.Helper()
	pad, err := b.w.PadSpace(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	return pad
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := mysqltest.NewDB(t, sqtest.Apply)
	s := db.SQL(t)
	b := &bundle{db: db, w: sqtest.World{App: s, Queue: s, NowMS: func() int64 { return testNow.UnixMilli() }}}
	b.h = open(t, db.DSN, db.DSN, host.Options{
		NowFunc: func() time.Time { return testNow },
		Logger:  slog.New(slog.DiscardHandler),
		OnDangling: func(queue, batchID, state string) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.dangling = append(b.dangling, dangling{queue, batchID, state})
		},
	})
	return b
}

func open(t *testing.T, appDSN, queueDSN string, opts host.Options) *host.DB {
	t.Helper()
	h, err := host.Open(context.Background(), appDSN, queueDSN, opts)
	if err != nil {
		t.Fatalf("host.Open: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func (b *bundle) seed(t *testing.T, queue, id, state string, requests ...string) {
	t.Helper()
	if err := b.w.SeedBatch(context.Background(), queue, id, state, requests...); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := b.w.App.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (b *bundle) membership(t *testing.T, queue string) []string {
	t.Helper()
	m, err := b.w.Membership(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (b *bundle) danglingRows() []dangling {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]dangling(nil), b.dangling...)
}

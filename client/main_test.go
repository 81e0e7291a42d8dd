package client_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/internal/testserver"
	"github.com/mendq/mend/migrations"
)

func TestMain(m *testing.M) {
	// The Examples need a server and cannot skip as a test does: without
	// one (and outside CI, where that is a failure) the package skips whole,
	// saying why, as its tests would one by one.
	if c := testserver.Discover(testserver.SystemProbes()); c.Backend == testserver.BackendNone && !c.Fatal {
		fmt.Printf("client: no test server (%s); skipping the package, Examples included\n", c.Reason)
		os.Exit(0)
	}
	mysqltest.Main(m, func() error { return goleak.Find() })
}

// world is one submit queue and mend's database beside it: mend's tables
// migrated in a database of their own, the host's real-shaped tables
// (application and queue) in another, the host's planner reading the wake
// topic as a running submit queue does, and one batch in flight.
type world struct {
	mendDB, hostDB *mysqltest.DB
	sq             sqtest.World
}

const (
	queue  = "monorepo/main"
	batch1 = queue + "/batch/1"
	batch2 = queue + "/batch/2"
)

func newWorld(t testing.TB) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{mendDB: mysqltest.NewDB(t, migrations.Up), hostDB: mysqltest.NewHostDB(t, sqtest.Apply)}
	w.sq = sqtest.World{App: w.hostDB.SQL(t), Queue: w.hostDB.SQL(t)}
	for _, seed := range []func() error{
		func() error { return w.sq.SeedBatch(ctx, queue, batch1, "speculating", queue+"/1") },
		func() error { return w.sq.SeedBatch(ctx, queue, batch2, "created", queue+"/2") },
		func() error { return w.sq.Join(ctx, "orchestrator", "speculate", queue) },
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// deadLetter moves batch 1's speculate message to the DLQ, as the host's
// consumer does after its last failed attempt, and returns the DLQ row.
func (w *world) deadLetter(t testing.TB) sqtest.Message {
	t.Helper()
	ctx := context.Background()
	payload := []byte(fmt.Sprintf(`{"id":%q,"queue":%q}`, batch1, queue))
	if err := w.sq.Publish(ctx, "speculate", queue, batch1, payload, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.sq.MoveToDLQ(ctx, "speculate", queue, batch1, sqtest.Failure{Count: 3, LastError: "speculation crashed"}); err != nil {
		t.Fatal(err)
	}
	ms, err := w.sq.Messages(ctx, "speculate_dlq", queue)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m sqtest.Message) bool { return m.ID == batch1 })
	if i < 0 {
		t.Fatalf("no dead letter for %s on speculate_dlq: %+v", batch1, ms)
	}
	return ms[i]
}

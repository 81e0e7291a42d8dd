package itest

// The subscription against the real queue's garbage collector with mend's
// store stopped (issue 27, item 6): the host's orchestrator-dlq group acks
// every dead letter as soon as it appears; the GC, the queue's own two
// statements (COALESCE(MIN(offset_acked), 0) over the partition's groups,
// then DELETE ... `offset` <= it when that is not 0), runs on each
// partition once it has been idle for the host's GC period (100 idle polls
// of 100 ms: 10 s); dead letters arrive on build_dlq partitions keyed by
// batch, which nothing registers ahead. mend's store is cut off (its proxy
// refuses every connection) for 15 s, longer than the GC period, while
// they arrive, then comes back: the subscription, which joins them on
// first sight whatever recording does, loses none. The control, mend
// import run from cron over the same schedule, loses some.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// storeStopGC is one run of the schedule: mend's database behind a proxy
// the test cuts, the queue's tables, and the world driving the host.
type storeStopGC struct {
	mendDSN  string // through the proxy
	queueDSN string
	proxy    *mysqltest.Proxy
	world    sqtest.World
	mend     *mysqltest.DB
	now      time.Time
}

const (
	stopRounds = 16               // rounds (of a second) with new dead letters
	stopFrom   = 3                // the store is cut from this round ...
	stopUntil  = 18               // ... until this one: 15 s, longer than the GC period
	stopDrain  = 20               // rounds without new dead letters
	stopGCIdle = 10 * time.Second // the host's GC period: 100 idle polls of 100 ms
)

func setupStoreStopGC(t *testing.T) *storeStopGC {
	t.Helper()
	m := mysqltest.NewDB(t, migrations.Up)
	q := mysqltest.NewHostDB(t, sqtest.Apply)
	p := mysqltest.NewProxy(t, m.Server.Addr())
	conn := q.SQL(t)
	g := &storeStopGC{mendDSN: m.DSNVia(p.Addr()), queueDSN: q.DSN, proxy: p, mend: m, now: time.UnixMilli(1_760_000_000_000).UTC()}
	g.world = sqtest.World{App: conn, Queue: conn, NowMS: func() int64 { return g.now.UnixMilli() }}
	return g
}

// gc is the host's GC over the build_dlq partitions idle for its period,
// with the queue's own statements (its offset store's GetMinAckedOffset,
// its message store's GarbageCollect).
func (g *storeStopGC) gc(t *testing.T, last map[string]time.Time) {
	t.Helper()
	ctx := context.Background()
	for p, at := range last {
		if g.now.Sub(at) < stopGCIdle {
			continue
		}
		var low int64
		if err := g.world.Queue.QueryRowContext(ctx, "SELECT COALESCE(MIN(offset_acked), 0) FROM queue_offsets WHERE topic = ? AND partition_key = ?",
			"build_dlq", p).Scan(&low); err != nil {
			t.Fatal(err)
		}
		if low == 0 {
			continue
		}
		if _, err := g.world.Queue.ExecContext(ctx, "DELETE FROM queue_messages WHERE topic = ? AND partition_key = ? AND `offset` <= ?",
			"build_dlq", p, low); err != nil {
			t.Fatal(err)
		}
	}
}

// run drives the rounds: each round a dead letter on a new build_dlq
// partition (and, every third round, a second on the previous one), the
// host's DLQ group acks everything, the GC runs on the partitions idle
// for its period, the store is cut or healed, then mend's step runs and
// the time it returns passes. It returns the message IDs dead-lettered.
func (g *storeStopGC) run(t *testing.T, step func(round int, storeUp bool) time.Duration) []string {
	t.Helper()
	ctx := context.Background()
	var lettered []string
	last := map[string]time.Time{} // each partition's last dead letter
	letter := func(batch string, n int) {
		id := fmt.Sprintf("%s/%d", batch, n)
		payload := fmt.Sprintf(`{"id":%q,"queue":"q"}`, batch)
		if err := g.world.Publish(ctx, "build", batch, id, []byte(payload), nil); err != nil {
			t.Fatal(err)
		}
		if err := g.world.MoveToDLQ(ctx, "build", batch, id, sqtest.Failure{Count: 5, LastError: "boom"}); err != nil {
			t.Fatal(err)
		}
		lettered = append(lettered, id)
		last[batch] = g.now
	}
	for r := range stopRounds + stopDrain {
		if r < stopRounds {
			letter(fmt.Sprintf("q/batch/%d", r), 1)
			if r%3 == 2 {
				letter(fmt.Sprintf("q/batch/%d", r-1), 2)
			}
		}
		if _, err := g.world.AckAll(ctx, "orchestrator-dlq", "build_dlq"); err != nil {
			t.Fatal(err)
		}
		g.gc(t, last)
		switch r {
		case stopFrom:
			g.proxy.Cut()
		case stopUntil:
			g.proxy.Heal()
		}
		g.now = g.now.Add(step(r, r < stopFrom || r >= stopUntil))
	}
	return lettered
}

// lost lists the dead letters mend has no record of.
func (g *storeStopGC) lost(t *testing.T, lettered []string) []string {
	t.Helper()
	rows, err := g.mend.SQL(t).Query("SELECT message_id FROM mend_records")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var have []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have = append(have, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, id := range lettered {
		if !slices.Contains(have, id) {
			out = append(out, id)
		}
	}
	return out
}

func TestSubscribeStoreStoppedBesideGC(t *testing.T) {
	t.Parallel()

	t.Run("the subscription loses no dead letter while mend's store is down longer than the GC period", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		g := setupStoreStopGC(t)
		store, err := storage.Open(ctx, g.mendDSN, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		in, err := dlq.New(store, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		qdb, err := subscribe.Open(ctx, g.queueDSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = qdb.Close() })
		s, err := subscribe.New(subscribe.Config{DB: qdb, Intake: in, Parker: store, Settle: 5 * time.Second,
			NowFunc: func() time.Time { return g.now }})
		if err != nil {
			t.Fatal(err)
		}
		failedWhileDown := 0
		lettered := g.run(t, func(r int, storeUp bool) time.Duration {
			st, err := s.Pass(ctx)
			if err != nil {
				t.Fatalf("round %d: %v", r, err) // the queue database never fails here
			}
			if !storeUp {
				failedWhileDown += st.Failed
			}
			if r >= stopRounds {
				return 6 * time.Second // drain: past the settle window and the backoffs
			}
			return time.Second
		})
		if failedWhileDown == 0 {
			t.Fatal("no recording failed while the store was cut: the test stopped nothing")
		}
		if l := g.lost(t, lettered); len(l) > 0 {
			t.Fatalf("%d of %d dead letters lost with the store down %d rounds: %v", len(l), len(lettered), stopUntil-stopFrom, l)
		}
		// Every one released once recorded: the GC emptied the DLQ.
		if _, err := g.world.GC(ctx, "build_dlq"); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := qdb.QueryRow("SELECT COUNT(*) FROM queue_messages WHERE topic = 'build_dlq'").Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Fatalf("%d dead letters left in build_dlq: the subscription still holds the GC back", left)
		}
	})

	t.Run("negative control: mend import from cron loses dead letters on the same schedule", func(t *testing.T) {
		t.Parallel()
		g := setupStoreStopGC(t)
		bin := buildMend(t)
		imports := 0
		lettered := g.run(t, func(r int, _ bool) time.Duration {
			if r%3 == 2 { // cron: every third round; a run while the store is down fails
				if res := bin.run(t, "import", "--dsn", g.mendDSN, "--queue-dsn", g.queueDSN); res.code == 0 {
					imports++
				}
			}
			return time.Second
		})
		if imports == 0 {
			t.Fatal("no import succeeded: the control shows nothing")
		}
		l := g.lost(t, lettered)
		if len(l) == 0 {
			t.Fatal("the cron'd import lost nothing; this test cannot tell it from the subscription")
		}
		t.Logf("cron'd import lost %d of %d dead letters", len(l), len(lettered))
	})
}

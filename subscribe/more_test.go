package subscribe_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/subscribe"
)

func TestSubscribeReplicas(t *testing.T) {
	t.Parallel()

	t.Run("two replicas of one group overlap safely: each dead letter recorded once, watermarks never move back", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := b.sub(t, subscribe.Config{PageSize: 3, Concurrency: 2})
		c := b.sub(t, subscribe.Config{PageSize: 2, Concurrency: 3})
		var want []string
		last := map[string]uint64{}
		for round := range 8 {
			for i := range 4 {
				q := fmt.Sprintf("q%d", i%3)
				id := fmt.Sprintf("%s/batch/%d-%d", q, round, i)
				want = append(want, id)
				b.deadLetter(t, q, id)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, s := range []*subscribe.Subscriber{a, c} {
				wg.Go(func() { _, errs[j] = s.Pass(context.Background()) })
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			for i := range 3 {
				q := fmt.Sprintf("q%d", i)
				got, ok, err := b.world.Acked(context.Background(), "mend", "speculate_dlq", q)
				if err != nil {
					t.Fatal(err)
				}
				if ok && got < last[q] {
					t.Fatalf("round %d: watermark of %s moved back from %d to %d", round, q, last[q], got)
				}
				last[q] = got
			}
			b.clock.Add(3 * time.Second)
		}
		settleAndPass(t, b, a)
		settleAndPass(t, b, c)
		slices.Sort(want)
		if got := b.ids(t); !slices.Equal(got, want) {
			t.Fatalf("records\n%v\nwant\n%v", got, want)
		}
		for i := range 3 {
			q := fmt.Sprintf("q%d", i)
			var top uint64
			if err := b.queue.QueryRow("SELECT MAX(`offset`) FROM queue_messages WHERE topic = 'speculate_dlq' AND partition_key = ?", q).Scan(&top); err != nil {
				t.Fatal(err)
			}
			if got := b.acked(t, "mend", "speculate_dlq", q); got != top {
				t.Errorf("watermark of %s is %d, want %d", q, got, top)
			}
		}
	})
}

func TestSubscribeJoin(t *testing.T) {
	t.Parallel()

	t.Run("partitions the host's groups joined are registered ahead of their first dead letter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		// The host's orchestrator reads speculate/q and build/q/batch/1; its
		// DLQ group has joined conclude_dlq/r; nothing is dead-lettered yet.
		for _, j := range [][3]string{{"orchestrator", "speculate", "q"}, {"orchestrator", "build", "q/batch/1"},
			{"orchestrator-dlq", "conclude_dlq", "r"}, {"orchestrator", "log", "q/7"}} {
			if err := b.world.Join(ctx, j[0], j[1], j[2]); err != nil {
				t.Fatal(err)
			}
		}
		// Its merge-signal subscriber heartbeats with no partition joined (a
		// quiet topic): the host reads merge-signal too (host.ReadEvidence).
		if err := b.world.Heartbeat(ctx, "orchestrator", "merge-signal", "orchestrator-1"); err != nil {
			t.Fatal(err)
		}
		s := b.sub(t, subscribe.Config{Queues: func(context.Context) ([]string, error) { return []string{"known"}, nil }})
		st := pass(t, s)
		for _, p := range [][2]string{{"speculate_dlq", "q"}, {"conclude_dlq", "r"},
			{"speculate_dlq", "known"}, {"merge-signal_dlq", "known"}} {
			if got, ok, err := b.world.Acked(ctx, "mend", p[0], p[1]); err != nil || !ok || got != 0 {
				t.Errorf("mend's row for %s/%s: %d, %v, %v; want joined at 0", p[0], p[1], got, ok, err)
			}
		}
		for _, p := range [][2]string{{"log_dlq", "q/7"}, {"build_dlq", "q/batch/1"}} {
			if _, ok, _ := b.world.Acked(ctx, "mend", p[0], p[1]); ok {
				t.Errorf("%s/%s was registered ahead; its topic is not partitioned by queue, so not an ahead topic by default", p[0], p[1])
			}
		}
		// Named in AheadTopics, a topic partitioned by batch is registered ahead too.
		s2 := b.sub(t, subscribe.Config{Group: "mend-2", AheadTopics: append(slices.Clone(subscribe.AheadTopicsDefault), "build")})
		pass(t, s2)
		if got, ok, err := b.world.Acked(ctx, "mend-2", "build_dlq", "q/batch/1"); err != nil || !ok || got != 0 {
			t.Errorf("mend-2's row for build_dlq/q/batch/1: %d, %v, %v; want joined at 0", got, ok, err)
		}
		if _, ok, _ := b.world.Acked(ctx, "mend", "build_dlq", "known"); ok {
			t.Error("build_dlq/known registered: build is not partitioned by queue")
		}
		if st.Joined == 0 {
			t.Errorf("pass %+v counts no joins", st)
		}
		// The host's GC cannot collect what mend has not recorded: its row says 0.
		b.deadLetter(t, "q", "q/batch/1")
		if _, err := b.world.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
			t.Fatal(err)
		}
		if n, err := b.world.GC(ctx, "speculate_dlq"); err != nil || n != 0 {
			t.Fatalf("GC deleted %d rows (%v) while mend's row held 0", n, err)
		}
		pass(t, s)
		if got := b.ids(t); !slices.Equal(got, []string{"q/batch/1"}) {
			t.Fatalf("records %v", got)
		}
	})

	t.Run("a partition with dead letters and no group row is joined on first sight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.deadLetterOn(t, "buildsignal", "build-7", "build-7", `{"id":"build-7","queue":"q"}`)
		s := b.sub(t, subscribe.Config{})
		st := pass(t, s)
		if st.Joined != 1 || st.Read != 1 {
			t.Fatalf("pass %+v; want one partition joined and one row read", st)
		}
		if got := b.acked(t, "mend", "buildsignal_dlq", "build-7"); got != 0 {
			t.Fatalf("watermark %d, want 0", got)
		}
	})

	t.Run("remove leaves every partition, and the host's GC proceeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		b.deadLetter(t, "q", "q/batch/1")
		s := b.sub(t, subscribe.Config{})
		pass(t, s) // recorded, not released: mend holds GC back
		if _, err := b.world.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.world.GC(ctx, "speculate_dlq"); n != 0 {
			t.Fatalf("GC deleted %d rows while mend held it back", n)
		}
		n, err := subscribe.Remove(ctx, b.queue, "mend")
		if err != nil || n != 1 {
			t.Fatalf("Remove: %d, %v; want 1 partition", n, err)
		}
		if n, _ := b.world.GC(ctx, "speculate_dlq"); n != 1 {
			t.Fatalf("GC deleted %d rows after remove, want 1", n)
		}
		lag, err := subscribe.Lag(ctx, b.queue, "mend")
		if err != nil || len(lag) != 0 {
			t.Fatalf("lag after remove: %v, %v", lag, err)
		}
	})
}

func TestSubscribePrivileges(t *testing.T) {
	t.Parallel()

	t.Run("runs with SELECT on queue_messages and SELECT, INSERT, UPDATE, DELETE on queue_offsets only", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg, err := mysql.ParseDSN(b.qdsn)
		if err != nil {
			t.Fatal(err)
		}
		user := "sub" + strings.ReplaceAll(cfg.DBName[len(cfg.DBName)-8:], "_", "")
		for _, q := range []string{
			fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw'", user),
			fmt.Sprintf("GRANT SELECT ON `%s`.queue_messages TO '%s'@'%%'", cfg.DBName, user),
			fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.queue_offsets TO '%s'@'%%'", cfg.DBName, user),
		} {
			if _, err := b.queue.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		t.Cleanup(func() { _, _ = b.queue.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
		cfg.User, cfg.Passwd = user, "pw"
		db, err := subscribe.Open(context.Background(), cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if err := b.world.Join(context.Background(), "orchestrator", "speculate", "q"); err != nil {
			t.Fatal(err)
		}
		b.deadLetter(t, "q", "q/batch/1")
		last := b.deadLetter(t, "r", "r/batch/1")
		s := b.sub(t, subscribe.Config{DB: db})
		pass(t, s)
		settleAndPass(t, b, s)
		if got := b.acked(t, "mend", "speculate_dlq", "r"); got != last {
			t.Fatalf("watermark %d, want %d", got, last)
		}
		if _, err := subscribe.Lag(context.Background(), db, "mend"); err != nil {
			t.Fatal(err)
		}
		if n, err := subscribe.Remove(context.Background(), db, "mend"); err != nil || n != 2 {
			t.Fatalf("Remove: %d, %v", n, err)
		}
	})
}

func TestSubscribeLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("Start runs passes until Stop; Stop is idempotent and safe before Start", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recorded := make(chan struct{}, 1)
		s := b.sub(t, subscribe.Config{PollInterval: 10 * time.Millisecond, Hooks: subscribe.Hooks{OnPass: func(st subscribe.PassStats) {
			if st.Recorded > 0 {
				select {
				case recorded <- struct{}{}:
				default:
				}
			}
		}}})
		s.Stop()
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err == nil {
			t.Error("a second Start succeeded")
		}
		b.deadLetter(t, "q", "q/batch/1")
		select {
		case <-recorded:
		case <-time.After(30 * time.Second):
			t.Fatal("the dead letter was not recorded within 30 s of passes 10 ms apart")
		}
		s.Stop()
		s.Stop()
	})
}

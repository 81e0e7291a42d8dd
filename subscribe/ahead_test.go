package subscribe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mendq/mend/subscribe"
)

// Issue 42: registering ahead from the host groups' queue_offsets rows
// registers nothing on a quiet host, whose subscriber released every
// drained partition and deleted its rows. The subscribers still heartbeat,
// so with Config.Queues (mend run's: host.DB.Queues) the queue-partitioned
// *_dlq partitions of each known queue are registered for each topic the
// host reads by host.ReadEvidence's rule, and for no other topic. The
// negative control, the old configuration (no Queues: what mend run
// passed), registers nothing on the same tables.
func TestRegisterAheadOnAQuietHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queues := func(context.Context) ([]string, error) { return []string{"q1", "q2"}, nil }
	// quietHost: the orchestrator subscribes to speculate and merge-signal
	// (its heartbeats are live, fresh by the database clock) and its DLQ
	// group to speculate_dlq; it was busy on speculate/q1 and has released
	// it since. stale makes every heartbeat five minutes old (a crash).
	quietHost := func(t *testing.T, stale bool) *bundle {
		t.Helper()
		b := setup(t)
		now, err := b.world.DBNowMS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if stale {
			now -= 5 * 60 * 1000
		}
		for _, h := range [][2]string{{"orchestrator", "speculate"}, {"orchestrator", "merge-signal"}, {"orchestrator-dlq", "speculate_dlq"}} {
			if err := b.world.HeartbeatAt(ctx, h[0], h[1], "orchestrator-7f9c", now); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.world.Join(ctx, "orchestrator", "speculate", "q1"); err != nil {
			t.Fatal(err)
		}
		if err := b.world.Quiet(ctx); err != nil {
			t.Fatal(err)
		}
		return b
	}
	has := func(t *testing.T, b *bundle, group, topic, partition string) bool {
		t.Helper()
		_, ok, err := b.world.Acked(ctx, group, topic, partition)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	t.Run("quiet: the read topics' DLQ partitions of every queue, and only theirs", func(t *testing.T) {
		t.Parallel()
		b := quietHost(t, false)
		// The negative control first (it would count mend's rows as another
		// group's): the old configuration registers nothing.
		pass(t, b.sub(t, subscribe.Config{Group: "mend-old"}))
		for _, q := range []string{"q1", "q2"} {
			if has(t, b, "mend-old", "speculate_dlq", q) || has(t, b, "mend-old", "merge-signal_dlq", q) {
				t.Fatalf("negative control: a DLQ partition of %s registered without Queues", q)
			}
		}
		s := b.sub(t, subscribe.Config{Queues: queues})
		pass(t, s)
		for _, q := range []string{"q1", "q2"} {
			for _, topic := range []string{"speculate_dlq", "merge-signal_dlq"} {
				if !has(t, b, "mend", topic, q) {
					t.Errorf("%s/%s not registered ahead on a quiet host", topic, q)
				}
			}
			if has(t, b, "mend", "conclude_dlq", q) {
				t.Errorf("conclude_dlq/%s registered: no subscriber of the host reads conclude", q)
			}
		}
		// The row holds the host's GC back from the first dead letter on.
		b.deadLetterOn(t, "speculate", "q2", "q2/batch/1", `{"id":"q2/batch/1","queue":"q2"}`)
		if _, err := b.world.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
			t.Fatal(err)
		}
		if n, err := b.world.GC(ctx, "speculate_dlq"); err != nil || n != 0 {
			t.Fatalf("GC deleted %d (%v) before mend recorded the dead letter", n, err)
		}
	})
	t.Run("down: nothing is registered by queue while no subscriber heartbeats", func(t *testing.T) {
		t.Parallel()
		b := quietHost(t, true)
		pass(t, b.sub(t, subscribe.Config{Queues: queues}))
		for _, q := range []string{"q1", "q2"} {
			if has(t, b, "mend", "speculate_dlq", q) || has(t, b, "mend", "merge-signal_dlq", q) {
				t.Errorf("a DLQ partition of %s registered with every heartbeat stale", q)
			}
		}
		// The host comes back: registered on the next register-ahead.
		if err := b.world.Heartbeat(ctx, "orchestrator", "speculate", "orchestrator-8a01"); err != nil {
			t.Fatal(err)
		}
		pass(t, b.sub(t, subscribe.Config{Queues: queues}))
		if !has(t, b, "mend", "speculate_dlq", "q2") || has(t, b, "mend", "merge-signal_dlq", "q2") {
			t.Error("after the speculate subscriber heartbeats: want speculate_dlq/q2 registered and merge-signal_dlq/q2 (still stale) not")
		}
	})
	t.Run("a failing Queues or an unreadable heartbeat table never stops first-sight joins", func(t *testing.T) {
		t.Parallel()
		b := quietHost(t, false)
		if _, err := b.queue.ExecContext(ctx, "DROP TABLE queue_subscriber_heartbeats"); err != nil {
			t.Fatal(err)
		}
		b.deadLetterOn(t, "speculate", "q3", "q3/batch/1", `{"id":"q3/batch/1","queue":"q3"}`)
		pass(t, b.sub(t, subscribe.Config{Queues: func(context.Context) ([]string, error) { return nil, errors.New("app database down") }}))
		if !has(t, b, "mend", "speculate_dlq", "q3") {
			t.Fatal("speculate_dlq/q3 holds a dead letter and was not joined on first sight")
		}
		if got := b.ids(t); len(got) != 1 || got[0] != "q3/batch/1" {
			t.Fatalf("records %v; want q3/batch/1", got)
		}
	})
}

package host_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
)

// joinWorld is the real tables with the host's groups joined as a running
// submit queue has them: the planner's group on speculate, its DLQ group on
// speculate_dlq, and mend's own subscription on speculate_dlq.
func joinWorld(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	ctx := context.Background()
	for _, j := range [][3]string{{"orchestrator", "speculate", "q"}, {"orchestrator-dlq", "speculate_dlq", "q"}, {"mend", "speculate_dlq", "q"}, {"mend", "mend-only", "q"}} {
		if err := b.w.Join(ctx, j[0], j[1], j[2]); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// A wake topic nobody joined is refused, with the nearest joined topic as a
// hint; the real topic passes; PAD SPACE does not make "speculate " pass;
// mend's own group does not count as a reader.
func TestCheckWakeTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name, topic string
		ok          bool
		hint        string
	}{
		{"the typo", "speculat", false, "speculate"},
		{"the control", "speculate", true, ""},
		{"a trailing space", "speculate ", false, "speculate"},
		{"joined only by mend", "mend-only", false, ""},
		{"far from every topic", "nothing-like-it", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := joinWorld(t)
			err := host.CheckWakeTopic(ctx, b.db.SQL(t), tt.topic, "mend")
			if tt.ok {
				if err != nil {
					t.Fatalf("CheckWakeTopic(%q) = %v; want nil", tt.topic, err)
				}
				return
			}
			var ue *host.UnjoinedTopicError
			if !errors.As(err, &ue) {
				t.Fatalf("CheckWakeTopic(%q) = %v; want *UnjoinedTopicError", tt.topic, err)
			}
			if got := host.NearestTopic(tt.topic, ue.Joined); got != tt.hint {
				t.Errorf("hint for %q = %q (joined %q); want %q", tt.topic, got, ue.Joined, tt.hint)
			}
		})
	}
}

// With RequireWakeConsumer, a wake-up on a topic nobody joined fails and
// publishes nothing, so the planner cannot mark its record woken; once the
// host's group joins, the same wake-up goes out. Without the option (the
// negative control: today's behaviour) it is published to nobody.
func TestWakeRequiresAConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := mend.WakeUp{Queue: "q", MessageID: "mend/wake/1", BatchID: "q/batch/2", Epoch: 1}
	open := func(t *testing.T, b *bundle, require bool) *host.DB {
		return open(t, b.db.DSN, b.db.DSN, host.Options{WakeTopic: "speculat", RequireWakeConsumer: require,
			WakeConsumerIgnore: []string{"mend"}, NowFunc: func() time.Time { return testNow }, Logger: slog.New(slog.DiscardHandler)})
	}
	count := func(t *testing.T, b *bundle) int {
		t.Helper()
		var n int
		if err := b.db.SQL(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'speculat'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("required: refused until a group joins", func(t *testing.T) {
		t.Parallel()
		b := joinWorld(t)
		h := open(t, b, true)
		var ue *host.UnjoinedTopicError
		if err := h.Wake(ctx, w); !errors.As(err, &ue) {
			t.Fatalf("Wake on an unjoined topic = %v; want *UnjoinedTopicError", err)
		}
		if n := count(t, b); n != 0 {
			t.Fatalf("%d message(s) published on the unjoined topic; want 0", n)
		}
		if err := b.w.Join(ctx, "orchestrator", "speculat", "q"); err != nil {
			t.Fatal(err)
		}
		if err := h.Wake(ctx, w); err != nil {
			t.Fatalf("Wake after the host joined = %v", err)
		}
		if n := count(t, b); n != 1 {
			t.Fatalf("%d message(s) published after the host joined; want 1", n)
		}
	})
	t.Run("not required: published to nobody", func(t *testing.T) {
		t.Parallel()
		b := joinWorld(t)
		if err := open(t, b, false).Wake(ctx, w); err != nil {
			t.Fatal(err)
		}
		if n := count(t, b); n != 1 {
			t.Fatalf("%d message(s); want the unchecked wake-up published", n)
		}
	})
}

package host_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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

// hostState builds the queue database as the real subscriber leaves it.
type hostState int

const (
	hostBusy        hostState = iota // subscribers heartbeat; the planner's group holds speculate/q (offsets and lease rows)
	hostQuiet                        // quiet for more than 2 x its lease duration: heartbeats only, every partition released
	hostCrashed                      // crashed while quiet: every heartbeat 5 minutes old, nothing else
	hostStopped                      // stopped cleanly while quiet: heartbeats deregistered (deleted), nothing else
	hostStoppedBusy                  // stopped cleanly while busy: no heartbeats, the offsets rows of its pending messages stay
)

// realHost is a submit queue's queue database in state st: the
// orchestrator's subscriptions on speculate and conclude, its DLQ group on
// speculate_dlq, and a heartbeat of mend's own group on mend-only (which
// never counts).
func realHost(t *testing.T, st hostState) *bundle {
	t.Helper()
	b := setup(t)
	ctx := context.Background()
	w := b.w
	now, err := w.DBNowMS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subs := [][3]string{{"orchestrator", "speculate", "orchestrator-7f9c"}, {"orchestrator", "conclude", "orchestrator-7f9c"},
		{"orchestrator-dlq", "speculate_dlq", "orchestrator-7f9c"}, {"mend", "mend-only", "mend-1"}}
	at := now
	if st == hostCrashed {
		at = now - 5*time.Minute.Milliseconds()
	}
	for _, s := range subs {
		if err := w.HeartbeatAt(ctx, s[0], s[1], s[2], at); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range [][3]string{{"orchestrator", "speculate", "q"}, {"orchestrator-dlq", "speculate_dlq", "q"}, {"mend", "speculate_dlq", "q"}} {
		if err := w.Join(ctx, j[0], j[1], j[2]); err != nil {
			t.Fatal(err)
		}
		if err := w.Lease(ctx, j[0], j[1], j[2], "orchestrator-7f9c", now); err != nil {
			t.Fatal(err)
		}
	}
	if st != hostBusy && st != hostStoppedBusy {
		if err := w.Quiet(ctx, "mend"); err != nil {
			t.Fatal(err)
		}
	}
	if st == hostStopped || st == hostStoppedBusy {
		for _, s := range subs {
			if err := w.Deregister(ctx, s[0], s[1], s[2]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b
}

// Issue 42: the real subscriber deletes its group's queue_offsets row of a
// partition drained for a minute, so the old rule (a group has a
// queue_offsets row on the topic) refused the real topic on a quiet host.
// The rule (a live heartbeat or a queue_offsets row) passes it there and on
// a busy host, still refuses the typo, and says a host whose subscribers
// are all gone or stale is down. Each case also runs the old rule's query
// (TopicConsumers), the negative control: it refuses every quiet case.
func TestCheckWakeTopicOnTheRealSubscribersRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		st       hostState
		topic    string
		ok       bool
		oldOK    bool // the old rule's verdict
		hostDown bool
		hint     string
	}{
		{"quiet host: the real topic passes", hostQuiet, "speculate", true, false, false, ""},
		{"busy host: the real topic passes", hostBusy, "speculate", true, true, false, ""},
		{"quiet host: the typo is refused", hostQuiet, "speculat", false, false, false, "speculate"},
		{"busy host: the typo is refused", hostBusy, "speculat", false, false, false, "speculate"},
		{"quiet host: PAD SPACE does not make a trailing space pass", hostQuiet, "speculate ", false, false, false, "speculate"},
		{"quiet host: mend's own heartbeat does not count", hostQuiet, "mend-only", false, false, false, ""},
		{"crashed host: stale heartbeats do not count, the host is down", hostCrashed, "speculate", false, false, true, ""},
		{"stopped host: no heartbeats, the host is down", hostStopped, "speculate", false, false, true, ""},
		{"stopped while busy: its offsets rows stay and say it", hostStoppedBusy, "speculate", true, true, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := realHost(t, tt.st)
			db := b.db.SQL(t)
			old, err := host.TopicConsumers(ctx, db, tt.topic, "mend")
			if err != nil {
				t.Fatal(err)
			}
			if got := len(old) > 0; got != tt.oldOK {
				t.Fatalf("negative control: the old rule (a queue_offsets row) says %v (groups %q); want %v", got, old, tt.oldOK)
			}
			err = host.CheckWakeTopic(ctx, db, tt.topic, "mend")
			if tt.ok {
				if err != nil {
					t.Fatalf("CheckWakeTopic(%q) = %v; want nil", tt.topic, err)
				}
				e, err := host.ReadEvidence(ctx, db, "mend")
				if err != nil || !slices.Contains(e.Readers(tt.topic), "orchestrator") {
					t.Fatalf("readers of %q = %q, %v; want orchestrator among them", tt.topic, e.Readers(tt.topic), err)
				}
				return
			}
			var ue *host.UnjoinedTopicError
			if !errors.As(err, &ue) {
				t.Fatalf("CheckWakeTopic(%q) = %v; want *UnjoinedTopicError", tt.topic, err)
			}
			if ue.HostDown != tt.hostDown {
				t.Errorf("HostDown = %v; want %v (%v)", ue.HostDown, tt.hostDown, err)
			}
			if got := host.NearestTopic(tt.topic, ue.Joined); got != tt.hint {
				t.Errorf("hint for %q = %q (read %q); want %q", tt.topic, got, ue.Joined, tt.hint)
			}
		})
	}

	t.Run("a deregistered row with a fresh heartbeat does not count", func(t *testing.T) {
		t.Parallel()
		b := realHost(t, hostStopped)
		db := b.db.SQL(t)
		now, err := b.w.DBNowMS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO queue_subscriber_heartbeats VALUES ('orchestrator', 'speculate', 'orchestrator-old', ?, ?)", now, now); err != nil {
			t.Fatal(err)
		}
		var ue *host.UnjoinedTopicError
		if err := host.CheckWakeTopic(ctx, db, "speculate", "mend"); !errors.As(err, &ue) || !ue.HostDown {
			t.Fatalf("CheckWakeTopic = %v; want the host down", err)
		}
		// The control: the same row live passes.
		if _, err := db.ExecContext(ctx, "UPDATE queue_subscriber_heartbeats SET deregistered_at = 0"); err != nil {
			t.Fatal(err)
		}
		if err := host.CheckWakeTopic(ctx, db, "speculate", "mend"); err != nil {
			t.Fatalf("CheckWakeTopic with the row live = %v", err)
		}
	})
	t.Run("without the heartbeat table the rule stands on queue_offsets alone", func(t *testing.T) {
		t.Parallel()
		for _, st := range []hostState{hostBusy, hostQuiet} {
			b := realHost(t, st)
			db := b.db.SQL(t)
			if _, err := db.ExecContext(ctx, "DROP TABLE queue_subscriber_heartbeats"); err != nil {
				t.Fatal(err)
			}
			e, err := host.ReadEvidence(ctx, db, "mend")
			if err != nil || e.Heartbeats == nil {
				t.Fatalf("ReadEvidence = %+v, %v; want the heartbeat table's error reported, not returned", e, err)
			}
			err = host.CheckWakeTopic(ctx, db, "speculate", "mend")
			var ue *host.UnjoinedTopicError
			switch {
			case st == hostBusy && err != nil:
				t.Fatalf("busy: CheckWakeTopic = %v; want nil from queue_offsets", err)
			case st == hostQuiet && (!errors.As(err, &ue) || ue.Heartbeats == nil || ue.HostDown):
				t.Fatalf("quiet: CheckWakeTopic = %v; want refused, saying the heartbeats could not be read", err)
			}
		}
	})
}

// A mend restarted while the host is quiet: Wake publishes at once (the
// adapter's clock is a year off the database's: liveness is the database's
// clock). While the host is down the wake-up is held, and it goes out on
// the first attempt after a subscriber heartbeats again.
func TestWakeOnAQuietHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := mend.WakeUp{Queue: "q", MessageID: "mend/wake/1", BatchID: "q/batch/2", Epoch: 1}
	open := func(t *testing.T, b *bundle) *host.DB {
		return open(t, b.db.DSN, b.db.DSN, host.Options{RequireWakeConsumer: true,
			WakeConsumerIgnore: []string{"mend"}, NowFunc: func() time.Time { return testNow }, Logger: slog.New(slog.DiscardHandler)})
	}
	count := func(t *testing.T, b *bundle) int {
		t.Helper()
		var n int
		if err := b.db.SQL(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'speculate'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Run("quiet: woken at once", func(t *testing.T) {
		t.Parallel()
		b := realHost(t, hostQuiet)
		if err := open(t, b).Wake(ctx, w); err != nil {
			t.Fatalf("Wake on a quiet host = %v", err)
		}
		if n := count(t, b); n != 1 {
			t.Fatalf("%d wake-up(s) on speculate; want 1", n)
		}
	})
	t.Run("down: held until a subscriber heartbeats", func(t *testing.T) {
		t.Parallel()
		b := realHost(t, hostCrashed)
		h := open(t, b)
		var ue *host.UnjoinedTopicError
		if err := h.Wake(ctx, w); !errors.As(err, &ue) || !ue.HostDown {
			t.Fatalf("Wake with the host down = %v; want held, the host down", err)
		}
		if n := count(t, b); n != 0 {
			t.Fatalf("%d wake-up(s) published while held", n)
		}
		if err := b.w.Heartbeat(ctx, "orchestrator", "speculate", "orchestrator-8a01"); err != nil {
			t.Fatal(err)
		}
		if err := h.Wake(ctx, w); err != nil {
			t.Fatalf("Wake after the host came back = %v", err)
		}
		if n := count(t, b); n != 1 {
			t.Fatalf("%d wake-up(s); want 1", n)
		}
	})
}

// Issue 47's planted slip: "a consumer of the wake topic was seen"
// remembered before the check. One held wake-up then lets every later one
// go out to a topic nobody was seen reading. The tests above call Wake
// once before the consumer appears, which the slip passes; here Wake is
// held twice (the second call is where the slip would publish), then goes
// out once a group reads the topic. Two ways to have no consumer: a topic
// nobody joined (the typo) and a host that is down.
func TestWakeHeldUntilAConsumerIsSeen(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// world is the queue database before a consumer appears; topic
		// the --wake-topic; appear makes a group of the host read it.
		world  func(*testing.T) *bundle
		topic  string
		appear func(context.Context, *bundle) error
	}{
		{"a topic nobody joined", joinWorld, "speculat", func(ctx context.Context, b *bundle) error {
			return b.w.Join(ctx, "orchestrator", "speculat", "q")
		}},
		{"a host that is down", func(t *testing.T) *bundle { return realHost(t, hostCrashed) }, "speculate", func(ctx context.Context, b *bundle) error {
			return b.w.Heartbeat(ctx, "orchestrator", "speculate", "orchestrator-8a01")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if p := wakeHoldProblems(t, tt.world(t), tt.topic, tt.appear, false); len(p) > 0 {
				t.Fatal(p)
			}
		})
		t.Run(tt.name+": the planted slip is caught", func(t *testing.T) {
			t.Parallel()
			if len(wakeHoldProblems(t, tt.world(t), tt.topic, tt.appear, true)) == 0 {
				t.Fatal("the planted slip passed the test meant to catch it")
			}
		})
	}
}

// wakeHoldProblems wakes three times on topic in b: twice before a
// consumer appears (each must be held: an *UnjoinedTopicError and nothing
// published), then after appear (published). With slip, the adapter
// remembers a consumer seen before its check (host.PlantSeenBeforeCheck).
func wakeHoldProblems(t *testing.T, b *bundle, topic string, appear func(context.Context, *bundle) error, slip bool) (problems []string) {
	t.Helper()
	ctx := context.Background()
	h := open(t, b.db.DSN, b.db.DSN, host.Options{WakeTopic: topic, RequireWakeConsumer: true,
		WakeConsumerIgnore: []string{"mend"}, NowFunc: func() time.Time { return testNow }, Logger: slog.New(slog.DiscardHandler)})
	if slip {
		host.PlantSeenBeforeCheck(h)
	}
	published := func() int {
		t.Helper()
		var n int
		if err := b.db.SQL(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM queue_messages WHERE topic = ?", topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Each wake-up has its own message ID, as the planner's re-sends do
	// (a record's version is in it), so a publish is never deduplicated
	// away.
	wake := func(n int) error {
		return h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: fmt.Sprintf("mend/wake/1/v%d", n), BatchID: "q/batch/2", Epoch: 1})
	}
	for n := 1; n <= 2; n++ {
		var ue *host.UnjoinedTopicError
		if err := wake(n); !errors.As(err, &ue) {
			problems = append(problems, fmt.Sprintf("wake-up %d before any consumer = %v; want held (*UnjoinedTopicError)", n, err))
		}
		if got := published(); got != 0 {
			problems = append(problems, fmt.Sprintf("after wake-up %d before any consumer: %d message(s) on %q; want 0", n, got, topic))
		}
	}
	if err := appear(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := wake(3); err != nil {
		problems = append(problems, fmt.Sprintf("wake-up after a consumer appeared = %v; want published", err))
	}
	if got, want := published(), 1; got != want {
		problems = append(problems, fmt.Sprintf("after a consumer appeared: %d message(s) on %q; want %d", got, topic, want))
	}
	return problems
}

// Queues lists every queue with a request, once, with a loose scan of the
// request table's primary key (its cost grows with the queues, not the
// requests): the queues the subscription registers ahead.
func TestQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i, q := range []string{"q2", "q1", "q2", "q3"} {
		id := fmt.Sprintf("%s/batch/%d", q, i)
		if err := b.w.SeedBatch(ctx, q, id, "created", fmt.Sprintf("%s/%d", q, i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.h.Queues(ctx)
	if err != nil || !slices.Equal(got, []string{"q1", "q2", "q3"}) {
		t.Fatalf("Queues = %q, %v; want q1 q2 q3", got, err)
	}
	// Many requests per queue, as a real host has: then the optimizer
	// prefers the loose scan to reading the index whole.
	if _, err := b.db.SQL(t).ExecContext(ctx, "INSERT INTO request (queue, id, change_uri, land_strategy, state, version) "+
		"WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 900) SELECT CONCAT('q', i % 3 + 1), CONCAT('old/', i), '[]', 'rebase', 'landed', 1 FROM n"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.SQL(t).ExecContext(ctx, "ANALYZE TABLE request"); err != nil {
		t.Fatal(err)
	}
	rows, err := b.db.SQL(t).QueryContext(ctx, "EXPLAIN SELECT DISTINCT queue FROM request")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var plan []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			plan = append(plan, c+"="+vals[i].String)
		}
	}
	if s := strings.Join(plan, " "); !strings.Contains(s, "Using index for group-by") && !strings.Contains(s, "skip scan for deduplication") {
		t.Errorf("plan %s; want a loose index scan (MariaDB: Using index for group-by; MySQL: a covering index skip scan for deduplication)", s)
	}
}

package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// Issue 30: `mend run --once --wake-topic speculat` logged "queue woken",
// marked the record done and left the queue stuck: nothing consumes that
// topic. On the real tables, with the host's planner group joined to
// speculate as a running submit queue has it, the typo is refused by run
// and doctor (exit 1, naming the fix) and nothing is published or marked;
// the correct topic (the control) repairs; the override starts but holds
// the wake-up, so the record is never marked woken, until the host joins.
func TestWakeTopicNobodyReadsIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type world = wakeWorld
	setup := func(t *testing.T) *world {
		t.Helper()
		x := newWakeWorld(t)
		for _, seed := range []func() error{
			func() error { return x.w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
			func() error { return x.w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/2") },
			func() error { return x.w.Join(ctx, "orchestrator", "speculate", "q") },
			func() error { return x.w.Join(ctx, "orchestrator-dlq", "speculate_dlq", "q") },
			// mend's own subscription does not count as a reader.
			func() error { return x.w.Join(ctx, "mend", "speculat", "q") },
		} {
			if err := seed(); err != nil {
				t.Fatal(err)
			}
		}
		x.recordDeadLetter(t)
		return x
	}
	mendCmd := func(args ...string) (int, string, string) { return wakeMain(ctx, args...) }
	runArgs := (*wakeWorld).runArgs
	state := func(t *testing.T, x *world) mend.State { return x.state(t) }
	published := func(t *testing.T, x *world, topic string) int { return x.published(t, topic) }

	t.Run("run refuses the typo, naming the fix", func(t *testing.T) {
		t.Parallel()
		x := setup(t)
		code, _, errOut := mendCmd(runArgs(x, "--wake-topic", "speculat")...)
		if code != exitFailure || !strings.Contains(errOut, "refusing to start") || !strings.Contains(errOut, "--wake-topic speculate") || !strings.Contains(errOut, "--"+wakeTopicUnjoinedFlag) {
			t.Fatalf("run --wake-topic speculat = exit %d\n%s\nwant 1 naming --wake-topic speculate and the override", code, errOut)
		}
		if s := state(t, x); s != mend.StatePending {
			t.Errorf("record = %s; want pending: a refused start touches nothing", s)
		}
		if n := published(t, x, "speculat"); n != 0 {
			t.Errorf("%d wake-up(s) published on the typo", n)
		}
	})
	t.Run("doctor refuses the typo, naming the fix", func(t *testing.T) {
		t.Parallel()
		x := setup(t)
		code, out, _ := mendCmd("doctor", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe=false", "--wake-topic", "speculat")
		if code != exitFailure || !regexp.MustCompile(`FAIL\s+host queue wake topic`).MatchString(out) || !strings.Contains(out, "--wake-topic speculate") {
			t.Fatalf("doctor --wake-topic speculat = exit %d\n%s\nwant 1 with a failed wake topic check naming the fix", code, out)
		}
		code, out, _ = mendCmd("doctor", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe=false")
		if code != exitOK || !regexp.MustCompile(`ok\s+host queue wake topic`).MatchString(out) || !strings.Contains(out, "orchestrator") {
			t.Fatalf("doctor with the default topic = exit %d\n%s\nwant 0, the check naming the orchestrator group", code, out)
		}
	})
	t.Run("the control: the real topic repairs", func(t *testing.T) {
		t.Parallel()
		x := setup(t)
		if code, _, errOut := mendCmd(runArgs(x, "--wake-topic", "speculate")...); code != exitOK {
			t.Fatalf("run --wake-topic speculate = exit %d\n%s", code, errOut)
		}
		if s := state(t, x); s != mend.StateDone {
			t.Errorf("record = %s; want done", s)
		}
		if n := published(t, x, "speculate"); n != 1 {
			t.Errorf("%d wake-up(s) on speculate; want 1", n)
		}
	})
	t.Run("the override holds the wake-up until the host joins", func(t *testing.T) {
		t.Parallel()
		x := setup(t)
		code, _, errOut := mendCmd(runArgs(x, "--wake-topic", "speculat", "--"+wakeTopicUnjoinedFlag)...)
		if code != exitFailure || strings.Contains(errOut, "refusing to start") || !strings.Contains(errOut, "no consumer group of the host reads") {
			t.Fatalf("run --%s = exit %d\n%s\nwant a started run whose wake-up failed (exit 1)", wakeTopicUnjoinedFlag, code, errOut)
		}
		if s := state(t, x); s != mend.StateSettled {
			t.Errorf("record = %s; want settled (owed its wake-up), never marked woken", s)
		}
		if n := published(t, x, "speculat"); n != 0 {
			t.Errorf("%d wake-up(s) published to nobody", n)
		}
	})
}

// Issue 42: after a quiet minute the real subscriber has deleted its
// group's queue_offsets rows (the idle-lease release), so the old rule made
// doctor fail and a restarted mend run refuse to start, or hold every
// wake-up, on a host whose planner would have read the wake-up within a
// second. On the real tables of a quiet host (subscribers heartbeating, no
// group rows; the negative control shows the old rule's query finds
// nobody), doctor passes and a restarted run wakes the queue in its first
// pass; the typo is still refused; a host whose heartbeats are stale is
// down: run refuses, saying so and naming the override, and with it holds
// the wake-up until a subscriber heartbeats, then sends it.
func TestWakeTopicOnAQuietHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type world = wakeWorld
	setup := func(t *testing.T, stale bool) *world {
		t.Helper()
		x := newWakeWorld(t)
		now, err := x.w.DBNowMS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if stale {
			now -= 5 * 60 * 1000 // crashed five minutes ago
		}
		for _, seed := range []func() error{
			func() error { return x.w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
			func() error { return x.w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/2") },
			// Busy once: the planner's groups joined their partitions...
			func() error { return x.w.Join(ctx, "orchestrator", "speculate", "q") },
			func() error { return x.w.Join(ctx, "orchestrator-dlq", "speculate_dlq", "q") },
			func() error { return x.w.HeartbeatAt(ctx, "orchestrator", "speculate", "orchestrator-7f9c", now) },
			func() error {
				return x.w.HeartbeatAt(ctx, "orchestrator-dlq", "speculate_dlq", "orchestrator-7f9c", now)
			},
			// ...then quiet for more than two lease durations: released.
			func() error { return x.w.Quiet(ctx) },
		} {
			if err := seed(); err != nil {
				t.Fatal(err)
			}
		}
		if old, err := host.TopicConsumers(ctx, x.queueDB.SQL(t), "speculate", "mend"); err != nil || len(old) != 0 {
			t.Fatalf("negative control: the old rule's query finds %q, %v; want nobody on a quiet host", old, err)
		}
		x.recordDeadLetter(t)
		return x
	}
	mendCmd := func(args ...string) (int, string, string) { return wakeMain(ctx, args...) }
	runArgs := (*wakeWorld).runArgs
	state := func(t *testing.T, x *world) mend.State { return x.state(t) }
	published := func(t *testing.T, x *world, topic string) int { return x.published(t, topic) }

	t.Run("doctor passes on a quiet host, naming the heartbeating group", func(t *testing.T) {
		t.Parallel()
		x := setup(t, false)
		code, out, _ := mendCmd("doctor", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe=false")
		if code != exitOK || !regexp.MustCompile(`ok\s+host queue wake topic.*orchestrator.*live subscriber heartbeats`).MatchString(out) {
			t.Fatalf("doctor on a quiet host = exit %d\n%s\nwant 0, the check naming the orchestrator's heartbeats", code, out)
		}
	})
	t.Run("a run restarted on a quiet host wakes the queue in its first pass", func(t *testing.T) {
		t.Parallel()
		x := setup(t, false)
		if code, _, errOut := mendCmd(runArgs(x)...); code != exitOK {
			t.Fatalf("run --once on a quiet host = exit %d\n%s", code, errOut)
		}
		if s := state(t, x); s != mend.StateDone {
			t.Errorf("record = %s; want done", s)
		}
		if n := published(t, x, "speculate"); n != 1 {
			t.Errorf("%d wake-up(s) on speculate; want 1", n)
		}
	})
	t.Run("a run subscribing on a quiet host registers the queue's DLQ partitions ahead", func(t *testing.T) {
		t.Parallel()
		x := setup(t, false)
		args := []string{"run", "--once", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN,
			"--subscribe-settle", "1s", "--subscribe-interval", "50ms"}
		if code, _, errOut := mendCmd(args...); code != exitOK {
			t.Fatalf("run --once subscribing on a quiet host = exit %d\n%s", code, errOut)
		}
		// The orchestrator heartbeats on speculate; no host group has a row.
		if _, ok, err := x.w.Acked(ctx, "mend", "speculate_dlq", "q"); err != nil || !ok {
			t.Fatalf("mend's row for speculate_dlq/q: %v, %v; want registered ahead (host.DB.Queues lists q)", ok, err)
		}
		if _, ok, err := x.w.Acked(ctx, "mend", "conclude_dlq", "q"); err != nil || ok {
			t.Fatalf("mend's row for conclude_dlq/q: %v, %v; want none: no subscriber of the host reads conclude", ok, err)
		}
	})
	t.Run("the typo is still refused on a quiet host", func(t *testing.T) {
		t.Parallel()
		x := setup(t, false)
		code, _, errOut := mendCmd(runArgs(x, "--wake-topic", "speculat")...)
		if code != exitFailure || !strings.Contains(errOut, "refusing to start") || !strings.Contains(errOut, "--wake-topic speculate") {
			t.Fatalf("run --wake-topic speculat = exit %d\n%s\nwant 1 naming --wake-topic speculate", code, errOut)
		}
		if n := published(t, x, "speculat"); n != 0 || state(t, x) != mend.StatePending {
			t.Errorf("%d wake-up(s) published on the typo, record %s; want none, pending", n, state(t, x))
		}
	})
	t.Run("a host whose heartbeats are stale is down: refused, or held with the override until it heartbeats", func(t *testing.T) {
		t.Parallel()
		x := setup(t, true)
		code, _, errOut := mendCmd(runArgs(x)...)
		if code != exitFailure || !strings.Contains(errOut, "refusing to start") || !strings.Contains(errOut, "looks down") || !strings.Contains(errOut, "--"+wakeTopicUnjoinedFlag) {
			t.Fatalf("run with the host down = exit %d\n%s\nwant 1 saying the host looks down and naming the override", code, errOut)
		}
		code, _, errOut = mendCmd(runArgs(x, "--"+wakeTopicUnjoinedFlag)...)
		if code != exitFailure || strings.Contains(errOut, "refusing to start") || !strings.Contains(errOut, "looks down") {
			t.Fatalf("run --%s with the host down = exit %d\n%s\nwant a started run whose wake-up was held", wakeTopicUnjoinedFlag, code, errOut)
		}
		if s, n := state(t, x), published(t, x, "speculate"); s != mend.StateSettled || n != 0 {
			t.Fatalf("record %s, %d wake-up(s); want settled (owed its wake-up), none published", s, n)
		}
		if err := x.w.Heartbeat(ctx, "orchestrator", "speculate", "orchestrator-8a01"); err != nil {
			t.Fatal(err)
		}
		// Its backoff over (mend's clock is the database's: no sleep).
		if _, err := x.mendDB.SQL(t).ExecContext(ctx, "UPDATE mend_records SET next_attempt_at = NOW(6) WHERE state = 'settled'"); err != nil {
			t.Fatal(err)
		}
		if code, _, errOut := mendCmd(runArgs(x)...); code != exitOK {
			t.Fatalf("run --once after the host came back = exit %d\n%s", code, errOut)
		}
		if s, n := state(t, x), published(t, x, "speculate"); s != mend.StateDone || n != 1 {
			t.Errorf("record %s, %d wake-up(s); want done, 1", s, n)
		}
	})
}

// wakeWorld is the wake-topic tests' world: mend's database, the host's
// application and queue databases with the real tables, and one recorded
// dead letter of speculate for q/batch/1.
type wakeWorld struct {
	mendDB, appDB, queueDB *mysqltest.DB
	w                      sqtest.World
	store                  *storage.DB
	rec                    mend.Record
}

func newWakeWorld(t *testing.T) *wakeWorld {
	t.Helper()
	x := &wakeWorld{mendDB: mysqltest.NewDB(t, migrations.Up), appDB: mysqltest.NewDB(t, onDSN(sqtest.CreateApp)), queueDB: mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))}
	x.w = sqtest.World{App: x.appDB.SQL(t), Queue: x.queueDB.SQL(t)}
	return x
}

// recordDeadLetter opens mend's store and records the world's dead letter.
func (x *wakeWorld) recordDeadLetter(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var err error
	if x.store, err = storage.Open(ctx, x.mendDB.DSN, storage.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.store.Close() })
	x.rec, _, err = x.store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"},
		Snapshot: mend.Snapshot{Payload: []byte(`{"id":"q/batch/1","queue":"q"}`), FailureCount: 3, LastError: "boom"},
		Target:   mend.Target{BatchID: "q/batch/1", Desired: mend.OutcomeFailed},
		OpID:     mend.NewOpID(), Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
}

// wakeMain runs mend with args and no environment.
func wakeMain(ctx context.Context, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(ctx, args, &out, &errOut, func(string) string { return "" })
	return code, out.String(), errOut.String()
}

func (x *wakeWorld) runArgs(extra ...string) []string {
	return append([]string{"run", "--once", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN, "--subscribe=false"}, extra...)
}

func (x *wakeWorld) state(t *testing.T) mend.State {
	t.Helper()
	got, err := x.store.RecordGetByID(context.Background(), "q", x.rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got.State
}

func (x *wakeWorld) published(t *testing.T, topic string) int {
	t.Helper()
	var n int
	if err := x.queueDB.SQL(t).QueryRowContext(context.Background(), "SELECT COUNT(*) FROM queue_messages WHERE topic = ?", topic).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

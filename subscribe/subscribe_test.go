package subscribe_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

func TestMain(m *testing.M) { mysqltest.Main(m, func() error { return goleak.Find() }) }

var (
	_ subscribe.Recorder = (*dlq.Intake)(nil)
	_ subscribe.Parker   = (*storage.DB)(nil)
)

// clock is the test's injected clock; passes never sleep.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is one test's mend database and submit queue (real-shaped
// tables), the intake over mend's store and a clock.
type bundle struct {
	store  *storage.DB
	mend   *sql.DB
	queue  *sql.DB
	qdsn   string
	qsrv   *mysqltest.DB // the queue database, for users of its own
	world  sqtest.World
	clock  *clock
	intake *dlq.Intake
}

const settle = 10 * time.Second

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, dlq.Config{})
}

func setupWith(t *testing.T, icfg dlq.Config) *bundle {
	t.Helper()
	ctx := context.Background()
	m := mysqltest.NewDB(t, migrations.Up)
	q := mysqltest.NewDB(t, sqtest.Apply)
	store, err := storage.Open(ctx, m.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	qdb, err := subscribe.Open(ctx, q.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qdb.Close() })
	in, err := dlq.New(store, icfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{now: time.UnixMilli(1_760_000_000_000).UTC()}
	return &bundle{store: store, mend: m.SQL(t), queue: qdb, qdsn: q.DSN, qsrv: q, world: sqtest.World{App: qdb, Queue: qdb, NowMS: func() int64 { return c.Now().UnixMilli() }},
		clock: c, intake: in}
}

func (b *bundle) sub(t *testing.T, cfg subscribe.Config) *subscribe.Subscriber {
	t.Helper()
	cfg.DB = cmpOr(cfg.DB, b.queue)
	if cfg.Intake == nil {
		cfg.Intake = b.intake
	}
	if cfg.Parker == nil {
		cfg.Parker = b.store
	}
	if cfg.Settle == 0 {
		cfg.Settle = settle
	}
	cfg.NowFunc = b.clock.Now
	s, err := subscribe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func cmpOr(a, b *sql.DB) *sql.DB {
	if a != nil {
		return a
	}
	return b
}

// deadLetter publishes a speculate message for batch id of queue q and
// moves it to speculate_dlq, as the host does; it returns the DLQ row's
// offset.
func (b *bundle) deadLetter(t *testing.T, q, id string) uint64 {
	t.Helper()
	return b.deadLetterOn(t, "speculate", q, id, fmt.Sprintf(`{"id":%q,"queue":%q}`, id, q))
}

func (b *bundle) deadLetterOn(t *testing.T, topic, partition, id, payload string) uint64 {
	t.Helper()
	ctx := context.Background()
	if err := b.world.Publish(ctx, topic, partition, id, []byte(payload), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.world.MoveToDLQ(ctx, topic, partition, id, sqtest.Failure{Count: 3, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
	return b.offsetOf(t, topic+"_dlq", partition, id)
}

func (b *bundle) offsetOf(t *testing.T, topic, partition, id string) uint64 {
	t.Helper()
	var off uint64
	if err := b.queue.QueryRow("SELECT `offset` FROM queue_messages WHERE topic = ? AND partition_key = ? AND id = ?", topic, partition, id).Scan(&off); err != nil {
		t.Fatalf("offset of %s/%s/%s: %v", topic, partition, id, err)
	}
	return off
}

// rawDLQ inserts a DLQ row directly (all twelve columns, as MoveToDLQ's
// INSERT does), through ex: a transaction the test may hold open.
func rawDLQ(t *testing.T, ex interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, topic, partition, id, payload string) {
	t.Helper()
	if _, err := ex.ExecContext(context.Background(), "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
		"VALUES (?, ?, ?, NULL, ?, 1, 1, 1760000000000, 1, 'boom', ?, NULL)", topic, id, payload, partition, strings.TrimSuffix(strings.TrimRight(topic, " "), "_dlq")); err != nil {
		t.Fatal(err)
	}
}

// records lists mend's records as "queue|topic|partition|message_id|state", sorted.
func (b *bundle) records(t *testing.T) []string {
	t.Helper()
	rows, err := b.mend.Query("SELECT queue, topic, partition_key, message_id, state FROM mend_records")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q, topic, p, id, state string
		if err := rows.Scan(&q, &topic, &p, &id, &state); err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Join([]string{q, topic, p, id, state}, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func (b *bundle) ids(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, r := range b.records(t) {
		out = append(out, strings.Split(r, "|")[3])
	}
	slices.Sort(out)
	return out
}

func (b *bundle) acked(t *testing.T, group, topic, partition string) uint64 {
	t.Helper()
	off, ok, err := b.world.Acked(context.Background(), group, topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("group %s has no row for %s/%s", group, topic, partition)
	}
	return off
}

func pass(t *testing.T, s *subscribe.Subscriber) subscribe.PassStats {
	t.Helper()
	st, err := s.Pass(context.Background())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return st
}

// settleAndPass moves the clock past the settle window and runs passes
// until one advances nothing and re-reads nothing, within a bound. A pass
// held by an open transaction does not count: innodb_trx shows one ended
// until its cache is refreshed, which InnoDB does once nobody has read it
// for 0.1 s, so it polls, with a deadline, slower than that.
func settleAndPass(t *testing.T, b *bundle, s *subscribe.Subscriber) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for n := 0; n < 6; {
		b.clock.Add(settle + time.Second)
		st := pass(t, s)
		if st.Held > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the subscription stayed held by an open transaction for 30 s")
			}
			<-tick.C
			continue
		}
		n++
		if st.Advanced == 0 && st.Late == 0 && !st.More {
			return
		}
	}
	t.Fatal("the subscription did not settle within 6 passes")
}

func TestSubscribe(t *testing.T) {
	t.Parallel()

	t.Run("records every dead letter in one pass and releases it after the settle window", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o1 := b.deadLetter(t, "q", "q/batch/1")
		o2 := b.deadLetter(t, "q", "q/batch/2")
		o3 := b.deadLetter(t, "r", "r/batch/1")
		s := b.sub(t, subscribe.Config{})
		st := pass(t, s)
		if st.Recorded != 3 || st.Read != 3 {
			t.Fatalf("first pass: %+v; want 3 read and recorded", st)
		}
		if got, want := b.ids(t), []string{"q/batch/1", "q/batch/2", "r/batch/1"}; !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v", got, want)
		}
		// Recorded at once, but not released: the watermark waits for the
		// settle window, holding the host's GC back meanwhile.
		if got := b.acked(t, "mend", "speculate_dlq", "q"); got != 0 {
			t.Fatalf("watermark %d before the settle window passed; want 0", got)
		}
		lag := st.Lag
		if len(lag) != 1 || lag[0].Topic != "speculate_dlq" || lag[0].Rows != 3 || lag[0].Partitions != 2 || lag[0].Oldest.IsZero() {
			t.Fatalf("lag %+v; want 3 rows over 2 partitions of speculate_dlq", lag)
		}
		settleAndPass(t, b, s)
		if got := b.acked(t, "mend", "speculate_dlq", "q"); got != o2 || o1 >= o2 {
			t.Fatalf("watermark of q is %d, want %d", got, o2)
		}
		if got := b.acked(t, "mend", "speculate_dlq", "r"); got != o3 {
			t.Fatalf("watermark of r is %d, want %d", got, o3)
		}
		l, err := subscribe.Lag(context.Background(), b.queue, "mend")
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != 1 || l[0].Rows != 0 || !l[0].Oldest.IsZero() {
			t.Fatalf("lag after release %+v; want 0 rows", l)
		}
		// Nothing is recorded twice.
		if st := pass(t, s); st.Read != 0 || st.Recorded != 0 {
			t.Fatalf("idle pass %+v; want nothing read", st)
		}
	})

	t.Run("a row committed after a later offset was read is recorded, and the watermark waits for it", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := b.sub(t, subscribe.Config{})
		earlier, later := outOfOrder(t, b, s)
		settleAndPass(t, b, s)
		if got := b.ids(t); !slices.Contains(got, "q/batch/early") {
			t.Fatalf("records %v: the row committed late (offset %d) was skipped", got, earlier)
		}
		if got := b.acked(t, "mend", "speculate_dlq", "q"); got != later {
			t.Fatalf("watermark %d, want %d", got, later)
		}
	})

	t.Run("negative control: without the settle window the late row is skipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := b.sub(t, subscribe.Config{})
		subscribe.SetSettle(s, 0)
		subscribe.BlindToOpen(s) // the window alone: root may read the open transactions
		_, later := outOfOrder(t, b, s)
		for range 3 {
			pass(t, s)
		}
		if got := b.ids(t); slices.Contains(got, "q/batch/early") {
			t.Fatalf("records %v: the unsettled variant recorded the late row; this test cannot tell the variants apart", got)
		}
		if got := b.acked(t, "mend", "speculate_dlq", "q"); got != later {
			t.Fatalf("watermark %d, want %d (past the late row)", got, later)
		}
	})

	t.Run("adjacent offsets across page boundaries are all read in one pass", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		// Publish all first, then move all: the DLQ rows sit at adjacent
		// offsets, so a read resuming one past a page's end skips a row.
		var ids []string
		for i := range 7 {
			id := fmt.Sprintf("q/batch/%d", i)
			ids = append(ids, id)
			if err := b.world.Publish(ctx, "speculate", "q", id, []byte(fmt.Sprintf(`{"id":%q,"queue":"q"}`, id)), nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range ids {
			if err := b.world.MoveToDLQ(ctx, "speculate", "q", id, sqtest.Failure{Count: 1, LastError: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		if a, z := b.offsetOf(t, "speculate_dlq", "q", ids[0]), b.offsetOf(t, "speculate_dlq", "q", ids[6]); z-a != 6 {
			t.Fatalf("DLQ offsets %d..%d are not adjacent", a, z)
		}
		s := b.sub(t, subscribe.Config{PageSize: 2})
		if st := pass(t, s); st.Recorded != 7 {
			t.Fatalf("pass %+v: recorded %d of 7 (records %v)", st, st.Recorded, b.ids(t))
		}
	})

	t.Run("pages holding rows the server matched but the byte-exact check dropped are not the end", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx := b.queue
		// Rows on "speculate_dlq " (trailing space) match topic =
		// 'speculate_dlq' under PAD SPACE; no MoveToDLQ writes them.
		rawDLQ(t, tx, "speculate_dlq", "q", "real-1", `{"id":"q/batch/1","queue":"q"}`)
		for i := range 5 {
			rawDLQ(t, tx, "speculate_dlq ", "q", fmt.Sprintf("pad-%d", i), `{}`)
		}
		rawDLQ(t, tx, "speculate_dlq", "q", "real-2", `{"id":"q/batch/2","queue":"q"}`)
		s := b.sub(t, subscribe.Config{PageSize: 2})
		st := pass(t, s)
		if got, want := b.ids(t), []string{"real-1", "real-2"}; !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v (pass %+v)", got, want, st)
		}
		if st.Dropped != 5 {
			t.Errorf("dropped %d, want 5", st.Dropped)
		}
		settleAndPass(t, b, s)
		if got, want := b.acked(t, "mend", "speculate_dlq", "q"), b.offsetOf(t, "speculate_dlq", "q", "real-2"); got != want {
			t.Fatalf("watermark %d, want %d", got, want)
		}
	})

	t.Run("on a case-insensitive queue table, upper-case _DLQ rows are dropped and the page goes on", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A deployment whose queue tables took a case-insensitive default.
		if _, err := b.queue.Exec("ALTER TABLE queue_messages CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"); err != nil {
			t.Fatal(err)
		}
		rawDLQ(t, b.queue, "speculate_DLQ", "q", "upper-0", `{}`)
		rawDLQ(t, b.queue, "speculate_dlq", "q", "real-1", `{"id":"q/batch/1","queue":"q"}`)
		for i := range 4 {
			rawDLQ(t, b.queue, "speculate_DLQ", "q", fmt.Sprintf("upper-%d", i+1), `{}`)
		}
		rawDLQ(t, b.queue, "speculate_dlq", "q", "real-2", `{"id":"q/batch/2","queue":"q"}`)
		s := b.sub(t, subscribe.Config{PageSize: 2})
		st := pass(t, s)
		if got, want := b.ids(t), []string{"real-1", "real-2"}; !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v (pass %+v)", got, want, st)
		}
	})

	t.Run("a row mend cannot record is parked as a stand-in naming its offset, counted and passed", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, dlq.Config{MaxPayload: 64})
		o1 := b.deadLetter(t, "q", "q/batch/1")
		big := b.deadLetterOn(t, "speculate", "q", "q/batch/big", fmt.Sprintf(`{"id":"q/batch/big","queue":"q","pad":%q}`, strings.Repeat("x", 100)))
		rawDLQ(t, b.queue, "speculate_dlq", "q", "", `{"id":"q/batch/3","queue":"q"}`) // an empty message ID
		empty := b.offsetOf(t, "speculate_dlq", "q", "")
		o4 := b.deadLetter(t, "q", "q/batch/4")
		var mu sync.Mutex
		var seen []uint64
		s := b.sub(t, subscribe.Config{PageSize: 2, Hooks: subscribe.Hooks{OnUnrecordable: func(_, _ string, off uint64, _ error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, off)
		}}})
		st := pass(t, s)
		if st.Unrecordable != 2 || st.Recorded != 2 {
			t.Fatalf("pass %+v; want 2 recorded and 2 unrecordable", st)
		}
		want := []string{
			fmt.Sprintf("q|speculate_dlq|q|mend-subscribe/unrecordable/offset/%d|parked", big),
			fmt.Sprintf("q|speculate_dlq|q|mend-subscribe/unrecordable/offset/%d|parked", empty),
			"q|speculate_dlq|q|q/batch/1|pending",
			"q|speculate_dlq|q|q/batch/4|pending",
		}
		slices.Sort(want)
		if got := b.records(t); !slices.Equal(got, want) {
			t.Fatalf("records\n%v\nwant\n%v", got, want)
		}
		mu.Lock()
		if !slices.Equal(seen, []uint64{big, empty}) {
			t.Errorf("OnUnrecordable saw %v, want [%d %d]", seen, big, empty)
		}
		mu.Unlock()
		var reason string
		if err := b.mend.QueryRow("SELECT last_error FROM mend_records WHERE message_id = ?", fmt.Sprintf("mend-subscribe/unrecordable/offset/%d", big)).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(reason, fmt.Sprintf("offset %d", big)) || !strings.Contains(reason, "q/batch/big") {
			t.Errorf("stand-in's reason %q does not name the row", reason)
		}
		settleAndPass(t, b, s)
		if got := b.acked(t, "mend", "speculate_dlq", "q"); got != o4 || o4 < o1 {
			t.Fatalf("watermark %d, want %d: the unrecordable rows stalled it", got, o4)
		}
	})
}

// outOfOrder leaves the queue with row "q/batch/early" allocated before
// "q/batch/late" but committed after the subscription read the later one.
// It returns both offsets.
func outOfOrder(t *testing.T, b *bundle, s *subscribe.Subscriber) (earlier, later uint64) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rawDLQ(t, tx, "speculate_dlq", "q", "q/batch/early", `{"id":"q/batch/early","queue":"q"}`) // allocated, not committed
	if err := tx.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&earlier); err != nil {
		t.Fatal(err)
	}
	later = b.deadLetter(t, "q", "q/batch/late")
	if later <= earlier {
		t.Fatalf("offsets %d, %d: not out of order", earlier, later)
	}
	if st := pass(t, s); st.Recorded != 1 {
		t.Fatalf("pass %+v; want the later row recorded", st)
	}
	if got := b.ids(t); !slices.Equal(got, []string{"q/batch/late"}) {
		t.Fatalf("records %v", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return earlier, later
}

// TestPassLag: a pass that moved a watermark reports the lag read after
// it; any other pass the lag read at most five seconds (by the pass's
// clock) before, since reading it scans every index entry above the
// watermarks.
func TestPassLag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows := func(st subscribe.PassStats) (n int64) {
		for _, l := range st.Lag {
			n += l.Rows
		}
		return n
	}
	b.deadLetter(t, "q", "q/batch/1")
	s := b.sub(t, subscribe.Config{})
	if st := pass(t, s); rows(st) != 1 || st.Lag[0].Oldest.IsZero() {
		t.Fatalf("first pass: lag %+v; want 1 row with its failed_at", st.Lag)
	}
	b.deadLetter(t, "q", "q/batch/2")
	b.clock.Add(time.Second)
	if st := pass(t, s); st.Recorded != 1 || rows(st) != 1 {
		t.Fatalf("a second later: recorded %d, lag %+v; want 1 recorded and the lag as read a second ago", st.Recorded, st.Lag)
	}
	b.clock.Add(5 * time.Second)
	if st := pass(t, s); rows(st) != 2 {
		t.Fatalf("five seconds later: lag %+v; want it read again: 2 rows", st.Lag)
	}
	b.clock.Add(settle)
	if st := pass(t, s); st.Advanced != 1 || rows(st) != 0 {
		t.Fatalf("releasing pass: advanced %d, lag %+v; want 1 advanced and the lag read after it: 0 rows", st.Advanced, st.Lag)
	}
}

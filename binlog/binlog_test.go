package binlog_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

func TestMain(m *testing.M) {
	// A planted variant for the whole run: TestPlantedBugsFailTheirTests
	// runs a named test of this binary with one, which must fail.
	if p := os.Getenv(envPlant); p != "" {
		binlog.Plant(p)
	}
	mysqltest.Main(m, func() error { return goleak.Find() })
}

var (
	_ binlog.Recorder = (*dlq.Intake)(nil)
	_ binlog.Store    = (*storage.DB)(nil)
)

// world is one test's mend database and submit queue (real-shaped tables)
// on one server with its binary log on.
type world struct {
	store  *storage.DB
	mend   *sql.DB
	queue  *sql.DB
	qcfg   *mysql.Config
	host   sqtest.World
	intake *dlq.Intake
	srv    *mysqltest.Server
}

func newWorld(t *testing.T) *world {
	t.Helper()
	mysqltest.SkipVitess(t, "the binary log is read from the queue database's own server, never through vtgate")
	return newWorldOn(t, mysqltest.SharedServer(t))
}

func newWorldOn(t *testing.T, srv *mysqltest.Server) *world {
	t.Helper()
	ctx := context.Background()
	m := mysqltest.NewDBOn(t, srv, migrations.Up)
	q := mysqltest.NewDBOn(t, srv, sqtest.Apply)
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
	in, err := dlq.New(store, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	qcfg, err := mysql.ParseDSN(q.DSN)
	if err != nil {
		t.Fatal(err)
	}
	return &world{store: store, mend: m.SQL(t), queue: qdb, qcfg: qcfg, intake: in, srv: srv,
		host: sqtest.World{App: qdb, Queue: qdb, NowMS: func() int64 { return time.Now().UnixMilli() }}}
}

// events collects what a reader's hooks saw; waits are on its channel, never
// on the clock.
type events struct {
	mu      sync.Mutex
	resets  []string
	purged  int
	saved   []storage.BinlogPosition
	failed  []error
	changed chan struct{}
}

func (e *events) hooks() binlog.Hooks {
	e.changed = make(chan struct{}, 1)
	poke := func() {
		select {
		case e.changed <- struct{}{}:
		default:
		}
	}
	return binlog.Hooks{
		OnReset: func(reason string, purged bool) {
			e.mu.Lock()
			e.resets = append(e.resets, reason)
			if purged {
				e.purged++
			}
			e.mu.Unlock()
			poke()
		},
		OnSaved: func(p storage.BinlogPosition) {
			e.mu.Lock()
			e.saved = append(e.saved, p)
			e.mu.Unlock()
			poke()
		},
		OnFailed: func(err error) {
			e.mu.Lock()
			e.failed = append(e.failed, err)
			e.mu.Unlock()
			poke()
		},
	}
}

func (e *events) snapshot() (resets []string, purged int, saves int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.resets), e.purged, len(e.saved)
}

// running is a reader running in the background.
type running struct {
	r      *binlog.Reader
	ev     *events
	cancel context.CancelFunc
	done   chan error
}

func (w *world) start(t *testing.T, holder string, mod func(*binlog.Config)) *running {
	t.Helper()
	f, err := fence.New(w.store, fence.Config{Holder: holder, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	cfg := binlog.Config{Server: w.qcfg, Intake: w.intake, Parker: w.store, Store: w.store, Fence: f,
		StandbyPoll: 50 * time.Millisecond, Heartbeat: 100 * time.Millisecond, SaveInterval: 50 * time.Millisecond, Hooks: ev.hooks()}
	if mod != nil {
		mod(&cfg)
	}
	r, err := binlog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{r: r, ev: ev, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- r.Run(ctx) }()
	t.Cleanup(run.stop)
	return run
}

func (r *running) stop() {
	r.cancel()
	if r.done != nil {
		<-r.done
		r.done = nil
	}
}

// until waits (on the reader's hooks, bounded only to catch a hang) for
// cond, failing with what it last saw.
func until(t *testing.T, r *running, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for !cond() {
		select {
		case <-r.ev.changed:
		case <-time.After(200 * time.Millisecond): // recheck: the condition may read the database
		case <-deadline:
			st := r.r.Status()
			t.Fatalf("waiting for %s: never happened (reader %s at %s, last error %q, failures %v)", what, st.Role, st.Position.File, st.LastErr, r.ev.failed)
		}
	}
}

// deadLetter publishes a speculate message for batch id of queue q and
// moves it to speculate_dlq, as the host does.
func (w *world) deadLetter(t *testing.T, q, id string) {
	t.Helper()
	ctx := context.Background()
	if err := w.host.Publish(ctx, "speculate", q, id, fmt.Appendf(nil, `{"id":%q,"queue":%q}`, id, q), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.host.MoveToDLQ(ctx, "speculate", q, id, sqtest.Failure{Count: 3, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
}

// rawDLQ inserts a DLQ row directly, as MoveToDLQ's INSERT does, through ex
// (a transaction the test may hold open).
func rawDLQ(t *testing.T, ex interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q, id string) {
	t.Helper()
	if _, err := ex.ExecContext(context.Background(), "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
		"VALUES ('speculate_dlq', ?, ?, NULL, ?, 1, 1, 1760000000000, 1, 'boom', 'speculate', NULL)", id, fmt.Sprintf(`{"id":%q,"queue":%q}`, id, q), q); err != nil {
		t.Fatal(err)
	}
}

// ids lists the message IDs mend has recorded, sorted.
func (w *world) ids(t *testing.T) []string {
	t.Helper()
	rows, err := w.mend.Query("SELECT message_id FROM mend_records")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// readThrough waits until the reader has read everything committed so far:
// a heartbeat the server sent after now (it sends one only when it has
// nothing more to send).
func readThrough(t *testing.T, r *running) {
	t.Helper()
	n := r.r.Status().Heartbeats
	until(t, r, "a heartbeat: the log read through", func() bool { st := r.r.Status(); return st.Heartbeats > n+1 })
}

func (w *world) has(t *testing.T, ids ...string) func() bool {
	return func() bool {
		got := w.ids(t)
		for _, id := range ids {
			if _, ok := slices.BinarySearch(got, id); !ok {
				return false
			}
		}
		return true
	}
}

func (w *world) position(t *testing.T, source string) storage.BinlogPosition {
	t.Helper()
	p, err := w.store.BinlogPositionGet(context.Background(), binlog.LeaseName(source))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A first start imports what the tables hold and then streams from the
// start of the file the server writes: dead letters committed before and
// after are all recorded, each once, and the position is saved with the
// reset's reason.
func TestFirstStartImportsThenStreams(t *testing.T) {
	w := newWorld(t)
	w.deadLetter(t, "q1", "before-1")
	w.deadLetter(t, "q2", "before-2")
	r := w.start(t, "a", nil)
	until(t, r, "the rows the tables held", w.has(t, "before-1", "before-2"))
	w.deadLetter(t, "q1", "after-1")
	until(t, r, "a row committed after the start", w.has(t, "after-1"))
	until(t, r, "a saved position", func() bool { _, _, n := r.ev.snapshot(); return n > 0 })
	resets, purged, _ := r.ev.snapshot()
	if len(resets) != 1 || !strings.HasPrefix(resets[0], binlog.ResetFirstStart) || purged != 0 {
		t.Fatalf("resets %q (purged %d), want one first start", resets, purged)
	}
	p := w.position(t, w.qcfg.DBName)
	if p.File == "" || p.ResetReason != binlog.ResetFirstStart || p.Flavor == "" {
		t.Fatalf("saved position %+v: want a file, the first start's reason and a flavor", p)
	}
	var n int
	if err := w.mend.QueryRow("SELECT COUNT(*) FROM mend_records").Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d records (%v), want 3: each dead letter once", n, err)
	}
}

// A restarted reader resumes from its saved position: no start-over, and
// what was committed while it was stopped is recorded.
func TestResumesFromSavedPosition(t *testing.T) {
	w := newWorld(t)
	r := w.start(t, "a", nil)
	w.deadLetter(t, "q1", "one")
	until(t, r, "the first row", w.has(t, "one"))
	until(t, r, "a saved position", func() bool { _, _, n := r.ev.snapshot(); return n > 0 })
	r.stop()
	w.deadLetter(t, "q1", "two")
	r2 := w.start(t, "a", nil)
	until(t, r2, "the row committed while stopped", w.has(t, "two"))
	if resets, _, _ := r2.ev.snapshot(); len(resets) != 0 {
		t.Fatalf("the restarted reader started over (%q); want a resume", resets)
	}
}

// A transaction rolled back never appears; one held open while later ones
// are recorded and their position saved is recorded when it commits. The
// hold lasts ten minutes by the reader's clock (moved on, not waited for):
// nothing in the reader keys on how long a transaction stays open.
func TestRollbackNeverAndHeldOpenAtCommit(t *testing.T) {
	w := newWorld(t)
	var ahead atomic.Int64 // how far the reader's clock is moved on
	r := w.start(t, "a", func(c *binlog.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	ctx := context.Background()
	rolled, err := w.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rawDLQ(t, rolled, "q1", "rolled-back")
	held, err := w.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rawDLQ(t, held, "q2", "held-open")
	if err := rolled.Rollback(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		w.deadLetter(t, "q3", fmt.Sprintf("later-%d", i))
	}
	until(t, r, "the later rows", w.has(t, "later-0", "later-1", "later-2"))
	_, _, saves := r.ev.snapshot()
	until(t, r, "a position saved past them", func() bool { _, _, n := r.ev.snapshot(); return n > saves })
	ahead.Store(int64(10 * time.Minute))
	_, _, saves = r.ev.snapshot()
	w.deadLetter(t, "q3", "ten-minutes-on")
	until(t, r, "a position saved ten minutes on", func() bool { _, _, n := r.ev.snapshot(); return n > saves && w.has(t, "ten-minutes-on")() })
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	until(t, r, "the held-open row, at its commit", w.has(t, "held-open"))
	w.deadLetter(t, "q3", "marker")
	until(t, r, "a row after the rollback's", w.has(t, "marker"))
	if slices.Contains(w.ids(t), "rolled-back") {
		t.Fatal("a rolled-back dead letter was recorded")
	}
}

// Two replicas: one reads, the other stands by; when the reader stops the
// other takes over from the saved position, without starting over.
func TestStandbyTakesOverFromSavedPosition(t *testing.T) {
	w := newWorld(t)
	a := w.start(t, "a", nil)
	w.deadLetter(t, "q1", "one")
	until(t, a, "the first row", w.has(t, "one"))
	until(t, a, "a saved position", func() bool { _, _, n := a.ev.snapshot(); return n > 0 })
	b := w.start(t, "b", nil)
	until(t, b, "b standing by", func() bool { return b.r.Status().Role == "standby" })
	a.stop()
	w.deadLetter(t, "q1", "two")
	until(t, b, "b recording after the takeover", w.has(t, "two"))
	if resets, _, _ := b.ev.snapshot(); len(resets) != 0 {
		t.Fatalf("the standby started over (%q); want a resume from the saved position", resets)
	}
}

// A saved position the server has purged is never skipped silently: the
// reader says so (the hook, its status: the metric and the alert read it),
// imports what the tables still hold, and reads on.
func TestPurgedPositionStartsOverLoudly(t *testing.T) {
	srv := mysqltest.StartPrivate(t)
	w := newWorldOn(t, srv)
	r := w.start(t, "a", nil)
	w.deadLetter(t, "q1", "one")
	until(t, r, "the first row", w.has(t, "one"))
	until(t, r, "a saved position", func() bool { _, _, n := r.ev.snapshot(); return n > 0 })
	r.stop()
	w.deadLetter(t, "q1", "while-down")
	root, err := sql.Open("mysql", srv.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	purgeAllButCurrent(t, root)
	r2 := w.start(t, "a", nil)
	until(t, r2, "the start-over", func() bool { _, p, _ := r2.ev.snapshot(); return p > 0 })
	until(t, r2, "the row the tables still held", w.has(t, "while-down"))
	w.deadLetter(t, "q1", "after")
	until(t, r2, "a row after the start-over", w.has(t, "after"))
	if st := r2.r.Status(); st.Purges != 1 {
		t.Fatalf("status counts %d purges, want 1", st.Purges)
	}
	if p := w.position(t, w.qcfg.DBName); !strings.HasPrefix(p.ResetReason, binlog.ResetPurged) {
		t.Fatalf("saved position's reset reason %q, want it to say the position was purged", p.ResetReason)
	}
}

// A position saved on another server: without GTIDs it is refused (never
// guessed) and the reader starts over from the tables; with a GTID set
// (MariaDB always; here the same server under another identity) it resumes
// by GTID without starting over.
func TestPositionOfAnotherServer(t *testing.T) {
	for _, withGTIDs := range []bool{false, true} {
		t.Run(fmt.Sprintf("gtids=%v", withGTIDs), func(t *testing.T) {
			w := newWorld(t)
			r := w.start(t, "a", nil)
			w.deadLetter(t, "q1", "one")
			until(t, r, "the first row", w.has(t, "one"))
			until(t, r, "a saved position", func() bool { _, _, n := r.ev.snapshot(); return n > 0 })
			r.stop()
			p := w.position(t, w.qcfg.DBName)
			if withGTIDs && p.GTIDSet == "" {
				t.Skipf("the server has no GTIDs (gtid_mode=OFF on MySQL): nothing to resume by")
			}
			gtids := p.GTIDSet
			if !withGTIDs {
				gtids = ""
			}
			if _, err := w.mend.Exec("UPDATE mend_binlog_positions SET server_uuid = 'another-server', gtid_set = ? WHERE name = ?", gtids, p.Name); err != nil {
				t.Fatal(err)
			}
			w.deadLetter(t, "q1", "two")
			r2 := w.start(t, "a", nil)
			until(t, r2, "the row after the failover", w.has(t, "two"))
			resets, _, _ := r2.ev.snapshot()
			switch {
			case withGTIDs && len(resets) != 0:
				t.Fatalf("with a GTID set the reader started over (%q); want a resume by GTID", resets)
			case !withGTIDs && (len(resets) != 1 || !strings.HasPrefix(resets[0], binlog.ResetFailover)):
				t.Fatalf("without GTIDs: resets %q, want one saying the server changed", resets)
			}
		})
	}
}

// A column added to queue_messages does not break decoding of the rows
// written after it.
func TestColumnAddedToQueueMessages(t *testing.T) {
	w := newWorld(t)
	r := w.start(t, "a", nil)
	w.deadLetter(t, "q1", "before")
	until(t, r, "the first row", w.has(t, "before"))
	if _, err := w.queue.Exec("ALTER TABLE queue_messages ADD COLUMN mend_test_extra INT NULL"); err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, "q1", "after")
	until(t, r, "a row written after the column was added", w.has(t, "after"))
}

// purgeAllButCurrent purges every binary log file but the one being
// written. A file a dump thread still reads is kept (MariaDB warns and
// purges nothing; the thread of a reader just stopped ends soon after), so
// it purges until the server lists one file.
func purgeAllButCurrent(t *testing.T, root *sql.DB) {
	t.Helper()
	deadline := time.After(time.Minute) // only catches a hang
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		files := logFiles(t, root)
		if len(files) == 1 {
			return
		}
		if _, err := root.Exec("PURGE BINARY LOGS TO '" + files[len(files)-1] + "'"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tick.C: // the server's state is read again; nothing is ordered by the wait
		case <-deadline:
			t.Fatalf("the server still lists %v after a minute of PURGE BINARY LOGS", logFiles(t, root))
		}
	}
}

func logFiles(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for rows.Next() {
		var name string
		vals := make([]any, len(cols))
		vals[0] = &name
		for i := 1; i < len(vals); i++ {
			vals[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
	}
	return files
}

// MySQL compresses a transaction's events into one payload event where
// binlog_transaction_compression is on; its dead letters are read from
// inside it. (MariaDB compresses events one by one, which go-mysql
// decodes as their own kinds.)
func TestCompressedTransaction(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	conn, err := w.queue.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION binlog_transaction_compression = ON"); err != nil {
		t.Skipf("no binlog_transaction_compression here (MariaDB): %v", err)
	}
	r := w.start(t, "a", nil)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rawDLQ(t, tx, "q1", "compressed-1")
	rawDLQ(t, tx, "q2", "compressed-2")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	until(t, r, "the rows of a compressed transaction", w.has(t, "compressed-1", "compressed-2"))
	w.deadLetter(t, "q3", "after")
	until(t, r, "a row after it", w.has(t, "after"))
	readThrough(t, r)
	p := w.position(t, w.qcfg.DBName)
	if p.Pos == 0 || p.File == "" {
		t.Fatalf("saved position %+v after a compressed transaction", p)
	}
}

// A host transaction committing more dead letters than one recording
// transaction takes is recorded in chunks of BatchRows, Concurrency at once.
func TestLargeTransactionInChunks(t *testing.T) {
	w := newWorld(t)
	var batches []int
	var mu sync.Mutex
	r := w.start(t, "a", func(c *binlog.Config) {
		c.BatchRows, c.Concurrency = 2, 2
		c.Intake = countingRecorder{Recorder: w.intake, sizes: &batches, mu: &mu}
	})
	tx, err := w.queue.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 7 {
		id := fmt.Sprintf("big-%d", i)
		rawDLQ(t, tx, fmt.Sprintf("q%d", i), id)
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	until(t, r, "every row of the large transaction", w.has(t, ids...))
	mu.Lock()
	defer mu.Unlock()
	for _, n := range batches {
		if n > 2 {
			t.Fatalf("a recording transaction took %d dead letters; BatchRows is 2 (batches %v)", n, batches)
		}
	}
}

type countingRecorder struct {
	binlog.Recorder
	sizes *[]int
	mu    *sync.Mutex
}

func (c countingRecorder) RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	c.mu.Lock()
	*c.sizes = append(*c.sizes, len(ds))
	c.mu.Unlock()
	return c.Recorder.RecordMany(ctx, ds)
}

// A deployment switched from the offset mode: the reader leaves the offset
// subscription's consumer group once it has saved a position, so the
// group's rows no longer hold the host's GC back, and every dead letter
// the group held is recorded first.
func TestLeavesTheOffsetGroup(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.deadLetter(t, "q1", "held-by-the-group")
	if err := w.host.Join(ctx, "mend", "speculate_dlq", "q1"); err != nil {
		t.Fatal(err)
	}
	r := w.start(t, "a", func(c *binlog.Config) { c.LeaveGroup = "mend" })
	until(t, r, "the row the group held", w.has(t, "held-by-the-group"))
	until(t, r, "the group gone from queue_offsets", func() bool {
		var n int
		return w.queue.QueryRow("SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = 'mend'").Scan(&n) == nil && n == 0
	})
}

package binlog_test

// The offset subscription's loss tests, in binlog mode: each fault that
// lost dead letters to an inference about offsets, against the reader of
// commits. Each test that has a planted variant (binlog.Plant) runs it as
// its negative control: the same steps, and the test's check must fail.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// missing lists the ids mend has not recorded.
func (w *world) missing(t *testing.T, ids []string) []string {
	t.Helper()
	got := w.ids(t)
	var out []string
	for _, id := range ids {
		if _, ok := slices.BinarySearch(got, id); !ok {
			out = append(out, id)
		}
	}
	return out
}

// collected moves a dead letter to speculate_dlq and has the host's DLQ
// group acknowledge it at once and the real GC delete it: the row is gone
// from the table before any reader of tables could see it.
func (w *world) collected(t *testing.T, q, id string) {
	t.Helper()
	ctx := context.Background()
	w.deadLetter(t, q, id)
	if _, err := w.host.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.host.GC(ctx, "speculate_dlq"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := w.queue.QueryRow("SELECT COUNT(*) FROM queue_messages WHERE id = ?", id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the host's GC left %d rows of %s (%v)", n, id, err)
	}
}

// ackedAtOnce: dead letters the host's DLQ group acknowledges at once and
// its GC collects, some while mend was not yet running and some while it
// runs. It returns those never recorded, after a marker committed last is.
func ackedAtOnce(t *testing.T) []string {
	w := newWorld(t)
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("before-%d", i)
		w.collected(t, "q1", id)
		ids = append(ids, id)
	}
	r := w.start(t, "a", nil)
	for i := range 3 {
		id := fmt.Sprintf("while-%d", i)
		w.collected(t, "q2", id)
		ids = append(ids, id)
	}
	w.deadLetter(t, "q3", "marker")
	until(t, r, "the marker", w.has(t, "marker"))
	readThrough(t, r)
	var own int
	if err := w.queue.QueryRow("SELECT COUNT(*) FROM queue_offsets WHERE consumer_group NOT IN ('orchestrator', 'orchestrator-dlq')").Scan(&own); err != nil || own != 0 {
		t.Fatalf("binlog mode holds %d queue_offsets rows of its own (%v); it must hold the host's GC back in no way", own, err)
	}
	return w.missing(t, ids)
}

func TestLossAckedAndCollectedAtOnce(t *testing.T) {
	loses(t, "", ackedAtOnce, "dead letters acknowledged and collected at once must be read from the log")
}

func TestLossAckedAndCollectedAtOnceNegativeControl(t *testing.T) {
	loses(t, "startAtEnd", ackedAtOnce, "a first start at the end of the log")
}

// loses runs a loss scenario, which returns the dead letters never
// recorded. Without a planted variant nothing may be lost (why says what
// the scenario guards); with one (plant, why naming the broken reader)
// something must be, or the scenario does not catch that variant.
func loses(t *testing.T, plant string, scenario func(*testing.T) []string, why string) {
	t.Helper()
	if plant == "" {
		if lost := scenario(t); len(lost) > 0 {
			t.Fatalf("lost %v: %s", lost, why)
		}
		return
	}
	defer binlog.Plant(plant)()
	lost := scenario(t)
	if len(lost) == 0 {
		t.Fatalf("%s lost nothing: the test does not catch it", why)
	}
	t.Logf("caught: lost %v", lost)
}

// failingRecorder fails every RecordMany while down is set, as mend's store
// cut off would; the position store stays reachable, so a reader that read
// on past a failed batch could save a position past it.
type failingRecorder struct {
	binlog.Recorder
	mu    sync.Mutex
	down  bool
	fails int
	seen  chan struct{}
}

func (f *failingRecorder) RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	f.mu.Lock()
	down := f.down
	if down {
		f.fails++
		select {
		case f.seen <- struct{}{}:
		default:
		}
	}
	f.mu.Unlock()
	if down {
		return nil, errors.New("mend's store is cut off (test)")
	}
	return f.Recorder.RecordMany(ctx, ds)
}

func (f *failingRecorder) set(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// storeCutOff: mend's store cannot record while dead letters are moved,
// acknowledged and collected by the host (longer than its GC period), then
// comes back. It returns those never recorded.
func storeCutOff(t *testing.T) []string {
	w := newWorld(t)
	fr := &failingRecorder{Recorder: w.intake, seen: make(chan struct{}, 1)}
	r := w.start(t, "a", func(c *binlog.Config) { c.Intake = fr })
	w.deadLetter(t, "q1", "first")
	until(t, r, "the first row", w.has(t, "first"))
	fr.set(true)
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("cut-%d", i)
		w.collected(t, "q1", id)
		ids = append(ids, id)
	}
	select {
	case <-fr.seen:
	case <-time.After(2 * time.Minute):
		t.Fatal("the reader never tried to record while the store was cut off")
	}
	fr.set(false)
	w.deadLetter(t, "q2", "marker")
	until(t, r, "the marker after the store came back", w.has(t, "marker"))
	readThrough(t, r)
	return w.missing(t, ids)
}

func TestLossStoreCutOffPastGC(t *testing.T) {
	loses(t, "", storeCutOff, "while mend's store was cut off")
}

func TestLossStoreCutOffPastGCNegativeControl(t *testing.T) {
	loses(t, "dropOnFailure", storeCutOff, "a reader that reads on past a failed batch")
}

// blockingRecorder holds the first batch it is given after arm until
// release, as a paused process would hold it: after recording it, or
// (before) before.
type blockingRecorder struct {
	binlog.Recorder
	mu      sync.Mutex
	armed   bool
	before  bool
	held    chan struct{}
	release chan struct{}
}

func (b *blockingRecorder) RecordMany(ctx context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	b.mu.Lock()
	hold := b.armed
	b.armed = false
	b.mu.Unlock()
	if hold && b.before {
		close(b.held)
		<-b.release
		return b.Recorder.RecordMany(ctx, ds)
	}
	res, err := b.Recorder.RecordMany(ctx, ds)
	if hold {
		close(b.held)
		<-b.release
	}
	return res, err
}

// A reader paused between recording a batch and saving its position past
// its lease: another replica takes over and reads on; when the paused one
// wakes its save is fenced, the saved position is the new reader's, and
// nothing is lost.
func TestLossReaderPausedPastItsLease(t *testing.T) {
	if problem := pausedPastLease(t, nil); problem != "" {
		t.Fatal(problem)
	}
}

// The negative control: a store whose save, refused by the fence, writes
// the position anyway (a save without the epoch check). The paused reader's
// older position then overwrites the new reader's, and the test says so.
func TestLossReaderPausedPastItsLeaseNegativeControl(t *testing.T) {
	problem := pausedPastLease(t, func(w *world) binlog.Store { return unfencedStore{w.store, w.mend} })
	if problem == "" {
		t.Fatal("a paused reader whose save is not fenced overwrote nothing: the test does not catch it")
	}
	t.Logf("caught: %s", problem)
}

// unfencedStore saves the position even when its term is fenced.
type unfencedStore struct {
	*storage.DB
	mend *sql.DB
}

func (u unfencedStore) BinlogPositionSave(ctx context.Context, term mend.Term, p storage.BinlogPosition) error {
	// Whether the paused reader's context was cancelled (its fence saw the
	// lease lost) before it woke is a race of the machine's load; this
	// planted save goes ahead either way, so the scenario's check decides,
	// not the race.
	ctx = context.WithoutCancel(ctx)
	err := u.DB.BinlogPositionSave(ctx, term, p)
	if errors.Is(err, mend.ErrFenced) {
		_, err = u.mend.ExecContext(ctx, "UPDATE mend_binlog_positions SET binlog_file = ?, binlog_pos = ?, epoch = ?, holder = ? WHERE name = ?",
			p.File, p.Pos, term.Epoch, term.Holder, p.Name)
	}
	return err
}

// pausedPastLease runs the scenario, the paused reader on the store store
// makes (nil: the world's), and says what went wrong ("" for nothing). A
// trigger logs every write of the saved position, so a write by an ended
// term is seen even when a later term overwrites it at once.
func pausedPastLease(t *testing.T, store func(*world) binlog.Store) string {
	w := newWorld(t)
	for _, stmt := range []string{
		"CREATE TABLE mend_test_position_log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, epoch BIGINT NOT NULL, holder VARBINARY(1020) NOT NULL)",
		"CREATE TRIGGER mend_test_position_ins AFTER INSERT ON mend_binlog_positions FOR EACH ROW INSERT INTO mend_test_position_log (epoch, holder) VALUES (NEW.epoch, NEW.holder)",
		"CREATE TRIGGER mend_test_position_upd AFTER UPDATE ON mend_binlog_positions FOR EACH ROW INSERT INTO mend_test_position_log (epoch, holder) VALUES (NEW.epoch, NEW.holder)",
	} {
		if _, err := w.mend.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	br := &blockingRecorder{Recorder: w.intake, held: make(chan struct{}), release: make(chan struct{})}
	var fencedSeen sync.Once
	fenced := make(chan struct{})
	a := w.start(t, "a", func(c *binlog.Config) {
		c.Intake = br
		if store != nil {
			c.Store = store(w)
		}
		c.Hooks.OnFailed = func(err error) {
			if errors.Is(err, mend.ErrFenced) || errors.Is(err, mend.ErrLeaseLost) {
				fencedSeen.Do(func() { close(fenced) })
			}
		}
	})
	w.deadLetter(t, "q1", "first")
	until(t, a, "the first row", w.has(t, "first"))
	br.mu.Lock()
	br.armed = true
	br.mu.Unlock()
	w.deadLetter(t, "q1", "paused")
	<-br.held
	// The pause outlasts the term: the lease row says it ended.
	name := binlog.LeaseName(w.qcfg.DBName)
	if _, err := w.mend.Exec("UPDATE mend_leases SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE queue = ?", name); err != nil {
		t.Fatal(err)
	}
	b := w.start(t, "b", nil)
	w.deadLetter(t, "q2", "after-takeover")
	until(t, b, "the row after the takeover", w.has(t, "paused", "after-takeover"))
	until(t, b, "b's saved position", func() bool { return w.position(t, w.qcfg.DBName).Holder == "b" })
	var bSeq int64
	if err := w.mend.QueryRow("SELECT MIN(seq) FROM mend_test_position_log WHERE holder = 'b'").Scan(&bSeq); err != nil {
		t.Fatal(err)
	}
	close(br.release)
	// The paused reader's save is refused, or (a save not fenced) written.
	until(t, a, "the paused reader's save refused or written", func() bool {
		select {
		case <-fenced:
			return true
		default:
			var n int
			if err := w.mend.QueryRow("SELECT COUNT(*) FROM mend_test_position_log WHERE holder = 'a' AND seq > ?", bSeq).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
	})
	w.deadLetter(t, "q2", "marker")
	until(t, b, "the marker", w.has(t, "marker"))
	// Every write of the position by a term older than one that wrote it
	// before: a write after the lease was lost.
	rows, err := w.mend.Query("SELECT seq, epoch, holder FROM mend_test_position_log ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var newest int64
	var stale []string
	for rows.Next() {
		var seq, epoch int64
		var holder string
		if err := rows.Scan(&seq, &epoch, &holder); err != nil {
			t.Fatal(err)
		}
		if epoch < newest {
			stale = append(stale, fmt.Sprintf("write %d by %s at epoch %d after epoch %d's", seq, holder, epoch, newest))
		}
		newest = max(newest, epoch)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		return "the saved position was written by an ended term: " + strings.Join(stale, "; ")
	}
	return ""
}

// A dead letter whose transaction waits on a lock twice after its insert
// (as MoveToDLQ's can) commits long after later ones of its own partition,
// which took higher offsets: it is recorded when it commits, whatever was
// saved meanwhile.
func TestLossTwoLockWaits(t *testing.T) {
	loses(t, "", twoLockWaits, "a transaction that waited on two locks")
}

// The negative control: a reader that takes offsets for commit order (the
// inference the offset subscription must not make) skips the row that
// waited, and the test says so.
func TestLossTwoLockWaitsNegativeControl(t *testing.T) {
	loses(t, "offsetWatermark", twoLockWaits, "a reader that skips offsets below its partition's highest")
}

// twoLockWaits runs the scenario and returns the dead letters never
// recorded, after a marker committed last is.
func twoLockWaits(t *testing.T) []string {
	w := newWorld(t)
	r := w.start(t, "a", nil)
	ctx := context.Background()
	if _, err := w.queue.Exec("CREATE TABLE mend_test_lock (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.queue.Exec("INSERT INTO mend_test_lock VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	mover, err := w.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rawDLQ(t, mover, "q1", "waited-twice")
	for _, lockID := range []int{1, 2} {
		holder, err := w.queue.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Exec("SELECT id FROM mend_test_lock WHERE id = ? FOR UPDATE", lockID); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			_, err := mover.Exec("SELECT id FROM mend_test_lock WHERE id = ? FOR UPDATE", lockID)
			waited <- err
		}()
		until(t, r, "the mover waiting on the lock", func() bool {
			n, err := mysqltest.CountStatements(ctx, w.queue, "FROM mend_test_lock WHERE id")
			return err == nil && n > 0
		})
		id := fmt.Sprintf("during-wait-%d", lockID)
		w.deadLetter(t, "q1", id)
		until(t, r, "a row committed during the wait", w.has(t, id))
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
	}
	if slices.Contains(w.ids(t), "waited-twice") {
		t.Fatal("recorded before its transaction committed")
	}
	if err := mover.Commit(); err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, "q1", "marker")
	until(t, r, "the marker committed after the row that waited", w.has(t, "marker"))
	readThrough(t, r)
	return w.missing(t, []string{"waited-twice", "during-wait-1", "during-wait-2"})
}

// The queue database's server killed and restarted while the reader held
// a dead letter it had read and not yet recorded: the reader reconnects
// and records it, and what was committed after the restart.
func TestLossQueueServerKilled(t *testing.T) {
	loses(t, "", queueServerKilled, "across the server's kill")
}

// The negative control: a reader that resumes where it had read to, not
// at its saved position, skips the dead letter it held, and the test says
// so.
func TestLossQueueServerKilledNegativeControl(t *testing.T) {
	loses(t, "resumeFromRead", queueServerKilled, "a reader resuming from what it had read")
}

// queueServerKilled runs the scenario and returns the dead letters never
// recorded, after a marker committed after the restart is.
func queueServerKilled(t *testing.T) []string {
	srv := mysqltest.StartPrivate(t)
	w := newWorldOn(t, srv)
	br := &blockingRecorder{Recorder: w.intake, before: true, held: make(chan struct{}), release: make(chan struct{})}
	r := w.start(t, "a", func(c *binlog.Config) { c.Intake = br })
	w.deadLetter(t, "q1", "before-kill")
	until(t, r, "the first row", w.has(t, "before-kill"))
	br.mu.Lock()
	br.armed = true
	br.mu.Unlock()
	w.deadLetter(t, "q1", "just-before-kill")
	<-br.held // read, not yet recorded
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	close(br.release) // its recording fails: the server is gone
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, "q1", "after-restart")
	until(t, r, "the row after the restart", w.has(t, "after-restart"))
	readThrough(t, r)
	return w.missing(t, []string{"before-kill", "just-before-kill", "after-restart"})
}

package binlog

// The simulation drives the reader's own event handling, batching, recording
// and saving (term.handle, flush, save, record, resumable) over a modelled
// binary log, seeded and without a server: transactions committed in log
// order (dead letters, other rows, DDL), transactions over a
// non-transactional table logged with a ROLLBACK, file rotation, purges of
// old files, the host's GC, failures of mend's store, and the reader
// crashing and another taking over from the saved position. It checks:
//
//   - a saved position never passes a committed dead letter that is not
//     recorded;
//   - a rolled-back dead letter is never recorded;
//   - at the end, every committed dead letter is recorded, but for those a
//     purge made unrecoverable (gone from the log before the reader read
//     them and collected from the tables before the start-over imported
//     them), and every such purge was reported.
//
// The planted variants it must catch: the position saved before the
// records, a batch dropped when its recording failed, a position saved in
// the middle of a transaction (a skipped event after a takeover), and a
// logged ROLLBACK taken for a commit.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/storage"
)

const simDB = "queue_db"

var simColumns = [][]byte{[]byte("offset"), []byte("topic"), []byte("partition_key"), []byte("id"), []byte("payload"), []byte("metadata"),
	[]byte("created_at"), []byte("published_at"), []byte("failed_at"), []byte("failure_count"), []byte("last_error"), []byte("original_topic"), []byte("failure_detail")}

// simEvent is one event of the modelled log: its file, its end offset, and
// the event the reader is given.
type simEvent struct {
	file int
	end  uint64
	ev   *replication.BinlogEvent
	// commit: the dead letters this event commits (XID / COMMIT).
	commit []string
}

type simWorld struct {
	rng       *rand.Rand
	log       []simEvent
	file      int    // the file being written
	size      uint64 // its size
	purged    int    // files below this are gone
	offset    uint64 // queue_messages' auto-increment
	tables    map[string]bool
	commitAt  map[string]int // dead letter -> index of its commit event
	rolled    map[string]bool
	recorded  map[string]bool
	saved     storage.BinlogPosition
	hasSaved  bool
	lossOK    map[string]bool // unrecoverable after a reported purge
	purges    int
	problems  []string
	storeBad  bool
	recordBad bool
	clock     time.Time // the reader's clock, moved on every step
	mu        sync.Mutex
}

func (w *simWorld) fail(format string, a ...any) {
	if len(w.problems) < 5 {
		w.problems = append(w.problems, fmt.Sprintf(format, a...))
	}
}

func simFile(i int) string { return fmt.Sprintf("mend-bin.%06d", i) }

func (w *simWorld) append(ev *replication.BinlogEvent, commit []string) {
	w.size += 100
	ev.Header.LogPos = uint32(w.size)
	ev.Header.Timestamp = uint32(1_760_000_000 + len(w.log))
	w.log = append(w.log, simEvent{file: w.file, end: w.size, ev: ev, commit: commit})
}

func header(t replication.EventType) *replication.EventHeader {
	return &replication.EventHeader{EventType: t}
}

func (w *simWorld) rowsEvent(ids []string, topic string) *replication.BinlogEvent {
	tm := &replication.TableMapEvent{Schema: []byte(simDB), Table: []byte(Table), ColumnCount: uint64(len(simColumns)), ColumnName: simColumns}
	re := &replication.RowsEvent{Table: tm}
	for _, id := range ids {
		w.offset++
		re.Rows = append(re.Rows, []any{int64(w.offset), topic, "q1", id, []byte(`{"id":"b","queue":"q1"}`), nil,
			int64(1), int64(1), int64(1_760_000_000_000), int32(1), "boom", "speculate", nil})
	}
	return &replication.BinlogEvent{Header: header(replication.WRITE_ROWS_EVENTv2), Event: re}
}

// transaction appends one host transaction (MySQL's shape: BEGIN, row
// events, XID), committing n dead letters and maybe other rows; a rolled
// one ends in a logged ROLLBACK instead.
func (w *simWorld) transaction(n int, rolled bool) {
	var ids []string
	for range n {
		ids = append(ids, fmt.Sprintf("dl-%d", len(w.commitAt)+len(w.rolled)))
		if rolled {
			w.rolled[ids[len(ids)-1]] = true
		} else {
			w.commitAt[ids[len(ids)-1]] = -1
		}
	}
	w.append(&replication.BinlogEvent{Header: header(replication.QUERY_EVENT), Event: &replication.QueryEvent{Query: []byte("BEGIN")}}, nil)
	for len(ids) > 0 {
		k := min(len(ids), 1+w.rng.IntN(3))
		w.append(w.rowsEvent(ids[:k], "speculate_dlq"), nil)
		if w.rng.IntN(3) == 0 {
			w.append(w.rowsEvent([]string{fmt.Sprintf("other-%d", len(w.log))}, "speculate"), nil)
		}
		if !rolled {
			for _, id := range ids[:k] {
				w.tables[id] = true
			}
		}
		ids = ids[k:]
	}
	var done []string
	for id, at := range w.commitAt {
		if at == -1 {
			done = append(done, id)
		}
	}
	slices.Sort(done)
	if rolled {
		w.append(&replication.BinlogEvent{Header: header(replication.QUERY_EVENT), Event: &replication.QueryEvent{Query: []byte("ROLLBACK")}}, nil)
		return
	}
	w.append(&replication.BinlogEvent{Header: header(replication.XID_EVENT), Event: &replication.XIDEvent{}}, done)
	for _, id := range done {
		w.commitAt[id] = len(w.log) - 1
	}
}

func (w *simWorld) host() {
	switch x := w.rng.IntN(20); {
	case x < 12:
		w.transaction(1+w.rng.IntN(3), false)
	case x < 14:
		w.transaction(1, true)
	case x < 15:
		w.append(&replication.BinlogEvent{Header: header(replication.QUERY_EVENT), Event: &replication.QueryEvent{Query: []byte("ALTER TABLE other ADD COLUMN c INT")}}, nil)
	case x < 16:
		w.file++
		w.size = 4
	default:
		// The host's DLQ group acknowledges and its GC collects: most
		// dead letters leave the tables soon after they are committed.
		n := 0
		for id := range w.tables {
			delete(w.tables, id)
			if n++; n == 3 {
				break
			}
		}
	}
}

// from is the index of the first event after position (file, pos).
func (w *simWorld) from(file string, pos uint64) int {
	for i, e := range w.log {
		if simFile(e.file) > file || (simFile(e.file) == file && e.end > pos) {
			return i
		}
	}
	return len(w.log)
}

// checkSave is the store's check of a save: every dead letter committed at
// or before the position is recorded.
func (w *simWorld) checkSave(p storage.BinlogPosition) {
	upTo := w.from(p.File, p.Pos)
	for id, at := range w.commitAt {
		if at >= 0 && at < upTo && !w.recorded[id] && !w.lossOK[id] {
			w.fail("position %s:%d saved past %s (committed at event %d), which is not recorded", p.File, p.Pos, id, at)
		}
	}
}

type simRecorder struct{ w *simWorld }

func (s simRecorder) RecordMany(_ context.Context, ds []dlq.Delivery) ([]dlq.ManyResult, error) {
	s.w.mu.Lock() // the reader records chunks at once
	defer s.w.mu.Unlock()
	if s.w.storeBad || s.w.recordBad {
		return nil, errors.New("mend's store is down (sim)")
	}
	res := make([]dlq.ManyResult, len(ds))
	for _, d := range ds {
		if s.w.rolled[d.Source.MessageID] {
			s.w.fail("rolled-back dead letter %s recorded", d.Source.MessageID)
		}
		s.w.recorded[d.Source.MessageID] = true
	}
	return res, nil
}

type simStore struct{ w *simWorld }

func (s simStore) BinlogPositionGet(context.Context, string) (storage.BinlogPosition, error) {
	if !s.w.hasSaved {
		return storage.BinlogPosition{}, mend.ErrNotFound
	}
	return s.w.saved, nil
}

func (s simStore) BinlogPositionSave(_ context.Context, term mend.Term, p storage.BinlogPosition) error {
	if s.w.storeBad {
		return errors.New("mend's store is down (sim)")
	}
	_ = term // one reader at a time here: the fence's own tests cover takeovers' writes
	s.w.checkSave(p)
	s.w.saved, s.w.hasSaved = p, true
	return nil
}

type simParker struct{}

func (simParker) RecordCreate(context.Context, mend.CreateParams) (mend.Record, bool, error) {
	return mend.Record{}, true, nil
}

// simulate runs one seed and returns its problems.
func simulate(seed uint64, steps int) []string {
	w := &simWorld{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), file: 1, size: 4, tables: map[string]bool{}, commitAt: map[string]int{},
		rolled: map[string]bool{}, recorded: map[string]bool{}, lossOK: map[string]bool{}}
	w.clock = time.Unix(1_760_000_000, 0)
	cfg := Config{Server: &mysql.Config{DBName: simDB}, Intake: simRecorder{w}, Parker: simParker{}, Store: simStore{w}, BatchRows: 4, Concurrency: 1,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return w.clock }}.withDefaults()
	r := &Reader{cfg: cfg, log: cfg.Log, failures: map[mend.SourceID]int{}}
	ctx := context.Background()
	var t *term
	next := 0 // the next event the reader is given
	start := func() {
		t = &term{r: r, lease: &fence.Lease{}, columns: map[uint64][]string{}}
		t.srv = Server{Flavor: "mysql", Identity: "sim", LogBin: true, Format: "ROW", RowImage: "FULL"}
		for f := w.purged; f <= w.file; f++ {
			t.srv.Files = append(t.srv.Files, simFile(f))
		}
		t.srv.Current = simFile(w.file)
		saved, err := cfg.Store.BinlogPositionGet(ctx, "")
		reason, purged := "", false
		if err != nil {
			reason = ResetFirstStart
		} else {
			t.pos = saved
			reason, purged = t.resumable(saved)
		}
		if reason == "" {
			t.read = saved
			next = w.from(saved.File, saved.Pos)
			return
		}
		// A start-over (reset's steps): the file being written, then the
		// tables' contents, then the stream from the file's start.
		if purged {
			w.purges++
		}
		p := storage.BinlogPosition{Flavor: "mysql", ServerUUID: "sim", File: simFile(w.file), Pos: 4, ResetReason: reason}
		next = w.from(p.File, p.Pos)
		for id, at := range w.commitAt {
			if at >= 0 && at < next && !w.recorded[id] && !w.tables[id] {
				// Gone from the log and from the tables: lost to a purge
				// (reported) or before mend first started, never to a
				// start-over of another kind.
				if !purged && reason != ResetFirstStart {
					w.fail("%s lost in a start-over (%s) that was neither a first start nor a reported purge", id, reason)
				}
				w.lossOK[id] = true
			}
		}
		var rows []dlq.Row
		for id := range w.tables {
			rows = append(rows, dlq.Row{Topic: "speculate_dlq", PartitionKey: "q1", ID: id, Payload: []byte(`{"id":"b","queue":"q1"}`), OriginalTopic: "speculate"})
		}
		slices.SortFunc(rows, func(a, b dlq.Row) int { return cmpString(a.ID, b.ID) })
		if len(rows) > 0 && t.record(ctx, rows) != nil {
			t = nil // the store failed: this term ends before it streams
			return
		}
		t.pos, t.read = p, p
	}
	for range steps {
		w.clock = w.clock.Add(300 * time.Millisecond)
		switch x := w.rng.IntN(20); {
		case x < 6:
			w.host()
		case x < 7 && w.rng.IntN(2) == 0:
			w.storeBad = !w.storeBad
		case x < 7:
			w.recordBad = !w.recordBad // recording fails (a build lookup, the intake) while positions still save
		case x < 8:
			t = nil // the reader crashes; whatever it had pending is gone
		case x < 9 && t == nil:
			// The reader is down long: the server purges files it has
			// not read.
			if w.purged < w.file && w.rng.IntN(8) == 0 {
				w.purged++
			}
		default:
			if t == nil {
				start()
				continue
			}
			if next < len(w.log) && w.log[next].file < w.purged {
				t = nil // the server answers the dump with error 1236; the next term starts over
				continue
			}
			if x < 16 && next < len(w.log) {
				e := w.log[next]
				if next == 0 || w.log[next-1].file != e.file {
					_ = t.handle(ctx, &replication.BinlogEvent{Header: header(replication.ROTATE_EVENT), Event: &replication.RotateEvent{NextLogName: []byte(simFile(e.file)), Position: 4}}, false)
				}
				if err := t.handle(ctx, e.ev, false); err != nil {
					w.fail("handle: %v", err)
				}
				next++
				// The stream's step after an event: a full batch recorded,
				// the position saved now and then.
				if t.after(ctx, false) != nil {
					t = nil
				}
				continue
			}
			// The flush timer, at whatever event the stream is at.
			if t.read.File != "" && t.flush(ctx) != nil {
				t = nil
			}
		}
	}
	// Drain: the store comes back, nothing more is purged, the reader
	// reads to the end.
	w.storeBad, w.recordBad = false, false
	for range 20 {
		if t == nil {
			start()
			continue
		}
		for next < len(w.log) {
			if w.log[next].file < w.purged {
				t = nil
				break
			}
			e := w.log[next]
			if next == 0 || w.log[next-1].file != e.file {
				_ = t.handle(ctx, &replication.BinlogEvent{Header: header(replication.ROTATE_EVENT), Event: &replication.RotateEvent{NextLogName: []byte(simFile(e.file)), Position: 4}}, false)
			}
			_ = t.handle(ctx, e.ev, false)
			next++
		}
		if t != nil && t.flush(ctx) == nil {
			break
		}
		t = nil
	}
	for id, at := range w.commitAt {
		if at >= 0 && !w.recorded[id] && !w.lossOK[id] {
			w.fail("dead letter %s committed at event %d was never recorded", id, at)
		}
	}
	return w.problems
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestSimulation(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		if p := simulate(seed, 400); len(p) > 0 {
			t.Fatalf("seed %d: %v", seed, p)
		}
	}
}

func TestSimulationFindsPlantedBugs(t *testing.T) {
	for _, c := range []struct {
		name string
		flag *bool
	}{
		{"the position saved before the records", &planted.saveBeforeRecord},
		{"a failed batch dropped", &planted.dropOnFailure},
		{"a position saved mid-transaction (an event skipped after a takeover)", &planted.saveMidTransaction},
		{"a logged ROLLBACK taken for a commit", &planted.recordRollbacks},
		{"the periodic save taken while read dead letters wait to be recorded", &planted.saveWhilePending},
	} {
		t.Run(c.name, func(t *testing.T) {
			*c.flag = true
			defer func() { *c.flag = false }()
			for seed := range uint64(300) {
				if p := simulate(seed, 400); len(p) > 0 {
					t.Logf("caught by seed %d: %s", seed, p[0])
					return
				}
			}
			t.Fatal("no seed of 300 caught it")
		})
	}
}

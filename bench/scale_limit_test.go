package bench

// The limit storm (issue 50): the same storm BenchmarkScale gives mend (the
// same dead letters over the same queues, the same host tables, the same
// server, in the same process, alternated with mend's runs), handled by the
// simplest correct implementation of the same obligations in the fewest
// round trips: record each dead letter durably (so the DLQ message could be
// acknowledged), settle each batch without overwriting a protected outcome,
// finish its fan-out with the RequestLogs the gateway reads, and publish one
// wake-up per queue naming its smallest live batch; everything idempotent.
// What it leaves out is what mend's design adds on top of those
// obligations: no per-queue fence (one process, each queue handled by one
// worker at a time), no event log (one row per dead letter with a done
// flag), no per-record attempts or backoff. mend's storm is reported as a
// ratio to it, so a busy machine moves both sides together.
//
// It is written from the schema and the fact sheet, not from storage/ or
// host/, as the other limits are (limit_test.go), and like mend it polls:
// every interval (mend run's, the same as the replicas') it lists the queues
// with work and hands each to one of its workers (as many as mend's
// replicas have in all), which drains the queue in pages:
//
//  1. mend's database: the page of the queue's undone dead letters
//     (LimitPage);
//  2. the application database: one read of the page's batches (LimitRead),
//     then one packet that moves every batch the decision table fails
//     (state-guarded, version bumped, so any host CAS from the old version
//     loses), writes and deletes their membership rows, finishes the
//     fan-out of every terminal batch of the page and answers with the
//     members as they now are and the queue's smallest live batch
//     (LimitSettle);
//  3. the queue database: every RequestLog and the wake-up in one INSERT
//     (LimitPublish);
//  4. mend's database: the page's dead letters marked done (LimitDone), only
//     after the wake-up is durable, so a crash before it repeats a page whose
//     second pass changes nothing and whose publishes coalesce by ID.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// limitStormTable holds the limit's record of each dead letter: its
// identity (the queue and the source key, the same SHA-256 mend keys by),
// the target batch, the snapshot a repair needs once the DLQ row is
// collected, and whether it is done.
const limitStormTable = `CREATE TABLE IF NOT EXISTS bench_limit_dl (
	queue VARBINARY(1020) NOT NULL,
	source_key BINARY(32) NOT NULL,
	batch_id VARBINARY(1020) NOT NULL,
	payload BLOB NOT NULL,
	failure_count INT NOT NULL,
	last_error TEXT NOT NULL,
	done TINYINT NOT NULL DEFAULT 0,
	PRIMARY KEY (queue, source_key),
	KEY bench_limit_dl_undone (done, queue)
) ENGINE=InnoDB`

// One statement per page of deliveries: a duplicate is a no-op that keeps
// the first writer's row (no INSERT IGNORE: it would hide truncation).
const limitStormIntake = `-- name: LimitIntake
INSERT INTO bench_limit_dl (queue, source_key, batch_id, payload, failure_count, last_error) VALUES `

const limitStormIntakeTail = ` ON DUPLICATE KEY UPDATE queue = queue`

const limitStormQueues = `-- name: LimitQueues
SELECT DISTINCT queue FROM bench_limit_dl WHERE done = 0`

const limitStormPage = `-- name: LimitPage
SELECT source_key, batch_id FROM bench_limit_dl WHERE done = 0 AND queue = ? LIMIT 500`

const limitStormRead = `-- name: LimitRead
SELECT CAST(id AS BINARY), state, contains FROM batch WHERE queue = ? AND id IN (%s)`

// limitStormSettle: the page's writes on the application database in one
// transaction (see the file comment). %[1]s is the list of batches to fail,
// %[2]s of their members, %[3]s of all the page's members, %[4]s the
// fan-out of the batches already terminal when read (limitStormFinish). The fan-out of the batches to fail runs only if every one of
// them moved (@moved = @want): a batch that left the pre-merge states in
// between keeps its members, and the next page reads it again.
const limitStormSettle = `-- name: LimitSettle
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
START TRANSACTION;
UPDATE batch SET state = 'failed', version = version + 1
WHERE queue = ? AND id IN (%[1]s) AND state IN ('creating', 'created', 'speculating') AND version < 2147483647;
SET @moved = ROW_COUNT(), @want = ?;
INSERT IGNORE INTO queue_batch_state (queue, state, batch_id)
SELECT queue, state, id FROM batch WHERE queue = ? AND id IN (%[1]s) AND state = 'failed';
DELETE FROM queue_batch_state WHERE queue = ? AND batch_id IN (%[1]s) AND state IN ('creating', 'created', 'speculating');
UPDATE request SET state = 'error', version = version + 1
WHERE queue = ? AND id IN (%[2]s) AND @moved = @want AND state NOT IN ('landed', 'error', 'cancelled') AND version BETWEEN 1 AND 2147483646;
%[4]s
SELECT @moved = @want;
SELECT CAST(id AS BINARY), state, version FROM request WHERE queue = ? AND id IN (%[3]s);
SELECT MIN(CAST(b.id AS BINARY)) FROM queue_batch_state m JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id
WHERE m.queue = ? AND m.state IN ('created', 'speculating', 'merging', 'cancelling')
	AND b.state IN ('created', 'speculating', 'merging', 'cancelling')
	AND CAST(b.id AS BINARY) = CAST(m.batch_id AS BINARY) AND CAST(b.queue AS BINARY) = CAST(? AS BINARY);
COMMIT`

// The fan-out of batches already terminal when read: their members move to
// the batch's own outcome (landed, error, cancelled), never out of another
// terminal state.
const limitStormFinish = `UPDATE request SET state = ?, version = version + 1
WHERE queue = ? AND id IN (%s) AND state NOT IN ('landed', 'error', 'cancelled') AND version BETWEEN 1 AND 2147483646;`

const limitStormDone = `-- name: LimitDone
UPDATE bench_limit_dl SET done = 1 WHERE queue = ? AND source_key IN (%s)`

// limitStormStats is what the limit storm's workers report.
type limitStormStats struct {
	mu     sync.Mutex
	firstW map[string]time.Time
	lastW  time.Time
	woken  int64
	done   atomic.Int64
	passes atomic.Int64
	want   int64
	all    chan struct{}
	once   sync.Once
}

// limitStorm is the limit's reconciler: one process, workers conns to each
// database (all one in BenchmarkScale).
type limitStorm struct {
	mendDB, appDB, queueDB *sql.DB
	workers                int
	interval               time.Duration
	st                     *limitStormStats
	nowMS                  func() int64
}

// pass lists the queues with work and drains each on one of the workers.
func (l *limitStorm) pass(ctx context.Context) error {
	l.st.passes.Add(1)
	rows, err := l.mendDB.QueryContext(ctx, limitStormQueues)
	if err != nil {
		return err
	}
	var queues []string
	for rows.Next() {
		var q []byte
		if err := rows.Scan(&q); err != nil {
			rows.Close()
			return err
		}
		queues = append(queues, string(q))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	work := make(chan string)
	errs := make([]error, l.workers)
	var wg sync.WaitGroup
	for w := range l.workers {
		wg.Go(func() {
			for q := range work {
				if err := l.drain(ctx, q); err != nil && errs[w] == nil {
					errs[w] = fmt.Errorf("limit storm: queue %s: %w", q, err)
				}
			}
		})
	}
	for _, q := range queues {
		work <- q
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// run passes every interval until ctx ends, the first at once, as mend's
// reconciler does.
func (l *limitStorm) run(ctx context.Context) error {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		if err := l.pass(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type limitStormItem struct {
	key   []byte
	batch string
}

// drain repairs q's undone dead letters page by page until none is left or
// a page settles nothing (a batch mend would wait on: never in the storm).
func (l *limitStorm) drain(ctx context.Context, q string) error {
	for {
		page, err := l.page(ctx, q)
		if err != nil || len(page) == 0 {
			return err
		}
		n, err := l.repair(ctx, q, page)
		if err != nil || n == 0 {
			return err
		}
	}
}

func (l *limitStorm) page(ctx context.Context, q string) ([]limitStormItem, error) {
	rows, err := l.mendDB.QueryContext(ctx, limitStormPage, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []limitStormItem
	for rows.Next() {
		var it limitStormItem
		var batch []byte
		if err := rows.Scan(&it.key, &batch); err != nil {
			return nil, err
		}
		it.batch = string(batch)
		out = append(out, it)
	}
	return out, rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// limitStormTerminal maps a terminal batch state to its members' target.
var limitStormTerminal = map[string]string{"failed": "error", "succeeded": "landed", "cancelled": "cancelled"}

// repair settles and wakes one page of q and returns how many of its dead
// letters it finished.
func (l *limitStorm) repair(ctx context.Context, q string, page []limitStormItem) (int, error) {
	// The page's batches as they are now, byte-exact.
	batches := make([]string, 0, len(page))
	for _, it := range page {
		if !slices.Contains(batches, it.batch) {
			batches = append(batches, it.batch)
		}
	}
	type batchRow struct {
		state   string
		members []string
	}
	read := map[string]batchRow{}
	rows, err := l.appDB.QueryContext(ctx, fmt.Sprintf(limitStormRead, placeholders(len(batches))), append([]any{q}, anys(batches)...)...)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var id, contains []byte
		var r batchRow
		if err := rows.Scan(&id, &r.state, &contains); err != nil {
			rows.Close()
			return 0, err
		}
		if err := json.Unmarshal(contains, &r.members); err != nil {
			rows.Close()
			return 0, fmt.Errorf("batch %q: contains: %w", id, err)
		}
		// The host's collation matches other spellings; only the exact
		// one is this dead letter's batch.
		if slices.Contains(batches, string(id)) {
			read[string(id)] = r
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	rows.Close()

	// Decide per batch: fail the pre-merge ones, finish the terminal ones,
	// leave merging and cancelling (a merge may be in flight) for later.
	var toFail, failMembers, all []string
	finish := map[string][]string{} // target state: members
	settled := map[string]bool{}    // batches whose dead letters are done after this page
	for _, id := range batches {
		r, ok := read[id]
		switch {
		case !ok:
			settled[id] = true // nothing to repair
		case r.state == "creating" || r.state == "created" || r.state == "speculating":
			toFail = append(toFail, id)
			failMembers = append(failMembers, r.members...)
		case limitStormTerminal[r.state] != "":
			finish[limitStormTerminal[r.state]] = append(finish[limitStormTerminal[r.state]], r.members...)
			settled[id] = true
		}
		if ok {
			all = append(all, r.members...)
		}
	}
	none := []string{"\x00"} // an IN list matches nothing with this
	orNone := func(xs []string) []string {
		if len(xs) == 0 {
			return none
		}
		return xs
	}
	toFailL, failL, allL := orNone(toFail), orNone(failMembers), orNone(all)
	var finishSQL strings.Builder
	var finishArgs []any
	for _, target := range []string{"error", "landed", "cancelled"} {
		if ms := finish[target]; len(ms) > 0 {
			fmt.Fprintf(&finishSQL, limitStormFinish+"\n", placeholders(len(ms)))
			finishArgs = append(append(finishArgs, target, q), anys(ms)...)
		}
	}
	text := fmt.Sprintf(limitStormSettle, placeholders(len(toFailL)), placeholders(len(failL)), placeholders(len(allL)), finishSQL.String())
	args := append([]any{q}, anys(toFailL)...)
	args = append(args, len(toFail), q)
	args = append(args, anys(toFailL)...)
	args = append(args, q)
	args = append(args, anys(toFailL)...)
	args = append(args, q)
	args = append(args, anys(failL)...)
	args = append(args, finishArgs...)
	args = append(args, q)
	args = append(args, anys(allL)...)
	args = append(args, q, q)
	conn, err := l.appDB.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	type member struct {
		state   string
		version int64
	}
	members := map[string]member{}
	var allMoved bool
	var wake []byte
	err = packet(ctx, conn, text, args, func(rows *sql.Rows) error {
		if err := scanOne(rows, &allMoved); err != nil {
			return err
		}
		if !rows.NextResultSet() {
			return errors.New("limit storm: the members' answer is missing")
		}
		for rows.Next() {
			var id []byte
			var m member
			if err := rows.Scan(&id, &m.state, &m.version); err != nil {
				return err
			}
			members[string(id)] = m
		}
		if !rows.NextResultSet() {
			return errors.New("limit storm: the wake target's answer is missing")
		}
		return scanOne(rows, &wake)
	})
	if err != nil {
		return 0, err
	}
	if allMoved {
		for _, id := range toFail {
			settled[id] = true
		}
	}
	if len(settled) == 0 {
		return 0, nil
	}

	// Every RequestLog the page's fan-out owes (a member in its batch's
	// target state; the gateway's winner rule makes a repeat harmless) and
	// the one wake-up, in one INSERT.
	var msgs []limitMessage
	published := map[string]bool{}
	for _, id := range batches {
		r, ok := read[id]
		if !ok || !settled[id] {
			continue
		}
		target := limitStormTerminal[r.state]
		if target == "" {
			target = "error" // failed by this page
		}
		for _, rid := range r.members {
			m, ok := members[rid]
			if !ok || m.state != target || published[rid] {
				continue
			}
			published[rid] = true
			payload, err := json.Marshal(map[string]any{"request_id": rid, "queue": q, "timestamp_ms": l.nowMS(), "type": "status",
				"status": target, "event": "", "request_version": m.version, "last_error": "storm", "metadata": map[string]string{"dlq.original_topic": "speculate"}})
			if err != nil {
				return 0, err
			}
			msgs = append(msgs, limitMessage{topic: "log", partition: rid, id: rid + "/" + target, payload: payload})
		}
	}
	var done [][]byte
	for _, it := range page {
		if settled[it.batch] {
			done = append(done, it.key)
		}
	}
	if wake != nil {
		// Named by the page's first dead letter: a crash before LimitDone
		// repeats the page, and the repeat coalesces with this one.
		payload, _ := json.Marshal(map[string]string{"id": string(wake), "queue": q})
		msgs = append(msgs, limitMessage{topic: "speculate", partition: q, id: "limit/wake/" + hex.EncodeToString(done[0]), payload: payload})
	}
	if len(msgs) > 0 {
		now := l.nowMS()
		var b strings.Builder
		b.WriteString("-- name: LimitPublish\n" + limitPublishSQL)
		pargs := make([]any, 0, 7*len(msgs))
		for i, m := range msgs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(limitPublishRow)
			pargs = append(pargs, m.topic, m.id, m.payload, m.meta, m.partition, now, now)
		}
		b.WriteString(limitPublishTail)
		if _, err := l.queueDB.ExecContext(ctx, b.String(), pargs...); err != nil {
			return 0, err
		}
	}
	if _, err := l.mendDB.ExecContext(ctx, fmt.Sprintf(limitStormDone, placeholders(len(done))), append([]any{q}, anys(done)...)...); err != nil {
		return 0, err
	}
	if wake != nil {
		now := time.Now()
		l.st.mu.Lock()
		if _, ok := l.st.firstW[q]; !ok {
			l.st.firstW[q] = now
		}
		l.st.lastW = now
		l.st.woken++
		l.st.mu.Unlock()
	}
	if n := l.st.done.Add(int64(len(done))); n >= l.st.want {
		l.st.once.Do(func() { close(l.st.all) })
	}
	return len(done), nil
}

// limitStormRecord is what the limit's intake writes for one delivery,
// decoded from its payload as mend's intake decodes a speculate dead letter.
func limitStormRecord(d dlq.Delivery) (args []any, err error) {
	b, err := sqtest.DecodeBatchID(d.Payload)
	if err != nil {
		return nil, err
	}
	key := d.Source.Key()
	return []any{d.Source.Queue, key[:], b.ID, d.Payload, d.FailureCount, d.LastError}, nil
}

// limitScaleRun runs the limit storm in db (BenchmarkScale's world) with
// the same sizes, interval and intake as mend's storm, and reports it under
// the metric names of mend's with the prefix "limit-". workers is the
// number of queues it repairs at once: mend's replicas' in all.
func limitScaleRun(b *testing.B, db *mysqltest.DB, cfg scaleConfig, workers int, prefix string) {
	b.StopTimer()
	ctx := context.Background()
	raw := db.SQL(b)
	if _, err := raw.ExecContext(ctx, limitStormTable); err != nil {
		b.Fatal(err)
	}
	seedStart := time.Now()
	seedStorm(b, raw, cfg, prefix)
	deliveries := stormDeliveries(cfg, prefix)
	b.Logf("mend-bench: scale seeded-storm for %s in %s", b.Name(), time.Since(seedStart).Round(time.Millisecond))
	b.ReportMetric(quiesce(b, raw).Seconds(), "storm-purge-wait-s")

	cnt, intakeCnt := newCounter(), newCounter()
	pool := openLimitPool(b, cnt.DSN(b, db.DSN), nil)
	pool.SetMaxIdleConns(2 * workers)
	intakePool := openLimitPool(b, intakeCnt.DSN(b, db.DSN), nil)
	intakePool.SetMaxIdleConns(cfg.IntakeConns)
	st := &limitStormStats{firstW: map[string]time.Time{}, want: int64(cfg.Storm), all: make(chan struct{})}
	l := &limitStorm{mendDB: pool, appDB: pool, queueDB: pool, workers: workers, interval: cfg.Interval, st: st,
		nowMS: func() int64 { return time.Now().UnixMilli() }}

	firstD := make([]atomic.Int64, cfg.StormQueues)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	procs := findServerProcs(b, raw, db.DSN)
	procBefore := procs.read()
	cpuBefore := readCPU()
	b.StartTimer()
	stormStart := time.Now()
	go func() { runErr <- l.run(runCtx) }()
	var next atomic.Int64
	errs := make([]error, cfg.IntakeConns)
	intakeTook := measure(cfg.IntakeConns, func(w int) {
		for {
			from := int(next.Add(int64(cfg.IntakeBatch)) - int64(cfg.IntakeBatch))
			if from >= cfg.Storm {
				return
			}
			page := deliveries[from:min(from+cfg.IntakeBatch, cfg.Storm)]
			now := time.Now().UnixNano()
			var text strings.Builder
			text.WriteString(limitStormIntake)
			args := make([]any, 0, 6*len(page))
			for i, d := range page {
				firstD[(from+i)%cfg.StormQueues].CompareAndSwap(0, now)
				a, err := limitStormRecord(d)
				if err != nil {
					errs[w] = err
					return
				}
				if i > 0 {
					text.WriteString(", ")
				}
				text.WriteString("(?, ?, ?, ?, ?, ?)")
				args = append(args, a...)
			}
			text.WriteString(limitStormIntakeTail)
			if _, err := intakePool.ExecContext(ctx, text.String(), args...); err != nil {
				errs[w] = err
				return
			}
		}
	})
	failOn(b, errs)
	drained := false
	giveUp := time.NewTimer(cfg.Bound)
	defer giveUp.Stop()
	select {
	case <-st.all:
		drained = true
	case err := <-runErr:
		b.Fatalf("limit storm: %v", err)
	case <-giveUp.C:
		b.Logf("mend-bench: scale gave-up %s: the limit storm did not drain within %s", b.Name(), cfg.Bound)
	}
	b.StopTimer()
	cpuDuring := readCPU().since(cpuBefore)
	procDuring := procs.read().since(procBefore)
	cancel()
	if err := <-runErr; err != nil {
		b.Fatalf("limit storm: %v", err)
	}
	reportProcCPU(b, cpuDuring, procDuring)

	st.mu.Lock()
	firstWake, missing := firstWakes(st.firstW, firstD, cfg, prefix)
	lastW, woken := st.lastW, st.woken
	st.mu.Unlock()
	if drained {
		b.ReportMetric(lastW.Sub(stormStart).Seconds(), "storm-drain-s")
	}
	b.ReportMetric(boolMetric(drained), "storm-drained")
	b.ReportMetric(float64(cfg.Storm)/intakeTook.Seconds(), "storm-intake/s")
	b.ReportMetric(intakeTook.Seconds(), "storm-intake-s")
	b.ReportMetric(float64(woken), "storm-woken")
	b.ReportMetric(float64(missing), "storm-queues-unwoken")
	if len(firstWake) > 0 {
		b.ReportMetric(firstWake[len(firstWake)/2].Seconds(), "storm-firstwake-p50-s")
		b.ReportMetric(firstWake[len(firstWake)-1].Seconds(), "storm-firstwake-max-s")
	}
	b.ReportMetric(float64(st.passes.Load()), "storm-passes")
	storm, intake := cnt.snapshot(), intakeCnt.snapshot()
	b.ReportMetric(float64(total(storm))/float64(cfg.Storm), "storm-roundtrips/record")
	b.ReportMetric(float64(total(intake))/float64(cfg.Storm), "storm-intake-roundtrips/record")
	reportPhases(b, storm, float64(cfg.Storm), cnt.waitSnapshot(), intakeCnt.waitSnapshot())
	b.Logf("mend-bench: scale storm-mix %s: %s per dead letter", b.Name(), mixString(storm, float64(cfg.Storm)))
	if drained {
		checkLimitStorm(b, raw, cfg, prefix)
	}
}

// stormDeliveries are the storm's dead letters: dead letter i is batch
// d<i> of queue <prefix><i mod queues>, dead-lettered from speculate.
func stormDeliveries(cfg scaleConfig, prefix string) []dlq.Delivery {
	deliveries := make([]dlq.Delivery, cfg.Storm)
	for i := range deliveries {
		q := stormQueue(prefix, i%cfg.StormQueues)
		batch := fmt.Sprintf("%s/batch/d%06d", q, i)
		deliveries[i] = dlq.Delivery{Source: mend.SourceID{Queue: q, Topic: "speculate_dlq", Partition: q, MessageID: batch},
			Payload: []byte(`{"id":"` + batch + `","queue":"` + q + `"}`), FailureCount: 1, LastError: "storm"}
	}
	return deliveries
}

func boolMetric(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// checkLimitStorm fails b unless the limit did what mend's storm is held
// to: every dead letter done, every storm batch failed with its request in
// error and its RequestLog published, and every queue woken by a message
// the real speculate consumer accepts, naming the queue's live batch.
func checkLimitStorm(b *testing.B, raw *sql.DB, cfg scaleConfig, prefix string) {
	ctx := context.Background()
	var undone, unfailed, unerrored, logs int
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM bench_limit_dl WHERE queue LIKE ? AND done = 0", prefix+"%").Scan(&undone); err != nil {
		b.Fatal(err)
	}
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM batch WHERE queue LIKE ? AND id NOT LIKE '%/z-live' AND state <> 'failed'", prefix+"%").Scan(&unfailed); err != nil {
		b.Fatal(err)
	}
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM request WHERE queue LIKE ? AND id NOT LIKE '%/live' AND state <> 'error'", prefix+"%").Scan(&unerrored); err != nil {
		b.Fatal(err)
	}
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM queue_messages WHERE topic = 'log' AND partition_key LIKE ?", prefix+"%").Scan(&logs); err != nil {
		b.Fatal(err)
	}
	if undone != 0 || unfailed != 0 || unerrored != 0 || logs != cfg.Storm {
		b.Fatalf("limit storm: %d dead letters undone, %d batches not failed, %d requests not in error, %d RequestLogs (want 0, 0, 0, %d)", undone, unfailed, unerrored, logs, cfg.Storm)
	}
	// A queue drained while its dead letters are still arriving is woken
	// with its smallest live batch then, which may be the batch of a dead
	// letter not recorded yet (the intake's pages commit out of order);
	// that page wakes it again. So every wake-up names a batch of its
	// queue, and each queue's last (a queue's wake-ups are sent one after
	// another, in offset order) names the live batch.
	rows, err := raw.QueryContext(ctx, "SELECT partition_key, payload, metadata FROM queue_messages WHERE topic = 'speculate' AND partition_key LIKE ? ORDER BY `offset`", prefix+"%")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	woken := map[string]bool{} // queue: its last wake-up so far names the live batch
	for rows.Next() {
		var q string
		var payload, meta []byte
		if err := rows.Scan(&q, &payload, &meta); err != nil {
			b.Fatal(err)
		}
		id, err := sqtest.DecodeBatchID(payload)
		if err != nil {
			b.Fatalf("limit storm: wake-up of %s: %v", q, err)
		}
		if _, err := sqtest.Metadata(meta); err != nil {
			b.Fatalf("limit storm: wake-up of %s: %v", q, err)
		}
		if id.Queue != q || !bytes.HasPrefix([]byte(id.ID), []byte(q+"/batch/")) {
			b.Fatalf("limit storm: wake-up of %s names %q of %q, not a batch of its queue", q, id.ID, id.Queue)
		}
		woken[q] = bytes.Equal([]byte(id.ID), []byte(q+"/batch/z-live"))
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if len(woken) != cfg.StormQueues {
		b.Fatalf("limit storm: %d of %d queues woken", len(woken), cfg.StormQueues)
	}
	for q, live := range woken {
		if !live {
			b.Fatalf("limit storm: the last wake-up of %s does not name its live batch", q)
		}
	}
}

// procCPU is CPU time (user + system, clock ticks) by process: this
// process, the benchmark's database server (its mysqld or mariadbd, in a
// container or not) and Docker's userland port proxy in front of it.
type procCPU struct{ self, server, proxy float64 }

// serverProcs finds the processes of the server raw is connected to through
// dsn's address: the mysqld or mariadbd whose container (cgroup) is named by
// the server's @@hostname, or which listens on its port; and the
// docker-proxy that forwards dsn's port. Other test servers on the machine
// are left out.
type serverProcs struct{ server, proxy []string }

func findServerProcs(b *testing.B, raw *sql.DB, dsn string) serverProcs {
	b.Helper()
	var hostname string
	var port int
	var out serverProcs
	if err := raw.QueryRow("SELECT @@hostname, @@port").Scan(&hostname, &port); err != nil {
		b.Logf("mend-bench: the server's processes are not measured: %v", err)
		return out
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	_, hostPort, _ := net.SplitHostPort(cfg.Addr)
	local, _ := os.Hostname()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := "/proc/" + e.Name() + "/"
		comm, err := os.ReadFile(dir + "comm")
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(dir + "cmdline")
		args := strings.Split(string(cmdline), "\x00")
		name := strings.TrimSpace(string(comm))
		if strings.HasPrefix(name, "ld-linux") {
			// scripts/mysql-rootfs.sh runs the local backend's server
			// through its root file system's loader: the process is named
			// after the loader, the server is an argument.
			for _, a := range args {
				if base := filepath.Base(a); base == "mysqld" || base == "mariadbd" {
					name = base
					break
				}
			}
		}
		switch name {
		case "mysqld", "mariadbd":
			// A container's server reports the container's ID as its
			// host name (and listens on its own port 3306, as others do);
			// a local one shares this machine's name and has a port of its
			// own.
			cgroup, _ := os.ReadFile(dir + "cgroup")
			if hostname != local && strings.Contains(string(cgroup), hostname) ||
				hostname == local && slices.Contains(args, "--port="+strconv.Itoa(port)) {
				out.server = append(out.server, e.Name())
			}
		case "docker-proxy":
			if i := slices.Index(args, "-host-port"); i >= 0 && i+1 < len(args) && args[i+1] == hostPort {
				out.proxy = append(out.proxy, e.Name())
			}
		}
	}
	return out
}

func (p serverProcs) read() procCPU {
	out := procCPU{self: procTicks("/proc/self/stat")}
	for _, pid := range p.server {
		out.server += procTicks("/proc/" + pid + "/stat")
	}
	for _, pid := range p.proxy {
		out.proxy += procTicks("/proc/" + pid + "/stat")
	}
	return out
}

// procTicks reads utime + stime from a /proc/<pid>/stat file.
func procTicks(path string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return u + k
}

func (p procCPU) since(before procCPU) procCPU {
	return procCPU{self: p.self - before.self, server: p.server - before.server, proxy: p.proxy - before.proxy}
}

// reportProcCPU reports, as shares of the machine's busy CPU time during
// the storm, this process's (the reconcilers and the intake workers), the
// server's and the port proxy's. A process that is not this one's child
// is seen only while it runs: a server that restarted in between would
// show less.
func reportProcCPU(b *testing.B, machine cpuTimes, p procCPU) {
	busy := machine.total - machine.idle - machine.steal
	if busy <= 0 {
		return
	}
	b.ReportMetric(100*p.self/busy, "storm-cpu-self-%")
	b.ReportMetric(100*p.server/busy, "storm-cpu-server-%")
	b.ReportMetric(100*p.proxy/busy, "storm-cpu-proxy-%")
	b.ReportMetric(p.self/clockTicks, "storm-cpu-self-s")
	b.ReportMetric(p.server/clockTicks, "storm-cpu-server-s")
	b.ReportMetric(p.proxy/clockTicks, "storm-cpu-proxy-s")
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// this project runs on.
const clockTicks = 100

// stormPhases groups the statements of a storm's reconcilers by what they
// do for a record: the fence (lease statements), mend's record keeping
// (the due listings, the records' events and projections), the host's
// settle (batches, membership, requests) and the wake-up (publishing), and
// transaction control (COMMIT, ROLLBACK, session settings).
func stormPhase(kind string) string {
	switch {
	case strings.HasPrefix(kind, "Lease"):
		return "fence"
	case strings.HasPrefix(kind, "Record"), strings.HasPrefix(kind, "Queue"), kind == "LimitQueues", kind == "LimitPage", kind == "LimitDone":
		return "records"
	case strings.HasPrefix(kind, "Batch"), strings.HasPrefix(kind, "Membership"), strings.HasPrefix(kind, "Requests"),
		kind == "LiveBatches", kind == "LimitRead", kind == "LimitSettle":
		return "settle"
	case kind == "Publish", kind == "LimitPublish":
		return "wake"
	}
	return "txn"
}

// reportPhases reports the round trips per record of each phase and the
// seconds the reconcilers' connections waited for replies in each (waits,
// by kind), and the intake's (intakeWaits): summed over connections, so
// they add up to more than the storm's wall time when work overlaps.
func reportPhases(b *testing.B, mix map[string]int64, records float64, waits, intakeWaits map[string]time.Duration) {
	by := map[string]int64{}
	for k, v := range mix {
		by[stormPhase(k)] += v
	}
	waited := map[string]time.Duration{}
	for k, v := range waits {
		waited[stormPhase(k)] += v
	}
	for _, ph := range []string{"fence", "records", "settle", "wake", "txn"} {
		b.ReportMetric(float64(by[ph])/records, "storm-rt-"+ph+"/record")
		b.ReportMetric(waited[ph].Seconds(), "storm-wait-"+ph+"-s")
	}
	var intake time.Duration
	for _, v := range intakeWaits {
		intake += v
	}
	b.ReportMetric(intake.Seconds(), "storm-wait-intake-s")
}

// firstWakes returns, sorted, each storm queue's time from its first
// delivery (firstD, unix nanos) to its first wake-up (firstW), and how many
// queues were never woken. The caller holds the lock firstW needs.
func firstWakes(firstW map[string]time.Time, firstD []atomic.Int64, cfg scaleConfig, prefix string) (out []time.Duration, missing int) {
	for q := range cfg.StormQueues {
		w, ok := firstW[stormQueue(prefix, q)]
		if !ok {
			missing++
			continue
		}
		out = append(out, w.Sub(time.Unix(0, firstD[q].Load())))
	}
	slices.Sort(out)
	return out, missing
}

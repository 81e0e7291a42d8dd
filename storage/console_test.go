package storage_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// setState moves a record to state by SQL, with next_attempt_at set by
// nextAt (an SQL expression, or NULL), as the planner's writes leave it.
func setState(t *testing.T, b *bundle, id mend.RecordID, state mend.State, nextAt string) {
	t.Helper()
	if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET state = ?, next_attempt_at = "+nextAt+", updated_at = NOW(6), state_since = NOW(6) WHERE record_id = ?",
		string(state), id[:]); err != nil {
		t.Fatal(err)
	}
}

// consoleWorld seeds queues in every state the status numbers tell apart:
// due for an hour, in backoff, waiting, settled, parked, done; a lease-only
// queue; slot leases without records; a queue whose name looks like a slot
// lease but has records (a queue, as mend status counts it).
func consoleWorld(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	b := setup(t)
	mk := func(q string, n int) []mend.Record {
		var out []mend.Record
		for i := range n {
			out = append(out, b.create(t, src(q, fmt.Sprintf("m%d", i))))
		}
		return out
	}
	a := mk("a/due", 3)
	if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET next_attempt_at = next_attempt_at - INTERVAL 1 HOUR, created_at = created_at - INTERVAL 2 HOUR WHERE queue = 'a/due'"); err != nil {
		t.Fatal(err)
	}
	setState(t, b, a[2].ID, mend.StateDone, "NULL")
	bo := mk("b/backoff", 2)
	setState(t, b, bo[0].ID, mend.StatePending, "NOW(6) + INTERVAL 10 MINUTE")
	setState(t, b, bo[1].ID, mend.StateWaiting, "NOW(6) + INTERVAL 30 MINUTE")
	c := mk("c/mixed", 4)
	setState(t, b, c[0].ID, mend.StateSettled, "NOW(6) - INTERVAL 5 SECOND")
	setState(t, b, c[1].ID, mend.StateParked, "NULL")
	setState(t, b, c[2].ID, mend.StateDone, "NULL")
	setState(t, b, c[3].ID, mend.StateDone, "NULL")
	mk("mend-subscribe/g/replica/02", 1) // a queue: it has records
	for _, l := range []string{"d/lease-only", "mend-reconcile/replica/00", "mend-reconcile/replica/01", "mend-subscribe/g/replica/00"} {
		if _, err := b.store.LeaseAcquire(ctx, l, "h", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.LeaseAcquire(ctx, "a/due", "h", time.Minute); err != nil {
		t.Fatal(err)
	}
	return b
}

// allNames pages through ConsoleQueueNames limit names at a time.
func allNames(t *testing.T, store *storage.DB, limit int) (names []string, pages int) {
	t.Helper()
	after := ""
	for {
		page, more, err := store.ConsoleQueueNames(context.Background(), after, limit)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page) > limit || (more && len(page) != limit) {
			t.Fatalf("page %d after %q = %q more %v; want %d names when more", pages, after, page, more, limit)
		}
		names = append(names, page...)
		if !more {
			return names, pages
		}
		after = page[len(page)-1]
		if pages > 100 {
			t.Fatal("ConsoleQueueNames does not end")
		}
	}
}

// The console's queues and their numbers are mend status's (Status with
// OldestOpen) on the same data, whatever the page size.
func TestConsoleAgreesWithStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := consoleWorld(t)
	st, err := b.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range st {
		want = append(want, s.Queue)
	}
	if len(want) != 5 || slices.Contains(want, "mend-reconcile/replica/00") || !slices.Contains(want, "mend-subscribe/g/replica/02") {
		t.Fatalf("Status lists %q; the world is built wrong", want)
	}
	for _, limit := range []int{1, 2, 4, 5, 6, 50} {
		t.Run(fmt.Sprintf("pages of %d", limit), func(t *testing.T) {
			got, pages := allNames(t, b.store, limit)
			if !slices.Equal(got, want) {
				t.Fatalf("names = %q; mend status lists %q", got, want)
			}
			if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
				t.Errorf("%d pages of %d; want %d (the last full page says no more)", pages, limit, wantPages)
			}
		})
	}
	cs, problems := disagreements(t, b, st)
	for _, p := range problems {
		t.Error(p)
	}
	// And the numbers are the world's, so agreeing is not agreeing on nothing.
	if a := cs[0]; a.Counts[mend.StatePending] != 2 || a.Counts[mend.StateDone] != 1 || a.Due != 2 || a.OldestDue < 59*time.Minute || a.OldestOpen < 119*time.Minute {
		t.Errorf("a/due = %+v; want 2 pending due for an hour, 1 done, open for two hours", a)
	}
	if bo := cs[1]; bo.Due != 0 || bo.OldestDue != 0 || bo.OldestOpen == 0 || bo.Counts[mend.StateWaiting] != 1 {
		t.Errorf("b/backoff = %+v; want nothing due, open, 1 waiting", bo)
	}
}

// The negative control: ConsoleQueueStatus with the number issue 30
// replaced (the oldest open record's age reported as the oldest due, what
// mend_oldest_due_seconds was before it) must disagree with mend status.
func TestConsoleAgreesWithStatusControl(t *testing.T) {
	ctx := context.Background()
	b := consoleWorld(t)
	st, err := b.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(storage.SQLConsoleQueueCounts, "MAX(TIMESTAMPDIFF(MICROSECOND, next_attempt_at, NOW(6)))", "MAX(TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)))", 1)
	if broken == storage.SQLConsoleQueueCounts {
		t.Fatal("the planted bug did not apply")
	}
	defer storage.SetConsoleQueueCountsSQL(broken)()
	if _, problems := disagreements(t, b, st); len(problems) == 0 {
		t.Error("the console reporting the oldest open record as the oldest due agrees with mend status: the agreement check misses it")
	}
}

// disagreements reads ConsoleQueueStatus for status's queues and lists
// where it differs from status (with OldestOpen filled in).
func disagreements(t *testing.T, b *bundle, st []storage.QueueStatus) ([]storage.QueueStatus, []string) {
	t.Helper()
	ctx := context.Background()
	oldest, err := b.store.OldestOpen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range st {
		st[i].OldestOpen = oldest[st[i].Queue]
		names = append(names, st[i].Queue)
	}
	cs, partial, err := b.store.ConsoleQueueStatus(ctx, names)
	if err != nil || partial {
		t.Fatalf("ConsoleQueueStatus = partial %v, %v", partial, err)
	}
	const slack = 5 * time.Second // the two reads' NOW(6) differ by their distance apart
	near := func(a, b time.Duration) bool { return a-b < slack && b-a < slack }
	var out []string
	for i, s := range st {
		c := cs[i]
		if c.Queue != s.Queue || !sameCounts(c.Counts, s.Counts) || c.Due != s.Due || !near(c.OldestDue, s.OldestDue) ||
			(c.OldestDue == 0) != (s.OldestDue == 0) || !near(c.OldestOpen, s.OldestOpen) || (c.Lease == nil) != (s.Lease == nil) ||
			(c.Lease != nil && c.Lease.Term != s.Lease.Term) {
			out = append(out, fmt.Sprintf("console %s: counts %v due %d oldest due %s oldest open %s lease %v\nstatus  %s: counts %v due %d oldest due %s oldest open %s lease %v",
				c.Queue, c.Counts, c.Due, c.OldestDue, c.OldestOpen, c.Lease, s.Queue, s.Counts, s.Due, s.OldestDue, s.OldestOpen, s.Lease))
		}
	}
	return cs, out
}

func sameCounts(a, b map[mend.State]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The per-page counts, the totals and the due queues read a bounded number
// of rows and say when they reached the bound, rather than undercount
// silently.
func TestConsoleBoundsReached(t *testing.T) {
	ctx := context.Background()
	b := consoleWorld(t)
	restore := storage.SetConsoleLimits(2, 2)
	defer restore()
	cs, partial, err := b.store.ConsoleQueueStatus(ctx, []string{"a/due", "c/mixed"})
	if err != nil || !partial {
		t.Errorf("ConsoleQueueStatus over 7 records with a bound of 2 = partial %v, %v; want partial", partial, err)
	}
	var n int64
	for _, c := range cs {
		for _, v := range c.Counts {
			n += v
		}
	}
	if n > 4 {
		t.Errorf("counted %d records with a bound of 2 per statement", n)
	}
	tot, err := b.store.ConsoleTotals(ctx)
	if err != nil || tot.Open != 2 || !slices.Contains(tot.Capped, "open") {
		t.Errorf("ConsoleTotals with a bound of 2 = %+v, %v; want open 2, capped", tot, err)
	}
	restore()
	tot, err = b.store.ConsoleTotals(ctx)
	if err != nil || tot.Open != 6 || tot.Due != 4 || tot.Parked != 1 || len(tot.Capped) != 0 {
		t.Errorf("ConsoleTotals = %+v, %v; want 6 open, 4 due, 1 parked, exact", tot, err)
	}
	due, more, err := b.store.ConsoleDueQueues(ctx, 3)
	if err != nil || !more || len(due) != 2 || due[0].Queue != "a/due" || due[0].Count != 2 || due[1].Queue != "c/mixed" {
		t.Errorf("ConsoleDueQueues(3) = %+v more %v, %v; want a/due (its 2 due records are the oldest), c/mixed, more", due, more, err)
	}
	due, more, err = b.store.ConsoleDueQueues(ctx, 10)
	if err != nil || more || len(due) != 3 || due[0].Queue != "a/due" || due[0].Age < 59*time.Minute {
		t.Errorf("ConsoleDueQueues(10) = %+v more %v, %v; want a/due (an hour), then the others, complete", due, more, err)
	}
}

// Repairs finished at given latencies within the hour, and older ones.
// The i-th finished ago+i ms before the first's base time, so the newest
// are the first of the list.
func seedRepairs(t *testing.T, b *bundle, queue string, latencies []time.Duration, ago time.Duration) {
	t.Helper()
	var base time.Time
	if err := b.db.SQL(t).QueryRow("SELECT NOW(6)").Scan(&base); err != nil {
		t.Fatal(err)
	}
	for i, l := range latencies {
		rec := b.create(t, src(queue, fmt.Sprintf("r%d-%d", ago, i)))
		fin := base.Add(-ago - time.Duration(i)*time.Millisecond)
		if _, err := b.db.SQL(t).Exec(`UPDATE mend_records SET state = 'done', next_attempt_at = NULL,
			updated_at = ?, failed_at = ? WHERE record_id = ?`, fin, fin.Add(-l), rec.ID[:]); err != nil {
			t.Fatal(err)
		}
	}
}

// The overview's latency is mend status's (RepairLatency) while the hour
// holds fewer repairs than the bound, and the newest repairs' beyond it.
func TestConsoleLatency(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	var ls []time.Duration
	for i := 1; i <= 20; i++ {
		ls = append(ls, time.Duration(i)*time.Second)
	}
	seedRepairs(t, b, "q1", ls[:10], time.Minute)
	seedRepairs(t, b, "q2", ls[10:], 2*time.Minute)
	seedRepairs(t, b, "q1", []time.Duration{time.Hour}, 2*time.Hour) // outside the window
	want, err := b.store.RepairLatency(ctx, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	act, err := b.store.ConsoleActivity(ctx, 60, []string{"q1", "q2", "q3"})
	if err != nil {
		t.Fatal(err)
	}
	got := act.Latency
	if got.Count != 20 || got.Count != want.Count || got.P50 != want.P50 || got.P99 != want.P99 || got.Max != want.Max || got.Truncated {
		t.Errorf("ConsoleLatency = %+v; RepairLatency = %+v", got.RepairLatency, want)
	}
	if q := got.Queues["q1"]; q.Count != 10 || q.P50 != 5*time.Second || q.P99 != 10*time.Second {
		t.Errorf("q1 = %+v; want 10 repairs, p50 5s, p99 10s", q)
	}
	if _, ok := got.Queues["q3"]; ok || len(got.Queues) != 2 {
		t.Errorf("queues = %v; want q1 and q2 only", got.Queues)
	}
	restore := storage.SetConsoleLimits(100, 5)
	defer restore()
	act, err = b.store.ConsoleActivity(ctx, 60, []string{"q1", "q2"})
	if err != nil {
		t.Fatal(err)
	}
	got = act.Latency
	// The newest five repairs are q1's first five (latencies 1..5 s).
	if !got.Truncated || got.Count != 5 || got.Max != 5*time.Second || got.P50 != 3*time.Second {
		t.Errorf("ConsoleLatency bounded to 5 = %+v truncated %v; want the newest five (1..5 s), truncated", got.RepairLatency, got.Truncated)
	}
	if !act.Truncated {
		t.Errorf("ConsoleActivity bounded to 5 repairs: not truncated")
	}
	restore()
	act, err = b.store.ConsoleActivity(ctx, 60, nil)
	if err != nil || act.Truncated || len(act.Latency.Queues) != 0 {
		t.Fatalf("ConsoleActivity = truncated %v queues %v, %v", act.Truncated, act.Latency.Queues, err)
	}
	mins := act.Minutes
	// q1's ten finished 60.000-60.009 s ago (minute 1), q2's ten 120.000-120.009 s ago (minute 2); all were
	// recorded within the last minute (this test backdates only their finish), and the 20 finished within the
	// window are counted as recorded now; the one backdated to two hours ago is not read (a real record is
	// never finished before it is recorded, so the window's finished rows hold every recorded one).
	if m0, m1, m2 := mins[len(mins)-1], mins[len(mins)-2], mins[len(mins)-3]; m1.Done != 10 || m2.Done != 10 || m0.Done != 0 ||
		m1.LatencyMax != 10*time.Second || m1.LatencyAvg != 5500*time.Millisecond || m2.LatencyMax != 20*time.Second || m0.Recorded != 20 {
		t.Errorf("minutes 0, 1 and 2 ago = %+v, %+v, %+v; want 20 recorded now, 10 finished a minute ago (avg 5.5 s, max 10 s), 10 two minutes ago (max 20 s)", m0, m1, m2)
	}
}

// A queue's records page newest first without repeating or skipping a
// record, also across records created in the same microsecond, and the
// page after the last full one is empty.
func TestConsoleQueueRecordsPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var all []mend.Record
	for i := range 6 {
		all = append(all, b.create(t, src("q", fmt.Sprintf("m%d", i))))
	}
	// Three share one creation time: the cursor's record ID orders them.
	if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET created_at = '2026-01-01 00:00:00.000001' WHERE record_id IN (?, ?, ?)",
		all[1].ID[:], all[2].ID[:], all[3].ID[:]); err != nil {
		t.Fatal(err)
	}
	setState(t, b, all[4].ID, mend.StateParked, "NULL")
	for _, tc := range []struct {
		state mend.State
		want  int
	}{{"", 6}, {mend.StatePending, 5}, {mend.StateParked, 1}, {mend.StateDone, 0}} {
		for _, limit := range []int{1, 2, 3, 6, 7} {
			seen := map[mend.RecordID]bool{}
			var cur storage.RecordCursor
			var last time.Time
			for pages := 0; ; pages++ {
				recs, err := b.store.ConsoleQueueRecords(ctx, "q", tc.state, cur, limit)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if seen[r.ID] {
						t.Fatalf("state %q limit %d: record %s twice", tc.state, limit, r.ID)
					}
					if !last.IsZero() && r.CreatedAt.After(last) {
						t.Fatalf("state %q limit %d: not newest first", tc.state, limit)
					}
					seen[r.ID], last = true, r.CreatedAt
					if tc.state != "" && r.State != tc.state {
						t.Fatalf("state %q: got a %s record", tc.state, r.State)
					}
				}
				if len(recs) < limit {
					break
				}
				cur = storage.RecordCursor{CreatedAt: recs[len(recs)-1].CreatedAt, ID: recs[len(recs)-1].ID}
				if pages > 10 {
					t.Fatal("no end")
				}
			}
			if len(seen) != tc.want {
				t.Errorf("state %q limit %d: %d records; want %d", tc.state, limit, len(seen), tc.want)
			}
		}
	}
	for _, bad := range []int{0, 1001} {
		if _, err := b.store.ConsoleQueueRecords(ctx, "q", "", storage.RecordCursor{}, bad); !errors.Is(err, mend.ErrInvalid) {
			t.Errorf("limit %d: %v; want ErrInvalid", bad, err)
		}
	}
}

// The parked page's selection pages in its order across queues, with the
// same filters retry and resolve take.
func TestConsoleParkedPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i, q := range []string{"q1", "q2", "q1", "q2", "q1"} {
		rec := b.create(t, src(q, fmt.Sprintf("m%d", i)))
		setState(t, b, rec.ID, mend.StateParked, "NULL")
	}
	if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET updated_at = '2026-01-01 00:00:00', last_error = IF(queue = 'q1', 'wake-up failed', 'contradiction')"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    storage.ParkedFilter
		want int
	}{{storage.ParkedFilter{}, 5}, {storage.ParkedFilter{Queue: "q2"}, 2}, {storage.ParkedFilter{ReasonContains: "wake"}, 3}, {storage.ParkedFilter{Queue: "q2", ReasonContains: "wake"}, 0}} {
		for _, limit := range []int{1, 2, 5} {
			f := tc.f
			f.Limit = limit
			seen := map[mend.RecordID]bool{}
			for pages := 0; pages < 10; pages++ {
				recs, err := b.store.ConsoleParked(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if seen[r.ID] || r.State != mend.StateParked {
						t.Fatalf("%+v: %s twice or not parked", f, r.ID)
					}
					seen[r.ID] = true
				}
				if len(recs) < limit {
					break
				}
				f.After = storage.RecordCursor{CreatedAt: recs[len(recs)-1].UpdatedAt, ID: recs[len(recs)-1].ID}
			}
			if len(seen) != tc.want {
				t.Errorf("%+v: %d records; want %d", tc.f, len(seen), tc.want)
			}
		}
	}
}

// A page of names past a run of slot leases longer than a page still
// lists the queues after it.
func TestConsoleQueueNamesPastSlotLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i := range 12 {
		if _, err := b.store.LeaseAcquire(ctx, fmt.Sprintf("mend-reconcile/replica/%02d", i), "h", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"a", "z1", "z2"} {
		if _, err := b.store.LeaseAcquire(ctx, q, "h", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	got, pages := allNames(t, b.store, 1)
	if !slices.Equal(got, []string{"a", "z1", "z2"}) || pages != 3 {
		t.Errorf("names = %q in %d pages; want a, z1, z2 in 3", got, pages)
	}
	if _, _, err := b.store.ConsoleQueueNames(ctx, "", 0); !errors.Is(err, mend.ErrInvalid) {
		t.Errorf("limit 0: %v; want ErrInvalid", err)
	}
}

// coveringRE matches EXPLAIN's note of an index-only read ("Using index",
// or a loose scan's "Using index for group-by"), not "Using index
// condition" (a pushed-down filter before reading the rows).
var coveringRE = regexp.MustCompile(`Using index($|;| for group-by)`)

// explainRows runs EXPLAIN (the table form) and returns its rows as maps.
func explainRows(t *testing.T, b *bundle, query string, args ...any) []map[string]string {
	t.Helper()
	db := b.db.SQL(t)
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var me *mysql.MySQLError
	if _, err := conn.ExecContext(t.Context(), "SET SESSION explain_format = 'TRADITIONAL'"); err != nil &&
		!(errors.As(err, &me) && me.Number == 1193) {
		t.Fatal(err)
	}
	rows, err := conn.QueryContext(t.Context(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []map[string]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		plan := map[string]string{}
		for i, c := range cols {
			switch v := vals[i].(type) {
			case []byte:
				plan[c] = string(v)
			case int64:
				plan[c] = fmt.Sprint(v)
			}
		}
		out = append(out, plan)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every console read of mend_records is an index range (never a table or
// whole-index scan), through the index it was written for, and the reads
// over many rows are index-only. A world of 3,000 records in 30 queues
// (a third finished within the hour, the rest a day ago, some parked and
// some due, some failing) gives the optimizer the choice. The negative
// control drops migrations 0014's and 0017's indexes: the check must then
// fail the reads they serve.
func TestConsoleQueryPlans(t *testing.T) {
	mysqltest.SkipVitess(t, "vtgate answers EXPLAIN with one shard's plan in MySQL's tree format (one column), not the rows this test reads")
	t.Parallel()
	t.Run("with migrations 0014 and 0017", func(t *testing.T) {
		t.Parallel()
		b := planWorld(t)
		for name, problems := range consolePlanProblems(t, b) {
			t.Errorf("%s: %s", name, strings.Join(problems, "; "))
		}
	})
	t.Run("negative control: without its indexes", func(t *testing.T) {
		t.Parallel()
		b := planWorld(t)
		if _, err := b.db.SQL(t).Exec("ALTER TABLE mend_records DROP INDEX mend_records_recent, DROP INDEX mend_records_queue_state, DROP INDEX mend_records_failing"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.db.SQL(t).Exec("ANALYZE TABLE mend_records"); err != nil {
			t.Fatal(err)
		}
		got := consolePlanProblems(t, b)
		// ConsoleParkedByQueue is not in the list since issue 57: it reads
		// each parked row's topic (its kind), so 0001's (state, updated_at)
		// index serves it as well as 0014's.
		for _, name := range []string{"ConsoleQueueCounts", "ConsoleQueueLatency", "ConsoleRecentDone", "ConsoleSlowRepairs", "ConsoleFailing"} {
			if len(got[name]) == 0 {
				t.Errorf("%s passes the plan check without the index it was written for", name)
			}
		}
	})
}

func planWorld(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	db := b.db.SQL(t)
	if _, err := db.Exec(`INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, payload,
		failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome, state, version, attempts,
		next_attempt_at, last_error, epoch, created_at, updated_at, state_since)
		SELECT UNHEX(LEFT(SHA2(CONCAT('r', seq), 256), 32)), CONCAT('q', seq MOD 30), UNHEX(SHA2(CONCAT('k', seq), 256)), 't', '', CONCAT('m', seq), '',
			0, '', NOW(6) - INTERVAL seq SECOND - INTERVAL 1 MINUTE, '[]', '', 'failed',
			CASE seq MOD 50 WHEN 0 THEN 'parked' WHEN 1 THEN 'pending' ELSE 'done' END, 3, IF(seq MOD 150 = 1, 2, 0),
			CASE seq MOD 50 WHEN 1 THEN NOW(6) - INTERVAL seq SECOND END, IF(seq MOD 150 = 1, 'host: boom', ''), 1,
			NOW(6) - INTERVAL seq SECOND - INTERVAL IF(seq MOD 3 = 0, 0, 1) DAY, NOW(6) - INTERVAL seq SECOND - INTERVAL IF(seq MOD 3 = 0, 0, 1) DAY,
			NOW(6) - INTERVAL seq SECOND
		FROM (SELECT a.n * 1000 + b.n * 100 + c.n * 10 + d.n AS seq
			FROM (SELECT 0 n UNION SELECT 1 UNION SELECT 2) a,
			     (SELECT 0 n UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) b,
			     (SELECT 0 n UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) c,
			     (SELECT 0 n UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) d) nums`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ANALYZE TABLE mend_records"); err != nil {
		t.Fatal(err)
	}
	return b
}

// consolePlanProblems EXPLAINs every console read of mend_records and
// returns what is wrong with each plan, by statement name; it logs the
// plans.
func consolePlanProblems(t *testing.T, b *bundle) map[string][]string {
	t.Helper()
	page := []any{"q1", "q2", "q3"}
	in := func(q string) string { return fmt.Sprintf(q, "?, ?, ?") }
	lim := 100_000
	kinded := func(args ...any) []any { return append(append([]any{}, storage.RecordedArgs...), args...) }
	var id [16]byte
	from := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	const (
		recent     = "mend_records_recent"
		queueState = "mend_records_queue_state"
		due        = "mend_records_due"
		failing    = "mend_records_failing"
	)
	out := map[string][]string{}
	for _, tc := range []struct {
		name      string
		query     string
		args      []any
		keys      []string // any of these
		indexOnly bool
	}{
		{"ConsoleRecordQueues", storage.SQLConsoleRecordQueues, []any{"", 51}, []string{"mend_records_source", "mend_records_queue_due", queueState}, true},
		{"ConsoleQueueCounts", in(storage.SQLConsoleQueueCounts), append(page, lim), []string{queueState}, true},
		{"ConsoleQueueDone", in(storage.SQLConsoleQueueDone), append(page, lim), []string{queueState}, true},
		{"ConsoleTotalOpen", storage.SQLConsoleTotalOpen, []any{lim}, []string{due}, true},
		{"ConsoleTotalDue", storage.SQLConsoleTotalDue, []any{lim}, []string{due}, true},
		// The parked total and the parked by queue read each parked row's
		// topic (its kind is derived at read time), within their bound.
		{"ConsoleTotalParked", storage.SQLConsoleTotalParked, kinded(lim), []string{recent, "mend_records_finished"}, false},
		{"ConsoleTotalRecorded", storage.SQLConsoleTotalRecorded, kinded(lim), []string{recent, "mend_records_finished"}, false},
		{"ConsoleDueQueues", storage.SQLConsoleDueQueues, []any{10_000}, []string{due}, true},
		{"ConsoleRecentDone", storage.SQLConsoleRecentDone, []any{int64(60_000_000), 3600, lim}, []string{recent}, true},
		{"ConsoleRecordedOpen", storage.SQLConsoleRecordedOpen, []any{3600, 3600, lim}, []string{recent}, true},
		{"ConsoleQueueLatency", in(storage.SQLConsoleQueueLatency), append([]any{3600}, append(page, lim)...), []string{queueState}, true},
		{"ConsoleOverdue", storage.SQLConsoleOverdue, []any{int64(600_000_000), 1000}, []string{due}, true},
		{"ConsoleParkedByQueue", storage.SQLConsoleParkedByQueue, kinded(1000), []string{recent, "mend_records_finished"}, false},
		{"ConsoleQueueRecorded", in(storage.SQLConsoleQueueRecorded), append(append(append(storage.StatusAuditArgs(), page...), storage.RecordedArgs...), lim), []string{queueState, "mend_records_source", "mend_records_queue_due"}, false},
		// Bounded by its LIMIT over the failing records alone.
		{"ConsoleFailing", storage.SQLConsoleFailing, []any{1001}, []string{failing}, true},
		// Two of planWorld's records (record_id is the first half of SHA2 of 'r' and the sequence): MariaDB plans
		// IDs that are not there as "Impossible WHERE", reading nothing.
		{"ConsoleFailingErrors", fmt.Sprintf(storage.SQLConsoleFailingErrors, "?, ?"), []any{worldID(1), worldID(151)}, []string{"PRIMARY"}, false},
		{"ConsoleSlowRepairs", storage.SQLConsoleSlowRepairs, []any{int64(900_000_000), int64(600_000_000), 1000, int64(600_000_000)}, []string{recent}, true},
		// One queue's page and the parked page read the rows they show,
		// through an index range.
		{"ConsoleQueueRecords", storage.SQLConsoleQueueRecords, []any{"q1", "", "", from, from, id[:], 50}, []string{"mend_records_source", "mend_records_queue_due", queueState}, false},
		{"ConsoleParkedScan", fmt.Sprintf(storage.SQLConsoleParkedScan, storage.SQLNotRecorded), append(append([]any{[]byte("x")}, storage.RecordedArgs...), "", "", from.AddDate(-9000, 0, 0), from.AddDate(-9000, 0, 0), id[:], 5000), []string{recent, "mend_records_finished"}, false},
		{"ConsoleParked", fmt.Sprintf(storage.SQLConsoleParked, storage.SQLNotRecorded), kinded("", "", "", []byte(""), from.AddDate(-9000, 0, 0), from.AddDate(-9000, 0, 0), id[:], 50), []string{recent, "mend_records_finished"}, false},
	} {
		var plan []string
		seen := false
		for _, row := range explainRows(t, b, tc.query, tc.args...) {
			plan = append(plan, fmt.Sprintf("%v", row))
			// The reads that share the SLO's fragments name mend_records r.
			if row["table"] != "mend_records" && row["table"] != "r" {
				continue
			}
			seen = true
			switch {
			case row["type"] == "ALL" || row["type"] == "index":
				out[tc.name] = append(out[tc.name], fmt.Sprintf("scans %s (type %s); want an index range", row["table"], row["type"]))
			case !slices.Contains(tc.keys, row["key"]):
				out[tc.name] = append(out[tc.name], fmt.Sprintf("reads key %q; want one of %q", row["key"], tc.keys))
			case tc.indexOnly && !coveringRE.MatchString(row["Extra"]):
				out[tc.name] = append(out[tc.name], fmt.Sprintf("Extra %q: not index-only", row["Extra"]))
			}
		}
		if !seen {
			out[tc.name] = append(out[tc.name], "no plan row reads mend_records")
		}
		t.Logf("%s:\n%s", tc.name, strings.Join(plan, "\n"))
	}
	return out
}

// The failing repairs: pending and settled records with failed attempts,
// by queue, the most attempts first; waiting records (whose attempts count
// checks), parked and done ones are not failing.
func TestConsoleFailingQueues(t *testing.T) {
	b := setup(t)
	db := b.db.SQL(t)
	mk := func(q, msg string, state mend.State, attempts int, lastErr, next string) mend.Record {
		t.Helper()
		rec := b.create(t, src(q, msg))
		if _, err := db.Exec("UPDATE mend_records SET state = ?, attempts = ?, last_error = ?, next_attempt_at = "+next+", updated_at = NOW(6) WHERE record_id = ?",
			string(state), attempts, lastErr, rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	worst := mk("q/grant", "m1", mend.StatePending, 4, "host: Error 1142: SELECT command denied <b>", "NOW(6) + INTERVAL 30 SECOND")
	mk("q/grant", "m2", mend.StatePending, 2, "host: Error 1142", "NOW(6) + INTERVAL 5 SECOND")
	wake := mk("q/wake", "m1", mend.StateSettled, 1, "wake-up: broker down", "NOW(6) - INTERVAL 2 SECOND")
	mk("q/fine", "m1", mend.StatePending, 0, "", "NOW(6)")
	mk("q/waiting", "m1", mend.StateWaiting, 3, "batch not settled yet", "NOW(6) + INTERVAL 1 MINUTE")
	mk("q/parked", "m1", mend.StateParked, 10, "gave up after 10 attempts", "NULL")
	mk("q/done", "m1", mend.StateDone, 2, "", "NULL")

	got, err := b.store.ConsoleFailingQueues(t.Context(), 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Queues) != 2 || got.Records != 3 || got.Truncated {
		t.Fatalf("failing = %+v, want q/grant and q/wake from 3 records", got)
	}
	g, w := got.Queues[0], got.Queues[1]
	if g.Queue != "q/grant" || g.Records != 2 || g.Attempts != 4 || g.Record != worst.ID || g.LastError != "host: Error 1142: SELECT command denied <b>" {
		t.Errorf("first = %+v, want q/grant: 2 records, 4 attempts, record %s and its error", g, worst.ID)
	}
	if g.NextAttempt <= 0 || g.NextAttempt > 6*time.Second || g.FailingFor <= 0 || g.LastFailed < 0 {
		t.Errorf("q/grant times: next %s (want the soonest, ~5s), failing for %s, last failed %s", g.NextAttempt, g.FailingFor, g.LastFailed)
	}
	if w.Queue != "q/wake" || w.Record != wake.ID || w.LastError != "" || w.NextAttempt >= 0 {
		t.Errorf("second = %+v, want q/wake, its error not read (show 1), due (negative next attempt)", w)
	}
	// Reading 2 failing records: q/grant's two (the most attempts); q/wake's
	// is past the bound, which the read says.
	got, err = b.store.ConsoleFailingQueues(t.Context(), 2, 5)
	if err != nil || !got.Truncated || got.Records != 2 || len(got.Queues) != 1 || got.Queues[0].Record != worst.ID {
		t.Errorf("read 2: %+v %v, want truncated, q/grant's two", got, err)
	}
	// Records that are not failing (q/fine's pending one, waiting, parked,
	// done) are not read: 3 holds every failing one.
	if got, err := b.store.ConsoleFailingQueues(t.Context(), 3, 5); err != nil || got.Truncated || got.Records != 3 {
		t.Errorf("read 3: %+v %v, want all 3 failing records, not truncated", got, err)
	}
}

// mend_records.failing_attempts (migration 0017's generated column, which
// the console's failing read goes by) is set exactly where FailingCondition
// holds, for every state and both sides of attempts > 0. Its control: a
// condition that also counts waiting records must disagree with it here.
func TestFailingAttemptsColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.db.SQL(t)
	for i, st := range []mend.State{mend.StatePending, mend.StateWaiting, mend.StateSettled, mend.StateParked, mend.StateDone} {
		for _, attempts := range []int{0, 3} {
			rec := b.create(t, src("q", fmt.Sprintf("m%d-%d", i, attempts)))
			if _, err := db.Exec("UPDATE mend_records SET state = ?, attempts = ? WHERE record_id = ?", string(st), attempts, rec.ID[:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	disagree := func(cond string) int {
		t.Helper()
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM mend_records WHERE (failing_attempts IS NOT NULL) <> (" + cond + ") OR COALESCE(failing_attempts <> attempts, FALSE)").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := disagree(storage.FailingCondition); n != 0 {
		t.Errorf("failing_attempts disagrees with FailingCondition on %d of 10 records", n)
	}
	if n := disagree("state IN ('pending', 'waiting', 'settled') AND attempts > 0"); n == 0 {
		t.Errorf("control: a condition counting waiting records agrees with failing_attempts; the check would pass anything")
	}
}

// "Failing for" has one definition (storage.FailingAgeUS: since the record
// entered its step, state_since): the console's failing section, mend
// status's oldest failing (the metric MendRepairsFailing pages on) and its
// failing list agree. A record recorded a day ago that has failed for an
// hour in its step shows an hour in each; the console measured it from
// created_at (a day) before.
func TestConsoleFailingAgreesWithStatus(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	rec := b.create(t, src("q/agree", "m1"))
	if _, err := b.db.SQL(t).Exec(`UPDATE mend_records SET state = 'settled', attempts = 3, last_error = 'wake-up: broker down',
		next_attempt_at = NOW(6) + INTERVAL 1 MINUTE, created_at = NOW(6) - INTERVAL 1 DAY, state_since = NOW(6) - INTERVAL 1 HOUR,
		updated_at = NOW(6) - INTERVAL 10 SECOND WHERE record_id = ?`, rec.ID[:]); err != nil {
		t.Fatal(err)
	}
	console, err := b.store.ConsoleFailingQueues(ctx, 10, 10)
	if err != nil || len(console.Queues) != 1 {
		t.Fatalf("ConsoleFailingQueues = %+v, %v; want q/agree", console, err)
	}
	st, err := b.store.Status(ctx)
	if err != nil || len(st) != 1 {
		t.Fatalf("Status = %+v, %v; want q/agree", st, err)
	}
	list, err := b.store.StatusFailing(ctx, 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("StatusFailing = %+v, %v; want its record", list, err)
	}
	// The three reads run at slightly different NOW(6)s.
	near := func(a, b time.Duration) bool { return (a - b).Abs() < time.Minute }
	c, s, l := console.Queues[0].FailingFor, st[0].OldestFailing, list[0].For
	if !near(c, time.Hour) || !near(c, s) || !near(c, l) {
		t.Errorf("failing for: console %s, mend status %s, its failing list %s; want the same, about 1h (state_since), not 24h (created_at)", c, s, l)
	}
}

// The reason filter searches a bounded number of parked records a page
// and says when it stopped there, with where to go on.
func TestConsoleParkedMatching(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	var want []mend.RecordID
	for i := range 7 {
		rec := b.create(t, src("q/p", fmt.Sprintf("m%d", i)))
		reason := "contradiction"
		if i%3 == 0 {
			reason = "wake-up failed: <b>broker</b>"
			want = append(want, rec.ID)
		}
		if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET state = 'parked', next_attempt_at = NULL, last_error = ?, updated_at = NOW(6) + INTERVAL ? SECOND WHERE record_id = ?",
			reason, i, rec.ID[:]); err != nil {
			t.Fatal(err)
		}
	}
	f := storage.ParkedFilter{ReasonContains: "wake-up failed", Limit: 10}
	got, err := b.store.ConsoleParkedMatching(ctx, f, 0)
	if err != nil || got.Capped || got.Scanned != 7 || len(got.Records) != 3 {
		t.Fatalf("unbounded page: %+v %v", got, err)
	}
	for i, r := range got.Records {
		if r.ID != want[i] {
			t.Errorf("match %d = %s, want %s", i, r.ID, want[i])
		}
	}
	// A scan of 2 a page: the pages together find the same 3, each capped
	// page saying so.
	var found []mend.RecordID
	pages := 0
	for {
		pages++
		got, err := b.store.ConsoleParkedMatching(ctx, f, 2)
		if err != nil || got.Scanned > 2 {
			t.Fatalf("page %d: %+v %v", pages, got, err)
		}
		for _, r := range got.Records {
			found = append(found, r.ID)
		}
		if got.Scanned < 2 || pages > 10 {
			break
		}
		if !got.Capped && len(got.Records) < f.Limit {
			t.Errorf("page %d scanned its bound without saying it stopped there: %+v", pages, got)
		}
		f.After = got.Resume
	}
	if !slices.Equal(found, want) {
		t.Errorf("capped pages found %v, want %v", found, want)
	}
}

// worldID is planWorld's record_id of sequence number seq.
func worldID(seq int) []byte {
	h := sha256.Sum256([]byte(fmt.Sprintf("r%d", seq)))
	return h[:16]
}

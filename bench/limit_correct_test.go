package bench

// Correctness of the limit implementations, on a real server. A limit is
// only a fair yardstick if it does what mend does: these tests hold each one
// to the guarantee mend's own suites hold mend to, and check the planner's
// limit against mend's planner on the same seeded queue.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

func openTestStore(t *testing.T, dsn string) *storage.DB {
	t.Helper()
	s, err := storage.Open(context.Background(), dsn, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestLimitIntakeCreatesOnce: racing deliveries of one dead letter create
// one record with one created event, and every racer gets that record; the
// row is the one mend's store finds for the source identity.
func TestLimitIntakeCreatesOnce(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	pool := openLimitPool(t, db.DSN, nil)
	d := limitDelivery{topic: "speculate_dlq", partition: "q", messageID: "m1", payload: []byte(`{"id":"q/batch/1","queue":"q"}`), failureCount: 2, lastError: "boom"}
	const racers = 8
	conns := make([]*sql.Conn, racers)
	for i := range conns {
		conns[i] = limitConn(t, pool)
	}
	recs := make([]limitRecord, racers)
	created := make([]bool, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			recs[i], created[i], errs[i] = limitIntake(ctx, conns[i], "limit", d)
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if created[i] {
			winners++
		}
		if recs[i].id != recs[0].id {
			t.Fatalf("racer %d got record %s, racer 0 got %s", i, recs[i].id, recs[0].id)
		}
	}
	if winners != 1 {
		t.Fatalf("%d racers created the record; want exactly 1", winners)
	}
	raw := db.SQL(t)
	if n := count(t, raw, "SELECT COUNT(*) FROM mend_records"); n != 1 {
		t.Fatalf("%d records; want 1", n)
	}
	if n := count(t, raw, "SELECT COUNT(*) FROM mend_events WHERE record_id = ? AND kind = 'created' AND seq = 1", recs[0].id[:]); n != 1 {
		t.Fatalf("%d created events; want 1", n)
	}
	// mend finds it by the same source identity, pending and due.
	got, err := openTestStore(t, db.DSN).RecordGet(ctx, mend.SourceID{Queue: "q", Topic: d.topic, Partition: d.partition, MessageID: d.messageID})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != recs[0].id || got.State != mend.StatePending || got.Version != 1 || got.Target.BatchID != "q/batch/1" ||
		got.Target.Desired != mend.OutcomeFailed || got.NextAttemptAt == nil || got.Snapshot.OriginalTopic != "speculate" {
		t.Fatalf("mend reads the limit's record as %+v", got)
	}
	// A redelivery returns the first writer's record, unchanged.
	again, made, err := limitIntake(ctx, conns[0], "limit", d)
	if err != nil || made || again.id != recs[0].id || again.version != 1 {
		t.Fatalf("redelivery: %+v created=%v err=%v", again, made, err)
	}
}

func appendOne(term *mend.Term, rec mend.Record, version int64, kind string) limitAppendArgs {
	return limitAppendArgs{queue: rec.Source.Queue, id: rec.ID, version: version, prevState: "pending", state: "pending",
		attempts: int(version), due: true, retryIn: time.Second, term: term, actor: "limit",
		events: []limitEvent{{kind: kind, data: `{"n":1}`}}}
}

// TestLimitAppend: the unfenced CAS refuses a stale version and an unknown
// record, writing nothing; every accepted append adds exactly its event.
func TestLimitAppend(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store := openTestStore(t, db.DSN)
	c := limitConn(t, openLimitPool(t, db.DSN, nil))
	rec, _, err := store.RecordCreate(ctx, mend.CreateParams{Source: src("q", "m"), OpID: mend.NewOpID(), Actor: "t",
		Target: mend.Target{BatchID: "b", Desired: mend.OutcomeFailed}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := limitAppend(ctx, c, appendOne(nil, rec, 1, "attempt_failed"))
	if err != nil || v != 2 {
		t.Fatalf("append at 1: v=%d err=%v", v, err)
	}
	if _, err := limitAppend(ctx, c, appendOne(nil, rec, 1, "attempt_failed")); !errors.Is(err, errLimitConflict) {
		t.Fatalf("append at stale version 1: %v; want a conflict", err)
	}
	ghost := rec
	ghost.ID = mend.NewRecordID()
	if _, err := limitAppend(ctx, c, appendOne(nil, ghost, 1, "attempt_failed")); !errors.Is(err, errLimitNotFound) {
		t.Fatalf("append to an unknown record: %v; want not found", err)
	}
	hist, err := store.RecordHistory(ctx, "q", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[1].Seq != 2 || hist[1].Kind != mend.EventAttemptFailed {
		t.Fatalf("history %+v; want created and one attempt_failed at seq 2", hist)
	}
	got, err := store.RecordGet(ctx, rec.Source)
	if err != nil || got.Version != 2 || got.Attempts != 1 {
		t.Fatalf("record after appends: %+v, %v", got, err)
	}
}

// TestLimitAppendFenced: the fenced CAS writes only under the queue's
// current, unexpired term, and holds the lease row against a takeover
// until it commits.
func TestLimitAppendFenced(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	raw := db.SQL(t)
	store := openTestStore(t, db.DSN)
	pool := openLimitPool(t, db.DSN, nil)
	c := limitConn(t, pool)
	rec, _, err := store.RecordCreate(ctx, mend.CreateParams{Source: src("q", "m"), OpID: mend.NewOpID(), Actor: "t",
		Target: mend.Target{BatchID: "b", Desired: mend.OutcomeFailed}})
	if err != nil {
		t.Fatal(err)
	}
	term, err := limitAcquire(ctx, c, "q", "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	version := int64(1)
	mustWrite := func(term mend.Term) {
		t.Helper()
		v, err := limitAppend(ctx, c, appendOne(&term, rec, version, "attempt_failed"))
		if err != nil {
			t.Fatalf("fenced append under %+v: %v", term, err)
		}
		version = v
	}
	mustRefuse := func(term mend.Term, want error, why string) {
		t.Helper()
		_, err := limitAppend(ctx, c, appendOne(&term, rec, version, "attempt_failed"))
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v; want %v", why, err, want)
		}
		if n := count(t, raw, "SELECT COUNT(*) FROM mend_events WHERE record_id = ?", rec.ID[:]); n != int(version) {
			t.Fatalf("%s: %d events after a refused write; want %d", why, n, version)
		}
		if n := count(t, raw, "SELECT version FROM mend_records WHERE record_id = ?", rec.ID[:]); n != int(version) {
			t.Fatalf("%s: version %d after a refused write; want %d", why, n, version)
		}
	}
	mustWrite(term)
	mustRefuse(mend.Term{Queue: "q", Holder: "B", Epoch: term.Epoch}, errLimitFenced, "a foreign holder at the current epoch")
	stale := appendOne(&term, rec, version-1, "attempt_failed")
	if _, err := limitAppend(ctx, c, stale); !errors.Is(err, errLimitConflict) {
		t.Fatalf("stale version under the current term: %v; want a conflict", err)
	}

	// The fenced packet without its COMMIT holds the lease row: a takeover
	// (which locks the row exclusively) cannot get it until the write ends.
	a := appendOne(&term, rec, version, "attempt_failed")
	body := strings.TrimSuffix(appendSQLs[[2]int{1, 1}], "COMMIT")
	args := []any{version + 1, a.state, false, a.attempts, "", term.Epoch, true, int64(1000), rec.ID[:], "q", version, "q", term.Holder, term.Epoch,
		rec.ID[:], version + 1, "q", a.events[0].kind, term.Epoch, "limit", mend.NewOpID(), a.events[0].data, rec.ID[:], "q", "q", term.Holder, term.Epoch}
	var hit, now, live sql.NullInt64
	if err := packetOnce(ctx, c, body, args, func(rows *sql.Rows) error { return scanOne(rows, &hit, &now, &live) }); err != nil {
		t.Fatal(err)
	}
	if hit.Int64 != 1 {
		t.Fatalf("the open fenced write did not hit: %v", hit)
	}
	other := limitConn(t, pool)
	if _, err := other.ExecContext(ctx, "SELECT epoch FROM mend_leases WHERE queue = 'q' FOR UPDATE NOWAIT"); err == nil {
		t.Fatal("a takeover locked the lease row while a fenced write of the current term was open")
	}
	if _, err := c.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, "SELECT epoch FROM mend_leases WHERE queue = 'q' FOR UPDATE NOWAIT"); err != nil {
		t.Fatalf("the lease row stayed locked after the fenced write ended: %v", err)
	}

	// Expired by the database clock: refused. Taken over: the old term is
	// refused, the new one writes.
	if _, err := raw.ExecContext(ctx, "UPDATE mend_leases SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE queue = 'q'"); err != nil {
		t.Fatal(err)
	}
	mustRefuse(term, errLimitFenced, "an expired term")
	next, err := store.LeaseAcquire(ctx, "q", "B", time.Minute)
	if err != nil || next.Epoch != term.Epoch+1 {
		t.Fatalf("takeover: %+v, %v", next, err)
	}
	mustRefuse(term, errLimitFenced, "the term a takeover replaced")
	mustWrite(next)
}

// TestLimitAcquire: the epoch strictly increases across acquires (the
// limit's and mend's interleaved), a held lease is refused without a
// change, and history records every term and how it ended.
func TestLimitAcquire(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	raw := db.SQL(t)
	store := openTestStore(t, db.DSN)
	pool := openLimitPool(t, db.DSN, nil)
	c := limitConn(t, pool)
	expire := func() {
		t.Helper()
		if _, err := raw.ExecContext(ctx, "UPDATE mend_leases SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE queue = 'q'"); err != nil {
			t.Fatal(err)
		}
	}
	type hist struct {
		Epoch  int64
		Holder string
		How    sql.NullString
		Ended  bool
	}
	history := func() []hist {
		t.Helper()
		rows, err := raw.QueryContext(ctx, "SELECT epoch, holder, ended_how, ended_at IS NOT NULL FROM mend_lease_history WHERE queue = 'q' ORDER BY epoch")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []hist
		for rows.Next() {
			var h hist
			if err := rows.Scan(&h.Epoch, &h.Holder, &h.How, &h.Ended); err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
		return out
	}

	t1, err := limitAcquire(ctx, c, "q", "A", time.Minute)
	if err != nil || t1.Epoch != 1 {
		t.Fatalf("first acquire: %+v, %v", t1, err)
	}
	_, err = limitAcquire(ctx, c, "q", "B", time.Minute)
	var held *heldError
	if !errors.As(err, &held) || held.holder != "A" || held.epoch != 1 || held.remaining <= 0 {
		t.Fatalf("acquire of a held lease: %v; want held by A at epoch 1", err)
	}
	if n := count(t, raw, "SELECT transitions FROM mend_leases WHERE queue = 'q'"); n != 1 {
		t.Fatalf("a refused acquire changed the lease: transitions %d", n)
	}
	// An expired term is taken over and closed in history at its expiry.
	expire()
	var oldExpiry time.Time
	if err := raw.QueryRowContext(ctx, "SELECT expires_at FROM mend_leases WHERE queue = 'q'").Scan(&oldExpiry); err != nil {
		t.Fatal(err)
	}
	t2, err := limitAcquire(ctx, c, "q", "B", time.Minute)
	if err != nil || t2.Epoch != 2 {
		t.Fatalf("takeover: %+v, %v", t2, err)
	}
	var ended time.Time
	if err := raw.QueryRowContext(ctx, "SELECT ended_at FROM mend_lease_history WHERE queue = 'q' AND epoch = 1").Scan(&ended); err != nil || !ended.Equal(oldExpiry) {
		t.Fatalf("term 1 ended at %v (%v); want its expiry %v", ended, err, oldExpiry)
	}
	// mend releases term 2; the limit takes term 3; mend takes term 4 after
	// it expires: one epoch sequence whoever acquires.
	if err := store.LeaseRelease(ctx, t2); err != nil {
		t.Fatal(err)
	}
	t3, err := limitAcquire(ctx, c, "q", "C", time.Minute)
	if err != nil || t3.Epoch != 3 {
		t.Fatalf("acquire after release: %+v, %v", t3, err)
	}
	expire()
	t4, err := store.LeaseAcquire(ctx, "q", "D", time.Minute)
	if err != nil || t4.Epoch != 4 {
		t.Fatalf("mend's acquire after the limit's: %+v, %v", t4, err)
	}
	want := []hist{
		{1, "A", sql.NullString{String: "expired", Valid: true}, true},
		{2, "B", sql.NullString{String: "released", Valid: true}, true},
		{3, "C", sql.NullString{String: "expired", Valid: true}, true},
		{4, "D", sql.NullString{}, false},
	}
	if got := history(); !reflect.DeepEqual(got, want) {
		t.Fatalf("history %+v; want %+v", got, want)
	}

	// Racing acquires of a free lease: exactly one wins, at the next epoch.
	expire()
	const racers = 8
	conns := make([]*sql.Conn, racers)
	for i := range conns {
		conns[i] = limitConn(t, pool)
	}
	terms := make([]mend.Term, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			terms[i], errs[i] = limitAcquire(ctx, conns[i], "q", fmt.Sprintf("R%d", i), time.Minute)
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range racers {
		switch {
		case errs[i] == nil:
			winners++
			if terms[i].Epoch != 5 {
				t.Fatalf("racer %d won epoch %d; want 5", i, terms[i].Epoch)
			}
		case !errors.As(errs[i], &held):
			t.Fatalf("racer %d: %v", i, errs[i])
		}
	}
	if winners != 1 {
		t.Fatalf("%d racers won the lease; want 1", winners)
	}
	if n := count(t, raw, "SELECT COUNT(*) FROM mend_lease_history WHERE queue = 'q'"); n != 5 {
		t.Fatalf("%d history rows; want 5", n)
	}
}

// TestLimitPlannerMatchesMend: on two copies of one seeded world, mend's
// planner and the limit planner leave the host's tables, the published
// messages and the records the same.
func TestLimitPlannerMatchesMend(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up, sqtest.Apply)
	store := openTestStore(t, db.DSN)
	w := sqtest.World{App: db.SQL(t), Queue: db.SQL(t)}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Queue q: every branch of the repair that writes the host.
	must(w.SeedBatch(ctx, "q", "q/batch/b1", "speculating", "q/r1", "q/r2")) // failed, fanned out
	must(w.SeedBatch(ctx, "q", "q/batch/b2", "speculating", "q/r3"))         // already failed: finished
	if ok, err := w.Transition(ctx, "q", "q/batch/b2", 1, "speculating", "failed"); err != nil || !ok {
		t.Fatalf("transition b2: %v %v", ok, err)
	}
	must(w.SeedBatch(ctx, "q", "q/batch/b3", "merging", "q/r4", "q/r5")) // succeeded: divergent finish
	if ok, err := w.Transition(ctx, "q", "q/batch/b3", 1, "merging", "succeeded"); err != nil || !ok {
		t.Fatalf("transition b3: %v %v", ok, err)
	}
	must(w.SetRequestState(ctx, "q", "q/r5", "cancelled"))                                                      // another terminal state: untouched
	must(w.SeedBatch(ctx, "q", "q/batch/b5", "created", "q/r6", "q/missing"))                                   // a member with no request row
	must(w.SeedBatch(ctx, "q", "q/batch/a-stale", "speculating"))                                               // a stale live-state membership row:
	if ok, err := w.Transition(ctx, "q", "q/batch/a-stale", 1, "speculating", "cancelled"); err != nil || !ok { // its batch is cancelled
		t.Fatalf("transition a-stale: %v %v", ok, err)
	}
	must(w.AddMembership(ctx, "q", "speculating", "q/batch/a-stale"))
	var many []string // more members than the limit names by position
	for i := range limitMembersByPosition + 3 {
		many = append(many, fmt.Sprintf("q/r7-%02d", i))
	}
	must(w.SeedBatch(ctx, "q", "q/batch/b6", "speculating", many...))
	must(w.SeedBatch(ctx, "q", "q/batch/z-live", "created", "q/live"))
	// Queue q2: nothing live to wake.
	must(w.SeedBatch(ctx, "q2", "q2/batch/b1", "speculating", "q2/r1"))

	failedAt := time.Date(2026, 11, 30, 7, 0, 0, 123_000_000, time.UTC)
	snap := mend.Snapshot{OriginalTopic: "speculate", FailureCount: 3, LastError: "build broke", FailedAt: failedAt,
		Subjects: []mend.Subject{{Kind: "batch", ID: "x"}, {Kind: "request", ID: "q/r1"}, {Kind: "batch", ID: "y"}}}
	create := func(queue, msg, batch string) {
		t.Helper()
		_, _, err := store.RecordCreate(ctx, mend.CreateParams{Source: src(queue, msg), OpID: mend.NewOpID(), Actor: "t",
			Target: mend.Target{BatchID: batch, Desired: mend.OutcomeFailed}, Snapshot: snap})
		must(err)
	}
	create("q", "m1", "q/batch/b1")
	create("q", "m2", "q/batch/b2")
	create("q", "m3", "q/batch/b3")
	create("q", "m4", "q/batch/b4") // no such batch
	create("q", "m5", "q/batch/b5")
	create("q", "m6", "q/batch/b1") // a second dead letter of b1: finish again, wake again
	create("q", "m7", "q/batch/b6")
	create("q2", "m1", "q2/batch/b1")
	terms := map[string]mend.Term{}
	for _, q := range []string{"q", "q2"} {
		term, err := store.LeaseAcquire(ctx, q, "planner", 10*time.Minute)
		must(err)
		terms[q] = term
	}
	other := cloneDB(t, db)

	// mend's planner on the original.
	h, err := host.Open(ctx, db.DSN, "", host.Options{})
	must(err)
	t.Cleanup(func() { _ = h.Close() })
	p, err := planner.New(planner.Config{Store: store, Batches: h, Waker: h, Actor: "planner"})
	must(err)
	for _, q := range []string{"q", "q2"} {
		_, err := p.Run(ctx, planLease{terms[q]})
		must(err)
	}
	// The limit planner on the copy.
	coll, err := hostCollation(ctx, other.SQL(t))
	must(err)
	pool := openLimitPool(t, other.DSN, nil)
	lp := newLimitPlanner(limitConn(t, pool), limitConn(t, pool), limitConn(t, pool), coll, "planner")
	for _, q := range []string{"q", "q2"} {
		_, err := lp.run(ctx, terms[q])
		must(err)
	}

	mendWorld := describeWorld(t, db)
	limitWorld := describeWorld(t, other)
	if !reflect.DeepEqual(mendWorld, limitWorld) {
		for _, k := range sortedKeys(mendWorld, limitWorld) {
			if mendWorld[k] != limitWorld[k] {
				t.Errorf("%s:\n  mend:  %s\n  limit: %s", k, mendWorld[k], limitWorld[k])
			}
		}
		t.FailNow()
	}
	// The world is what the repair should leave, not merely the same twice.
	for k, want := range map[string]string{
		"batch q/batch/b1":   "failed v2",
		"batch q/batch/b5":   "failed v2",
		"request q/r1":       "error v2",
		"request q/r5":       "cancelled v2",
		"request q/r4":       "landed v2",
		"records q2":         `done v3 attempts=0 err="" epoch=1 [created settled done]`,
		"request q/r7-10":    "error v2",
		"speculate q wakes":  "1", // one wake-up for the queue's seven records
		"speculate q2 wakes": "0",
	} {
		if !strings.HasPrefix(mendWorld[k], want) {
			t.Errorf("%s = %q; want it to start with %q", k, mendWorld[k], want)
		}
	}
}

// describeWorld renders what a repair leaves behind as comparable text:
// batches, requests, membership, RequestLog entries (timestamps aside),
// wake-ups as the speculate consumer decodes them (message IDs aside),
// records and their event kinds.
func describeWorld(t *testing.T, db *mysqltest.DB) map[string]string {
	t.Helper()
	ctx := context.Background()
	conn := db.SQL(t)
	w := sqtest.World{App: conn, Queue: conn}
	out := map[string]string{}
	rows, err := conn.QueryContext(ctx, "SELECT queue, id, state, version, contains FROM batch")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q, id, state, contains string
		var v int
		if err := rows.Scan(&q, &id, &state, &v, &contains); err != nil {
			t.Fatal(err)
		}
		out["batch "+id] = fmt.Sprintf("%s v%d %s", state, v, contains)
	}
	rows.Close()
	rows, err = conn.QueryContext(ctx, "SELECT id, state, version FROM request")
	if err != nil {
		t.Fatal(err)
	}
	var requests []string
	for rows.Next() {
		var id, state string
		var v int
		if err := rows.Scan(&id, &state, &v); err != nil {
			t.Fatal(err)
		}
		out["request "+id] = fmt.Sprintf("%s v%d", state, v)
		requests = append(requests, id)
	}
	rows.Close()
	for _, q := range []string{"q", "q2"} {
		m, err := w.Membership(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out["membership "+q] = strings.Join(m, " ")
		wakes, err := w.ConsumeSpeculate(ctx, q, false)
		if err != nil {
			t.Fatal(err)
		}
		out["speculate "+q+" wakes"] = fmt.Sprint(len(wakes))
		for i, wk := range wakes {
			out[fmt.Sprintf("speculate %s #%d", q, i)] = fmt.Sprintf("batch=%s queue=%s meta=%v", wk.Batch.ID, wk.Batch.Queue, wk.Meta)
		}
		recs, err := conn.QueryContext(ctx, "SELECT record_id, state, version, attempts, last_error, epoch FROM mend_records WHERE queue = ? ORDER BY message_id", q)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for recs.Next() {
			var id []byte
			var state, lastErr string
			var v, attempts, epoch int
			if err := recs.Scan(&id, &state, &v, &attempts, &lastErr, &epoch); err != nil {
				t.Fatal(err)
			}
			var kinds []string
			ev, err := conn.QueryContext(ctx, "SELECT kind FROM mend_events WHERE record_id = ? ORDER BY seq", id)
			if err != nil {
				t.Fatal(err)
			}
			for ev.Next() {
				var k string
				if err := ev.Scan(&k); err != nil {
					t.Fatal(err)
				}
				kinds = append(kinds, k)
			}
			ev.Close()
			lines = append(lines, fmt.Sprintf("%s v%d attempts=%d err=%q epoch=%d %v", state, v, attempts, lastErr, epoch, kinds))
		}
		recs.Close()
		out["records "+q] = strings.Join(lines, "; ")
	}
	for _, r := range requests {
		logs, err := w.ConsumeLog(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range logs {
			l.TimestampMS = 0
			out[fmt.Sprintf("log %s #%d", r, i)] = fmt.Sprintf("%+v", l)
		}
	}
	return out
}

func sortedKeys(ms ...map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

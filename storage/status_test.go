package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.create(t, src("q1", "a"))
	b.create(t, src("q1", "b"))
	done := b.create(t, src("q1", "c"))
	if _, err := b.store.RecordAppend(ctx, appendParams(done, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}
	// q1's records have been due for an hour by the database clock.
	if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET next_attempt_at = next_attempt_at - INTERVAL 1 HOUR WHERE next_attempt_at IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	parked := b.create(t, src("q2", "a"))
	if _, err := b.store.RecordAppend(ctx, appendParams(parked, mend.EventParked, mend.StateParked)); err != nil {
		t.Fatal(err)
	}
	term, err := b.store.LeaseAcquire(ctx, "q3", "holder-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	got, err := b.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Queue != "q1" || got[1].Queue != "q2" || got[2].Queue != "q3" {
		t.Fatalf("Status queues = %+v; want q1, q2, q3 in order", got)
	}
	q1, q2, q3 := got[0], got[1], got[2]
	if q1.Counts[mend.StatePending] != 2 || q1.Counts[mend.StateDone] != 1 || q1.Due != 2 {
		t.Errorf("q1 = counts %v due %d; want 2 pending, 1 done, 2 due", q1.Counts, q1.Due)
	}
	if q1.OldestDue < 59*time.Minute || q1.OldestDue > 2*time.Hour {
		t.Errorf("q1 oldest due = %s; want about an hour", q1.OldestDue)
	}
	if q2.Counts[mend.StateParked] != 1 || q2.Due != 0 || q2.OldestDue != 0 || q2.Lease != nil {
		t.Errorf("q2 = %+v; want 1 parked, nothing due, no lease", q2)
	}
	if q3.Lease == nil || q3.Lease.Term != term || !q3.Lease.Live() || len(q3.Counts) != 0 {
		t.Errorf("q3 = %+v; want the live lease %v and no records", q3, term)
	}
}

func TestRecordFindAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first := b.create(t, src("q", "first"))
	second := b.create(t, src("q", "second"))
	b.create(t, src("other", "x"))

	t.Run("find by id alone", func(t *testing.T) {
		got, err := b.store.RecordFind(ctx, second.ID)
		if err != nil || got.ID != second.ID || got.Source != second.Source {
			t.Fatalf("RecordFind = %+v, %v; want %s", got, err, second.ID)
		}
	})
	t.Run("unknown id is not found", func(t *testing.T) {
		_, err := b.store.RecordFind(ctx, mend.NewRecordID())
		if !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("RecordFind(unknown) = %v; want ErrNotFound", err)
		}
	})
	t.Run("list is per queue", func(t *testing.T) {
		got, err := b.store.RecordsList(ctx, "q", 10)
		if err != nil || len(got) != 2 {
			t.Fatalf("RecordsList = %d records, %v; want 2", len(got), err)
		}
		ids := map[mend.RecordID]bool{got[0].ID: true, got[1].ID: true}
		if !ids[first.ID] || !ids[second.ID] {
			t.Fatalf("RecordsList = %v, %v; want %s and %s", got[0].ID, got[1].ID, first.ID, second.ID)
		}
	})
}

func TestRecordRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setupParked := func(t *testing.T) (*bundle, mend.Record) {
		t.Helper()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		p := appendParams(rec, mend.EventParked, mend.StateParked)
		p.Attempts, p.LastError = 10, "gave up"
		if _, err := b.store.RecordAppend(ctx, p); err != nil {
			t.Fatal(err)
		}
		return b, rec
	}

	t.Run("parked goes back to pending, due now, as one event", func(t *testing.T) {
		b, rec := setupParked(t)
		op := mend.NewOpID()
		got, err := b.store.RecordRetry(ctx, storage.RetryParams{ID: rec.ID, Actor: "operator/test", OpID: op, Reason: "host fixed"})
		if err != nil {
			t.Fatal(err)
		}
		if got.State != mend.StatePending || got.Attempts != 0 || got.LastError != "" || got.Version != 3 || got.NextAttemptAt == nil {
			t.Fatalf("after retry = %+v; want pending, 0 attempts, no error, version 3, due", got)
		}
		ev, err := b.store.OpLookup(ctx, "q", op)
		if err != nil || ev.Kind != mend.EventRetried || ev.Seq != 3 || ev.Epoch != 0 {
			t.Fatalf("retry event = %+v, %v; want retried at seq 3, epoch 0", ev, err)
		}
		var data map[string]string
		if err := json.Unmarshal(ev.Data, &data); err != nil || data["parked_reason"] != "gave up" || data["note"] != "host fixed" {
			t.Fatalf("retry event data = %s (%v); want the parked reason and the note", ev.Data, err)
		}
		due, err := b.store.QueuesDue(ctx, 10)
		if err != nil || len(due) != 1 || due[0] != "q" {
			t.Fatalf("QueuesDue after retry = %q, %v; want [q]", due, err)
		}
	})
	t.Run("at a version it is not at, it is refused with ErrConflict and nothing changes", func(t *testing.T) {
		b, rec := setupParked(t)
		parked, err := b.store.RecordFind(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []int64{parked.Version - 1, parked.Version + 1} {
			got, err := b.store.RecordRetry(ctx, storage.RetryParams{ID: rec.ID, Actor: "operator/test", OpID: mend.NewOpID(), Version: v})
			if !errors.Is(err, mend.ErrConflict) || got.Version != parked.Version {
				t.Errorf("RecordRetry(version %d) = %d, %v; want ErrConflict and the record at %d", v, got.Version, err, parked.Version)
			}
		}
		if now, err := b.store.RecordFind(ctx, rec.ID); err != nil || now.Version != parked.Version || now.State != mend.StateParked {
			t.Fatalf("after refused retries: %s at %d (%v); want parked at %d", now.State, now.Version, err, parked.Version)
		}
		got, err := b.store.RecordRetry(ctx, storage.RetryParams{ID: rec.ID, Actor: "operator/test", OpID: mend.NewOpID(), Version: parked.Version})
		if err != nil || got.Version != parked.Version+1 || got.State != mend.StatePending {
			t.Fatalf("RecordRetry(its version) = %+v, %v; want pending at %d", got, err, parked.Version+1)
		}
	})
	t.Run("a record that is not parked is refused", func(t *testing.T) {
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		_, err := b.store.RecordRetry(ctx, storage.RetryParams{ID: rec.ID, Actor: "operator/test", OpID: mend.NewOpID()})
		if !errors.Is(err, storage.ErrNotParked) || !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("RecordRetry(pending) = %v; want ErrNotParked", err)
		}
	})
	t.Run("unknown record", func(t *testing.T) {
		b := setup(t)
		_, err := b.store.RecordRetry(ctx, storage.RetryParams{ID: mend.NewRecordID(), Actor: "operator/test", OpID: mend.NewOpID()})
		if !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("RecordRetry(unknown) = %v; want ErrNotFound", err)
		}
	})
}

// TestViews checks that each operator view selects on this server and
// returns what docs/sql.md says it does.
func TestViews(t *testing.T) {
	mysqltest.SkipVitess(t, "mend's views are not in the vschema: vtgate routes no view of a sharded keyspace (Vitess views are experimental, --enable-views)")
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conn := b.db.SQL(t)
	s := mend.SourceID{Queue: "monorepo/main", Topic: "speculate_dlq", Partition: "monorepo/main", MessageID: "spec/b1/é"}
	rec := b.create(t, s)
	p := appendParams(rec, mend.EventParked, mend.StateParked)
	p.Attempts, p.LastError = 4, "wake-up failed 4 times"
	if _, err := b.store.RecordAppend(ctx, p); err != nil {
		t.Fatal(err)
	}
	finished := b.create(t, src("monorepo/main", "done"))
	if _, err := b.store.RecordAppend(ctx, appendParams(finished, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.LeaseAcquire(ctx, "monorepo/main", "host-1", time.Minute); err != nil {
		t.Fatal(err)
	}

	t.Run("mend_pending_records", func(t *testing.T) {
		rows, err := conn.QueryContext(ctx, `SELECT record_id, queue, state, message_id, attempts, last_error, age_seconds, overdue_seconds IS NULL
			FROM mend_pending_records WHERE queue = ?`, "monorepo/main")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			n++
			var id, queue, state, msg, lastErr string
			var attempts, age int64
			var notDue bool
			if err := rows.Scan(&id, &queue, &state, &msg, &attempts, &lastErr, &age, &notDue); err != nil {
				t.Fatal(err)
			}
			if id != rec.ID.String() || queue != s.Queue || state != "parked" || msg != s.MessageID ||
				attempts != 4 || lastErr != "wake-up failed 4 times" || age < 0 || age > 60 || !notDue {
				t.Errorf("row = %s %s %s %q %d %q age %d notDue %v; want the parked record as text", id, queue, state, msg, attempts, lastErr, age, notDue)
			}
		}
		if err := rows.Err(); err != nil || n != 1 {
			t.Fatalf("%d rows (%v); want 1 (done records are left out)", n, err)
		}
	})
	t.Run("mend_lease_status", func(t *testing.T) {
		var queue, status, holder string
		var epoch int64
		var left float64
		err := conn.QueryRowContext(ctx, `SELECT queue, status, holder, epoch, seconds_left FROM mend_lease_status WHERE queue = ?`, "monorepo/main").
			Scan(&queue, &status, &holder, &epoch, &left)
		if err != nil {
			t.Fatal(err)
		}
		if status != "held" || holder != "host-1" || epoch != 1 || left <= 0 || left > 60 {
			t.Fatalf("lease = %s %s %s epoch %d left %.3f; want held by host-1 at epoch 1 with up to 60 s left", queue, status, holder, epoch, left)
		}
	})
	// Issue 49: the views are for people, whose clients connect with their
	// own collation (MariaDB 11.8 remaps the driver's general_ci to
	// uca1400_ai_ci; MySQL's clients use 0900_ai_ci). A filter on a text
	// column of a view must work from each of them: a column built from
	// literals keeps the migrator's collation otherwise, and comparing it
	// with the session's literal is error 1267 (illegal mix of collations).
	t.Run("views filtered from any session collation", func(t *testing.T) {
		filters := []string{
			"SELECT COUNT(*) FROM mend_lease_status WHERE status = 'held'",
			"SELECT COUNT(*) FROM mend_pending_records WHERE state = 'parked'",
			"SELECT COUNT(*) FROM mend_record_history WHERE kind = 'created'",
			"SELECT COUNT(*) FROM mend_lease_terms WHERE ended_how = 'released'",
		}
		tried := 0
		for _, coll := range []string{"utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_0900_ai_ci", "utf8mb4_uca1400_ai_ci", "utf8mb4_bin"} {
			c, err := conn.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.ExecContext(ctx, "SET NAMES utf8mb4 COLLATE "+coll); err != nil {
				_ = c.Close()
				continue // not on this engine (error 1273)
			}
			tried++
			for _, q := range filters {
				var n int
				if err := c.QueryRowContext(ctx, q).Scan(&n); err != nil {
					t.Errorf("session collation %s: %s: %v", coll, q, err)
				}
			}
			_ = c.Close()
		}
		if tried < 3 {
			t.Fatalf("only %d session collations exist here; want at least 3", tried)
		}
	})
	t.Run("mend_record_history", func(t *testing.T) {
		rows, err := conn.QueryContext(ctx, `SELECT seq, kind, message_id, message_id_hex, actor, record_state FROM mend_record_history
			WHERE record_id = ? ORDER BY seq`, rec.ID.String())
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var kinds []string
		for rows.Next() {
			var seq int64
			var kind, msg, msgHex, actor, state string
			if err := rows.Scan(&seq, &kind, &msg, &msgHex, &actor, &state); err != nil {
				t.Fatal(err)
			}
			if msg != s.MessageID || msgHex != "737065632f62312fc3a9" || actor != "test" || state != "parked" || seq != int64(len(kinds)+1) {
				t.Errorf("event %d = %s %q %s %s %s; want the message ID as text and hex", seq, kind, msg, msgHex, actor, state)
			}
			kinds = append(kinds, kind)
		}
		if err := rows.Err(); err != nil || len(kinds) != 2 || kinds[0] != "created" || kinds[1] != "parked" {
			t.Fatalf("history = %v (%v); want [created parked]", kinds, err)
		}
	})
}

package storage_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// eventCounts returns, per record ID, how many created events the log holds.
func createdEvents(t *testing.T, b *bundle) map[mend.RecordID]int {
	t.Helper()
	rows, err := b.db.SQL(t).Query("SELECT record_id FROM mend_events WHERE kind = 'created'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[mend.RecordID]int{}
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var id mend.RecordID
		copy(id[:], raw)
		out[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRecordCreateMany(t *testing.T) {
	t.Parallel()

	t.Run("new, existing, repeated and bad items each get their answer", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		first := createParams(src("q", "old"), "first")
		old, _, err := b.store.RecordCreate(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		bad := createParams(src("q", "bad"), "{}")
		bad.Source.MessageID = strings.Repeat("x", 300) // over 255 characters
		reusedOp := createParams(src("q", "reused-op"), "{}")
		reusedOp.OpID = "op-shared"
		sameOp := createParams(src("q", "same-op"), "{}")
		sameOp.OpID = "op-shared"
		ps := []storage.CreateParams{
			createParams(src("q", "a"), "a"),
			createParams(src("q", "old"), "second"), // first writer wins
			bad,
			createParams(src("q2", "b"), "b"),
			createParams(src("q", "a"), "a again"), // the same source twice in one batch
			reusedOp,
			sameOp, // an op ID an earlier item of the batch uses
		}
		res, err := b.store.RecordCreateMany(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(ps) {
			t.Fatalf("%d results for %d items", len(res), len(ps))
		}
		for _, i := range []int{0, 3, 5} {
			if res[i].Err != nil || !res[i].Created || res[i].Record.Source != ps[i].Source || string(res[i].Record.Snapshot.Payload) != string(ps[i].Snapshot.Payload) {
				t.Errorf("item %d = %+v; want created with its own snapshot", i, res[i])
			}
		}
		if r := res[1]; r.Err != nil || r.Created || r.Record.ID != old.ID || string(r.Record.Snapshot.Payload) != "first" {
			t.Errorf("existing source = %+v; want the first writer's record %s unchanged", r, old.ID)
		}
		if r := res[2]; !errors.Is(r.Err, mend.ErrInvalid) {
			t.Errorf("bad item = %+v; want ErrInvalid", r)
		}
		if r := res[4]; r.Err != nil || r.Created || r.Record.ID != res[0].Record.ID {
			t.Errorf("repeated source = %+v; want item 0's record, not created", r)
		}
		if r := res[6]; !errors.Is(r.Err, mend.ErrInvalid) || !strings.Contains(r.Err.Error(), "op-shared") {
			t.Errorf("item reusing a batch op ID = %+v; want ErrInvalid naming it", r)
		}
		events := createdEvents(t, b)
		if len(events) != 4 {
			t.Errorf("created events for %d records; want 4 (old, a, b, reused-op)", len(events))
		}
		for id, n := range events {
			if n != 1 {
				t.Errorf("record %s has %d created events", id, n)
			}
		}
		if _, err := b.store.RecordGet(ctx, src("q", "same-op")); !errors.Is(err, mend.ErrNotFound) {
			t.Errorf("the refused item was recorded: %v", err)
		}
	})

	t.Run("an op ID used before is refused on its item only", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		earlier := createParams(src("q", "earlier"), "{}")
		if _, _, err := b.store.RecordCreate(ctx, earlier); err != nil {
			t.Fatal(err)
		}
		clash := createParams(src("q", "clash"), "{}")
		clash.OpID = earlier.OpID
		ps := []storage.CreateParams{createParams(src("q", "x"), "{}"), clash, createParams(src("q", "y"), "{}")}
		res, err := b.store.RecordCreateMany(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(res[1].Err, mend.ErrInvalid) {
			t.Errorf("clashing op ID = %+v; want ErrInvalid", res[1])
		}
		for _, i := range []int{0, 2} {
			if res[i].Err != nil || !res[i].Created {
				t.Errorf("item %d = %+v; want created", i, res[i])
			}
		}
	})

	t.Run("a stored identity that differs is the item's error", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		rec := b.create(t, src("q", "m"))
		if _, err := b.db.SQL(t).Exec("UPDATE mend_records SET message_id = CONCAT(message_id, 'x') WHERE record_id = ?", rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		res, err := b.store.RecordCreateMany(ctx, []storage.CreateParams{createParams(src("q", "m"), "{}"), createParams(src("q", "n"), "{}")})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(res[0].Err, mend.ErrIdentityMismatch) {
			t.Errorf("damaged identity = %+v; want ErrIdentityMismatch", res[0])
		}
		if res[1].Err != nil || !res[1].Created {
			t.Errorf("other item = %+v; want created", res[1])
		}
	})

	t.Run("large batches are split into statements by rows and by bytes", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		store := openStore(t, b.db.DSN, storage.Options{MaxPayload: 3 << 20})
		var ps []storage.CreateParams
		for i := range 1100 {
			ps = append(ps, createParams(src("q", fmt.Sprintf("m%04d", i)), "{}"))
		}
		for i := range 3 { // each alone over half the byte bound
			ps = append(ps, createParams(src("q", fmt.Sprintf("big%d", i)), strings.Repeat("p", 2<<20)))
		}
		res, err := store.RecordCreateMany(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil || !r.Created || len(r.Record.Snapshot.Payload) != len(ps[i].Snapshot.Payload) {
				t.Fatalf("item %d = created %v, %v, payload %d bytes; want created with its payload", i, r.Created, r.Err, len(r.Record.Snapshot.Payload))
			}
		}
		if n := len(createdEvents(t, b)); n != len(ps) {
			t.Fatalf("%d created events; want %d", n, len(ps))
		}
	})
}

// TestRecordCreateManyConcurrentOverlap: several batches at once over
// overlapping sources, in different orders. Each source must be recorded
// once, with one created event, exactly one result across all batches
// reporting it created, and every result naming the same record.
func TestRecordCreateManyConcurrentOverlap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	const sources, batches, size = 300, 6, 150
	var wg sync.WaitGroup
	results := make([][]mend.CreateResult, batches)
	params := make([][]storage.CreateParams, batches)
	errs := make([]error, batches)
	for w := range batches {
		store := openStore(t, b.db.DSN, storage.Options{})
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		for range size {
			n := rng.IntN(sources)
			params[w] = append(params[w], createParams(src(fmt.Sprintf("q%d", n%5), fmt.Sprintf("m%d", n)), fmt.Sprintf("batch %d", w)))
		}
		wg.Go(func() { results[w], errs[w] = store.RecordCreateMany(ctx, params[w]) })
	}
	wg.Wait()
	ids := map[mend.SourceID]mend.RecordID{}
	created := map[mend.SourceID]int{}
	for w := range batches {
		if errs[w] != nil {
			t.Fatalf("batch %d: %v", w, errs[w])
		}
		for i, r := range results[w] {
			s := params[w][i].Source
			if r.Err != nil {
				t.Fatalf("batch %d item %d: %v", w, i, r.Err)
			}
			if id, ok := ids[s]; ok && id != r.Record.ID {
				t.Fatalf("%s answered as %s and as %s", s, id, r.Record.ID)
			}
			ids[s] = r.Record.ID
			if r.Created {
				created[s]++
			}
		}
	}
	for s := range ids {
		if created[s] != 1 {
			t.Errorf("%s reported created %d times; want once", s, created[s])
		}
	}
	events := createdEvents(t, b)
	if len(events) != len(ids) {
		t.Errorf("%d records have created events; want %d", len(events), len(ids))
	}
	for id, n := range events {
		if n != 1 {
			t.Errorf("record %s has %d created events; want 1", id, n)
		}
	}
	var records int
	if err := b.db.SQL(t).QueryRow("SELECT COUNT(*) FROM mend_records").Scan(&records); err != nil || records != len(ids) {
		t.Errorf("%d records stored (%v); want %d", records, err, len(ids))
	}
}

// TestRecordCreateManyAnswers: a batch whose rows are all new is answered
// from what was sent and the time read back, without reading the rows; a
// batch holding some existing rows reads them back. Either way each
// answer must be the stored row exactly (as RecordGetByID reads it), and
// each new record must have one created event carrying its row's
// projection, with no event left over for a row that already existed.
func TestRecordCreateManyAnswers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	odd := createParams(src("q", "odd  "), "")
	odd.Snapshot.Payload = nil
	odd.Snapshot.Subjects = nil
	odd.Snapshot.FailedAt = time.Date(2026, 1, 2, 3, 4, 5, 999_999_999, time.FixedZone("x", 3600)) // finer than DATETIME(6)
	odd.Target = mend.Target{}
	odd.State, odd.Reason = mend.StateParked, "dlq: cannot decode \x00 ä"
	big := createParams(src("q2", "big"), "\x00\xff binary")
	big.Snapshot.FailureCount = 1 << 40 // stored clamped
	big.Snapshot.Subjects = []mend.Subject{{Kind: "batch", ID: "ä\u2028<&>"}, {Kind: "", ID: ""}}
	big.Snapshot.FailedAt = time.Date(2026, 1, 2, 3, 4, 5, 1000, time.UTC)
	first := []storage.CreateParams{createParams(src("q", "a"), `{"id":"a"}`), odd, big}
	// The second batch repeats two of the first (so it reads them back) and
	// adds two new ones.
	second := []storage.CreateParams{createParams(src("q", "a"), "again"), createParams(src("q", "b"), "b"), first[2], createParams(src("q3", "c"), "c")}
	second[2].OpID = mend.NewOpID()
	// The third repeats only existing ones: nothing is created.
	third := []storage.CreateParams{second[1], second[3]}
	for i := range third {
		third[i].OpID = mend.NewOpID()
	}
	var records int
	for n, ps := range [][]storage.CreateParams{first, second, third} {
		res, err := b.store.RecordCreateMany(ctx, ps)
		if err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("batch %d item %d: %v", n, i, r.Err)
			}
			if wantCreated := n == 0 || n == 1 && i%2 == 1; r.Created != wantCreated {
				t.Errorf("batch %d item %d: created %v; want %v", n, i, r.Created, wantCreated)
			}
			if r.Created {
				records++
			}
			got := r.Record
			stored, err := b.store.RecordGetByID(ctx, ps[i].Source.Queue, got.ID)
			if err != nil {
				t.Fatalf("batch %d item %d: %v", n, i, err)
			}
			got.StateAge, stored.StateAge = 0, 0
			if !reflect.DeepEqual(got, stored) {
				t.Errorf("batch %d item %d answered\n%+v\nbut the row is\n%+v", n, i, got, stored)
			}
			if !r.Created {
				continue
			}
			var at, state, lastError string
			var attempts int
			var next sql.NullString
			if err := b.db.SQL(t).QueryRow("SELECT CAST(created_at AS CHAR), state, attempts, last_error, CAST(next_attempt_at AS CHAR) FROM mend_events WHERE record_id = ? AND seq = 1 AND kind = 'created'",
				got.ID[:]).Scan(&at, &state, &attempts, &lastError, &next); err != nil {
				t.Fatalf("batch %d item %d: created event: %v", n, i, err)
			}
			wantNext := sql.NullString{}
			if got.NextAttemptAt != nil {
				wantNext = sql.NullString{String: got.NextAttemptAt.Format("2006-01-02 15:04:05.000000"), Valid: true}
			}
			if at != got.UpdatedAt.Format("2006-01-02 15:04:05.000000") || state != string(got.State) || attempts != 0 || lastError != got.LastError || next != wantNext {
				t.Errorf("batch %d item %d: created event carries (%s, %s, %d, %q, %v); want the row's (%s, %s, 0, %q, %v)", n, i, at, state, attempts, lastError, next,
					got.UpdatedAt, got.State, got.LastError, wantNext)
			}
		}
	}
	events := createdEvents(t, b)
	if len(events) != records {
		t.Errorf("created events name %d records; want the %d created (an event for a row that existed?)", len(events), records)
	}
	for id, n := range events {
		if n != 1 {
			t.Errorf("record %s has %d created events", id, n)
		}
	}
}

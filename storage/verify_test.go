package storage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// verifyAll runs Verify and returns every divergence.
func verifyAll(t *testing.T, s *storage.DB, p storage.VerifyParams) ([]storage.Divergence, storage.VerifyStats) {
	t.Helper()
	var divs []storage.Divergence
	st, err := s.Verify(context.Background(), p, func(d storage.Divergence) error {
		divs = append(divs, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return divs, st
}

// history gives a record a realistic life: waiting, attempt failed,
// settled, wake failed, woken (each with its own state, attempts, error
// and due time).
func (b *bundle) history(t *testing.T, rec mend.Record) mend.Record {
	t.Helper()
	ctx := context.Background()
	steps := []struct {
		kind     mend.EventKind
		state    mend.State
		attempts int
		lastErr  string
		retry    time.Duration
	}{
		{mend.EventWaiting, mend.StateWaiting, 1, "batch merging", time.Minute},
		{mend.EventAttemptFailed, mend.StateWaiting, 2, "read batch: down", 2 * time.Minute},
		{mend.EventSettled, mend.StateSettled, 0, "", 0},
		{mend.EventWakeFailed, mend.StateSettled, 1, "publish: refused", time.Second},
		{mend.EventWoken, mend.StateDone, 2, "", 0},
	}
	for _, s := range steps {
		p := appendParams(rec, s.kind, s.state)
		p.Attempts, p.LastError, p.RetryIn, p.Epoch = s.attempts, s.lastErr, s.retry, 3
		v, err := b.store.RecordAppend(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		rec.Version = v
	}
	return rec
}

func TestVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a database mend wrote verifies clean, over pages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range 7 {
			rec := b.create(t, src(fmt.Sprintf("q%d", i%2), fmt.Sprintf("m%d", i)))
			if i%3 == 0 {
				b.history(t, rec)
			}
		}
		if _, err := b.store.RecordCreateMany(ctx, []storage.CreateParams{createParams(src("q9", "a"), "{}"), createParams(src("q9", "b"), "{}")}); err != nil {
			t.Fatal(err)
		}
		divs, st := verifyAll(t, b.store, storage.VerifyParams{PageSize: 2})
		if len(divs) != 0 || st.Records != 9 || st.Divergent != 0 || st.Legacy != 0 || st.Events != 9+3*5 {
			t.Fatalf("verify = %v, %+v; want 9 records, 24 events, clean", divs, st)
		}
	})

	// The negative control: a projection changed behind the log's back is
	// caught, column by column, and only in the record changed.
	t.Run("a corrupted projection is caught", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.history(t, b.create(t, src("q", "m")))
		other := b.create(t, src("q", "other"))
		if _, err := b.db.SQL(t).ExecContext(ctx, "UPDATE mend_records SET attempts = 9, state = 'parked', next_attempt_at = NULL WHERE record_id = ?", other.ID[:]); err != nil {
			t.Fatal(err)
		}
		divs, st := verifyAll(t, b.store, storage.VerifyParams{})
		cols := map[string]bool{}
		for _, d := range divs {
			if d.RecordID != other.ID {
				t.Errorf("divergence in the untouched record %s: %v", rec.ID, d)
			}
			cols[d.Column] = true
		}
		if !cols["attempts"] || !cols["state"] || !cols["next_attempt_at"] || len(divs) != 3 || st.Divergent != 1 {
			t.Fatalf("divergences %v (%+v); want attempts, state and next_attempt_at of %s", divs, st, other.ID)
		}
		// Filters: the other queue, the clean record.
		if divs, st := verifyAll(t, b.store, storage.VerifyParams{Queue: "nope"}); len(divs) != 0 || st.Records != 0 {
			t.Fatalf("verify --queue nope = %v, %+v", divs, st)
		}
		if divs, st := verifyAll(t, b.store, storage.VerifyParams{Record: rec.ID}); len(divs) != 0 || st.Records != 1 {
			t.Fatalf("verify --record clean = %v, %+v", divs, st)
		}
		if _, st := verifyAll(t, b.store, storage.VerifyParams{Since: time.Hour}); st.Records != 2 {
			t.Fatalf("verify --since 1h read %d records; want 2", st.Records)
		}
	})

	t.Run("a missing event is caught", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.history(t, b.create(t, src("q", "m")))
		if _, err := b.db.SQL(t).ExecContext(ctx, "DELETE FROM mend_events WHERE record_id = ? AND seq = 6", rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		divs, _ := verifyAll(t, b.store, storage.VerifyParams{})
		cols := map[string]bool{}
		for _, d := range divs {
			cols[d.Column] = true
		}
		if !cols["version"] || !cols["state"] {
			t.Fatalf("divergences %v; want version and state (the woken event is gone)", divs)
		}
	})

	t.Run("rebuild rewrites the projection from the fold, fenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.history(t, b.create(t, src("q", "m")))
		if _, err := b.db.SQL(t).ExecContext(ctx, "UPDATE mend_records SET attempts = 9, last_error = 'x', state_since = NOW(6) + INTERVAL 1 DAY WHERE record_id = ?", rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		term, err := b.store.LeaseAcquire(ctx, "q", "verify", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		stale := term
		stale.Holder = "an earlier holder"
		if _, err := b.store.RebuildRecord(ctx, stale, rec.ID); !errors.Is(err, mend.ErrFenced) {
			t.Fatalf("rebuild under a stale term = %v; want ErrFenced", err)
		}
		if divs, _ := verifyAll(t, b.store, storage.VerifyParams{}); len(divs) != 3 {
			t.Fatalf("after a fenced rebuild: %v; want the 3 divergences still there", divs)
		}
		fixed, err := b.store.RebuildRecord(ctx, term, rec.ID)
		if err != nil || len(fixed) != 3 {
			t.Fatalf("rebuild = %v, %v; want 3 columns fixed", fixed, err)
		}
		if divs, _ := verifyAll(t, b.store, storage.VerifyParams{}); len(divs) != 0 {
			t.Fatalf("after rebuild: %v; want clean", divs)
		}
		if fixed, err := b.store.RebuildRecord(ctx, term, rec.ID); err != nil || len(fixed) != 0 {
			t.Fatalf("second rebuild = %v, %v; want nothing to fix", fixed, err)
		}
	})

	t.Run("bad input is refused before the database", func(t *testing.T) {
		t.Parallel()
		var s storage.DB
		if _, err := s.Verify(ctx, storage.VerifyParams{Since: -time.Second}, nil); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("Verify(since -1s) = %v; want ErrInvalid", err)
		}
	})
}

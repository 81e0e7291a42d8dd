package storage_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend/storage"
)

// TestRebuildAndFoldEdges: the cases of Verify and RebuildRecord no other
// test reached, each of which a one-line change broke unnoticed.
func TestRebuildAndFoldEdges(t *testing.T) {
	t.Parallel()

	// A record whose only divergence is source_key: the rebuild never
	// writes that column, so its UPDATE would change nothing and match 0
	// rows. Before, 0 rows read as "the term ended": a live term was
	// reported fenced.
	t.Run("a source_key divergence alone is reported, not fenced", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		rec := b.history(t, b.create(t, src("q", "m")))
		if _, err := b.db.SQL(t).ExecContext(ctx, "UPDATE mend_records SET source_key = UNHEX(REPEAT('ab', 32)) WHERE record_id = ?", rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		term, err := b.store.LeaseAcquire(ctx, "q", "verify", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fixed, err := b.store.RebuildRecord(ctx, term, rec.ID)
		if err != nil || len(fixed) != 1 || fixed[0].Column != "source_key" {
			t.Fatalf("rebuild = %v, %v; want the source_key divergence reported under a live term", fixed, err)
		}
	})

	// Events written before migration 0013 carry no projection (state is
	// NULL): a fold of them lacks the record's state, so a rebuild must
	// refuse rather than write it.
	t.Run("a record with pre-0013 events is not rebuilt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		rec := b.history(t, b.create(t, src("q", "m")))
		raw := b.db.SQL(t)
		if _, err := raw.ExecContext(ctx, "UPDATE mend_events SET state = NULL, attempts = NULL, last_error = NULL, next_attempt_at = NULL WHERE record_id = ? AND seq <= 3", rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		// A version divergence, which a legacy fold can still see.
		if _, err := raw.ExecContext(ctx, "UPDATE mend_records SET version = 4, state = 'waiting' WHERE record_id = ?", rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		term, err := b.store.LeaseAcquire(ctx, "q", "verify", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.RebuildRecord(ctx, term, rec.ID); !errors.Is(err, storage.ErrNotDerivable) {
			t.Fatalf("rebuild of a record with pre-0013 events = %v; want ErrNotDerivable", err)
		}
		var version int64
		var state string
		if err := raw.QueryRowContext(ctx, "SELECT version, state FROM mend_records WHERE record_id = ?", rec.ID[:]).Scan(&version, &state); err != nil {
			t.Fatal(err)
		}
		if version != 4 || state != "waiting" {
			t.Errorf("the refused rebuild wrote: version %d, state %s", version, state)
		}
	})

	// A second created event means the log is not one record's history
	// (two records' events under one ID).
	t.Run("verify flags a second created event", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(t)
		rec := b.history(t, b.create(t, src("q", "m")))
		if _, err := b.db.SQL(t).ExecContext(ctx, "UPDATE mend_events SET kind = 'created' WHERE record_id = ? AND seq = 3", rec.ID[:]); err != nil {
			t.Fatal(err)
		}
		divs, st := verifyAll(t, b.store, storage.VerifyParams{})
		if len(divs) != 1 || divs[0].Column != "events" || st.Divergent != 1 {
			t.Fatalf("verify = %v (%+v); want the log flagged as malformed", divs, st)
		}
	})
}

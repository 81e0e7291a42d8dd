package host_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
)

func TestBatchGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("returns state, version and members in stored order", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating", "q/7", "q/3")
		got, err := b.h.BatchGet(ctx, "q", "q/batch/1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Queue != "q" || got.ID != "q/batch/1" || got.State != mend.BatchSpeculating || got.Version != 1 || !slices.Equal(got.Requests, []string{"q/7", "q/3"}) {
			t.Fatalf("BatchGet = %+v; want speculating at version 1 with members q/7, q/3", got)
		}
	})

	t.Run("a missing batch is not found and no spelling error", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "created")
		for _, k := range []struct{ queue, id string }{{"q", "q/batch/2"}, {"other", "q/batch/1"}} {
			_, err := b.h.BatchGet(ctx, k.queue, k.id)
			var se *mend.SpellingError
			if !errors.Is(err, mend.ErrNotFound) || errors.As(err, &se) {
				t.Errorf("BatchGet(%q, %q) = %v; want plain ErrNotFound", k.queue, k.id, err)
			}
		}
	})

	// The application tables compare case-insensitively on both engines, so
	// the server finds a case variant; with a PAD SPACE collation (MariaDB)
	// it also finds a trailing-space variant, with NO PAD (MySQL 8) it does
	// not. Whatever the server finds under another spelling, mend must not
	// take it, and says which spelling it found.
	t.Run("a differently spelled row is a spelling error naming both spellings", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "created")
		pad := b.padSpace(t, "batch")
		for _, tt := range []struct {
			queue, id, field, asked string
			padOnly                 bool // the server finds the row only under PAD SPACE
		}{
			{"q", "Q/BATCH/1", "batch_id", "Q/BATCH/1", false},
			{"q", "q/batch/1 ", "batch_id", "q/batch/1 ", true},
			{"Q", "q/batch/1", "queue", "Q", false},
		} {
			_, err := b.h.BatchGet(ctx, tt.queue, tt.id)
			var se *mend.SpellingError
			if tt.padOnly && !pad {
				if !errors.Is(err, mend.ErrNotFound) || errors.As(err, &se) {
					t.Errorf("BatchGet(%q, %q) = %v; want plain ErrNotFound under a NO PAD collation", tt.queue, tt.id, err)
				}
				continue
			}
			if !errors.As(err, &se) || !errors.Is(err, mend.ErrNotFound) {
				t.Errorf("BatchGet(%q, %q) = %v; want a *mend.SpellingError matching ErrNotFound", tt.queue, tt.id, err)
				continue
			}
			want := map[string]string{"batch_id": "q/batch/1", "queue": "q"}[tt.field]
			if se.Field != tt.field || se.Asked != tt.asked || se.Stored != want {
				t.Errorf("BatchGet(%q, %q): spelling error %+v; want field %s asked %q stored %q", tt.queue, tt.id, se, tt.field, tt.asked, want)
			}
		}
	})

	t.Run("bad input is refused before SQL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, k := range []struct{ queue, id string }{{"", "x"}, {"q", ""}, {"q", string(make([]byte, 1021))}, {"q", "\xff"}} {
			var ve *mend.ValidationError
			if _, err := b.h.BatchGet(ctx, k.queue, k.id); !errors.As(err, &ve) {
				t.Errorf("BatchGet(%q, %.10q) = %v; want *mend.ValidationError", k.queue, k.id, err)
			}
		}
	})
}

func TestBatchTransition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("moves state, version and membership row", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating", "q/1")
		got, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchFailed)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != mend.BatchFailed || got.Version != 2 || !slices.Equal(got.Requests, []string{"q/1"}) {
			t.Fatalf("BatchTransition = %+v; want failed at version 2 with its members", got)
		}
		row, err := b.w.Batch(ctx, "q", "q/batch/1")
		if err != nil || row.State != "failed" || row.Version != 2 {
			t.Fatalf("batch row = %+v, %v; want failed at version 2", row, err)
		}
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"failed/q/batch/1"}) {
			t.Fatalf("membership = %q; want only the failed row", m)
		}
	})

	t.Run("a stale version is a conflict and changes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "created")
		if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchSpeculating); err != nil {
			t.Fatal(err)
		}
		_, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchFailed)
		if !errors.Is(err, mend.ErrConflict) || errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("transition from version 1 at version 2 = %v; want ErrConflict only", err)
		}
		if row, _ := b.w.Batch(ctx, "q", "q/batch/1"); row.State != "speculating" || row.Version != 2 {
			t.Fatalf("batch row = %+v; want speculating at version 2", row)
		}
	})

	t.Run("a missing batch is not found, never a conflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.h.BatchTransition(ctx, "q", "q/batch/9", 1, mend.BatchFailed)
		if !errors.Is(err, mend.ErrNotFound) || errors.Is(err, mend.ErrConflict) {
			t.Fatalf("transition of a missing batch = %v; want ErrNotFound only", err)
		}
		if m := b.membership(t, "q"); len(m) != 0 {
			t.Fatalf("membership = %q; want nothing written", m)
		}
	})

	t.Run("a terminal batch is refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "succeeded")
		_, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchFailed)
		if !errors.Is(err, mend.ErrInvalid) || errors.Is(err, mend.ErrConflict) {
			t.Fatalf("transition of a succeeded batch = %v; want ErrInvalid", err)
		}
		if row, _ := b.w.Batch(ctx, "q", "q/batch/1"); row.State != "succeeded" || row.Version != 1 {
			t.Fatalf("batch row = %+v; want it untouched", row)
		}
	})

	t.Run("a missing old membership row is tolerated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "merging")
		if err := b.w.DropMembership(ctx, "q", "merging", "q/batch/1"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchSucceeded); err != nil {
			t.Fatal(err)
		}
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"succeeded/q/batch/1"}) {
			t.Fatalf("membership = %q; want the succeeded row", m)
		}
	})

	t.Run("duplicate and stale membership rows are tolerated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating")
		// A crash after an earlier CAS left the created row behind, and the
		// new state's row is already there.
		for _, s := range []string{"created", "failed"} {
			if err := b.w.AddMembership(ctx, "q", s, "q/batch/1"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchFailed); err != nil {
			t.Fatal(err)
		}
		// As in the real protocol, only the old state's row is deleted.
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"created/q/batch/1", "failed/q/batch/1"}) {
			t.Fatalf("membership = %q; want the stale created row kept and one failed row", m)
		}
	})

	t.Run("a differently spelled batch is a spelling error and untouched", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "created")
		_, err := b.h.BatchTransition(ctx, "q", "Q/Batch/1", 1, mend.BatchFailed)
		var se *mend.SpellingError
		if !errors.As(err, &se) || se.Asked != "Q/Batch/1" || se.Stored != "q/batch/1" {
			t.Fatalf("transition of a case variant = %v; want a spelling error naming both", err)
		}
		if row, _ := b.w.Batch(ctx, "q", "q/batch/1"); row.State != "created" || row.Version != 1 {
			t.Fatalf("batch row = %+v; want it untouched", row)
		}
	})

	t.Run("versions stop at the host's INT limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "created")
		b.exec(t, "UPDATE batch SET version = ? WHERE queue = 'q' AND id = 'q/batch/1'", math.MaxInt32-1)
		got, err := b.h.BatchTransition(ctx, "q", "q/batch/1", math.MaxInt32-1, mend.BatchSpeculating)
		if err != nil || got.Version != math.MaxInt32 {
			t.Fatalf("transition to version 2^31-1 = %+v, %v; want it stored", got, err)
		}
		var ve *mend.ValidationError
		if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", math.MaxInt32, mend.BatchFailed); !errors.As(err, &ve) {
			t.Fatalf("transition from version 2^31-1 = %v; want a ValidationError before SQL", err)
		}
		if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 0, mend.BatchFailed); !errors.As(err, &ve) {
			t.Fatalf("transition from version 0 = %v; want a ValidationError", err)
		}
		if row, _ := b.w.Batch(ctx, "q", "q/batch/1"); row.State != "speculating" || row.Version != math.MaxInt32 {
			t.Fatalf("batch row = %+v; want speculating at 2^31-1", row)
		}
	})

	t.Run("an unknown state is refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ve *mend.ValidationError
		if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, "Failed"); !errors.As(err, &ve) {
			t.Fatalf("transition to %q = %v; want a ValidationError", "Failed", err)
		}
	})

	t.Run("racing transitions from one version have one winner", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating")
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				to := mend.BatchFailed
				if i%2 == 0 {
					to = mend.BatchMerging
				}
				_, errs[i] = b.h.BatchTransition(ctx, "q", "q/batch/1", 1, to)
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, mend.ErrConflict):
				t.Errorf("a loser got %v; want ErrConflict", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d winners; want exactly 1", won)
		}
		if row, _ := b.w.Batch(ctx, "q", "q/batch/1"); row.Version != 2 {
			t.Fatalf("batch version %d; want 2", row.Version)
		}
	})
}

func TestLiveBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("own state decides, sorted by bytes, limited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Byte order: "q/batch/10" < "q/batch/9" < "q/batch/B" < "q/batch/a";
		// the server's collation would put "a" before "B".
		for id, state := range map[string]string{
			"q/batch/a": "created", "q/batch/B": "merging", "q/batch/9": "cancelling", "q/batch/10": "speculating",
			"q/batch/0": "failed", "q/batch/1": "creating", "q/batch/2": "succeeded",
		} {
			b.seed(t, "q", id, state)
		}
		b.seed(t, "other", "other/batch/1", "created")
		got, err := b.h.LiveBatches(ctx, "q", 10)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"q/batch/10", "q/batch/9", "q/batch/B", "q/batch/a"}; !slices.Equal(got, want) {
			t.Fatalf("LiveBatches = %q; want %q", got, want)
		}
		if got, _ := b.h.LiveBatches(ctx, "q", 2); !slices.Equal(got, []string{"q/batch/10", "q/batch/9"}) {
			t.Fatalf("LiveBatches(limit 2) = %q", got)
		}
	})

	t.Run("stale membership rows are paged past", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// 70 batches, more than one hydration chunk, that finished without
		// their live rows being deleted, all sorting before the live one.
		for i := range 70 {
			id := fmt.Sprintf("q/batch/0%02d", i)
			b.seed(t, "q", id, "failed")
			if err := b.w.AddMembership(ctx, "q", "speculating", id); err != nil {
				t.Fatal(err)
			}
		}
		b.seed(t, "q", "q/batch/7", "created")
		got, err := b.h.LiveBatches(ctx, "q", 1)
		if err != nil || !slices.Equal(got, []string{"q/batch/7"}) {
			t.Fatalf("LiveBatches = %q, %v; want the one live batch behind 70 stale rows", got, err)
		}
	})

	t.Run("duplicate membership rows list a batch once", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating")
		for _, s := range []string{"created", "merging"} {
			if err := b.w.AddMembership(ctx, "q", s, "q/batch/1"); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := b.h.LiveBatches(ctx, "q", 10); err != nil || !slices.Equal(got, []string{"q/batch/1"}) {
			t.Fatalf("LiveBatches = %q, %v; want q/batch/1 once", got, err)
		}
	})

	t.Run("a live batch without a membership row is not seen", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "created")
		if err := b.w.DropMembership(ctx, "q", "created", "q/batch/1"); err != nil {
			t.Fatal(err)
		}
		if got, err := b.h.LiveBatches(ctx, "q", 10); err != nil || len(got) != 0 {
			t.Fatalf("LiveBatches = %q, %v; want none, as the host's own ListByStates", got, err)
		}
	})

	t.Run("a dangling membership row is reported, not fatal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/2", "created")
		b.seed(t, "q", "q/batch/3", "speculating")
		// Another batch of the queue has a membership row and no batch.
		if err := b.w.AddMembership(ctx, "q", "speculating", "q/batch/1"); err != nil {
			t.Fatal(err)
		}
		got, err := b.h.LiveBatches(ctx, "q", 10)
		if err != nil || !slices.Equal(got, []string{"q/batch/2", "q/batch/3"}) {
			t.Fatalf("LiveBatches = %q, %v; want the two live batches", got, err)
		}
		if d := b.danglingRows(); !slices.Equal(d, []dangling{{"q", "q/batch/1", "speculating"}}) {
			t.Fatalf("reported dangling rows %+v; want the speculating row of q/batch/1", d)
		}
	})

	t.Run("a differently spelled membership row is skipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/2", "created")
		b.seed(t, "q", "q/batch/3", "failed")
		for _, id := range []string{"Q/BATCH/2", "q/batch/3 "} {
			if err := b.w.AddMembership(ctx, "q", "speculating", id); err != nil {
				t.Fatal(err)
			}
		}
		got, err := b.h.LiveBatches(ctx, "q", 10)
		if err != nil || !slices.Equal(got, []string{"q/batch/2"}) {
			t.Fatalf("LiveBatches = %q, %v; want only q/batch/2 as stored", got, err)
		}
		// Under PAD SPACE the server hydrates "q/batch/3 " as q/batch/3, a
		// spelling variant; under NO PAD it finds no batch, and the row is
		// dangling like any other row without its batch.
		var want []dangling
		if !b.padSpace(t, "batch") {
			want = []dangling{{"q", "q/batch/3 ", "speculating"}}
		}
		if d := b.danglingRows(); !slices.Equal(d, want) {
			t.Fatalf("dangling rows %+v; want %+v", d, want)
		}
	})

	t.Run("bad input is refused before SQL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tt := range []struct {
			queue string
			limit int
		}{{"", 1}, {"q", 0}, {"q", host.LiveBatchesMax + 1}} {
			var ve *mend.ValidationError
			if _, err := b.h.LiveBatches(ctx, tt.queue, tt.limit); !errors.As(err, &ve) {
				t.Errorf("LiveBatches(%q, %d) = %v; want a ValidationError", tt.queue, tt.limit, err)
			}
		}
	})
}

func TestBuildBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if err := b.w.SeedBuild(ctx, "q", "build-77", "q/batch/3"); err != nil {
		t.Fatal(err)
	}

	t.Run("found", func(t *testing.T) {
		t.Parallel()
		if got, err := b.h.BuildBatch(ctx, "q", "build-77"); err != nil || got != "q/batch/3" {
			t.Fatalf("BuildBatch = %q, %v; want q/batch/3", got, err)
		}
	})
	t.Run("missing is not found", func(t *testing.T) {
		t.Parallel()
		_, err := b.h.BuildBatch(ctx, "q", "build-78")
		var se *mend.SpellingError
		if !errors.Is(err, mend.ErrNotFound) || errors.As(err, &se) {
			t.Fatalf("BuildBatch of a missing build = %v; want plain ErrNotFound", err)
		}
	})
	t.Run("a differently spelled build is a spelling error", func(t *testing.T) {
		t.Parallel()
		_, err := b.h.BuildBatch(ctx, "q", "BUILD-77")
		var se *mend.SpellingError
		if !errors.As(err, &se) || se.Field != "build_id" || se.Asked != "BUILD-77" || se.Stored != "build-77" {
			t.Fatalf("BuildBatch of a case variant = %v; want a spelling error naming both", err)
		}
	})
	t.Run("bad input is refused", func(t *testing.T) {
		t.Parallel()
		var ve *mend.ValidationError
		if _, err := b.h.BuildBatch(ctx, "q", ""); !errors.As(err, &ve) {
			t.Fatalf("BuildBatch(empty) = %v; want a ValidationError", err)
		}
	})
}

func TestMissingTablesAreNamed(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t) // no tables: mend never creates a host's
	h := open(t, db.DSN, db.DSN, host.Options{})
	_, err := h.BatchGet(context.Background(), "q", "q/batch/1")
	if err == nil || !containsAll(err.Error(), "table is missing", "never creates") {
		t.Fatalf("BatchGet without tables = %v; want an error naming the missing table", err)
	}
}

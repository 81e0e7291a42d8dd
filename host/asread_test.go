package host_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/mendq/mend"
)

// TestBatchesAsRead: the planner's path acts on the batch as BatchGet
// returned it, without the host reading it again. A batch that moved or
// vanished since that read must still be a conflict or not found, never
// overwritten; a terminal batch is never moved; and finishing a batch the
// transition just made terminal does not need the EnsureRecord step.
func TestBatchesAsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("moves the batch as read and finishes it", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating", "q/1", "q/2")
		read, err := b.h.BatchGet(ctx, "q", "q/batch/1")
		if err != nil {
			t.Fatal(err)
		}
		moved, err := b.h.BatchTransitionFrom(ctx, read, mend.BatchFailed)
		if err != nil || moved.State != mend.BatchFailed || moved.Version != 2 || !slices.Equal(moved.Requests, read.Requests) {
			t.Fatalf("BatchTransitionFrom = %+v, %v; want failed at version 2 with its members", moved, err)
		}
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"failed/q/batch/1"}) {
			t.Fatalf("membership = %q; want only the failed row", m)
		}
		if err := b.h.BatchFinishFrom(ctx, moved, deadLetter, true); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"q/1", "q/2"} {
			if r := b.request(t, id); r.State != "error" || r.Version != 2 {
				t.Fatalf("request %s = %+v; want error at version 2", id, r)
			}
			if l := b.logs(t, id); len(l) != 1 || l[0].RequestVersion != 2 {
				t.Fatalf("log of %s = %+v; want one entry at version 2", id, l)
			}
		}
	})

	t.Run("a batch that moved since the read is a conflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating", "q/1")
		read, err := b.h.BatchGet(ctx, "q", "q/batch/1")
		if err != nil {
			t.Fatal(err)
		}
		// The host moves it on after mend's read.
		b.exec(t, `UPDATE batch SET state = 'merging', version = 2 WHERE queue = 'q' AND id = 'q/batch/1'`)
		if _, err := b.h.BatchTransitionFrom(ctx, read, mend.BatchFailed); !errors.Is(err, mend.ErrConflict) {
			t.Fatalf("BatchTransitionFrom a stale read = %v; want ErrConflict", err)
		}
		row, err := b.w.Batch(ctx, "q", "q/batch/1")
		if err != nil || row.State != "merging" || row.Version != 2 {
			t.Fatalf("batch row = %+v, %v; want the host's merging at version 2", row, err)
		}
	})

	t.Run("a batch deleted since the read is not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "speculating")
		read, err := b.h.BatchGet(ctx, "q", "q/batch/1")
		if err != nil {
			t.Fatal(err)
		}
		b.exec(t, `DELETE FROM batch WHERE queue = 'q' AND id = 'q/batch/1'`)
		if _, err := b.h.BatchTransitionFrom(ctx, read, mend.BatchFailed); !errors.Is(err, mend.ErrNotFound) || errors.Is(err, mend.ErrConflict) {
			t.Fatalf("BatchTransitionFrom a deleted batch = %v; want ErrNotFound, not ErrConflict", err)
		}
	})

	t.Run("a terminal batch is never moved", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "succeeded")
		read, err := b.h.BatchGet(ctx, "q", "q/batch/1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.h.BatchTransitionFrom(ctx, read, mend.BatchFailed); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("BatchTransitionFrom a succeeded batch = %v; want ErrInvalid", err)
		}
	})

	t.Run("finishing a batch read as terminal writes its membership row", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "failed", "q/1")
		b.exec(t, `DELETE FROM queue_batch_state WHERE queue = 'q'`)
		read, err := b.h.BatchGet(ctx, "q", "q/batch/1")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.h.BatchFinishFrom(ctx, read, deadLetter, false); err != nil {
			t.Fatal(err)
		}
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"failed/q/batch/1"}) {
			t.Fatalf("membership = %q; want the failed row re-created", m)
		}
		if r := b.request(t, "q/1"); r.State != "error" {
			t.Fatalf("request = %+v; want error", r)
		}
	})
}

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

func TestRecordAppendMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seed := func(t *testing.T, b *bundle) []mend.Record {
		t.Helper()
		var recs []mend.Record
		for i := range 3 {
			recs = append(recs, b.create(t, src("q", fmt.Sprintf("m%d", i))))
		}
		return recs
	}
	woken := func(recs []mend.Record, term *mend.Term) []storage.AppendParams {
		var ps []storage.AppendParams
		for _, r := range recs {
			p := appendParams(r, mend.EventWoken, mend.StateDone)
			p.Attempts, p.Fence = 1, term
			ps = append(ps, p)
		}
		return ps
	}

	t.Run("each record its own compare-and-set, one transaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recs := seed(t, b)
		term, err := b.store.LeaseAcquire(ctx, "q", "p", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ps := woken(recs, &term)
		ps[1].Version = 7 // moved under the caller
		res, err := b.store.RecordAppendMany(ctx, ps)
		if err != nil || len(res) != 3 || res[0] != nil || !errors.Is(res[1], mend.ErrConflict) || res[2] != nil {
			t.Fatalf("RecordAppendMany = %v, %v; want nil, ErrConflict, nil", res, err)
		}
		for i, r := range recs {
			got, _ := b.store.RecordGetByID(ctx, "q", r.ID)
			want := mend.StateDone
			if i == 1 {
				want = mend.StatePending
			}
			if got.State != want || (i != 1 && (got.Version != 2 || got.Epoch != term.Epoch)) {
				t.Fatalf("record %d = %s v%d epoch %d; want %s", i, got.State, got.Version, got.Epoch, want)
			}
		}
		if divs, _ := verifyAll(t, b.store, storage.VerifyParams{}); len(divs) != 0 {
			t.Fatalf("verify after RecordAppendMany: %v", divs)
		}
	})

	t.Run("a stale term writes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recs := seed(t, b)
		term, err := b.store.LeaseAcquire(ctx, "q", "p", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		stale := term
		stale.Holder = "an earlier holder"
		if _, err := b.store.RecordAppendMany(ctx, woken(recs, &stale)); !errors.Is(err, mend.ErrFenced) {
			t.Fatalf("RecordAppendMany under a stale term = %v; want ErrFenced", err)
		}
		for _, r := range recs {
			if got, _ := b.store.RecordGetByID(ctx, "q", r.ID); got.Version != 1 {
				t.Fatalf("record written under a stale term: %+v", got)
			}
		}
	})

	t.Run("bad input is refused before the database", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recs := seed(t, b)
		ps := woken(recs, nil)
		ps[2].OpID = ps[0].OpID
		if _, err := b.store.RecordAppendMany(ctx, ps); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("op id twice: %v; want ErrInvalid", err)
		}
		ps = woken(recs, nil)
		ps[1].Source.Queue = "other"
		if _, err := b.store.RecordAppendMany(ctx, ps); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("two queues: %v; want ErrInvalid", err)
		}
	})
}

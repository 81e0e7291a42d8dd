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

	// Each record gets what RecordAppend alone gives it: a twin record,
	// appended alone, ends with the same projection and event.
	t.Run("all at once, each record as if alone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		recs := seed(t, b)
		twins := []mend.Record{}
		for i := range 3 {
			twins = append(twins, b.create(t, src("q", fmt.Sprintf("twin%d", i))))
		}
		var missed []bool
		storage.SetAfterAppendTogether(b.store, func(m bool) { missed = append(missed, m) })
		term, err := b.store.LeaseAcquire(ctx, "q", "p", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// A state change (state_since moves), a failed attempt in the same
		// state with a retry due later (state_since stays), a settle due now.
		mk := func(r mend.Record, i int) storage.AppendParams {
			p := appendParams(r, mend.EventWoken, mend.StateDone)
			switch i {
			case 1:
				p = appendParams(r, mend.EventAttemptFailed, mend.StatePending)
				p.Attempts, p.LastError, p.RetryIn = 1, "host said no", 90*time.Second
			case 2:
				p = appendParams(r, mend.EventSettled, mend.StateSettled)
				p.Data = []byte(`{"outcome":"failed"}`)
			}
			p.Fence, p.Epoch = &term, term.Epoch
			return p
		}
		var ps []storage.AppendParams
		for i, r := range recs {
			ps = append(ps, mk(r, i))
		}
		res, err := b.store.RecordAppendMany(ctx, ps)
		if err != nil || len(res) != 3 || res[0] != nil || res[1] != nil || res[2] != nil {
			t.Fatalf("RecordAppendMany = %v, %v; want three nils", res, err)
		}
		if len(missed) != 1 || missed[0] {
			t.Fatalf("all-at-once try reported missed=%v; want one try that hit", missed)
		}
		for i, r := range twins {
			if _, err := b.store.RecordAppend(ctx, mk(r, i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range recs {
			got, err := b.store.RecordGetByID(ctx, "q", recs[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			want, err := b.store.RecordGetByID(ctx, "q", twins[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != 2 || got.State != want.State || got.Attempts != want.Attempts || got.LastError != want.LastError ||
				got.Epoch != want.Epoch || (got.NextAttemptAt == nil) != (want.NextAttemptAt == nil) {
				t.Fatalf("record %d = %+v; appended alone it is %+v", i, got, want)
			}
			if got.NextAttemptAt != nil {
				if d, w := got.NextAttemptAt.Sub(got.UpdatedAt), want.NextAttemptAt.Sub(want.UpdatedAt); d != w {
					t.Fatalf("record %d due %s after its write; appended alone %s", i, d, w)
				}
			}
			movedSince := !got.StateSince.Equal(recs[i].StateSince)
			if wantMoved := want.State != twins[i].State; movedSince != wantMoved || (movedSince && !got.StateSince.Equal(got.UpdatedAt)) {
				t.Fatalf("record %d: state_since %s -> %s (updated %s); state %s -> %s", i, recs[i].StateSince, got.StateSince, got.UpdatedAt, recs[i].State, got.State)
			}
			h, err := b.store.RecordHistory(ctx, "q", recs[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != 2 || h[1].Seq != 2 || h[1].Kind != ps[i].Kind || h[1].OpID != ps[i].OpID || h[1].Epoch != term.Epoch || !h[1].CreatedAt.Equal(got.UpdatedAt) {
				t.Fatalf("record %d history %+v; want its created event and the %s event at seq 2", i, h, ps[i].Kind)
			}
		}
		if divs, _ := verifyAll(t, b.store, storage.VerifyParams{}); len(divs) != 0 {
			t.Fatalf("verify after RecordAppendMany: %v", divs)
		}
	})

	// Another writer moved one record by exactly one version: the try's
	// UPDATE misses it and the event it would insert has a taken seq. The
	// try keeps nothing and the records are appended each alone.
	movedByOne := func(t *testing.T, unguarded bool) (*bundle, []mend.Record, []error, error) {
		b := setup(t)
		if unguarded {
			storage.DropAppendTogetherGuard(b.store)
		}
		recs := seed(t, b)
		var missed []bool
		storage.SetAfterAppendTogether(b.store, func(m bool) { missed = append(missed, m) })
		ps := woken(recs, nil)
		other := appendParams(recs[1], mend.EventAttemptFailed, mend.StatePending)
		if _, err := b.store.RecordAppend(ctx, other); err != nil {
			t.Fatal(err)
		}
		res, err := b.store.RecordAppendMany(ctx, ps)
		if !unguarded && (len(missed) != 1 || !missed[0]) {
			t.Fatalf("all-at-once try reported missed=%v; want one try that missed", missed)
		}
		return b, recs, res, err
	}
	t.Run("a record moved by one version: the others written once", func(t *testing.T) {
		t.Parallel()
		b, recs, res, err := movedByOne(t, false)
		if err != nil || len(res) != 3 || res[0] != nil || !errors.Is(res[1], mend.ErrConflict) || res[2] != nil {
			t.Fatalf("RecordAppendMany = %v, %v; want nil, ErrConflict, nil", res, err)
		}
		for i, r := range recs {
			h, err := b.store.RecordHistory(ctx, "q", r.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := mend.EventWoken
			if i == 1 {
				want = mend.EventAttemptFailed
			}
			if len(h) != 2 || h[1].Kind != want {
				t.Fatalf("record %d history %+v; want two events, the second %s", i, h, want)
			}
		}
		if divs, _ := verifyAll(t, b.store, storage.VerifyParams{}); len(divs) != 0 {
			t.Fatalf("verify: %v", divs)
		}
	})
	t.Run("negative control: without the guard the same call is refused as an op id used twice", func(t *testing.T) {
		t.Parallel()
		_, _, res, err := movedByOne(t, true)
		if err == nil {
			t.Fatalf("RecordAppendMany without the guard = %v, nil; the test above would not catch a missing guard", res)
		}
		if !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("RecordAppendMany without the guard = %v; want the duplicate seq read as a used op id (ErrInvalid)", err)
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

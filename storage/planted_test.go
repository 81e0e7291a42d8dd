package storage_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// TestAppendManyRefusesMixedTerms: one RecordAppendMany call is one fenced
// transaction checked against one term, so items fenced by different terms
// (or some fenced, some not) are refused before anything is written.
// Accepting them wrote an item whose own term was stale under the first
// item's, unnoticed.
func TestAppendManyRefusesMixedTerms(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	r1, r2 := b.create(t, src("q", "m1")), b.create(t, src("q", "m2"))
	term, err := b.store.LeaseAcquire(ctx, "q", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stale := term // the same epoch under another holder: never the current term
	stale.Holder = "another holder"
	for name, fences := range map[string][2]*mend.Term{
		"a stale term after the current one":  {&term, &stale},
		"an unfenced item after a fenced one": {&term, nil},
		"a fenced item after an unfenced one": {nil, &term},
	} {
		p1, p2 := appendParams(r1, mend.EventSettled, mend.StateSettled), appendParams(r2, mend.EventSettled, mend.StateSettled)
		p1.Fence, p2.Fence = fences[0], fences[1]
		_, err := b.store.RecordAppendMany(ctx, []storage.AppendParams{p1, p2})
		var ve *mend.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: %v; want a ValidationError", name, err)
		}
	}
	for _, rec := range []mend.Record{r1, r2} {
		got, err := b.store.RecordGetByID(ctx, "q", rec.ID)
		if err != nil || got.Version != rec.Version {
			t.Errorf("record %s at version %d (%v); want nothing written (version %d)", rec.ID, got.Version, err, rec.Version)
		}
	}
}

// TestCreateManySameOpIDInTwoQueues: op IDs are unique per queue, so one
// RecordCreateMany call may use the same op ID in two queues, and both
// items are created. Refusing the second (op IDs checked across queues)
// went unnoticed.
func TestCreateManySameOpIDInTwoQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	op := mend.NewOpID()
	pa, pb := createParams(src("a", "m"), `{"batch_id":"b1"}`), createParams(src("b", "m"), `{"batch_id":"b1"}`)
	pa.OpID, pb.OpID = op, op
	res, err := b.store.RecordCreateMany(t.Context(), []storage.CreateParams{pa, pb})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Created {
			t.Errorf("item %d: created %v, %v; want created (op IDs are per queue)", i, r.Created, r.Err)
		}
	}
	// Within one queue the op ID is still refused.
	pc, pd := createParams(src("c", "m1"), `{}`), createParams(src("c", "m2"), `{}`)
	pc.OpID, pd.OpID = op, op
	res, err = b.store.RecordCreateMany(t.Context(), []storage.CreateParams{pc, pd})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, mend.ErrInvalid) {
		t.Errorf("one op ID twice in queue c: %+v, %v; want the second refused", res, err)
	}
}

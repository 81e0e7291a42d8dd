package sqtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/sqtest"
)

type recordingWaker struct{ got []string }

func (r *recordingWaker) Wake(_ context.Context, w mend.WakeUp) error {
	r.got = append(r.got, w.MessageID)
	return nil
}

func TestFaultyWaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	next := &recordingWaker{}
	f := &sqtest.FaultyWaker{Next: next}
	f.RefuseNext(1)
	if err := f.Wake(ctx, mend.WakeUp{MessageID: "a"}); !errors.Is(err, sqtest.ErrInjected) {
		t.Fatalf("refused publish = %v; want ErrInjected", err)
	}
	f.LoseNextAnswer(1)
	if err := f.Wake(ctx, mend.WakeUp{MessageID: "b"}); !errors.Is(err, mend.ErrAmbiguous) {
		t.Fatalf("publish with a lost answer = %v; want ErrAmbiguous", err)
	}
	if err := f.Wake(ctx, mend.WakeUp{MessageID: "c"}); err != nil {
		t.Fatalf("unarmed publish = %v", err)
	}
	if want := []string{"b", "c"}; len(next.got) != 2 || next.got[0] != want[0] || next.got[1] != want[1] {
		t.Fatalf("reached the host: %q; want %q (the refused one never does)", next.got, want)
	}
	calls, errs := f.Calls()
	if len(calls) != 3 || errs[2] != nil {
		t.Fatalf("calls = %+v, %v", calls, errs)
	}
}

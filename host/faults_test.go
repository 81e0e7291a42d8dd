package host_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

func TestFailNextPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("fails the first matching publish, then lets it through", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.h.FailNextPublish(ctx, "speculate", "q"); err != nil {
			t.Fatal(err)
		}
		w := mend.WakeUp{Queue: "q", MessageID: "wake/r1/1", BatchID: "b2", Epoch: 3}
		err := b.h.Wake(ctx, w)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1644 || me.SQLState != [5]byte{'4', '5', '0', '0', '0'} {
			t.Fatalf("first Wake = %v; want the trigger's SIGNAL (1644, 45000)", err)
		}
		if errors.Is(err, mend.ErrConflict) || errors.Is(err, mend.ErrInvalid) || errors.Is(err, mend.ErrBusy) {
			t.Fatalf("the injected failure %v matches a sentinel; want a plain error", err)
		}
		if msgs, _ := b.h.Messages(ctx, "speculate", "q"); len(msgs) != 0 {
			t.Fatalf("the failed publish left %d rows; want none", len(msgs))
		}
		// The same publish, retried, goes through, and only once.
		for i := range 2 {
			if err := b.h.Wake(ctx, w); err != nil {
				t.Fatalf("Wake retry #%d: %v", i+1, err)
			}
		}
		msgs, err := b.h.Messages(ctx, "speculate", "q")
		if err != nil || len(msgs) != 1 || msgs[0].ID != w.MessageID {
			t.Fatalf("Messages = %+v, %v; want the one wake-up", msgs, err)
		}
	})

	t.Run("other topics and partitions are not hit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.h.FailNextPublish(ctx, "speculate", "q1"); err != nil {
			t.Fatal(err)
		}
		if err := b.h.Wake(ctx, mend.WakeUp{Queue: "q2", MessageID: "m", BatchID: "b"}); err != nil {
			t.Fatalf("Wake on q2 = %v; want nil", err)
		}
		if err := b.h.Wake(ctx, mend.WakeUp{Queue: "q10", MessageID: "m", BatchID: "b"}); err != nil {
			t.Fatalf("Wake on q10 = %v; want nil", err)
		}
		if _, err := b.h.Publish(ctx, hostMessage("speculate_dlq", "q1", "m")); err != nil {
			t.Fatalf("publish on speculate_dlq/q1 = %v; want nil", err)
		}
		if err := b.h.Wake(ctx, mend.WakeUp{Queue: "q1", MessageID: "m", BatchID: "b"}); err == nil {
			t.Fatal("Wake on q1 = nil; want the armed failure")
		}
	})

	t.Run("each call arms one failure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 2 {
			if err := b.h.FailNextPublish(ctx, "speculate", "q"); err != nil {
				t.Fatal(err)
			}
		}
		var got []bool
		for range 3 {
			err := b.h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m", BatchID: "b"})
			got = append(got, err == nil)
		}
		if fmt.Sprint(got) != "[false false true]" {
			t.Fatalf("publish outcomes (ok?) = %v; want [false false true]", got)
		}
	})

	t.Run("concurrent publishers: exactly one fails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.h.FailNextPublish(ctx, "speculate", "q"); err != nil {
			t.Fatal(err)
		}
		const n = 10
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = b.h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: fmt.Sprintf("m%d", i), BatchID: "b"})
			})
		}
		close(start)
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
			}
		}
		msgs, err := b.h.Messages(ctx, "speculate", "q")
		if err != nil || failed != 1 || len(msgs) != n-1 {
			t.Fatalf("%d publishes failed, %d rows stored (%v); want 1 and %d", failed, len(msgs), err, n-1)
		}
	})
}

// TestFailNextPublishNeedsMemoryTable is the negative control for the fault's
// design: with the control table on InnoDB, the SIGNAL rolls back the
// trigger's own delete, so the "one-shot" fault fires forever.
func TestFailNextPublishNeedsMemoryTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if err := b.h.FailNextPublish(ctx, "speculate", "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sql.Exec("ALTER TABLE sq_faults ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := b.h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m", BatchID: "b"}); err == nil {
			t.Fatalf("publish #%d with an InnoDB control table = nil; want the fault to stick", i+1)
		}
	}
	var n int
	if err := b.sql.QueryRow("SELECT COUNT(*) FROM sq_faults").Scan(&n); err != nil || n != 1 {
		t.Fatalf("armed faults left = %d (%v); want 1 (every consume was rolled back)", n, err)
	}
}

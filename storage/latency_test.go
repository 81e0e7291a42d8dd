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

func TestRepairLatency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Ten repairs finished now, of dead letters that failed 1 to 10 minutes
	// ago; the slowest in queue "slow".
	now := time.Now()
	for k := 1; k <= 10; k++ {
		q := "q"
		if k == 10 {
			q = "slow"
		}
		p := createParams(src(q, fmt.Sprintf("m%d", k)), "{}")
		p.Snapshot.FailedAt = now.Add(-time.Duration(k) * time.Minute)
		rec, _, err := b.store.RecordCreate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.RecordAppend(ctx, appendParams(rec, mend.EventWoken, mend.StateDone)); err != nil {
			t.Fatal(err)
		}
	}
	// Not counted: a record still pending, and one without a failure time.
	pending := createParams(src("q", "pending"), "{}")
	pending.Snapshot.FailedAt = now.Add(-time.Hour)
	if _, _, err := b.store.RecordCreate(ctx, pending); err != nil {
		t.Fatal(err)
	}
	noTime := b.create(t, src("q", "no-time"))
	if _, err := b.store.RecordAppend(ctx, appendParams(noTime, mend.EventDone, mend.StateDone)); err != nil {
		t.Fatal(err)
	}

	got, err := b.store.RepairLatency(ctx, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	near := func(d, want time.Duration) bool { return d > want-30*time.Second && d < want+30*time.Second }
	if got.Count != 10 || !near(got.P50, 5*time.Minute) || !near(got.P99, 10*time.Minute) || !near(got.Max, 10*time.Minute) {
		t.Fatalf("latency = %+v; want 10 repairs, p50 5m, p99 and max 10m", got)
	}
	if len(got.Worst) != 1 || got.Worst[0].Queue != "slow" || got.Worst[0].Count != 1 {
		t.Fatalf("worst = %+v; want queue slow", got.Worst)
	}
	if _, err := b.store.RepairLatency(ctx, 0, 1); !errors.Is(err, mend.ErrInvalid) {
		t.Fatalf("window 0: %v; want ErrInvalid", err)
	}
	empty := setup(t)
	if got, err := empty.store.RepairLatency(ctx, time.Hour, 5); err != nil || got.Count != 0 || got.Worst != nil {
		t.Fatalf("empty database: %+v, %v", got, err)
	}
	_ = storage.RepairLatencyWindowDefault
}

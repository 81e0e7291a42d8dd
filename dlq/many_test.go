package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/storage"
)

// Compile-time check that the store has the batch method.
var _ dlq.ManyStore = (*storage.DB)(nil)

// oneByOne hides the store's batch method, for RecordMany's fallback.
type oneByOne struct{ s *storage.DB }

func (o oneByOne) RecordCreate(ctx context.Context, p mend.CreateParams) (mend.Record, bool, error) {
	return o.s.RecordCreate(ctx, p)
}

// repairs counts inline repair requests per queue.
type repairs struct {
	mu     sync.Mutex
	queues []string
}

func (r *repairs) TryRepair(_ context.Context, queue string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queues = append(r.queues, queue)
	return nil
}

func TestRecordMany(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			rep := &repairs{}
			b := setup(t, dlq.Config{Repairer: rep})
			in := b.in
			if !batched {
				var err error
				if in, err = dlq.New(oneByOne{b.store}, dlq.Config{Repairer: rep, Builds: buildsFunc(func(context.Context, string, string) (string, error) {
					return "", errors.New("not used")
				})}); err != nil {
					t.Fatal(err)
				}
			}
			earlier := b.deadLetter(t, "speculate", "q", "q/batch/9", `{"id":"q/batch/9","queue":"q"}`, failure())
			before := b.record(t, earlier)
			rep.queues = nil // Record's own inline repair
			bad := b.deadLetter(t, "speculate", "q", "bad", `{"id":"q/batch/3","queue":"q"}`, failure()).Delivery()
			bad.Source.MessageID = strings.Repeat("m", 256) // one character too many
			first := b.deadLetter(t, "speculate", "q", "q/batch/1", `{"id":"q/batch/1","queue":"q"}`, failure()).Delivery()
			ds := []dlq.Delivery{
				first,
				b.deadLetter(t, "conclude", "q2", "q2/batch/5/conclude", `{"id":"q2/batch/5","queue":"q2"}`, failure()).Delivery(),
				bad,
				b.deadLetter(t, "speculate", "q", "junk", `not json`, failure()).Delivery(),
				earlier.Delivery(), // redelivered
				first,              // twice in the batch
			}
			res, err := in.RecordMany(ctx, ds)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != len(ds) {
				t.Fatalf("%d results for %d deliveries", len(res), len(ds))
			}
			if r := res[0]; r.Err != nil || !r.Created {
				t.Fatalf("first delivery = %+v; want created", r)
			}
			wantPending(t, res[0].Record, "q", "q/batch/1", mend.OutcomeFailed)
			if r := res[1]; r.Err != nil || !r.Created {
				t.Fatalf("second delivery = %+v; want created", r)
			}
			wantPending(t, res[1].Record, "q2", "q2/batch/5", mend.OutcomeFailed)
			if r := res[2]; !errors.Is(r.Err, mend.ErrInvalid) {
				t.Fatalf("bad delivery = %+v; want ErrInvalid", r)
			}
			if r := res[3]; r.Err != nil || !r.Created {
				t.Fatalf("undecodable delivery = %+v; want recorded", r)
			}
			wantParked(t, res[3].Record, "q")
			if r := res[4]; r.Err != nil || r.Created || r.Record.ID != before.ID {
				t.Fatalf("redelivery = %+v; want the earlier record %s, not created", r, before.ID)
			}
			if r := res[5]; r.Err != nil || r.Created || r.Record.ID != res[0].Record.ID {
				t.Fatalf("repeated delivery = %+v; want the first one's record, not created", r)
			}
			for i, r := range res {
				if r.Err != nil {
					continue
				}
				got, err := b.store.RecordGet(ctx, r.Record.Source)
				if err != nil || got.ID != r.Record.ID {
					t.Fatalf("delivery %d: read back %+v, %v; want record %s", i, got, err, r.Record.ID)
				}
				h, err := b.store.RecordHistory(ctx, got.Source.Queue, got.ID)
				if err != nil || len(h) != 1 || h[0].Kind != mend.EventCreated {
					t.Fatalf("delivery %d: history %+v, %v; want one created event", i, h, err)
				}
			}
			slices.Sort(rep.queues)
			if !slices.Equal(rep.queues, []string{"q", "q2"}) {
				t.Fatalf("inline repairs of %q; want q and q2 once each", rep.queues)
			}
		})
	}
}

// TestRecordManyConcurrent: intakes recording overlapping storms at once
// record each dead letter once, with one created event, and tell exactly
// one of them it created it.
func TestRecordManyConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, dlq.Config{})
	const letters, workers = 120, 4
	var all []dlq.Delivery
	for i := range letters {
		q := fmt.Sprintf("q%d", i%7)
		batch := fmt.Sprintf("%s/batch/%d", q, i)
		all = append(all, b.deadLetter(t, "speculate", q, batch, fmt.Sprintf(`{"id":%q,"queue":%q}`, batch, q), failure()).Delivery())
	}
	results := make([][]dlq.ManyResult, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		// Overlapping windows, in a different order per worker.
		var ds []dlq.Delivery
		for i := range 80 {
			ds = append(ds, all[(w*20+i*(w+1))%letters])
		}
		wg.Go(func() { results[w], errs[w] = b.in.RecordMany(ctx, ds) })
	}
	wg.Wait()
	created := map[mend.RecordID]int{}
	seen := map[mend.SourceID]mend.RecordID{}
	for w := range workers {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		for _, r := range results[w] {
			if r.Err != nil {
				t.Fatalf("worker %d: %v", w, r.Err)
			}
			if id, ok := seen[r.Record.Source]; ok && id != r.Record.ID {
				t.Fatalf("%s recorded as %s and %s", r.Record.Source, id, r.Record.ID)
			}
			seen[r.Record.Source] = r.Record.ID
			if r.Created {
				created[r.Record.ID]++
			}
		}
	}
	for s, id := range seen {
		if created[id] != 1 {
			t.Errorf("%s reported created %d times; want once", s, created[id])
		}
		h, err := b.store.RecordHistory(ctx, s.Queue, id)
		if err != nil || len(h) != 1 {
			t.Errorf("%s: %d events (%v); want one created event", s, len(h), err)
		}
	}
}

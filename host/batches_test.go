package host_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
)

func TestBatchGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("returns state, version and members", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchSpeculating, "r2", "r1")
		got, err := b.h.BatchGet(ctx, "q", "b1")
		if err != nil {
			t.Fatal(err)
		}
		want := mend.Batch{Queue: "q", ID: "b1", State: mend.BatchSpeculating, Version: 1, Requests: []string{"r2", "r1"}}
		if got.Queue != want.Queue || got.ID != want.ID || got.State != want.State || got.Version != want.Version || !slices.Equal(got.Requests, want.Requests) {
			t.Fatalf("BatchGet = %+v; want %+v", got, want)
		}
	})

	t.Run("missing batch is not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchCreated)
		for _, k := range []struct{ queue, id string }{{"q", "b2"}, {"other", "b1"}, {"q", "B1"}, {"q", "b1 "}} {
			if _, err := b.h.BatchGet(ctx, k.queue, k.id); !errors.Is(err, mend.ErrNotFound) {
				t.Errorf("BatchGet(%q, %q) = %v; want ErrNotFound", k.queue, k.id, err)
			}
		}
	})
}

func TestBatchTransition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("success bumps the version and moves the membership row", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchSpeculating, "r1")
		got, err := b.h.BatchTransition(ctx, "q", "b1", 1, mend.BatchFailed)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != mend.BatchFailed || got.Version != 2 || !slices.Equal(got.Requests, []string{"r1"}) {
			t.Fatalf("BatchTransition = %+v; want failed at version 2 with its requests", got)
		}
		read, err := b.h.BatchGet(ctx, "q", "b1")
		if err != nil || read.State != mend.BatchFailed || read.Version != 2 {
			t.Fatalf("BatchGet after transition = %+v, %v; want failed at version 2", read, err)
		}
		b.membershipMatches(t)
	})

	t.Run("stale version is a conflict and changes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchCreated)
		if _, err := b.h.BatchTransition(ctx, "q", "b1", 1, mend.BatchSpeculating); err != nil {
			t.Fatal(err)
		}
		_, err := b.h.BatchTransition(ctx, "q", "b1", 1, mend.BatchFailed)
		if !errors.Is(err, mend.ErrConflict) || errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("transition from version 1 at version 2 = %v; want ErrConflict only", err)
		}
		got, _ := b.h.BatchGet(ctx, "q", "b1")
		if got.State != mend.BatchSpeculating || got.Version != 2 {
			t.Fatalf("after the lost CAS batch is %s v%d; want speculating v2", got.State, got.Version)
		}
		b.membershipMatches(t)
	})

	t.Run("missing batch is not found, not a conflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "other", "b1", mend.BatchCreated)
		_, err := b.h.BatchTransition(ctx, "q", "b1", 1, mend.BatchFailed)
		if !errors.Is(err, mend.ErrNotFound) || errors.Is(err, mend.ErrConflict) {
			t.Fatalf("transition of a missing batch = %v; want ErrNotFound only", err)
		}
		got, _ := b.h.BatchGet(ctx, "other", "b1")
		if got.State != mend.BatchCreated || got.Version != 1 {
			t.Fatalf("the other queue's batch changed to %s v%d", got.State, got.Version)
		}
	})

	t.Run("nothing leaves a terminal state", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, s := range []mend.BatchState{mend.BatchSucceeded, mend.BatchFailed, mend.BatchCancelled} {
			b.seed(t, "q", string(s), s)
			_, err := b.h.BatchTransition(ctx, "q", string(s), 1, mend.BatchFailed)
			if !errors.Is(err, mend.ErrInvalid) || errors.Is(err, mend.ErrConflict) {
				t.Errorf("transition out of %s = %v; want ErrInvalid", s, err)
			}
			got, _ := b.h.BatchGet(ctx, "q", string(s))
			if got.State != s || got.Version != 1 {
				t.Errorf("batch %s changed to %s v%d", s, got.State, got.Version)
			}
		}
		b.membershipMatches(t)
	})

	t.Run("a drifted membership index fails the transition", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchMerging)
		if err := b.h.CheckMembership(ctx, "q"); err != nil {
			t.Fatalf("CheckMembership on a fresh seed = %v", err)
		}
		if _, err := b.sql.Exec("DELETE FROM sq_batch_membership"); err != nil {
			t.Fatal(err)
		}
		if err := b.h.CheckMembership(ctx, "q"); err == nil {
			t.Fatal("CheckMembership with the index row deleted = nil; want an error (negative control)")
		}
		if _, err := b.h.BatchTransition(ctx, "q", "b1", 1, mend.BatchSucceeded); err == nil {
			t.Fatal("transition with no index row = nil; want an error")
		}
		got, _ := b.h.BatchGet(ctx, "q", "b1")
		if got.State != mend.BatchMerging || got.Version != 1 {
			t.Fatalf("failed transition left the batch %s v%d; want merging v1 (rolled back)", got.State, got.Version)
		}
	})

	t.Run("many transitions keep the index equal to the batch states", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rng := rand.New(rand.NewPCG(1, 2))
		states := []mend.BatchState{mend.BatchCreated, mend.BatchSpeculating, mend.BatchMerging, mend.BatchCancelling,
			mend.BatchSucceeded, mend.BatchFailed, mend.BatchCancelled}
		type cur struct {
			queue, id string
			version   int64
			state     mend.BatchState
		}
		var live []cur
		for i := range 12 {
			c := cur{queue: fmt.Sprintf("q%d", i%3), id: fmt.Sprintf("b%02d", i), version: 1, state: mend.BatchCreating}
			b.seed(t, c.queue, c.id, c.state)
			live = append(live, c)
		}
		for step := 0; len(live) > 0 && step < 200; step++ {
			i := rng.IntN(len(live))
			to := states[rng.IntN(len(states))]
			got, err := b.h.BatchTransition(ctx, live[i].queue, live[i].id, live[i].version, to)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			live[i].version, live[i].state = got.Version, got.State
			if to.Terminal() {
				live = slices.Delete(live, i, i+1)
			}
		}
		for _, q := range []string{"q0", "q1", "q2"} {
			if err := b.h.CheckMembership(ctx, q); err != nil {
				t.Error(err)
			}
		}
		b.membershipMatches(t)
	})

	t.Run("racing transitions have one winner per version", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchCreated)
		b.seed(t, "q", "b2", mend.BatchCreated) // a bystander in the same index range
		racers := []mend.BatchState{mend.BatchCreated, mend.BatchSpeculating, mend.BatchMerging, mend.BatchCancelling,
			mend.BatchSpeculating, mend.BatchMerging, mend.BatchCreated, mend.BatchCancelling}
		version := int64(1)
		for round := range 10 {
			start := make(chan struct{})
			errs := make([]error, len(racers))
			results := make([]mend.Batch, len(racers))
			var wg sync.WaitGroup
			for i, to := range racers {
				wg.Go(func() {
					<-start
					results[i], errs[i] = b.h.BatchTransition(ctx, "q", "b1", version, to)
				})
			}
			close(start)
			wg.Wait()
			winners := 0
			var won mend.Batch
			for i, err := range errs {
				switch {
				case err == nil:
					winners++
					won = results[i]
				case !errors.Is(err, mend.ErrConflict):
					t.Fatalf("round %d racer %d: %v; want nil or ErrConflict", round, i, err)
				}
			}
			if winners != 1 || won.Version != version+1 {
				t.Fatalf("round %d: %d winners (last at version %d); want exactly 1 at version %d", round, winners, won.Version, version+1)
			}
			got, _ := b.h.BatchGet(ctx, "q", "b1")
			if got.State != won.State || got.Version != won.Version {
				t.Fatalf("round %d: stored %s v%d; the winner wrote %s v%d", round, got.State, got.Version, won.State, won.Version)
			}
			b.membershipMatches(t)
			version = won.Version
		}
	})

	t.Run("concurrent writers on different batches of one queue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const writers, perWriter = 4, 5
		for w := range writers {
			for i := range perWriter {
				b.seed(t, "q", fmt.Sprintf("w%d-b%d", w, i), mend.BatchCreated)
			}
		}
		walk := []mend.BatchState{mend.BatchSpeculating, mend.BatchMerging, mend.BatchCancelling, mend.BatchCancelled}
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range perWriter {
					for v, to := range walk {
						if _, err := b.h.BatchTransition(ctx, "q", fmt.Sprintf("w%d-b%d", w, i), int64(v+1), to); err != nil {
							errs[w] = err
							return
						}
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if err := b.h.CheckMembership(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		b.membershipMatches(t)
		live, err := b.h.LiveBatches(ctx, "q", 100)
		if err != nil || len(live) != 0 {
			t.Fatalf("LiveBatches after every batch was cancelled = %q, %v; want none", live, err)
		}
	})
}

func TestLiveBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("smallest first across states, terminal and creating excluded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		seeds := []struct {
			id    string
			state mend.BatchState
		}{
			{"b5", mend.BatchCreated}, {"b1", mend.BatchSucceeded}, {"b3", mend.BatchMerging},
			{"b2", mend.BatchFailed}, {"b4", mend.BatchCancelling}, {"b0", mend.BatchCancelled},
			{"b7", mend.BatchSpeculating}, {"b6", mend.BatchCreating}, {"b8", mend.BatchCreated},
		}
		for _, s := range seeds {
			b.seed(t, "q", s.id, s.state)
		}
		b.seed(t, "other", "a0", mend.BatchCreated)
		for _, tt := range []struct {
			limit int
			want  []string
		}{
			{1, []string{"b3"}},
			{2, []string{"b3", "b4"}},
			{10, []string{"b3", "b4", "b5", "b7", "b8"}},
		} {
			got, err := b.h.LiveBatches(ctx, "q", tt.limit)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("LiveBatches(q, %d) = %q, %v; want %q", tt.limit, got, err, tt.want)
			}
		}
	})

	t.Run("byte order, not collation order", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := []string{"b", "a ", "a", "B", "é", "e\u0301", "😀", "ab", "a\t"}
		for i, id := range ids {
			b.seed(t, "q", id, mend.LiveBatchStates[i%len(mend.LiveBatchStates)])
		}
		want := slices.Clone(ids)
		slices.Sort(want) // Go compares strings byte by byte
		got, err := b.h.LiveBatches(ctx, "q", len(ids))
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("LiveBatches = %q, %v; want %q", got, err, want)
		}
	})

	t.Run("a transition out of the live states removes the batch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchSpeculating)
		b.seed(t, "q", "b2", mend.BatchCreated)
		if _, err := b.h.BatchTransition(ctx, "q", "b1", 1, mend.BatchFailed); err != nil {
			t.Fatal(err)
		}
		got, err := b.h.LiveBatches(ctx, "q", 5)
		if err != nil || !slices.Equal(got, []string{"b2"}) {
			t.Fatalf("LiveBatches = %q, %v; want [b2]", got, err)
		}
	})

	t.Run("empty queue gives an empty list", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got, err := b.h.LiveBatches(ctx, "q", 5)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("LiveBatches on an empty queue = %#v, %v; want an empty slice", got, err)
		}
	})
}

func TestBatchFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for _, tt := range []struct {
		batch mend.BatchState
		want  host.RequestState
	}{
		{mend.BatchSucceeded, host.RequestLanded},
		{mend.BatchFailed, host.RequestError},
		{mend.BatchCancelled, host.RequestCancelled},
	} {
		t.Run(fmt.Sprintf("%s fans out as %s, twice the same", tt.batch, tt.want), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.seed(t, "q", "b1", mend.BatchMerging, "r1", "r2", "r3")
			if _, err := b.h.BatchTransition(ctx, "q", "b1", 1, tt.batch); err != nil {
				t.Fatal(err)
			}
			// r3 was cancelled on its own before the batch finished: a
			// terminal request is never overwritten.
			if err := b.h.SetRequestState(ctx, "q", "r3", host.RequestCancelled); err != nil {
				t.Fatal(err)
			}
			want := []host.Request{
				{Queue: "q", ID: "r1", BatchID: "b1", State: tt.want, Version: 2},
				{Queue: "q", ID: "r2", BatchID: "b1", State: tt.want, Version: 2},
				{Queue: "q", ID: "r3", BatchID: "b1", State: host.RequestCancelled, Version: 2},
			}
			for i := range 2 {
				if err := b.h.BatchFinish(ctx, "q", "b1"); err != nil {
					t.Fatalf("BatchFinish #%d: %v", i+1, err)
				}
				got, err := b.h.Requests(ctx, "q", "b1")
				if err != nil || !slices.Equal(got, want) {
					t.Fatalf("after BatchFinish #%d requests = %+v, %v; want %+v", i+1, got, err, want)
				}
			}
			got, _ := b.h.BatchGet(ctx, "q", "b1")
			if got.State != tt.batch || got.Version != 2 {
				t.Fatalf("BatchFinish changed the batch to %s v%d", got.State, got.Version)
			}
		})
	}

	t.Run("a terminal batch seeded with open requests", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchSucceeded, "r1")
		if r, _ := b.h.Request(ctx, "q", "r1"); r.State.Terminal() {
			t.Fatalf("seeded request is %s; want non-terminal", r.State)
		}
		if err := b.h.BatchFinish(ctx, "q", "b1"); err != nil {
			t.Fatal(err)
		}
		if r, err := b.h.Request(ctx, "q", "r1"); err != nil || r.State != host.RequestLanded {
			t.Fatalf("request after BatchFinish = %+v, %v; want landed", r, err)
		}
	})

	t.Run("a request now owned by another batch is left alone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "b1", mend.BatchFailed, "r1", "r2")
		if _, err := b.sql.Exec("UPDATE sq_requests SET batch_id = 'b9' WHERE id = 'r2'"); err != nil {
			t.Fatal(err)
		}
		if err := b.h.BatchFinish(ctx, "q", "b1"); err != nil {
			t.Fatal(err)
		}
		r2, _ := b.h.Request(ctx, "q", "r2")
		if r2.State != host.RequestProcessing || r2.Version != 1 {
			t.Fatalf("r2 (moved to b9) = %s v%d; want untouched", r2.State, r2.Version)
		}
		if r1, _ := b.h.Request(ctx, "q", "r1"); r1.State != host.RequestError {
			t.Fatalf("r1 = %s; want error", r1.State)
		}
	})

	t.Run("a live batch is invalid and nothing changes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, s := range append([]mend.BatchState{mend.BatchCreating}, mend.LiveBatchStates...) {
			b.seed(t, "q", string(s), s, "r-"+string(s))
			if err := b.h.BatchFinish(ctx, "q", string(s)); !errors.Is(err, mend.ErrInvalid) {
				t.Errorf("BatchFinish on a %s batch = %v; want ErrInvalid", s, err)
			}
			if r, _ := b.h.Request(ctx, "q", "r-"+string(s)); r.State.Terminal() || r.Version != 1 {
				t.Errorf("request of the %s batch became %s v%d", s, r.State, r.Version)
			}
		}
	})

	t.Run("missing batch is not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.h.BatchFinish(ctx, "q", "nope"); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("BatchFinish of a missing batch = %v; want ErrNotFound", err)
		}
	})
}

func TestSeedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.seed(t, "q", "b1", mend.BatchCreated, "r1")
	if err := b.h.SeedBatch(ctx, "q", "b1", mend.BatchCreated); !errors.Is(err, mend.ErrConflict) {
		t.Errorf("seeding b1 twice = %v; want ErrConflict", err)
	}
	if err := b.h.SeedBatch(ctx, "q", "b2", mend.BatchCreated, "r1"); !errors.Is(err, mend.ErrConflict) {
		t.Errorf("seeding a second owner of r1 = %v; want ErrConflict", err)
	}
	if _, err := b.h.BatchGet(ctx, "q", "b2"); !errors.Is(err, mend.ErrNotFound) {
		t.Errorf("the failed seed left b2 behind: %v", err)
	}
	if r, err := b.h.Request(ctx, "q", "r1"); err != nil || r.State != host.RequestBatched || r.BatchID != "b1" {
		t.Errorf("r1 = %+v, %v; want batched in b1", r, err)
	}
	if err := b.h.SetRequestState(ctx, "q", "nope", host.RequestLanded); !errors.Is(err, mend.ErrNotFound) {
		t.Errorf("SetRequestState on a missing request = %v; want ErrNotFound", err)
	}
	b.membershipMatches(t)
}

// TestValidation shows every entry point rejects bad input with a
// *mend.ValidationError before reaching MySQL: the adapter is closed, so any
// query would fail with a different error.
func TestValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t).db
	h, err := host.Open(ctx, db.DSN, "", host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 256)
	wide := strings.Repeat("😀", 256)
	calls := []struct {
		name  string
		field string
		call  func() error
	}{
		{"BatchGet empty queue", "queue", func() error { _, err := h.BatchGet(ctx, "", "b"); return err }},
		{"BatchGet long batch", "batch_id", func() error { _, err := h.BatchGet(ctx, "q", long); return err }},
		{"BatchGet bad UTF-8", "batch_id", func() error { _, err := h.BatchGet(ctx, "q", "\xff"); return err }},
		{"BatchTransition bad state", "state", func() error { _, err := h.BatchTransition(ctx, "q", "b", 1, "bogus"); return err }},
		{"BatchTransition version 0", "version", func() error { _, err := h.BatchTransition(ctx, "q", "b", 0, mend.BatchFailed); return err }},
		{"BatchFinish wide queue", "queue", func() error { return h.BatchFinish(ctx, wide, "b") }},
		{"LiveBatches limit 0", "limit", func() error { _, err := h.LiveBatches(ctx, "q", 0); return err }},
		{"LiveBatches huge limit", "limit", func() error { _, err := h.LiveBatches(ctx, "q", host.LiveBatchesMax+1); return err }},
		{"Wake long message ID", "message_id", func() error {
			return h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: long, BatchID: "b"})
		}},
		{"Wake 1024-byte message ID", "message_id", func() error {
			return h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: wide[:1024], BatchID: "b"})
		}},
		{"Wake empty batch", "batch_id", func() error { return h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m"}) }},
		{"Wake negative epoch", "epoch", func() error {
			return h.Wake(ctx, mend.WakeUp{Queue: "q", MessageID: "m", BatchID: "b", Epoch: -1})
		}},
		{"Publish bad metadata", "metadata", func() error {
			_, err := h.Publish(ctx, host.Message{Topic: "t", ID: "m", Metadata: []byte("{")})
			return err
		}},
		{"Publish empty topic", "topic", func() error { _, err := h.Publish(ctx, host.Message{ID: "m"}); return err }},
		{"SeedBatch duplicate request", "request_id", func() error {
			return h.SeedBatch(ctx, "q", "b", mend.BatchCreated, "r", "r")
		}},
		{"SetRequestState bad state", "state", func() error { return h.SetRequestState(ctx, "q", "r", "done") }},
		{"FailNextPublish empty topic", "topic", func() error { return h.FailNextPublish(ctx, "", "q") }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.call()
			var ve *mend.ValidationError
			if !errors.As(err, &ve) || ve.Field != c.field || !errors.Is(err, mend.ErrInvalid) {
				t.Fatalf("got %v; want a ValidationError on %s", err, c.field)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct{ name, app, queue, field string }{
		{"unparsable", "not a dsn", "", "app_dsn"},
		{"no database", "root@tcp(127.0.0.1:1)/", "", "app_dsn"},
		{"clientFoundRows", "root@tcp(127.0.0.1:1)/db?clientFoundRows=true", "", "app_dsn"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := host.Open(ctx, tt.app, tt.queue, host.Options{})
			var ve *mend.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field {
				t.Fatalf("Open = %v; want a ValidationError on %s", err, tt.field)
			}
			if strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Fatalf("error %q shows the DSN", err)
			}
		})
	}
	t.Run("bad queue dsn", func(t *testing.T) {
		t.Parallel()
		db := setup(t).db
		_, err := host.Open(ctx, db.DSN, "root@tcp(127.0.0.1:1)/", host.Options{})
		var ve *mend.ValidationError
		if !errors.As(err, &ve) || ve.Field != "queue_dsn" {
			t.Fatalf("Open = %v; want a ValidationError on queue_dsn", err)
		}
	})
}

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// The subscription beside the real queue's garbage collector (issue 18):
// the host's orchestrator-dlq group acknowledges every dead letter as soon
// as it appears, and the GC deletes each partition's rows up to the
// smallest watermark of its groups. mend must record every dead letter
// anyway. A cron'd mend import, the negative control, loses some; so does
// the subscription without registering ahead (the window).

type gcClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *gcClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *gcClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// gcRun drives rounds of a live submit queue. Each round: new messages on
// speculate, each on a partition (queue) never seen before, which the
// host's orchestrator group joins as it reads them; the messages of the
// previous round move to speculate_dlq (their retries ran out); the
// orchestrator-dlq group acknowledges every dead letter; every other round the GC runs; mend
// takes its step; a second passes. Then rounds without new messages let
// everything drain. It returns the message IDs dead-lettered.
func gcRun(t *testing.T, b *importBundle, clock *gcClock, step func(round int)) []string {
	t.Helper()
	ctx := context.Background()
	const rounds, perRound, drain = 9, 3, 12
	var pending, lettered []string
	for r := range rounds + drain {
		var fresh []string
		if r < rounds {
			for i := range perRound {
				q := fmt.Sprintf("q%d-%d", r, i)
				id := q + "/batch/1"
				if err := b.world.Publish(ctx, "speculate", q, id, []byte(fmt.Sprintf(`{"id":%q,"queue":%q}`, id, q)), nil); err != nil {
					t.Fatal(err)
				}
				if err := b.world.Join(ctx, "orchestrator", "speculate", q); err != nil {
					t.Fatal(err)
				}
				fresh = append(fresh, id)
			}
		}
		for _, id := range pending {
			q := strings.TrimSuffix(id, "/batch/1")
			if err := b.world.MoveToDLQ(ctx, "speculate", q, id, sqtest.Failure{Count: 5, LastError: "boom"}); err != nil {
				t.Fatal(err)
			}
			lettered = append(lettered, id)
		}
		pending = fresh
		if _, err := b.world.AckAll(ctx, "orchestrator-dlq", "speculate_dlq"); err != nil {
			t.Fatal(err)
		}
		if r%2 == 1 { // the host's GC runs on idle ticks, not every round
			if _, err := b.world.GC(ctx, "speculate_dlq"); err != nil {
				t.Fatal(err)
			}
		}
		step(r)
		clock.add(time.Second)
	}
	return lettered
}

// lost lists the dead letters mend has no record of.
func lost(t *testing.T, b *importBundle, lettered []string) []string {
	t.Helper()
	var have []string
	for _, r := range b.records(t) {
		have = append(have, strings.Split(r, "|")[2])
	}
	var out []string
	for _, id := range lettered {
		if !slices.Contains(have, id) {
			out = append(out, id)
		}
	}
	return out
}

func gcSubscriber(t *testing.T, b *importBundle, clock *gcClock, ahead []string) *subscribe.Subscriber {
	t.Helper()
	ctx := context.Background()
	store, err := storage.Open(ctx, b.mendDSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	in, err := dlq.New(store, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := subscribe.New(subscribe.Config{DB: b.world.Queue, Intake: in, Parker: store, Settle: 5 * time.Second,
		AheadInterval: time.Second, AheadTopics: ahead, NowFunc: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func setupGC(t *testing.T) (*importBundle, *gcClock) {
	t.Helper()
	b := setupImport(t)
	clock := &gcClock{now: time.UnixMilli(1_760_000_000_000)}
	b.world.NowMS = func() int64 { return clock.Now().UnixMilli() }
	return b, clock
}

func TestSubscribeBesideGC(t *testing.T) {
	t.Parallel()

	t.Run("the subscription records every dead letter, and GC collects them once it has", func(t *testing.T) {
		t.Parallel()
		b, clock := setupGC(t)
		s := gcSubscriber(t, b, clock, nil)
		lettered := gcRun(t, b, clock, func(int) {
			if _, err := s.Pass(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		if len(lettered) == 0 {
			t.Fatal("no dead letters")
		}
		if l := lost(t, b, lettered); len(l) > 0 {
			t.Fatalf("%d of %d dead letters lost: %v", len(l), len(lettered), l)
		}
		// mend released them all: the GC emptied the DLQ.
		var left int
		if err := b.world.Queue.QueryRow("SELECT COUNT(*) FROM queue_messages WHERE topic = 'speculate_dlq'").Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Fatalf("%d dead letters left in the DLQ: the subscription still holds the GC back", left)
		}
	})

	t.Run("window: without registering ahead, partitions first seen after the GC lose their dead letters", func(t *testing.T) {
		t.Parallel()
		b, clock := setupGC(t)
		s := gcSubscriber(t, b, clock, []string{})
		lettered := gcRun(t, b, clock, func(int) {
			if _, err := s.Pass(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		if l := lost(t, b, lettered); len(l) == 0 {
			t.Fatalf("no dead letter lost without registering ahead; this test shows no window")
		}
	})

	t.Run("negative control: a cron'd mend import loses dead letters", func(t *testing.T) {
		t.Parallel()
		b, clock := setupGC(t)
		lettered := gcRun(t, b, clock, func(r int) {
			if r%3 != 2 {
				return // cron: every third round
			}
			if code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN); code != exitOK {
				t.Fatalf("import: exit %d\n%s\n%s", code, out, errOut)
			}
		})
		l := lost(t, b, lettered)
		if len(l) == 0 {
			t.Fatalf("the cron'd import lost nothing; this test cannot tell it from the subscription")
		}
		t.Logf("cron'd import lost %d of %d dead letters", len(l), len(lettered))
	})
}

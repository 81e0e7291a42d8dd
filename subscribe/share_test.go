package subscribe_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mendq/mend/subscribe"
)

// Replicas with Config.Leases divide the partitions: each dead letter is
// read by one of them, and when one stops renewing its slot (a paused
// process, here its term ended under it as the TTL would end it) the other
// takes its share on its next pass; the paused one, back, takes a slot
// again and they divide the work again. No dead letter is lost and no watermark
// moves back at any step. Passes run one at a time on the test's
// goroutine: the outcome does not depend on timing.
func TestSubscribeShare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	newSub := func(holder string) *subscribe.Subscriber {
		s := b.sub(t, subscribe.Config{Leases: b.store, Holder: holder, PageSize: 40, Concurrency: 2})
		t.Cleanup(s.Stop)
		return s
	}
	a, c := newSub("replica-a"), newSub("replica-c")
	// Both take a slot (a the first, c the second) before any dead letter.
	for _, s := range []*subscribe.Subscriber{a, c} {
		pass(t, s)
	}
	const parts = 40
	var want []string
	letters := func(round int) {
		for i := range 3 * parts {
			q := fmt.Sprintf("q%02d", i%parts)
			id := fmt.Sprintf("%s/batch/%d-%d", q, round, i)
			want = append(want, id)
			b.deadLetter(t, q, id)
		}
	}

	letters(0)
	sa, sc := pass(t, a), pass(t, c)
	if sa.Replicas != 2 || sc.Replicas != 2 {
		t.Fatalf("replicas seen: a %d, c %d; want 2 each", sa.Replicas, sc.Replicas)
	}
	if sa.Share+sc.Share != parts || sa.Share == 0 || sc.Share == 0 {
		t.Fatalf("shares a %d + c %d of %d partitions; want a split of all of them", sa.Share, sc.Share, parts)
	}
	if sa.Read+sc.Read != 3*parts || sa.Already+sc.Already != 0 {
		t.Fatalf("a read %d (%d already), c %d (%d already); want %d read once", sa.Read, sa.Already, sc.Read, sc.Already, 3*parts)
	}
	checkRecords(t, b, want)

	// c is paused: its term ends (the TTL running out, without waiting for it).
	st, err := b.store.LeaseGet(ctx, subscribe.SlotName("mend", 1))
	if err != nil || st.Term.Holder != "replica-c" || !st.Live() {
		t.Fatalf("slot 1: %+v, %v; want replica-c's live term", st, err)
	}
	if _, err := b.store.LeaseEndByOperator(ctx, st.Term.Queue, st.Term.Epoch); err != nil {
		t.Fatal(err)
	}
	letters(1)
	sa = pass(t, a)
	// a reads c's partitions from their watermarks: c's first round is
	// read again (recorded already, not released within the settle window).
	if sa.Replicas != 1 || sa.Share != parts || sa.Recorded != 3*parts || sa.Read != 3*parts+sc.Read {
		t.Fatalf("after c's slot ended, a's pass %+v; want every partition, the %d new dead letters recorded and c's %d read again", sa, 3*parts, sc.Read)
	}
	checkRecords(t, b, want)
	settleAndPass(t, b, a)
	checkReleased(t, b, parts)

	// c comes back: its slot is gone, so it takes one again at once (the
	// one it lost is free) and the two divide the partitions again.
	letters(2)
	sc, sa = pass(t, c), pass(t, a)
	if sc.Replicas != 2 || sa.Replicas != 2 || sc.Share+sa.Share != parts || sc.Share == 0 || sa.Share == 0 {
		t.Fatalf("after c came back: c %+v, a %+v; want the partitions divided by 2", sc, sa)
	}
	if sc.Recorded+sa.Recorded != 3*parts || sc.Already+sa.Already != 0 {
		t.Fatalf("after c came back: c recorded %d (%d already), a %d (%d already); want %d recorded once", sc.Recorded, sc.Already, sa.Recorded, sa.Already, 3*parts)
	}
	checkRecords(t, b, want)
	settleAndPass(t, b, a)
	settleAndPass(t, b, c)
	checkReleased(t, b, parts)

	// A stopped replica gives its slot back at once.
	c.Stop()
	if sa = pass(t, a); sa.Replicas != 1 || sa.Share != parts {
		t.Fatalf("after c stopped, a's pass %+v; want every partition", sa)
	}
}

func checkRecords(t *testing.T, b *bundle, want []string) {
	t.Helper()
	w := slices.Sorted(slices.Values(want))
	if got := b.ids(t); !slices.Equal(got, w) {
		t.Fatalf("%d records, want %d: %v", len(got), len(w), got)
	}
}

// checkReleased checks that every partition's watermark is at its last row.
func checkReleased(t *testing.T, b *bundle, parts int) {
	t.Helper()
	for i := range parts {
		q := fmt.Sprintf("q%02d", i)
		var top uint64
		if err := b.queue.QueryRow("SELECT MAX(`offset`) FROM queue_messages WHERE topic = 'speculate_dlq' AND partition_key = ?", q).Scan(&top); err != nil {
			t.Fatal(err)
		}
		if got := b.acked(t, "mend", "speculate_dlq", q); got != top {
			t.Fatalf("watermark of %s is %d, want %d", q, got, top)
		}
	}
}

// TestSubscribeShareStartTogether: a replica that starts alone reads every
// partition until it sees the next one's slot. What it read of the
// other's partitions then must not be released by it: the watermark would
// move under the owner, which reads again from there all it had read
// beyond (40% of the reads when two replicas started together on a few
// deep partitions). Here a reads the first half of every partition alone,
// c then reads its share whole; once settled, c has nothing to read again.
func TestSubscribeShareStartTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const parts, rows = 20, 4
	var want []string
	for i := range rows * parts {
		q := fmt.Sprintf("q%02d", i%parts)
		id := fmt.Sprintf("%s/batch/%d", q, i)
		want = append(want, id)
		b.deadLetter(t, q, id)
	}
	// a reads 2 rows of each partition per pass (page 2 shared by the
	// partitions of a read, 1 page a pass).
	a := b.sub(t, subscribe.Config{Leases: b.store, Holder: "replica-a", PageSize: 2, PagesPerPass: 1, Concurrency: 1})
	t.Cleanup(a.Stop)
	if sa := pass(t, a); sa.Replicas != 1 || sa.Read != 2*parts || !sa.More {
		t.Fatalf("a alone: %+v; want 2 rows of each of the %d partitions read, more left", sa, parts)
	}
	c := b.sub(t, subscribe.Config{Leases: b.store, Holder: "replica-c"})
	t.Cleanup(c.Stop)
	sc := pass(t, c)
	if sc.Replicas != 2 || sc.Share == 0 || sc.Share == parts || sc.Read != rows*sc.Share {
		t.Fatalf("c beside a: %+v; want its share of the partitions read whole", sc)
	}
	for range rows {
		pass(t, a) // a finishes its own share
	}
	checkRecords(t, b, want)
	b.clock.Add(settle + time.Second)
	pass(t, a) // releases a's share only
	if sc = pass(t, c); sc.Read != 0 || sc.Advanced != sc.Share {
		t.Fatalf("c once settled: %+v; want its %d partitions released and nothing read again", sc, sc.Share)
	}
	settleAndPass(t, b, a)
	settleAndPass(t, b, c)
	checkReleased(t, b, parts)
}

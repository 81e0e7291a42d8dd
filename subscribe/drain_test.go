package subscribe_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mendq/mend/subscribe"
)

// TestDrainEndsBesideHeldTransaction: mend run --once's Drain beside a
// MoveToDLQ held open (with PROCESS every sample waits for it, however
// long) records what is visible and ends within DrainBound, naming the
// partition that stays held and the transaction holding it, with no
// error. Before, it waited for the transaction to end: beside one held for
// 10 minutes, cron piled up runs.
func TestDrainEndsBesideHeldTransaction(t *testing.T) {
	t.Parallel()
	if p := drainProblems(t); len(p) > 0 {
		t.Fatal(p)
	}
}

// drainSlack is what a loaded machine's passes add to DrainBound.
const drainSlack = 20 * time.Second

func drainProblems(t *testing.T) (problems []string) {
	t.Helper()
	ctx := context.Background()
	b := setup(t)
	s, err := subscribe.New(subscribe.Config{DB: b.queue, Intake: b.intake, Parker: b.store,
		Settle: time.Second, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.deadLetter(t, "q", "q/batch/0")
	tx, err := b.queue.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rawDLQ(t, tx, "speculate_dlq", "q", "q/batch/held", `{"id":"q/batch/held","queue":"q"}`)
	var session int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&session); err != nil {
		t.Fatal(err)
	}
	b.deadLetter(t, "q", "q/batch/after")
	// The transaction stays open past the drain, which may run its bound
	// and the slack (10 minutes would do: a drain that waits for it is
	// caught at the deadline).
	dctx, cancel := context.WithTimeout(ctx, s.DrainBound()+drainSlack+5*time.Second)
	defer cancel()
	began := time.Now()
	st, err := s.Drain(dctx)
	took := time.Since(began)
	if err != nil {
		return append(problems, fmt.Sprintf("Drain beside a held transaction: %v after %v (bound %v)", err, took, s.DrainBound()))
	}
	if !s.SeesOpen() {
		t.Skip("the test's user cannot see open transactions: nothing holds the drain")
	}
	if got := b.ids(t); !slices.Contains(got, "q/batch/0") || !slices.Contains(got, "q/batch/after") {
		problems = append(problems, fmt.Sprintf("records %v; want the visible dead letters recorded", got))
	}
	if len(st.Unreleased) != 1 || st.Unreleased[0].Topic != "speculate_dlq" || st.Unreleased[0].Partition != "q" {
		problems = append(problems, fmt.Sprintf("Unreleased = %+v; want speculate_dlq/q held", st.Unreleased))
	}
	if st.HeldBy.Session != session || st.HeldBy.Began.IsZero() {
		problems = append(problems, fmt.Sprintf("HeldBy = %+v; want session %d", st.HeldBy, session))
	}
	if took > s.DrainBound()+drainSlack {
		problems = append(problems, fmt.Sprintf("Drain took %v, bound %v", took, s.DrainBound()))
	}
	return problems
}

// TestDrainEndsBesideHeldTransactionCatchesSlip: a Drain that waits for
// every release, however long, fails the test above (at its deadline).
func TestDrainEndsBesideHeldTransactionCatchesSlip(t *testing.T) {
	defer subscribe.Plant("drainUnbounded")()
	p := drainProblems(t)
	if len(p) == 0 {
		t.Fatal("the planted slip passed the test meant to catch it")
	}
	t.Logf("caught: %v", p)
}

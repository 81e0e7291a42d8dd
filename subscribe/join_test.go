package subscribe_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/subscribe"
)

// TestJoinRetriedAfterFailure: a join the server refuses (mend's user
// lacks INSERT on queue_offsets) leaves the partition unjoined in mend's
// bookkeeping, so the first pass after the grant joins it: one found
// through its rows (discovery) and one registered ahead (a host group
// joined its source partition; it has no rows). Marking a partition
// joined before its statement succeeds, or keeping a failed join in the
// joined map, leaves it without mend's row, and the host's GC free to
// empty it, for as long as a recording pass (which reloads the group's
// rows) runs long: the steps here are Run's membership loop's, alone.
func TestJoinRetriedAfterFailure(t *testing.T) {
	t.Parallel()
	for _, c := range joinCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if p := joinProblems(t, c.partition); len(p) > 0 {
				t.Fatal(p)
			}
		})
	}
}

// joinCases are TestJoinRetriedAfterFailure's partitions: one found
// through its rows (discovery), one registered ahead.
var joinCases = []struct{ name, partition string }{
	{"found through its rows", "q"},
	{"registered ahead", "ahead"},
}

func joinProblems(t *testing.T, partition string) (problems []string) {
	t.Helper()
	ctx := context.Background()
	b := setup(t)
	dsn := b.qsrv.User(t, "SELECT ON %s.queue_messages", "SELECT, UPDATE ON %s.queue_offsets")
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := subscribe.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if partition == "q" {
		b.deadLetter(t, "q", "q/batch/1")
	} else if err := b.world.Join(ctx, "orchestrator", "speculate", "ahead"); err != nil {
		t.Fatal(err)
	}
	s := b.sub(t, subscribe.Config{DB: db})
	if _, err := subscribe.MembershipStep(ctx, s); err == nil {
		t.Fatal("a membership step joined without INSERT: this test shows nothing")
	}
	b.clock.Add(time.Minute) // past AheadInterval
	if _, err := subscribe.MembershipStep(ctx, s); err == nil {
		problems = append(problems, "the membership step after a failed join succeeded without INSERT: it did not try the join again")
	}
	b.clock.Add(time.Minute)
	if _, ok, err := b.world.Acked(ctx, "mend", "speculate_dlq", partition); err != nil || ok {
		t.Fatalf("speculate_dlq/%s joined without INSERT (%v): this test shows nothing", partition, err)
	}
	if _, err := b.queue.ExecContext(ctx, "GRANT INSERT ON `"+cfg.DBName+"`.queue_offsets TO '"+cfg.User+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		b.clock.Add(time.Minute)
		if _, err := subscribe.MembershipStep(ctx, s); err != nil {
			problems = append(problems, fmt.Sprintf("membership step after the grant: %v", err))
		}
	}
	if _, ok, err := b.world.Acked(ctx, "mend", "speculate_dlq", partition); err != nil || !ok {
		problems = append(problems, fmt.Sprintf("speculate_dlq/%s is not joined after the grant (%v): a failed join was kept as joined", partition, err))
	}
	return problems
}

// TestJoinRetriedAfterFailureCatchesSlips: discovery marking a partition
// joined before its join statement succeeds, and registering ahead
// keeping a failed join in the joined map, each fail the test above (the
// case that runs the slipped step).
func TestJoinRetriedAfterFailureCatchesSlips(t *testing.T) {
	for _, c := range []struct{ slip, partition string }{
		{"joinedEarly", "q"},
		{"keepFailedJoins", "ahead"},
	} {
		t.Run(c.slip, func(t *testing.T) {
			defer subscribe.Plant(c.slip)()
			p := joinProblems(t, c.partition)
			if len(p) == 0 {
				t.Fatal("the planted slip passed the test meant to catch it")
			}
			t.Logf("caught: %v", p)
		})
	}
}

package subscribe

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// TestAdvanceStatement runs the real advance statement against
// watermarks below, at and above the one each range was counted from:
// only the watermark still at from moves (a compare-and-set), never one
// another replica moved meanwhile, forward or past.
func TestAdvanceStatement(t *testing.T) {
	t.Parallel()
	if p := advanceStatementProblems(t); len(p) > 0 {
		t.Fatal(p)
	}
}

func advanceStatementProblems(t *testing.T) (problems []string) {
	t.Helper()
	ctx := context.Background()
	q := mysqltest.NewDB(t, sqtest.Apply)
	db, err := Open(ctx, q.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := &Subscriber{cfg: Config{DB: db, Group: "mend", NowFunc: time.Now}}
	for _, c := range []struct {
		partition string
		current   uint64
		moves     bool
	}{
		{"at", 5, true},       // the watermark the range was counted from
		{"below", 3, false},   // lower than from: not this range's
		{"between", 7, false}, // another replica moved it forward, still below to
		{"past", 12, false},   // another replica moved it past to
	} {
		if _, err := db.ExecContext(ctx, "INSERT INTO queue_offsets (consumer_group, topic, partition_key, offset_acked, updated_at) VALUES ('mend', 'speculate_dlq', ?, ?, 0)", c.partition, c.current); err != nil {
			t.Fatal(err)
		}
		n, err := s.advanceMany(ctx, []advance{{topic: "speculate_dlq", partition: c.partition, from: 5, to: 10, cas: true}})
		if err != nil {
			t.Fatal(err)
		}
		var now uint64
		if err := db.QueryRowContext(ctx, "SELECT offset_acked FROM queue_offsets WHERE consumer_group = 'mend' AND topic = 'speculate_dlq' AND partition_key = ?", c.partition).Scan(&now); err != nil {
			t.Fatal(err)
		}
		want := c.current
		if c.moves {
			want = 10
		}
		if now != want || (n == 1) != c.moves {
			problems = append(problems, fmt.Sprintf("watermark %d (%s), advance 5 -> 10: now %d, %d moved; want %d", c.current, c.partition, now, n, want))
		}
	}
	return problems
}

// TestAdvanceStatementCatchesAtLeast: the compare-and-set written >=
// moves a watermark another replica moved: the test above fails with it.
func TestAdvanceStatementCatchesAtLeast(t *testing.T) {
	// Not parallel: it plants a bug the other tests must not see.
	planted.casAtLeast = true
	defer func() { planted.casAtLeast = false }()
	if len(advanceStatementProblems(t)) == 0 {
		t.Fatal("the planted >= passed the test meant to catch it")
	}
}

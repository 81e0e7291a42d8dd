package subscribe_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/subscribe"
)

// TestGroupRows: GroupRows counts the group's rows in queue_offsets, and
// no other group's, under a user that may only SELECT there (the
// documented grants, which withhold DELETE); GroupPartitions lists them
// with their watermarks and the rows above each that the host's GC keeps.
func TestGroupRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	cfg, err := mysql.ParseDSN(b.qdsn)
	if err != nil {
		t.Fatal(err)
	}
	user := fmt.Sprintf("gr%d", b.clock.Now().UnixNano()%1_000_000)
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw'", user),
		fmt.Sprintf("GRANT SELECT ON `%s`.queue_messages TO '%s'@'%%'", cfg.DBName, user),
		fmt.Sprintf("GRANT SELECT ON `%s`.queue_offsets TO '%s'@'%%'", cfg.DBName, user),
	} {
		if _, err := b.queue.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = b.queue.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	cfg.User, cfg.Passwd = user, "pw"
	ro, err := subscribe.Open(ctx, cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ro.Close() })

	if n, err := subscribe.GroupRows(ctx, ro, "mend"); err != nil || n != 0 {
		t.Fatalf("GroupRows before any join = %d, %v; want 0", n, err)
	}
	if err := b.world.Join(ctx, "orchestrator", "speculate", "q"); err != nil {
		t.Fatal(err)
	}
	b.deadLetter(t, "q", "q/batch/1")
	b.deadLetter(t, "r", "r/batch/1")
	s := b.sub(t, subscribe.Config{})
	pass(t, s) // joins q and r at watermark 0, records both, releases nothing yet (settle)
	if n, err := subscribe.GroupRows(ctx, ro, "mend"); err != nil || n != 2 {
		t.Errorf("GroupRows of mend = %d, %v; want 2 (speculate_dlq/q and /r)", n, err)
	}
	if n, err := subscribe.GroupRows(ctx, ro, ""); err != nil || n != 2 {
		t.Errorf(`GroupRows of "" = %d, %v; want the default group's 2`, n, err)
	}
	if n, err := subscribe.GroupRows(ctx, ro, "other"); err != nil || n != 0 {
		t.Errorf("GroupRows of a group that joined nothing = %d, %v; want 0", n, err)
	}
	parts, err := subscribe.GroupPartitions(ctx, ro, "mend", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []subscribe.GroupPartition{{Topic: "speculate_dlq", Partition: "q", Behind: 1}, {Topic: "speculate_dlq", Partition: "r", Behind: 1}}
	if fmt.Sprint(parts) != fmt.Sprint(want) {
		t.Errorf("GroupPartitions = %+v; want %+v", parts, want)
	}
	if parts, err := subscribe.GroupPartitions(ctx, ro, "mend", 1); err != nil || len(parts) != 1 {
		t.Errorf("GroupPartitions limited to 1 = %+v, %v", parts, err)
	}
	if _, err := subscribe.Remove(ctx, ro, "mend"); !errors.Is(err, mend.ErrDenied) {
		t.Errorf("Remove under SELECT alone = %v; want mend.ErrDenied (the user really lacks DELETE)", err)
	}
	if _, err := subscribe.Remove(ctx, b.queue, "mend"); err != nil {
		t.Fatal(err)
	}
	if n, err := subscribe.GroupRows(ctx, ro, "mend"); err != nil || n != 0 {
		t.Errorf("GroupRows after Remove = %d, %v; want 0", n, err)
	}
}

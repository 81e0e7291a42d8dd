package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/fence"
)

// newReader builds a reader that is not run (CatchUp's), as holder.
func (w *world) newReader(t *testing.T, holder string) *binlog.Reader {
	t.Helper()
	f, err := fence.New(w.store, fence.Config{Holder: holder, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := binlog.New(binlog.Config{Server: w.qcfg, Intake: w.intake, Parker: w.store, Store: w.store, Fence: f,
		Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mend run --once beside a binary log: CatchUp reads from the saved
// position to the end the log had, records what was committed there, saves
// and returns; while another replica reads, it leaves intake to it.
func TestCatchUp(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.deadLetter(t, "q1", "before-first")
	first, err := w.newReader(t, "once-1").CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.Reset, binlog.ResetFirstStart) || !w.has(t, "before-first")() {
		t.Fatalf("a first CatchUp: reset %q, recorded %v; want a first start that imported the row", first.Reset, w.ids(t))
	}
	w.deadLetter(t, "q1", "between")
	w.deadLetter(t, "q2", "between-2")
	second, err := w.newReader(t, "once-2").CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Reset != "" || !w.has(t, "between", "between-2")() || second.Recorded < 2 {
		t.Fatalf("a second CatchUp: reset %q, %d recorded, records %v; want a resume recording both rows", second.Reset, second.Recorded, w.ids(t))
	}
	if second.To.Pos == 0 || (second.To.File == second.From.File && second.To.Pos <= second.From.Pos) {
		t.Fatalf("the position did not move: from %+v to %+v", second.From, second.To)
	}
	if p := w.position(t, w.qcfg.DBName); p.File != second.To.File || p.Pos != second.To.Pos {
		t.Fatalf("saved %s:%d, CatchUp says %s:%d", p.File, p.Pos, second.To.File, second.To.Pos)
	}
	r := w.start(t, "runner", nil)
	until(t, r, "the running reader reading", func() bool { return r.r.Status().Role == binlog.RoleReader })
	_, err = w.newReader(t, "once-3").CatchUp(ctx)
	if !errors.Is(err, mend.ErrLeaseHeld) {
		t.Fatalf("CatchUp beside a running reader: %v, want ErrLeaseHeld", err)
	}
}

// A reader caught up on a quiet server writes its position again every
// RefreshInterval, so the row's age says whether anyone reads.
func TestIdleReaderRefreshesPosition(t *testing.T) {
	w := newWorld(t)
	r := w.start(t, "a", func(c *binlog.Config) { c.RefreshInterval = 300 * time.Millisecond })
	readThrough(t, r)
	_, _, saves := r.ev.snapshot()
	until(t, r, "two saves with nothing committed", func() bool { _, _, n := r.ev.snapshot(); return n >= saves+2 })
}

// syncBuffer is a log destination safe for the reader's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Under the documented grants (no DELETE on queue_offsets), a term that
// finds none of the offset group's rows says nothing about them; one that
// finds some says how many and who may remove them (mend_leave).
func TestLeaveGroupOnlyWhenRowsExist(t *testing.T) {
	w := newWorld(t)
	root := w.root(t)
	user := fmt.Sprintf("mend_nodel_%d", time.Now().UnixNano()%1_000_000_000)
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%'", user),
		fmt.Sprintf("GRANT SELECT ON `%s`.* TO '%s'@'%%'", w.qcfg.DBName, user),
		fmt.Sprintf("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '%s'@'%%'", user),
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	server := w.qcfg.Clone()
	server.User, server.Passwd = user, ""
	var logs syncBuffer
	r := w.start(t, "a", func(c *binlog.Config) {
		c.Server, c.LeaveGroup = server, "mend"
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	until(t, r, "a saved position", func() bool { _, _, n := r.ev.snapshot(); return n > 0 })
	if strings.Contains(logs.String(), "queue_offsets") {
		t.Fatalf("with no rows of the group, the reader spoke of them:\n%s", logs.String())
	}
	if err := w.host.Join(context.Background(), "mend", "speculate_dlq", "q1"); err != nil {
		t.Fatal(err)
	}
	_, _, saves := r.ev.snapshot()
	killDumps(t, root) // a new term, which looks again
	until(t, r, "the warning of a new term", func() bool {
		_, _, n := r.ev.snapshot()
		return n > saves && strings.Contains(logs.String(), "still has 1 row(s)")
	})
	if !strings.Contains(logs.String(), "mend_leave") {
		t.Fatalf("the warning does not say who may remove the rows:\n%s", logs.String())
	}
}

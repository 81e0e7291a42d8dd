package storage_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/vitessdb"
	"github.com/mendq/mend/storage"
)

// vitessSetup is setup on the Vitess backend only: the store on a keyspace sharded in two,
// through vtgate, and the cluster (for the shards' databases under it).
func vitessSetup(t *testing.T) (*bundle, *vitessdb.Server) {
	t.Helper()
	if !mysqltest.Vitess() {
		t.Skipf("runs on the Vitess backend only (%s=vitess)", mysqltest.EnvEngine)
	}
	b := setup(t)
	return b, b.db.Server.Vitess()
}

// shardOf says on which shard the rows of queue landed, reading each shard's own database on
// the mysqld under the cluster (not through vtgate).
func shardOf(t *testing.T, v *vitessdb.Server, keyspace, table, queue string) []string {
	t.Helper()
	var on []string
	for _, shard := range vitessdb.ShardNames {
		c, err := mysql.NewConnector(v.MySQLConfig(vitessdb.ShardDB(keyspace, shard)))
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		var n int
		err = db.QueryRow("SELECT COUNT(*) FROM `"+table+"` WHERE queue = ?", queue).Scan(&n)
		_ = db.Close()
		if err != nil {
			t.Fatalf("count %s rows of %q on %s: %v", table, queue, shard, err)
		}
		if n > 0 {
			on = append(on, shard)
		}
	}
	return on
}

// twoQueues creates records until it has one queue on each shard.
func twoQueues(t *testing.T, b *bundle, v *vitessdb.Server) (lo, hi string) {
	t.Helper()
	for i := 0; i < 64 && (lo == "" || hi == ""); i++ {
		q := fmt.Sprintf("queue-%d", i)
		b.create(t, src(q, "m1"))
		switch on := shardOf(t, v, b.db.Name, "mend_records", q); {
		case len(on) != 1:
			t.Fatalf("records of %q are on shards %v, want exactly one", q, on)
		case on[0] == "-80" && lo == "":
			lo = q
		case on[0] == "80-" && hi == "":
			hi = q
		}
	}
	if lo == "" || hi == "" {
		t.Fatalf("64 queues did not cover both shards (lo %q, hi %q)", lo, hi)
	}
	return lo, hi
}

// TestVitessQueueTransactionsStayOnOneShard shows that a queue's lease, records, events and
// lease history live on one shard, and that every write transaction mend runs for a queue
// stays there: the cluster runs vtgate with --transaction-mode=SINGLE, which fails a
// transaction the moment it touches a second shard. The negative control first shows that
// mode refusing a transaction that writes two queues on different shards.
func TestVitessQueueTransactionsStayOnOneShard(t *testing.T) {
	b, v := vitessSetup(t)
	ctx := context.Background()
	lo, hi := twoQueues(t, b, v)

	t.Run("negative control: a transaction over two shards fails", func(t *testing.T) {
		tx, err := b.store.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		for _, q := range []string{lo, hi} {
			_, err = tx.ExecContext(ctx, "UPDATE mend_records SET attempts = attempts + 1 WHERE queue = ?", q)
			if err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), "multi-db transaction") {
			t.Fatalf("update of %q (-80) and %q (80-) in one transaction: err %v, want vtgate's multi-db transaction refusal", lo, hi, err)
		}
	})

	for _, q := range []string{lo, hi} {
		t.Run("every write of queue "+q, func(t *testing.T) {
			term, err := b.store.LeaseAcquire(ctx, q, "h1", time.Minute)
			if err != nil {
				t.Fatalf("LeaseAcquire: %v", err)
			}
			if err := b.store.LeaseRenew(ctx, term, time.Minute); err != nil {
				t.Fatalf("LeaseRenew: %v", err)
			}
			rec := b.create(t, src(q, "m2"))
			p := appendParams(rec, mend.EventWaiting, mend.StateWaiting)
			p.Fence = &term
			if _, err := b.store.RecordAppend(ctx, p); err != nil {
				t.Fatalf("fenced RecordAppend: %v", err)
			}
			if err := b.store.LeaseRelease(ctx, term); err != nil {
				t.Fatalf("LeaseRelease: %v", err)
			}
			want := shardOf(t, v, b.db.Name, "mend_records", q)
			for _, table := range []string{"mend_events", "mend_leases", "mend_lease_history"} {
				if got := shardOf(t, v, b.db.Name, table, q); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s rows of %q on %v, records on %v: want the same single shard", table, q, got, want)
				}
			}
		})
	}
}

// TestVitessPlans asks vtgate how it routes mend's statements (VEXPLAIN PLAN): a statement
// that names its queue goes to one shard (EqualUnique on the queue's vindex), the due listing
// across queues goes to every shard (Scatter).
func TestVitessPlans(t *testing.T) {
	b, _ := vitessSetup(t)
	tests := []struct {
		name, query, want string
	}{
		{"RecordsDue names its queue", storage.SQLRecordsDue, "EqualUnique"},
		{"QueuesDue spans every queue", storage.SQLQueuesDue, "Scatter"},
		{"a lease row by queue", "SELECT epoch FROM mend_leases WHERE queue = 'q1' FOR UPDATE", "EqualUnique"},
		{"a record by ID alone", "SELECT queue FROM mend_records WHERE record_id = 0x00112233445566778899aabbccddeeff", "Scatter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.query
			if strings.Count(q, "?") > 0 {
				q = bindExample(q)
			}
			var plan string
			if err := b.store.SQL().QueryRow("VEXPLAIN PLAN " + q).Scan(&plan); err != nil {
				t.Fatalf("VEXPLAIN PLAN: %v\n%s", err, q)
			}
			if !strings.Contains(plan, `"Variant": "`+tt.want+`"`) {
				t.Errorf("plan of %s has no %s route:\n%s", tt.name, tt.want, plan)
			}
		})
	}
}

// bindExample fills a statement's placeholders with literals of the right shape for VEXPLAIN
// (which takes no arguments): 'q1' for the first (the queue where there is one), 10 after.
func bindExample(q string) string {
	first := true
	var out strings.Builder
	for _, r := range q {
		if r != '?' {
			out.WriteRune(r)
			continue
		}
		if first && strings.Contains(q, "queue = ?") {
			out.WriteString("'q1'")
		} else {
			out.WriteString("10")
		}
		first = false
	}
	return out.String()
}

// TestVitessIntakeCommitsOncePerShard shows RecordCreateMany through vtgate committing once per
// shard, not once per queue: 40 queues over both shards are created in two transactions, each
// on one shard (vtgate runs --transaction-mode=SINGLE, so a group that crossed shards would
// fail), and every record is there once with its created event. Its control is the count a
// per-queue split would give (40), which the assertion of at most two commits refuses.
func TestVitessIntakeCommitsOncePerShard(t *testing.T) {
	b, _ := vitessSetup(t)
	ctx := context.Background()
	var commits []string
	storage.SetBeforeCommit(b.store, func(op string) { commits = append(commits, op) })
	const queues = 40
	var ps []mend.CreateParams
	for i := range queues {
		for m := range 2 {
			ps = append(ps, mend.CreateParams{
				Source:   src(fmt.Sprintf("shard-queue-%02d", i), fmt.Sprintf("m%d", m)),
				Snapshot: mend.Snapshot{Payload: []byte(`{}`)},
				Target:   mend.Target{BatchID: "b1", Desired: mend.OutcomeFailed},
				OpID:     mend.NewOpID(), Actor: "test",
			})
		}
	}
	res, err := b.store.RecordCreateMany(ctx, ps)
	if err != nil {
		t.Fatalf("RecordCreateMany of %d records over %d queues: %v", len(ps), queues, err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Created {
			t.Fatalf("item %d: created %v, err %v; want created", i, r.Created, r.Err)
		}
	}
	n := 0
	for _, op := range commits {
		if op == "RecordCreateMany" {
			n++
		}
	}
	if n < 1 || n > len(vitessdb.ShardNames) {
		t.Fatalf("RecordCreateMany committed %d times for %d queues on %d shards; want one commit per shard (a commit per queue would be %d)",
			n, queues, len(vitessdb.ShardNames), queues)
	}
	for _, p := range ps {
		rec, err := b.store.RecordGet(ctx, p.Source)
		if err != nil {
			t.Fatalf("RecordGet %s: %v", p.Source, err)
		}
		evs, err := b.store.RecordHistory(ctx, p.Source.Queue, rec.ID)
		if err != nil || len(evs) != 1 || evs[0].Kind != mend.EventCreated {
			t.Fatalf("history of %s: %v, %v; want its one created event", p.Source, evs, err)
		}
	}
}

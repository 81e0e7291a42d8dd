package vitesscluster_test

import (
	"database/sql"
	"fmt"
	"os"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/vitesscluster"
	"github.com/mendq/mend/internal/vitessdb"
	"github.com/mendq/mend/migrations"
)

// EnvCluster enables the tests that start a cluster (minutes and about 2 GB): make
// test-vitess-failover sets it.
const EnvCluster = "MEND_TEST_VITESS_CLUSTER"

// startCluster starts a cluster with mend's schema and vschema, closed when t ends, or skips t
// unless EnvCluster is set.
func startCluster(t *testing.T) *vitesscluster.Cluster {
	t.Helper()
	if os.Getenv(EnvCluster) == "" {
		t.Skipf("%s is not set (make test-vitess-failover sets it)", EnvCluster)
	}
	dir, etcd, err := vitesscluster.Find()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := vitessdb.MendSchema()
	if err != nil {
		t.Fatal(err)
	}
	c, err := vitesscluster.Start(t.Context(), vitesscluster.Config{VitessDir: dir, Etcd: etcd, Schema: schema, VSchema: migrations.VSchema, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	rss, n := c.RSS()
	t.Logf("cluster started in %v: %d processes, RSS %.0f MiB", c.StartedIn.Round(1e6), n, float64(rss)/(1<<20))
	return c
}

// TestClusterKeepsAcknowledgedWrites: the cluster runs semi-sync on every primary, and a row
// whose INSERT was acknowledged through vtgate is there after a planned reparent and after
// the primary's mysqld and vttablet are killed and an emergency reparent promotes a replica.
func TestClusterKeepsAcknowledgedWrites(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	for _, shard := range vitesscluster.ShardNames {
		p, err := c.Primary(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		src, _, clients, err := c.SemiSync(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !src || clients < 1 {
			t.Fatalf("primary %s of %s: semi-sync source enabled %v with %d acknowledging replicas; want on with at least 1", p.Alias, shard, src, clients)
		}
	}
	db, err := sql.Open("mysql", c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const shard = "-80"
	var queue string
	for i := 0; queue == ""; i++ {
		q := fmt.Sprintf("ack-%d", i)
		s, err := c.ShardOf(ctx, "queue_xxhash", q)
		if err != nil {
			t.Fatal(err)
		}
		if s == shard {
			queue = q
		}
	}
	write := func(epoch int) {
		t.Helper()
		if _, err := db.ExecContext(ctx, "INSERT INTO mend_leases (queue, holder, epoch, acquired_at, renewed_at, expires_at, transitions) VALUES (?, 'h', ?, NOW(6), NOW(6), NOW(6), 0) ON DUPLICATE KEY UPDATE epoch = VALUES(epoch)", queue, epoch); err != nil {
			t.Fatal(err)
		}
	}
	read := func() int {
		t.Helper()
		var e int
		if err := db.QueryRowContext(ctx, "SELECT epoch FROM mend_leases WHERE queue = ?", queue).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	write(1)
	p, err := c.PlannedReparent(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("planned reparent: %s primary %s", shard, p.Alias)
	if e := read(); e != 1 {
		t.Fatalf("after the planned reparent epoch is %d; want 1", e)
	}
	write(2)
	dead, err := c.KillPrimary(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	p, err = c.EmergencyReparent(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s; emergency reparent: %s primary %s", dead.Alias, shard, p.Alias)
	if p == dead {
		t.Fatalf("the dead tablet %s is still primary", dead.Alias)
	}
	if e := read(); e != 2 {
		t.Fatalf("after the emergency reparent epoch is %d; want the acknowledged 2", e)
	}
	write(3)
	rss, n := c.RSS()
	t.Logf("after the failover: %d processes, RSS %.0f MiB", n, float64(rss)/(1<<20))
}

package host_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/planner"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// The adapter satisfies the ports exactly.
var (
	_ planner.Batches = (*host.DB)(nil)
	_ planner.Waker   = (*host.DB)(nil)
)

type bundle struct {
	db  *mysqltest.DB
	h   *host.DB
	sql *sql.DB
}

// setup gives each test its own migrated database, with the application and
// queue databases being the same one.
func setup(t *testing.T) *bundle {
	t.Helper()
	db := mysqltest.NewDB(t, host.Migrations.Up)
	return &bundle{db: db, h: open(t, db.DSN, db.DSN), sql: db.SQL(t)}
}

func open(t *testing.T, appDSN, queueDSN string) *host.DB {
	t.Helper()
	h, err := host.Open(context.Background(), appDSN, queueDSN, host.Options{})
	if err != nil {
		t.Fatalf("host.Open: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func (b *bundle) seed(t *testing.T, queue, id string, state mend.BatchState, requests ...string) {
	t.Helper()
	if err := b.h.SeedBatch(context.Background(), queue, id, state, requests...); err != nil {
		t.Fatalf("SeedBatch(%q, %q, %s): %v", queue, id, state, err)
	}
}

// membershipMatches compares the membership index with sq_batches row by
// row in plain SQL, independently of CheckMembership.
func (b *bundle) membershipMatches(t *testing.T) {
	t.Helper()
	read := func(query string) []string {
		rows, err := b.sql.Query(query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var q, s, id string
			if err := rows.Scan(&q, &s, &id); err != nil {
				t.Fatal(err)
			}
			out = append(out, q+"\x00"+s+"\x00"+id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := read("SELECT queue, state, batch_id FROM sq_batch_membership ORDER BY queue, state, batch_id")
	want := read("SELECT queue, state, id FROM sq_batches ORDER BY queue, state, id")
	if !slices.Equal(got, want) {
		t.Fatalf("membership index = %q; want it equal to the batch states %q", got, want)
	}
}

package storage_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/mendq/mend"
)

// rowImage is every column of a record's row, as text, and its event count.
func rowImage(t *testing.T, db *sql.DB, id mend.RecordID) string {
	t.Helper()
	rows, err := db.Query("SELECT * FROM mend_records WHERE record_id = ?", id[:])
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		t.Fatalf("no row for %s", id)
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := rows.Scan(dest...); err != nil {
		t.Fatal(err)
	}
	img := ""
	for i, c := range cols {
		img += fmt.Sprintf("%s=%q\n", c, vals[i])
	}
	rows.Close()
	var events int
	if err := db.QueryRow("SELECT COUNT(*) FROM mend_events WHERE record_id = ?", id[:]).Scan(&events); err != nil {
		t.Fatal(err)
	}
	return img + fmt.Sprintf("events=%d\n", events)
}

// TestDuplicateCreateChangesNothing: a redelivered dead letter's create is
// a no-op on the first writer's row, every column of it (updated_at
// included: bumping it would postpone retention pruning on every
// redelivery, and rewrite the first writer's row), and adds no event. Each
// statement runs at a later NOW(6) (microseconds), so a write of any time
// column shows.
func TestDuplicateCreateChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	raw := b.db.SQL(t)
	first := b.create(t, src("q", "m"))
	before := rowImage(t, raw, first.ID)
	for _, create := range []func() error{
		func() error {
			p := createParams(src("q", "m"), `{"batch_id":"other"}`)
			p.Snapshot.FailureCount = 99
			rec, created, err := b.store.RecordCreate(ctx, p)
			if err == nil && (created || rec.ID != first.ID) {
				err = fmt.Errorf("created %v, id %s; want the first record", created, rec.ID)
			}
			return err
		},
		func() error {
			res, err := b.store.RecordCreateMany(ctx, []mend.CreateParams{createParams(src("q", "m"), `{}`)})
			if err == nil && (len(res) != 1 || res[0].Err != nil || res[0].Created) {
				err = fmt.Errorf("results %+v; want one duplicate", res)
			}
			return err
		},
	} {
		if err := create(); err != nil {
			t.Fatal(err)
		}
		if after := rowImage(t, raw, first.ID); after != before {
			t.Fatalf("a duplicate create changed the first writer's row:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	}
}

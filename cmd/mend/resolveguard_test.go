package main

import (
	"strings"
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// Issue 30: a bug planted in resolve's guard (counting only pending
// records as at stake) passed every test, so waiting and settled records
// of a selection were closed by --yes without --force. One case per state:
// every open state is refused without --force and resolved with it; a
// parked record, the one resolve exists for, needs no --force.
func TestResolveGuardPerOpenState(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		state string
		open  bool
	}{{"pending", true}, {"waiting", true}, {"settled", true}, {"parked", false}} {
		t.Run(tt.state, func(t *testing.T) {
			t.Parallel()
			db := mysqltest.NewDB(t, migrations.Up)
			opsMust(t, recordArgs(db.DSN, "m", speculatePayload)...)
			next := "NOW(6) + INTERVAL 1 MINUTE"
			if !tt.open {
				next = "NULL"
			}
			if _, err := db.SQL(t).Exec("UPDATE mend_records SET state = ?, next_attempt_at = "+next, tt.state); err != nil {
				t.Fatal(err)
			}
			state := func() string {
				var s string
				if err := db.SQL(t).QueryRow("SELECT state FROM mend_records").Scan(&s); err != nil {
					t.Fatal(err)
				}
				return s
			}
			args := []string{"resolve", "--dsn", db.DSN, "--queue", "q", "--state", tt.state, "--reason", "handled by hand", "--yes"}
			r := opsRun(t, nil, args...)
			if !tt.open {
				if r.code != exitOK || state() != "done" {
					t.Fatalf("resolve --yes of a parked record = exit %d %q, state %s; want it resolved", r.code, r.stderr, state())
				}
				return
			}
			if r.code != exitFailure || !strings.Contains(r.stderr, "refusing to resolve") || state() != tt.state {
				t.Fatalf("resolve --yes of a %s record = exit %d %q, state %s; want 1 refusing, nothing changed", tt.state, r.code, r.stderr, state())
			}
			if r := opsMust(t, append(args, "--force")...); !strings.Contains(r.stdout, "is resolved") || state() != "done" {
				t.Fatalf("resolve --yes --force of a %s record = %q, state %s; want it resolved", tt.state, r.stdout, state())
			}
		})
	}
}

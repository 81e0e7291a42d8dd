package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// stampRE is a table's UTC timestamp.
var stampRE = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}`)

// Issue 19, Why 2: a lease's last term was named differently by each
// surface (lease list said expired for a term its holder released). Now
// lease list, status, the view mend_lease_status and lease history (and the
// view mend_lease_terms) say the same for every ending.
func TestLeaseEndingsOneVocabulary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const long = time.Hour
	ranOut := func(t *testing.T, queue string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := store.LeaseGet(ctx, queue)
			if err == nil && !st.Live() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the 1ms term on %s is still live: %+v, %v", queue, st, err)
			}
			runtime.Gosched()
		}
	}
	// Each ending on a queue of its own; want is how the first term ended,
	// and latest how the queue's latest term reads now.
	cases := []struct {
		queue, want, latest string
		end                 func(t *testing.T, queue string)
	}{
		{"holder", storage.LeaseEndedHolder, storage.LeaseEndedHolder, func(t *testing.T, q string) {
			term, err := store.LeaseAcquire(ctx, q, "h1", long)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.LeaseRelease(ctx, term); err != nil {
				t.Fatal(err)
			}
		}},
		{"operator", storage.LeaseEndedOperator, storage.LeaseEndedOperator, func(t *testing.T, q string) {
			term, err := store.LeaseAcquire(ctx, q, "h1", long)
			if err != nil {
				t.Fatal(err)
			}
			opsMust(t, "lease", "release", "--dsn", db.DSN, "--queue", q, "--epoch", fmt.Sprint(term.Epoch))
		}},
		{"expired", storage.LeaseEndedExpired, storage.LeaseEndedExpired, func(t *testing.T, q string) {
			if _, err := store.LeaseAcquire(ctx, q, "h1", time.Millisecond); err != nil {
				t.Fatal(err)
			}
			ranOut(t, q)
		}},
		{"takenover", storage.LeaseEndedTakenOver, "held", func(t *testing.T, q string) {
			if _, err := store.LeaseAcquire(ctx, q, "h1", time.Millisecond); err != nil {
				t.Fatal(err)
			}
			ranOut(t, q)
			if _, err := store.LeaseAcquire(ctx, q, "h2", long); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		c.end(t, c.queue)
	}
	var list []struct{ Queue, Status string }
	if err := json.Unmarshal([]byte(opsMust(t, "lease", "list", "--dsn", db.DSN, "--json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	var status []struct {
		Queue string
		Lease struct{ Status string }
	}
	if err := json.Unmarshal([]byte(opsMust(t, "status", "--dsn", db.DSN, "--json").stdout), &status); err != nil {
		t.Fatal(err)
	}
	// Issue 47: a released term did not expire; -o wide's EXPIRES column
	// said it did, at the release instant. Only live and run-out terms
	// show an expiry.
	for _, args := range [][]string{{"lease", "list"}, {"status"}} {
		out := opsMust(t, append(args, "--dsn", db.DSN, "-o", "wide")...).stdout
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || (f[0] != "holder" && f[0] != "operator" && f[0] != "expired") {
				continue
			}
			want := map[string]int{"lease": 2, "status": 0}[args[0]] // lease list: ACQUIRED and RENEWED
			if f[0] == "expired" {
				want++
			}
			if stamped := stampRE.FindAllString(line, -1); len(stamped) != want {
				t.Errorf("%v -o wide, queue %s: %q; want an expiry only for the term that ran out", args, f[0], line)
			}
		}
	}
	for _, c := range cases {
		surfaces := map[string]string{}
		for _, l := range list {
			if l.Queue == c.queue {
				surfaces["lease list"] = l.Status
			}
		}
		for _, s := range status {
			if s.Queue == c.queue {
				surfaces["status"] = s.Lease.Status
			}
		}
		var view string
		if err := db.SQL(t).QueryRow("SELECT status FROM mend_lease_status WHERE queue = ?", c.queue).Scan(&view); err != nil {
			t.Fatal(err)
		}
		surfaces["mend_lease_status"] = view
		for surface, got := range surfaces {
			if got != c.latest {
				t.Errorf("%s: %s says %q; want %q", c.queue, surface, got, c.latest)
			}
		}
		if len(surfaces) != 3 {
			t.Errorf("%s: only %v list the queue", c.queue, surfaces)
		}
		// The first term's ending, in the history and its view.
		var hist []struct {
			Epoch    int64
			EndedHow string `json:"ended_how"`
		}
		if err := json.Unmarshal([]byte(opsMust(t, "lease", "history", "--dsn", db.DSN, "--queue", c.queue, "--json").stdout), &hist); err != nil {
			t.Fatal(err)
		}
		if len(hist) == 0 || hist[len(hist)-1].EndedHow != c.want {
			t.Errorf("%s: lease history = %+v; want the first term %q", c.queue, hist, c.want)
		}
		var terms string
		if err := db.SQL(t).QueryRow("SELECT ended_how FROM mend_lease_terms WHERE queue = ? AND epoch = 1", c.queue).Scan(&terms); err != nil || terms != c.want {
			t.Errorf("%s: mend_lease_terms = %q, %v; want %q", c.queue, terms, err, c.want)
		}
	}
}

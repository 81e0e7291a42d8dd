package console

import (
	"strings"
	"testing"

	"github.com/mendq/mend/dlq"
)

// Issue 57: a runway dead letter recorded through the intake is not on the
// parked page, not in the parked total, and raises no MendRecordsParked
// row; the recorded page lists it apart, its stored text escaped. The
// setup's two parked speculate records still are parked, and the
// MendRecordsParked row says it is a ticket.
func TestConsoleRecordedApart(t *testing.T) {
	b := setup(t)
	in, err := dlq.New(b.store, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	row := dlq.Row{Topic: "runway-merge_dlq", OriginalTopic: "runway-merge", PartitionKey: queueName, ID: `runway/<b id="mend-pwned">x</b>`,
		Payload: []byte(`{"id":"x"}`), LastError: "conflict"}
	res, err := in.Record(t.Context(), row.Delivery())
	if err != nil {
		t.Fatal(err)
	}
	s := guardConsole(t, b.store, nil)
	get := func(path string) string {
		t.Helper()
		code, body := send(s, request("GET", path, "alice", nil))
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if strings.Contains(body, `<b id="mend-pwned">`) {
			t.Errorf("GET %s: stored markup unescaped", path)
		}
		return body
	}
	id := res.Record.ID.String()

	parked := get("/parked")
	if strings.Contains(parked, id) {
		t.Errorf("/parked lists the runway record %s", id)
	}
	for _, want := range []string{b.parked.ID.String(), b.other.ID.String(), `href="/parked?recorded=1"`} {
		if !strings.Contains(parked, want) {
			t.Errorf("/parked: no %q", want)
		}
	}
	rec := get("/parked?recorded=1")
	if !strings.Contains(rec, id) || !strings.Contains(rec, "Recorded for the audit") || strings.Contains(rec, b.parked.ID.String()) {
		t.Errorf("/parked?recorded=1: want the runway record alone, under its heading:\n%s", rec)
	}
	if strings.Contains(rec, "mend retry --state parked") {
		t.Errorf("/parked?recorded=1 offers the parked selection's retry command")
	}

	over := get("/")
	for _, want := range []string{"2 parked", "1 recorded for the audit", "MendRecordsParked (ticket"} {
		if !strings.Contains(over, want) {
			t.Errorf("overview: no %q", want)
		}
	}
	if strings.Contains(over, "3 parked") || strings.Contains(over, "3 record(s) parked") {
		t.Errorf("overview counts the runway record as parked")
	}
}

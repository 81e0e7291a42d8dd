package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mendq/mend"
)

// A record the stuck-queue scan made (topic mend/stuck: no dead letter, a
// wake-up owed to a queue with live batches and nothing in flight) says so
// on its page, with the scan's reason, and its row on the queue page is
// marked; the reason and the queue's name are escaped like every other
// value from the host. A record from a dead letter is not marked.
func TestConsoleStuckWake(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	const (
		queue  = "team/<b>stuck</b>"
		reason = "queue stuck: 2 live batch(es) and nothing in flight to wake its planner for 3m0s (bound 3m0s) <script>alert(1)</script>"
	)
	rec, _, err := b.store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: queue, Topic: mend.StuckTopic, Partition: queue, MessageID: "stuck/5e1f"},
		Snapshot: mend.Snapshot{Payload: []byte(`{"reason":"queue stuck","live_batches":2}`), LastError: reason},
		Target:   mend.Target{BatchID: "team/batch/7", Desired: mend.OutcomeWake},
		Reason:   reason, OpID: mend.NewOpID(), Actor: "stuck-scan/replica-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	// A record from a dead letter in the same queue.
	if _, _, err := b.store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: queue, Topic: "speculate_dlq", Partition: queue, MessageID: "speculate/team/batch/8"},
		Snapshot: mend.Snapshot{Payload: []byte(`{"batch_id":"team/batch/8"}`), LastError: "handler: boom"},
		Target:   mend.Target{BatchID: "team/batch/8", Desired: mend.OutcomeFailed}, OpID: mend.NewOpID(), Actor: "intake",
	}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		t.Helper()
		code, body := send(s, request(http.MethodGet, path, "", nil))
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, code, body)
		}
		if strings.Contains(body, "<script>alert(1)") || strings.Contains(body, "<b>stuck</b>") {
			t.Errorf("GET %s: a value is not escaped: %s", path, body)
		}
		return body
	}

	page := get("/record/" + rec.ID.String())
	mustContain(t, "the stuck record's page", page, `id="stuck-wake"`, "Woken by the stuck-queue scan",
		"(bound 3m0s) &lt;script&gt;alert(1)&lt;/script&gt;", "The stuck-queue scan's snapshot")
	if strings.Contains(page, "<h2>Dead letter</h2>") {
		t.Errorf("the stuck record's page calls its snapshot a dead letter")
	}

	q := get("/queue?" + url.Values{"name": {queue}}.Encode())
	mustContain(t, "the queue page", q, `<span class="stuck-wake" title="queue stuck: 2 live batch(es)`, "&lt;script&gt;alert(1)&lt;/script&gt;")
	if n := strings.Count(q, ">woken by the stuck-queue scan</span>"); n != 1 {
		t.Errorf("the queue page marks %d records as woken by the stuck-queue scan; want 1 (not the dead letter's):\n%s", n, q)
	}

	if other := get("/record/" + b.parked.ID.String()); strings.Contains(other, "stuck-wake") || !strings.Contains(other, "<h2>Dead letter</h2>") {
		t.Errorf("a dead letter's record page is marked as a stuck-queue wake-up")
	}
}

package host_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/sqtest"
)

// deadLetter is the cause the fan-out tests finish with.
var deadLetter = mend.Snapshot{
	Payload:       []byte(`{"id":"q/batch/1","queue":"q"}`),
	OriginalTopic: "speculate",
	FailureCount:  4,
	LastError:     "speculation exceeded retry limit",
	FailedAt:      time.UnixMilli(1_750_000_000_456).UTC(),
	Subjects:      []mend.Subject{{Kind: "batch", ID: "q/batch/1"}, {Kind: "request", ID: "q/1"}, {Kind: "request", ID: "q/2"}},
}

// wantMeta is deadLetter's RequestLog metadata, written out by hand.
var wantMeta = map[string]string{
	"dlq.original_topic":  "speculate",
	"dlq.failure_count":   "4",
	"dlq.failed_at":       "1750000000456",
	"dlq.subject.batch":   "q/batch/1",
	"dlq.subject.request": "q/1,q/2",
	"mend.repaired_by":    "mend",
}

func (b *bundle) request(t *testing.T, id string) sqtest.Request {
	t.Helper()
	r, err := b.w.Request(context.Background(), "q", id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// logs reads a request's log partition with the strict consumer-side
// decoder.
func (b *bundle) logs(t *testing.T, requestID string) []sqtest.RequestLog {
	t.Helper()
	l, err := b.w.ConsumeLog(context.Background(), requestID)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBatchFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a failed batch fans out like the real TerminateRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// q/1 batched, q/2 cancelling, q/3 already landed (another outcome),
		// q/4 already error, q/5 listed but missing.
		b.seed(t, "q", "q/batch/1", "speculating", "q/1", "q/2", "q/3", "q/4")
		b.exec(t, `UPDATE batch SET contains = '["q/1","q/2","q/3","q/5","q/4"]' WHERE queue = 'q' AND id = 'q/batch/1'`)
		for id, state := range map[string]string{"q/2": "cancelling", "q/3": "landed", "q/4": "error"} {
			if err := b.w.SetRequestState(ctx, "q", id, state); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.h.BatchTransition(ctx, "q", "q/batch/1", 1, mend.BatchFailed); err != nil {
			t.Fatal(err)
		}
		if err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]sqtest.Request{
			"q/1": {State: "error", Version: 2}, "q/2": {State: "error", Version: 3},
			"q/3": {State: "landed", Version: 2}, "q/4": {State: "error", Version: 2},
		} {
			if r := b.request(t, id); r.State != want.State || r.Version != want.Version || r.LandStrategy != "rebase" {
				t.Errorf("request %s = %s v%d (%s); want %s v%d, land strategy untouched", id, r.State, r.Version, r.LandStrategy, want.State, want.Version)
			}
		}
		for id, version := range map[string]int32{"q/1": 2, "q/2": 3, "q/4": 2} {
			l := b.logs(t, id)
			if len(l) != 1 {
				t.Fatalf("log of %s = %+v; want one entry", id, l)
			}
			want := sqtest.RequestLog{RequestID: id, Queue: "q", TimestampMS: testNow.UnixMilli(), Type: "status", Status: "error",
				RequestVersion: version, LastError: deadLetter.LastError, Metadata: wantMeta}
			if !sameLog(l[0], want) {
				t.Errorf("log of %s = %+v; want %+v", id, l[0], want)
			}
		}
		for _, id := range []string{"q/3", "q/5"} {
			if l := b.logs(t, id); len(l) != 0 {
				t.Errorf("log of %s = %+v; want none (other outcome / missing)", id, l)
			}
		}
		msgs, err := b.w.Messages(ctx, host.LogTopic, "q/1")
		if err != nil || len(msgs) != 1 {
			t.Fatalf("log rows of q/1 = %+v, %v", msgs, err)
		}
		if m := msgs[0]; m.ID != "q/1/error" || m.CreatedAt != uint64(testNow.UnixMilli()) || m.PublishedAt != m.CreatedAt ||
			m.FailedAt != 0 || m.FailureCount != 0 || m.LastError != "" || m.OriginalTopic != "" || m.FailureDetail != nil {
			t.Fatalf("log row = %+v; want a normal publish with ID q/1/error", m)
		}
		const wantPayload = `{"request_id":"q/1","queue":"q","timestamp_ms":1760000000123,"type":"status","status":"error","event":"",` +
			`"request_version":2,"last_error":"speculation exceeded retry limit","metadata":{"dlq.failed_at":"1750000000456",` +
			`"dlq.failure_count":"4","dlq.original_topic":"speculate","dlq.subject.batch":"q/batch/1","dlq.subject.request":"q/1,q/2",` +
			`"mend.repaired_by":"mend"}}`
		if string(msgs[0].Payload) != wantPayload {
			t.Fatalf("log payload\n %s\nwant\n %s", msgs[0].Payload, wantPayload)
		}
	})

	t.Run("calling it again changes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "failed", "q/1", "q/2")
		for range 2 {
			if err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"q/1", "q/2"} {
			if r := b.request(t, id); r.State != "error" || r.Version != 2 {
				t.Errorf("request %s = %s v%d; want error v2", id, r.State, r.Version)
			}
			if l := b.logs(t, id); len(l) != 1 {
				t.Errorf("log of %s has %d entries; want 1 (the republish is deduplicated)", id, len(l))
			}
		}
	})

	// Issue 47, checked against the real DLQ controller (failRequest ->
	// TerminateRequest, TerminationOutcomeAlreadyInTargetState): for a
	// request already error it writes nothing and republishes its terminal
	// log under publish.IntentID(request, "error"), "<request>/error", at
	// the current version. mend's republish is that very message, so when
	// the host already wrote its own, the store's dedupe keeps one row and
	// readers see one entry, the host's.
	t.Run("a request the host already failed and logged gets no second entry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "failed", "q/1")
		if err := b.w.SetRequestState(ctx, "q", "q/1", "error"); err != nil {
			t.Fatal(err)
		}
		hostsOwn := []byte(`{"request_id":"q/1","queue":"q","timestamp_ms":1,"type":"status","status":"error","event":"","request_version":2,"last_error":"the host's","metadata":{}}`)
		if err := b.w.Publish(ctx, host.LogTopic, "q/1", "q/1/error", hostsOwn, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter); err != nil {
			t.Fatal(err)
		}
		if r := b.request(t, "q/1"); r.State != "error" || r.Version != 2 {
			t.Errorf("request q/1 = %s v%d; want error v2 (no write)", r.State, r.Version)
		}
		msgs, err := b.w.Messages(ctx, host.LogTopic, "q/1")
		if err != nil || len(msgs) != 1 || msgs[0].ID != "q/1/error" || string(msgs[0].Payload) != string(hostsOwn) {
			t.Fatalf("log rows of q/1 = %+v, %v; want the host's one entry alone", msgs, err)
		}
	})

	t.Run("succeeded lands and cancelled cancels, with no last error", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "succeeded", "q/1")
		b.seed(t, "q", "q/batch/2", "cancelled", "q/2")
		for _, id := range []string{"q/batch/1", "q/batch/2"} {
			if err := b.h.BatchFinish(ctx, "q", id, deadLetter); err != nil {
				t.Fatal(err)
			}
		}
		for id, status := range map[string]string{"q/1": "landed", "q/2": "cancelled"} {
			if r := b.request(t, id); r.State != status || r.Version != 2 {
				t.Errorf("request %s = %s v%d; want %s v2", id, r.State, r.Version, status)
			}
			l := b.logs(t, id)
			if len(l) != 1 || l[0].Status != status || l[0].LastError != "" || l[0].RequestVersion != 2 {
				t.Errorf("log of %s = %+v; want one %s entry at version 2 without last_error", id, l, status)
			}
			msgs, _ := b.w.Messages(ctx, host.LogTopic, id)
			if len(msgs) != 1 || msgs[0].ID != id+"/"+status {
				t.Errorf("log rows of %s = %+v; want ID %s/%s", id, msgs, id, status)
			}
		}
	})

	t.Run("EnsureRecord re-creates the terminal membership row and deletes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A transition that stopped after its CAS: batch failed, only the
		// old speculating row exists.
		b.seed(t, "q", "q/batch/1", "speculating", "q/1")
		b.exec(t, "UPDATE batch SET state = 'failed', version = 2 WHERE queue = 'q' AND id = 'q/batch/1'")
		if err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter); err != nil {
			t.Fatal(err)
		}
		if m := b.membership(t, "q"); !slices.Equal(m, []string{"failed/q/batch/1", "speculating/q/batch/1"}) {
			t.Fatalf("membership = %q; want the failed row added and the stale one kept", m)
		}
	})

	t.Run("a live batch is refused and nothing is written", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "merging", "q/1")
		if err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter); !errors.Is(err, mend.ErrInvalid) {
			t.Fatalf("BatchFinish of a merging batch = %v; want ErrInvalid", err)
		}
		if r := b.request(t, "q/1"); r.State != "batched" || r.Version != 1 {
			t.Fatalf("request = %+v; want untouched", r)
		}
		if l := b.logs(t, "q/1"); len(l) != 0 {
			t.Fatalf("log = %+v; want none", l)
		}
	})

	t.Run("a missing batch is not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter); !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("BatchFinish of a missing batch = %v; want ErrNotFound", err)
		}
	})

	t.Run("a differently spelled request is skipped, reported and never written", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "failed", "q/1", "q/a")
		b.exec(t, `UPDATE batch SET contains = '["Q/A","q/1"]' WHERE queue = 'q' AND id = 'q/batch/1'`)
		err := b.h.BatchFinish(ctx, "q", "q/batch/1", deadLetter)
		var se *mend.SpellingError
		if !errors.As(err, &se) || se.Field != "request_id" || se.Asked != "Q/A" || se.Stored != "q/a" {
			t.Fatalf("BatchFinish = %v; want a spelling error naming Q/A and q/a", err)
		}
		if r := b.request(t, "q/a"); r.State != "batched" || r.Version != 1 {
			t.Fatalf("variant request = %+v; want untouched", r)
		}
		if r := b.request(t, "q/1"); r.State != "error" {
			t.Fatalf("the other member = %+v; want it finished anyway", r)
		}
		for _, id := range []string{"q/a", "Q/A"} {
			if l := b.logs(t, id); len(l) != 0 {
				t.Fatalf("log of %s = %+v; want none", id, l)
			}
		}
	})

	t.Run("a last error too long for the payload is cut", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "q", "q/batch/1", "failed", "q/1")
		cause := deadLetter
		cause.LastError = strings.Repeat("é", 40_000) // 80,000 bytes
		if err := b.h.BatchFinish(ctx, "q", "q/batch/1", cause); err != nil {
			t.Fatal(err)
		}
		msgs, _ := b.w.Messages(ctx, host.LogTopic, "q/1")
		l := b.logs(t, "q/1")
		if len(msgs) != 1 || len(msgs[0].Payload) > host.MaxPayloadBytes || len(l) != 1 || !strings.HasSuffix(l[0].LastError, "é…") {
			t.Fatalf("log payload of %d bytes; want at most %d with the last error cut on a rune boundary", len(msgs[0].Payload), host.MaxPayloadBytes)
		}
	})
}

func sameLog(a, b sqtest.RequestLog) bool {
	return a.RequestID == b.RequestID && a.Queue == b.Queue && a.TimestampMS == b.TimestampMS && a.Type == b.Type &&
		a.Status == b.Status && a.Event == b.Event && a.RequestVersion == b.RequestVersion && a.LastError == b.LastError &&
		maps.Equal(a.Metadata, b.Metadata)
}

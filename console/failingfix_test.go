package console

import (
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// Issue 57: a failing (pending) record's page suggested only resolve. It
// names the fix, the GRANT its denied statement's error names, and says the
// next attempt comes by itself; the resolve command block is not offered.
// A failing record whose error names no GRANT says to fix the cause.
func TestConsoleFailingRecordNamesFix(t *testing.T) {
	b := setup(t)
	recs, err := b.store.ConsoleQueueRecords(t.Context(), queueName, mend.StatePending, storage.RecordCursor{}, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("pending records of %s: %v %v", queueName, recs, err)
	}
	rec := recs[0]
	s := guardConsole(t, b.store, nil)
	page := func() string {
		t.Helper()
		code, body := send(s, request("GET", "/record/"+rec.ID.String(), "alice", nil))
		if code != 200 {
			t.Fatalf("record page: %d %s", code, body)
		}
		return body
	}

	t.Run("denied", func(t *testing.T) {
		denied := &mend.DeniedError{Privilege: "UPDATE", User: "mend<b>", Database: "app", Table: "batch", Err: errString("Error 1142 (42000): UPDATE command denied")}
		b.failing(t, rec, 3, "host: "+denied.Error())
		body := page()
		want := `<code id="fix">GRANT UPDATE ON ` + "`app`.`batch`" + ` TO &#39;mend&lt;b&gt;&#39;</code>`
		for _, w := range []string{want, "the next attempt comes by itself", "Failing: every attempt"} {
			if !strings.Contains(body, w) {
				t.Errorf("failing record page lacks %q", w)
			}
		}
		if strings.Contains(body, `id="commands"`) || strings.Contains(body, "mend resolve --record") {
			t.Errorf("failing record page still offers the resolve command block")
		}
		if strings.Contains(body, "mend<b>") {
			t.Errorf("the error's user is shown unescaped")
		}
	})
	t.Run("no grant named", func(t *testing.T) {
		b.failing(t, rec, 1, "wake-up: broker down")
		body := page()
		if !strings.Contains(body, "Fix the cause its last error names") || strings.Contains(body, `id="fix"`) {
			t.Errorf("failing record without a GRANT: want the generic fix line")
		}
	})
	t.Run("not failing", func(t *testing.T) {
		b.failing(t, rec, 0, "")
		body := page()
		if strings.Contains(body, `id="failing-fix"`) || !strings.Contains(body, "mend resolve --record") {
			t.Errorf("a pending record with no failed attempt: want no failing note and the command block")
		}
	})
}

type errString string

func (e errString) Error() string { return string(e) }

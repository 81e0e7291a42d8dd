package console

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// failing makes rec a repair failing attempts times with lastErr, its next
// attempt in 40 s, as the planner's attempt_failed writes leave it.
func (b *bundle) failing(t *testing.T, rec mend.Record, attempts int, lastErr string) {
	t.Helper()
	if _, err := b.sql.Exec(`UPDATE mend_records SET attempts = ?, last_error = ?, next_attempt_at = NOW(6) + INTERVAL 40 SECOND,
		updated_at = NOW(6) - INTERVAL 3 SECOND, created_at = NOW(6) - INTERVAL 80 SECOND WHERE record_id = ?`, attempts, lastErr, rec.ID[:]); err != nil {
		t.Fatal(err)
	}
}

// The walk: two queues fail every attempt (a revoked grant) and
// nothing parks yet. The overview shows them first, red, with the attempt
// count, the last error quoted (escaped) and the next attempt.
func TestConsoleFailingNow(t *testing.T) {
	b := setup(t)
	var pending []mend.Record
	recs, err := b.store.ConsoleQueueRecords(t.Context(), queueName, mend.StatePending, storage.RecordCursor{}, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("pending records of %s: %v %v", queueName, recs, err)
	}
	pending = append(pending, recs...)
	recs, err = b.store.ConsoleQueueRecords(t.Context(), otherQueue, mend.StatePending, storage.RecordCursor{}, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("pending records of %s: %v %v", otherQueue, recs, err)
	}
	pending = append(pending, recs...)
	b.failing(t, pending[0], 3, `host: Error 1142 (42000): SELECT command denied to user 'mend'@'%' for table 'batches' <b id="mend-pwned">x</b>`)
	b.failing(t, pending[1], 5, "host: Error 1142 (42000): SELECT command denied")
	_, base := b.serve(t, func(c *Config, _ *Server) { c.PageSize = 50 })
	ctx := browser(t)
	load(t, ctx, base+"/", "#failing table")
	f := text(t, ctx, "#failing")
	mustContain(t, "failing now", f, "Failing now", queueName, otherQueue, "SELECT command denied", `<b id="mend-pwned">x</b>`, "in ")
	if strings.Index(f, otherQueue) > strings.Index(f, queueName) {
		t.Errorf("the queue with 5 attempts is not listed before the one with 3:\n%s", f)
	}
	order, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("section")).map(s => s.id).join(",")`))
	if err != nil || !strings.HasPrefix(order, "failing,") {
		t.Errorf("sections %q (%v): want failing first", order, err)
	}
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("`+pwnedID+`") !== null`))
	if err != nil || injected {
		t.Errorf("the last error's markup became an element: %v %v", injected, err)
	}
	rows := text(t, ctx, "table.queues")
	if i, j := strings.Index(rows, otherQueue), strings.Index(rows, queueName); i < 0 || j < 0 || i > j {
		t.Errorf("the queue table does not list the failing queues first, worst first:\n%s", rows)
	}
	mustContain(t, "queue table", rows, "failing")
	screenshot(t, ctx, "overview-failing")
	// The worst record's link leads to its page.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#failing a.mono")), chromedp.WaitVisible(chromedp.CSS("#events"))); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "record page", text(t, ctx, "h1"), pending[1].ID.String())

	b.failing(t, pending[0], 0, "")
	b.failing(t, pending[1], 0, "")
	load(t, ctx, base+"/", "#nothing-failing")
}

// A parked record whose dead letter names no batch is offered no retry
// (its confirmation could only refuse it): the page says why and what to
// do instead. Every selection prints its command lines, quoted for a shell.
func TestConsoleNoRetryAndCommands(t *testing.T) {
	b := setup(t)
	if _, err := b.sql.Exec(`UPDATE mend_records SET batch_id = '', desired_outcome = '' WHERE record_id = ?`, b.other.ID[:]); err != nil {
		t.Fatal(err)
	}
	_, base := b.serve(t, func(c *Config, _ *Server) { c.PageSize = 50 })
	ctx := browser(t)
	load(t, ctx, base+"/record/"+b.other.ID.String(), "#no-retry")
	mustContain(t, "no retry", text(t, ctx, "#no-retry"), "names no batch", "Resolve it")
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#retry-link").length`)); err != nil || n != 0 {
		t.Errorf("the record page offers a retry that can only be refused (%d links, %v)", n, err)
	}
	cmds := text(t, ctx, "#commands")
	mustContain(t, "commands", cmds, "mend resolve --record "+b.other.ID.String())
	if strings.Contains(cmds, "mend retry") {
		t.Errorf("the commands offer a retry:\n%s", cmds)
	}
	load(t, ctx, base+"/record/"+b.parked.ID.String(), "#retry-link")
	mustContain(t, "commands", text(t, ctx, "#commands"), "mend retry --record "+b.parked.ID.String())

	reason := `it's $(touch /tmp/pwned) "x"`
	load(t, ctx, base+"/parked?queue="+strings.ReplaceAll(queueName, "/", "%2F")+"&reason="+strings.NewReplacer(" ", "+", "$", "%24", "(", "%28", ")", "%29", `"`, "%22", "'", "%27", "/", "%2F").Replace(reason), "#commands")
	cmds = text(t, ctx, "#commands")
	want := `mend retry --state parked --queue monorepo/main --reason-contains 'it'\''s $(touch /tmp/pwned) "x"'`
	mustContain(t, "parked commands", cmds, want)
	load(t, ctx, base+"/parked", "table.records")
	mustContain(t, "parked rows", text(t, ctx, "table.records"), "no retry (names no batch)")
}

// shellQuote's words reach a shell as the bytes they quote.
func TestShellQuote(t *testing.T) {
	sh, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, s := range []string{"monorepo/main", "team/web <i>", `it's $(touch /tmp/x) "y" \n`, "a\x01b\xff'\\", "tab\there", "ünï", "", "-n"} {
		out, err := exec.Command(sh, "-c", "printf '%s' "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("shellQuote(%q) = %s: the shell printed %q (%v)", s, shellQuote(s), out, err)
		}
	}
}

// The overview shows the last mend verify run with its age; a divergence
// is a ticket alert.
func TestConsoleVerifyShown(t *testing.T) {
	b := setup(t)
	s, err := New(Config{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	code, body := send(s, request("GET", "/", "", nil))
	if code != 200 || !strings.Contains(body, "No mend verify run is recorded yet") {
		t.Fatalf("no run: %d, the page does not say so", code)
	}
	now := time.Now()
	if err := b.store.VerifyRunRecord(t.Context(), storage.VerifyRun{Started: now.Add(-2 * time.Minute), Finished: now.Add(-90 * time.Second),
		Records: 1200, Events: 5000, Divergent: 2, Host: "ops <1>"}); err != nil {
		t.Fatal(err)
	}
	code, body = send(s, request("GET", "/", "", nil))
	if code != 200 {
		t.Fatalf("overview: %d", code)
	}
	mustContain(t, "overview", body, "1200 records (5000 events)", "<b>2 divergent</b>", "MendVerifyDivergent (ticket)", "ops &lt;1&gt;", "ago")
}

// The parked page's reason filter searches a bounded number of records a
// page and says when it stopped there, linking to the rest.
func TestConsoleParkedReasonBounded(t *testing.T) {
	b := setup(t)
	s, err := New(Config{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	saved := parkedScan
	parkedScan = 1
	defer func() { parkedScan = saved }()
	_, body := send(s, request("GET", "/parked?reason=contradiction", "", nil))
	mustContain(t, "first page", body, `id="capped"`, "searched 1 parked records", `id="next"`)
	if strings.Contains(body, b.other.ID.String()) {
		t.Errorf("the first page (one record searched, b.parked) lists the match that comes after it")
	}
	i := strings.Index(body, `id="next" href="`)
	next := strings.ReplaceAll(body[i+len(`id="next" href="`):][:strings.Index(body[i+len(`id="next" href="`):], `"`)], "&amp;", "&")
	_, body = send(s, request("GET", next, "", nil))
	mustContain(t, "second page", body, b.other.ID.String())
}

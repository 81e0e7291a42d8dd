package console

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// The seeded dead letter: markup that would inject an element if it ever
// reached the page as HTML, a script, and bytes that are not UTF-8.
const (
	pwnedID    = "mend-pwned"
	xssPayload = `{"batch_id":"b-1"}<b id="mend-pwned">bold</b><script>document.title="pwned"</script>`
	queueName  = "monorepo/main"
	otherQueue = "team/web <i>"
	slotName   = "mend-reconcile/replica/01" // a reconciler's slot lease (reconcile.ReplicaSlotName)
	password   = "correct horse"
)

var rawPayload = append([]byte(xssPayload), 0xff, 0xfe, 0x00)

type bundle struct {
	db     *mysqltest.DB
	sql    *sql.DB
	store  *storage.DB
	parked mend.Record // parked, payload with markup and invalid UTF-8
	other  mend.Record // parked, for resolve
	done   mend.Record // settled and woken
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	b := &bundle{db: db, sql: db.SQL(t), store: store}
	create := func(q, msg string, payload []byte) mend.Record {
		t.Helper()
		rec, created, err := store.RecordCreate(ctx, mend.CreateParams{
			Source: mend.SourceID{Queue: q, Topic: "speculate_dlq", Partition: q, MessageID: msg},
			Snapshot: mend.Snapshot{Payload: payload, OriginalTopic: "speculate", FailureCount: 3,
				LastError: "handler: <em>boom</em>", FailedAt: time.Now().Add(-90 * time.Second), Subjects: []mend.Subject{{Kind: "batch", ID: "b-1"}}},
			Target: mend.Target{BatchID: "b-1", Desired: mend.OutcomeFailed},
			OpID:   mend.NewOpID(), Actor: "intake",
		})
		if err != nil || !created {
			t.Fatalf("RecordCreate(%q, %q) = %v, %v", q, msg, created, err)
		}
		return rec
	}
	step := func(rec mend.Record, kind mend.EventKind, state mend.State, lastErr string, data string) mend.Record {
		t.Helper()
		ap := storage.AppendTo(rec)
		ap.Kind, ap.Actor, ap.OpID, ap.State, ap.LastError, ap.Data = kind, "planner/replica-1", mend.NewOpID(), state, lastErr, json.RawMessage(data)
		if _, err := store.RecordAppend(ctx, ap); err != nil {
			t.Fatalf("append %s: %v", kind, err)
		}
		rec, err := store.RecordGetByID(ctx, rec.Source.Queue, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	b.parked = step(create(queueName, "speculate/b-1/\x01<i>x</i>", rawPayload), mend.EventParked, mend.StateParked,
		"wake-up failed 5 times; last: <em>queue db down</em>", `{"reason":"wake-up failed"}`)
	b.other = step(create(queueName, "speculate/b-2", []byte(`{"batch_id":"b-2"}`)), mend.EventParked, mend.StateParked, "contradiction", `{}`)
	d := create(queueName, "speculate/b-3", []byte(`{"batch_id":"b-3"}`))
	d = step(d, mend.EventSettled, mend.StateSettled, "", `{"outcome":"failed","batch_id":"b-3"}`)
	b.done = step(d, mend.EventWoken, mend.StateDone, "", `{"message_id":"mend/wake/monorepo/main/3f2a"}`)
	create(queueName, "speculate/b-4", []byte(`{"batch_id":"b-4"}`))
	create(otherQueue, "speculate/b-9", []byte(`{}`))
	for _, l := range []string{queueName, slotName} {
		if _, err := store.LeaseAcquire(ctx, l, "replica-1", time.Minute); err != nil {
			t.Fatalf("lease %q: %v", l, err)
		}
	}
	return b
}

// serve starts a console over b's store; configure adjusts the config and
// the server (the test hooks) before it serves.
func (b *bundle) serve(t *testing.T, configure func(*Config, *Server)) (*Server, string) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := ParseBasicAuth([]byte("alice:" + string(hash) + "\nbob:" + string(hash) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: b.store, AllowActions: true, Auth: auth, PageSize: 2}
	if configure != nil {
		configure(&cfg, nil)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(&s.cfg, s)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// browser starts headless Chromium for one test, authenticated as alice.
// Outside CI a machine without chromium skips; under CI=true it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is not installed (CI=true): apt-get install chromium")
		}
		t.Skip("chromium is not installed; the browser tests need Debian's chromium package")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1100, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(cancelCtx)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+password))
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": basic}})
		return err
	})); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Only a hang guard: each step waits on the page, never on a clock.
	tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	return tctx
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func load(t *testing.T, ctx context.Context, u, waitFor string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("load %s: %v", u, err)
	}
	failed, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("error-message") || {}).textContent || ""`))
	if err != nil || failed != "" {
		t.Fatalf("load %s: the page failed: %q %v", u, failed, err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(waitFor))); err != nil {
		t.Fatalf("load %s: %v", u, err)
	}
}

// screenshot saves the page as docs/console-<name>.png when
// MEND_CONSOLE_SCREENSHOTS names the docs directory (make screenshots).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("MEND_CONSOLE_SCREENSHOTS")
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

func TestConsolePages(t *testing.T) {
	b := setup(t)
	_, base := b.serve(t, nil)
	ctx := browser(t)

	t.Run("overview", func(t *testing.T) {
		load(t, ctx, base+"/", "#queues")
		q := text(t, ctx, "#queues")
		mustContain(t, "queue table", q, queueName, otherQueue, "held · replica-1 · epoch 1")
		if strings.Contains(q, slotName) {
			t.Errorf("the slot lease %q is listed as a queue:\n%s", slotName, q)
		}
		mustContain(t, "alerts", text(t, ctx, "#alerts"), "MendRecordsParked", queueName)
		mustContain(t, "latency", text(t, ctx, "#latency"), "1 repairs", "recorded (5)", "finished (1)")
		screenshot(t, ctx, "overview")
	})
	t.Run("queue", func(t *testing.T) {
		load(t, ctx, base+"/queue?name="+url.QueryEscape(queueName), "table.records")
		recs := text(t, ctx, "table.records")
		mustContain(t, "records", recs, "pending", "done") // newest first, page size 2
		mustContain(t, "lease history", text(t, ctx, "table.history"), "replica-1", "current")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#next")), chromedp.WaitVisible(chromedp.CSS("table.records"))); err != nil {
			t.Fatal(err)
		}
		mustContain(t, "second page", text(t, ctx, "table.records"), b.parked.ID.String(), b.other.ID.String())
		load(t, ctx, base+"/queue?state=parked&name="+url.QueryEscape(queueName), "table.records")
		got := text(t, ctx, "table.records")
		mustContain(t, "parked filter", got, b.parked.ID.String(), b.other.ID.String())
		if strings.Contains(got, b.done.ID.String()) {
			t.Errorf("state=parked lists the done record:\n%s", got)
		}
		screenshot(t, ctx, "queue")
	})
	t.Run("record", func(t *testing.T) {
		if err := checkEscaped(ctx, base, b.parked.ID); err != nil {
			t.Fatal(err)
		}
		id := text(t, ctx, "#identity")
		mustContain(t, "identity", id, `speculate/b-1/\x01<i>x</i>`, "hex "+fmt.Sprintf("%x", b.parked.Source.MessageID))
		mustContain(t, "payload hex dump", text(t, ctx, "#payload .dump"), "ff fe 00")
		mustContain(t, "events", text(t, ctx, "#events"), "created", "parked", "planner/replica-1", "wake-up failed")
		screenshot(t, ctx, "record")

		load(t, ctx, base+"/record/"+b.done.ID.String(), "#events")
		mustContain(t, "settled", text(t, ctx, "#settled"), "failed")
		mustContain(t, "wake-up", text(t, ctx, "#wake"), "mend/wake/monorepo/main/3f2a")
		mustContain(t, "events", text(t, ctx, "#events"), "created", "settled", "woken")
	})
	t.Run("parked", func(t *testing.T) {
		load(t, ctx, base+"/parked", "table.records")
		got := text(t, ctx, "table.records")
		mustContain(t, "parked", got, b.parked.ID.String(), "<em>queue db down</em>")
		screenshot(t, ctx, "parked")
		load(t, ctx, base+"/parked?reason=contradiction", "table.records")
		got = text(t, ctx, "table.records")
		if !strings.Contains(got, b.other.ID.String()) || strings.Contains(got, b.parked.ID.String()) {
			t.Errorf("reason filter: got\n%s", got)
		}
	})
}

// checkEscaped loads the record page of id and reports whether the dead
// letter's markup became elements instead of text.
func checkEscaped(ctx context.Context, base string, id mend.RecordID) error {
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/record/"+id.String()), chromedp.WaitVisible(chromedp.CSS("#payload"))); err != nil {
		return err
	}
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("`+pwnedID+`") !== null || document.querySelector("#payload script") !== null`))
	if err != nil {
		return err
	}
	if injected {
		return errors.New("the payload's markup became elements of the page")
	}
	shown, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#payload pre.payload")))
	if err != nil {
		return err
	}
	if want := xssPayload + `\xff\xfe\x00`; shown != want {
		return fmt.Errorf("payload shown as %q, want the text %q", shown, want)
	}
	return nil
}

func TestConsoleEscaping(t *testing.T) {
	b := setup(t)
	_, base := b.serve(t, nil)
	ctx := browser(t)
	if err := checkEscaped(ctx, base, b.parked.ID); err != nil {
		t.Fatalf("payload not escaped: %v", err)
	}
	// Negative control: a page that prints the payload as template.HTML
	// must be caught by the same check.
	saved := renderPayload
	renderPayload = func(p []byte) any { return template.HTML(p) } //nolint:gosec // the deliberately broken variant
	defer func() { renderPayload = saved }()
	if err := checkEscaped(ctx, base, b.parked.ID); err == nil {
		t.Fatal("negative control: the check passed a page that renders the payload as HTML")
	}
}

// post sends a form as user and returns the status and body.
func post(t *testing.T, u, user string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(user, password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// lastEvent is a record's newest event as SQL reads it, its data decoded
// (MariaDB keeps JSON as sent, MySQL normalises it).
func (b *bundle) lastEvent(t *testing.T, id mend.RecordID) (kind, actor string, data map[string]string, seq int64) {
	t.Helper()
	var raw []byte
	err := b.sql.QueryRow(`SELECT kind, actor, data, seq FROM mend_events WHERE record_id = ? ORDER BY seq DESC LIMIT 1`, id[:]).Scan(&kind, &actor, &raw, &seq)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatalf("event data %s: %v", raw, err)
	}
	return kind, actor, data, seq
}

func TestConsoleActions(t *testing.T) {
	b := setup(t)
	_, base := b.serve(t, nil)
	ctx := browser(t)

	t.Run("retry", func(t *testing.T) {
		load(t, ctx, base+"/record/"+b.parked.ID.String(), "#retry-link")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#retry-link")), chromedp.WaitVisible(chromedp.CSS("#confirm"))); err != nil {
			t.Fatal(err)
		}
		mustContain(t, "confirmation", text(t, ctx, "#changes"), "parked → pending", `"console/alice"`)
		screenshot(t, ctx, "confirm")
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#reason"), "queue db is back <b>"),
			chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#done-message"))); err != nil {
			t.Fatal(err)
		}
		mustContain(t, "result", text(t, ctx, "#done-message"), "parked → pending")
		kind, actor, data, seq := b.lastEvent(t, b.parked.ID)
		if kind != "retried" || actor != "console/alice" || seq != b.parked.Version+1 {
			t.Errorf("last event = %s by %s at seq %d, want retried by console/alice at %d", kind, actor, seq, b.parked.Version+1)
		}
		if data["note"] != "queue db is back <b>" || !strings.HasPrefix(data["parked_reason"], "wake-up failed 5 times") {
			t.Errorf("event data = %q", data)
		}
	})
	t.Run("resolve", func(t *testing.T) {
		load(t, ctx, base+"/record/"+b.other.ID.String(), "#resolve-link")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#resolve-link")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
			chromedp.SendKeys(chromedp.CSS("#reason"), "batch b-2 failed by hand"),
			chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#done-message"))); err != nil {
			t.Fatal(err)
		}
		kind, actor, data, _ := b.lastEvent(t, b.other.ID)
		if kind != "resolved" || actor != "console/alice" {
			t.Errorf("last event = %s by %s, want resolved by console/alice", kind, actor)
		}
		if data["reason"] != "batch b-2 failed by hand" || data["from"] != "parked" {
			t.Errorf("event data = %q", data)
		}
		var state, lastErr string
		if err := b.sql.QueryRow(`SELECT state, last_error FROM mend_records WHERE record_id = ?`, b.other.ID[:]).Scan(&state, &lastErr); err != nil {
			t.Fatal(err)
		}
		if state != "done" || lastErr != "resolved by console/alice: batch b-2 failed by hand" {
			t.Errorf("record = %s, %q", state, lastErr)
		}
	})
	t.Run("lease release", func(t *testing.T) {
		load(t, ctx, base+"/lease/release?queue="+url.QueryEscape(queueName)+"&epoch=1", "#confirm")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#done-message"))); err != nil {
			t.Fatal(err)
		}
		var how sql.NullString
		if err := b.sql.QueryRow(`SELECT ended_how FROM mend_lease_history WHERE queue = ? AND epoch = 1`, queueName).Scan(&how); err != nil {
			t.Fatal(err)
		}
		// The table stores a short code; storage.LeaseEndedOperator is the word people read for it.
		if how.String != "operator" {
			t.Errorf("ended_how = %q, want the operator's code %q", how.String, "operator")
		}
	})
}

// refusedUnchanged posts a retry of rec with form as alice and reports an
// error unless the server refused it (403) and the record kept its version.
func (b *bundle) refusedUnchanged(t *testing.T, base string, rec mend.Record, form url.Values) error {
	t.Helper()
	code, body := post(t, base+"/record/"+rec.ID.String()+"/retry", "alice", form)
	var version int64
	if err := b.sql.QueryRow(`SELECT version FROM mend_records WHERE record_id = ?`, rec.ID[:]).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusForbidden || version != rec.Version {
		return fmt.Errorf("status %d, version %d -> %d: %s", code, rec.Version, version, body)
	}
	return nil
}

func TestConsoleRefusals(t *testing.T) {
	form := func(s *Server, user string, rec mend.Record) url.Values {
		return url.Values{"csrf": {s.csrfToken(user, "retry", recordTarget(rec.ID.String(), rec.Version), time.Now())}, "reason": {"r"}, "version": {fmt.Sprint(rec.Version)}}
	}
	t.Run("read-only refuses the POST", func(t *testing.T) {
		b := setup(t)
		s, base := b.serve(t, func(c *Config, _ *Server) { c.AllowActions = false })
		if err := b.refusedUnchanged(t, base, b.parked, form(s, "alice", b.parked)); err != nil {
			t.Fatal(err)
		}
		code, _ := post(t, base+"/lease/release", "alice", url.Values{"csrf": {s.csrfToken("alice", "release", leaseTarget(queueName, 1), time.Now())}, "queue": {queueName}, "epoch": {"1"}})
		if code != http.StatusForbidden {
			t.Errorf("lease release in read-only mode: status %d, want 403", code)
		}
	})
	t.Run("read-only negative control", func(t *testing.T) {
		b := setup(t)
		s, base := b.serve(t, func(c *Config, s *Server) {
			c.AllowActions = false
			if s != nil {
				s.skipReadOnly = true
			}
		})
		if err := b.refusedUnchanged(t, base, b.parked, form(s, "alice", b.parked)); err == nil {
			t.Fatal("a server without the read-only check passed the check")
		}
	})
	t.Run("missing or foreign CSRF token", func(t *testing.T) {
		b := setup(t)
		s, base := b.serve(t, nil)
		f := form(s, "alice", b.parked)
		f.Del("csrf")
		if err := b.refusedUnchanged(t, base, b.parked, f); err != nil {
			t.Errorf("no token: %v", err)
		}
		if err := b.refusedUnchanged(t, base, b.parked, form(s, "bob", b.parked)); err != nil {
			t.Errorf("bob's token used by alice: %v", err)
		}
		f = form(s, "alice", b.parked)
		f.Set("csrf", "1."+strings.Repeat("0", 64))
		if err := b.refusedUnchanged(t, base, b.parked, f); err != nil {
			t.Errorf("forged token: %v", err)
		}
		// The valid form goes through: the refusals above were the token's.
		if code, body := post(t, base+"/record/"+b.parked.ID.String()+"/retry", "alice", form(s, "alice", b.parked)); code != http.StatusOK {
			t.Errorf("valid form: %d %s", code, body)
		}
	})
	t.Run("CSRF negative control", func(t *testing.T) {
		b := setup(t)
		_, base := b.serve(t, func(_ *Config, s *Server) {
			if s != nil {
				s.skipCSRF = true
			}
		})
		f := url.Values{"reason": {"r"}, "version": {fmt.Sprint(b.parked.Version)}}
		if err := b.refusedUnchanged(t, base, b.parked, f); err == nil {
			t.Fatal("a server without the CSRF check passed the check")
		}
	})
	t.Run("authentication and headers", func(t *testing.T) {
		b := setup(t)
		_, base := b.serve(t, nil)
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("no credentials: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/record/"+b.parked.ID.String(), nil)
		req.SetBasicAuth("alice", "wrong")
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("wrong password: %d", resp.StatusCode)
		}
		req.SetBasicAuth("alice", password)
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for h, want := range map[string]string{
			"Content-Security-Policy": "default-src 'self'",
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "same-origin",
		} {
			if !strings.Contains(resp.Header.Get(h), want) {
				t.Errorf("%s = %q, want it to contain %q", h, resp.Header.Get(h), want)
			}
		}
		if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("CSP %q allows framing", resp.Header.Get("Content-Security-Policy"))
		}
		if strings.Contains(string(body), `<b id="mend-pwned">`) || !strings.Contains(string(body), `&lt;b id=&#34;mend-pwned&#34;&gt;`) {
			t.Errorf("the record page's HTML does not carry the payload escaped")
		}
		if strings.Contains(string(body), b.db.DSN) {
			t.Errorf("the page shows the DSN")
		}
	})
}

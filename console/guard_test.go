package console

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// The guards of a record action (issue 46): a retry or resolve changes the
// record only at the version its confirmation page showed, and a retry only
// a parked record. Each test has negative controls: a server with the guard
// planted away must fail the same check.

const guardQueue = "guard/main"

// guardRecord creates a record in guardQueue, moved to state through the
// usual events, and returns it as it is.
func (b *bundle) guardRecord(t *testing.T, msg string, state mend.State) mend.Record {
	t.Helper()
	ctx := context.Background()
	rec, created, err := b.store.RecordCreate(ctx, mend.CreateParams{
		Source:   mend.SourceID{Queue: guardQueue, Topic: "speculate_dlq", MessageID: msg},
		Snapshot: mend.Snapshot{Payload: []byte(`{"batch_id":"b-7"}`), FailureCount: 3, LastError: "handler: boom"},
		Target:   mend.Target{BatchID: "b-7", Desired: mend.OutcomeFailed},
		OpID:     mend.NewOpID(), Actor: "intake",
	})
	if err != nil || !created {
		t.Fatalf("RecordCreate(%q) = %v, %v", msg, created, err)
	}
	var path []mend.State
	switch state {
	case mend.StatePending:
	case mend.StateDone:
		path = []mend.State{mend.StateSettled, mend.StateDone}
	default:
		path = []mend.State{state}
	}
	for _, st := range path {
		rec = b.step(t, rec, st, "moved to "+string(st))
	}
	return rec
}

// step appends one event moving rec to state (the same state: a second
// park with another reason), as a planner would, and returns the record.
func (b *bundle) step(t *testing.T, rec mend.Record, state mend.State, lastErr string) mend.Record {
	t.Helper()
	kind := map[mend.State]mend.EventKind{mend.StateParked: mend.EventParked, mend.StateSettled: mend.EventSettled,
		mend.StateDone: mend.EventWoken, mend.StateWaiting: mend.EventWaiting}[state]
	ap := storage.AppendTo(rec)
	ap.Kind, ap.Actor, ap.OpID, ap.State, ap.LastError, ap.Data = kind, "planner/replica-2", mend.NewOpID(), state, lastErr, json.RawMessage(`{}`)
	if _, err := b.store.RecordAppend(context.Background(), ap); err != nil {
		t.Fatalf("append %s: %v", kind, err)
	}
	got, err := b.store.RecordFind(context.Background(), rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// guardConsole is proxyConsole over store, with hook applied.
func guardConsole(t *testing.T, store Store, hook func(*Server)) *Server {
	t.Helper()
	s, err := New(Config{Store: store, AllowActions: true, Auth: proxyAuth(), Hosts: []string{"127.0.0.1:8089"}})
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(s)
	}
	return s
}

var (
	formCSRF    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	formVersion = regexp.MustCompile(`name="version" value="([0-9]+)"`)
)

// confirmation reads action's confirmation page for rec as alice and
// returns its form as the browser would post it (with a reason). It
// returns nil if the page offers no form.
func confirmation(t *testing.T, s *Server, rec mend.Record, action string) (url.Values, string) {
	t.Helper()
	code, body := send(s, request(http.MethodGet, "/record/"+rec.ID.String()+"/"+action, "alice", nil))
	if code != http.StatusOK {
		t.Fatalf("GET the %s confirmation: %d %.300s", action, code, body)
	}
	tok, ver := formCSRF.FindStringSubmatch(body), formVersion.FindStringSubmatch(body)
	if tok == nil || ver == nil {
		return nil, body
	}
	return url.Values{"csrf": {html.UnescapeString(tok[1])}, "version": {ver[1]}, "reason": {"host fixed"}}, body
}

// postForm sends a confirmation's form and returns the status and the page.
func postForm(s *Server, rec mend.Record, action string, form url.Values) (int, string) {
	return send(s, request(http.MethodPost, "/record/"+rec.ID.String()+"/"+action, "alice", form))
}

// conflictUnchanged reports why an action's answer is not a refusal (409
// saying want) that left the record as it was (want.Version, want.State).
func (b *bundle) conflictUnchanged(t *testing.T, code int, body string, want mend.Record, says string) error {
	t.Helper()
	now, err := b.store.RecordFind(context.Background(), want.ID)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	if code != http.StatusConflict {
		problems = append(problems, fmt.Sprintf("answered %d, want 409", code))
	}
	if !strings.Contains(html.UnescapeString(body), says) {
		problems = append(problems, fmt.Sprintf("the page does not say %q", says))
	}
	if now.Version != want.Version || now.State != want.State {
		problems = append(problems, fmt.Sprintf("the record moved to %s at version %d (want %s at %d)", now.State, now.Version, want.State, want.Version))
	}
	if problems == nil {
		return nil
	}
	return fmt.Errorf("%s: %.300s", strings.Join(problems, "; "), body)
}

// TestConsoleActionVersionGuard: a confirmation page is for the record at
// one version. If the record moves to the next version (a planner parks it
// again with another reason, still parked) after the page was shown, or
// between the console's own comparison and its write, the POST is refused
// (409, saying the record changed, both versions) and nothing is written.
// The second case is what only the storage call's compare-and-set on the
// confirmed version catches: a console that compares and then writes
// without the version (check-then-act) is caught by it; one without any
// version guard is caught by both.
func TestConsoleActionVersionGuard(t *testing.T) {
	b := setup(t)
	type variant struct {
		name string
		hook func(*Server)
	}
	var (
		guarded    = variant{"guarded", nil}
		unguarded  = variant{"no version guard", func(s *Server) { s.versionUnguarded = true }}
		checkFirst = variant{"check-then-act", func(s *Server) { s.versionCheckOnly = true }}
	)
	// movedAfterPage: the record moves between the page and the POST;
	// movedInFlight: between the console's comparison and the write.
	attempt := func(t *testing.T, action string, v variant, inFlight bool) error {
		t.Helper()
		rec := b.guardRecord(t, fmt.Sprintf("%s/%s/%v/%d", action, v.name, inFlight, time.Now().UnixNano()), mend.StateParked)
		s := guardConsole(t, b.store, v.hook)
		form, page := confirmation(t, s, rec, action)
		if form == nil || form.Get("version") != fmt.Sprint(rec.Version) {
			t.Fatalf("the %s confirmation of version %d offers %v: %.300s", action, rec.Version, form, page)
		}
		moved := rec
		if inFlight {
			s.beforeWrite = func() { moved = b.step(t, rec, mend.StateParked, "parked again: another reason") }
		} else {
			moved = b.step(t, rec, mend.StateParked, "parked again: another reason")
		}
		code, body := postForm(s, rec, action, form)
		if moved.Version != rec.Version+1 {
			t.Fatalf("the record did not move before the write (version %d)", moved.Version)
		}
		return b.conflictUnchanged(t, code, body, moved,
			fmt.Sprintf("the record changed since the confirmation page (version %d, now %d): nothing was done", rec.Version, moved.Version))
	}
	for _, action := range []string{"retry", "resolve"} {
		t.Run(action+": moved after the confirmation page", func(t *testing.T) {
			if err := attempt(t, action, guarded, false); err != nil {
				t.Error(err)
			}
		})
		t.Run(action+": moved between the check and the write", func(t *testing.T) {
			if err := attempt(t, action, guarded, true); err != nil {
				t.Error(err)
			}
		})
		t.Run(action+": negative controls", func(t *testing.T) {
			if attempt(t, action, unguarded, false) == nil {
				t.Errorf("a console without a version guard passed the moved-after-the-page check")
			}
			if attempt(t, action, unguarded, true) == nil {
				t.Errorf("a console without a version guard passed the moved-in-flight check")
			}
			if attempt(t, action, checkFirst, true) == nil {
				t.Errorf("a console that checks the version and then writes without it passed the moved-in-flight check")
			}
		})
	}
	t.Run("the confirmed version goes through", func(t *testing.T) {
		for _, action := range []string{"retry", "resolve"} {
			rec := b.guardRecord(t, "through/"+action, mend.StateParked)
			s := guardConsole(t, b.store, nil)
			form, page := confirmation(t, s, rec, action)
			if form == nil {
				t.Fatalf("no %s form: %.300s", action, page)
			}
			if code, body := postForm(s, rec, action, form); code != http.StatusOK {
				t.Errorf("%s at the confirmed version: %d %.300s", action, code, body)
			}
			if now, err := b.store.RecordFind(context.Background(), rec.ID); err != nil || now.Version != rec.Version+1 {
				t.Errorf("%s: record at %d (%v), want %d", action, now.Version, err, rec.Version+1)
			}
		}
	})
}

// retryAnything is a store whose retry skips its "only parked" check (at
// the version asked, as the real one): the planted slip for the negative
// control of TestConsoleRetryOnlyParked.
type retryAnything struct{ *storage.DB }

func (d retryAnything) RecordRetry(ctx context.Context, p storage.RetryParams) (mend.Record, error) {
	rec, err := d.RecordFind(ctx, p.ID)
	if err != nil {
		return rec, err
	}
	ap := storage.AppendTo(rec)
	if p.Version != 0 {
		ap.Version = p.Version
	}
	ap.Kind, ap.Actor, ap.OpID, ap.Data = mend.EventRetried, p.Actor, p.OpID, json.RawMessage(`{}`)
	ap.State, ap.Attempts, ap.LastError, ap.RetryIn = mend.StatePending, 0, "", 0
	if _, err := d.RecordAppend(ctx, ap); err != nil {
		return mend.Record{}, err
	}
	return d.RecordFind(ctx, rec.ID)
}

// TestConsoleRetryOnlyParked: only a parked record can be retried. For a
// pending, waiting, settled or done record the confirmation page offers no
// form and says why, and a POST with a valid token for the record at its
// version is refused (409, "not parked") with nothing written. With the
// console's own check planted away the store still refuses it; with the
// store's check planted away too, the check must fail.
func TestConsoleRetryOnlyParked(t *testing.T) {
	b := setup(t)
	attempt := func(t *testing.T, state mend.State, store Store, hook func(*Server)) error {
		t.Helper()
		rec := b.guardRecord(t, fmt.Sprintf("notparked/%s/%d", state, time.Now().UnixNano()), state)
		s := guardConsole(t, store, hook)
		form, page := confirmation(t, s, rec, "retry")
		if !s.parkedUnchecked {
			if form != nil || !strings.Contains(page, "not parked: only parked records can be retried") {
				return fmt.Errorf("the retry confirmation of a %s record offers a form or does not say why not: %.300s", state, page)
			}
		}
		// The form the page would have had: a valid token for this record at its version.
		form = url.Values{"csrf": {s.csrfToken("alice", "retry", recordTarget(rec.ID.String(), rec.Version), time.Now())},
			"version": {fmt.Sprint(rec.Version)}, "reason": {"x"}}
		code, body := postForm(s, rec, "retry", form)
		return b.conflictUnchanged(t, code, body, rec, fmt.Sprintf("it is %s, not parked: only parked records can be retried", state))
	}
	states := []mend.State{mend.StatePending, mend.StateWaiting, mend.StateSettled, mend.StateDone}
	for _, st := range states {
		t.Run(string(st), func(t *testing.T) {
			if err := attempt(t, st, b.store, nil); err != nil {
				t.Error(err)
			}
			// Without the console's check, the store's refuses it: the same answer.
			if err := attempt(t, st, b.store, func(s *Server) { s.parkedUnchecked = true }); err != nil {
				t.Errorf("console check off: %v", err)
			}
		})
	}
	t.Run("negative control: no check at all", func(t *testing.T) {
		for _, st := range states {
			if attempt(t, st, retryAnything{b.store}, func(s *Server) { s.parkedUnchecked = true }) == nil {
				t.Errorf("a retry without its only-parked checks passed for a %s record", st)
			}
		}
	})
}

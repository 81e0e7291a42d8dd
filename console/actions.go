package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// maxReason bounds the reason an operator types; it is kept in the event.
const maxReason = 2000

// actorOf is the person an action records: console/<user>.
func actorOf(r *http.Request) string { return "console/" + userOf(r) }

// errActionsOff is every action's answer in read-only mode.
var errActionsOff = &httpError{http.StatusForbidden, "actions are disabled: this console is read-only (start mend console with --allow-actions and authentication to enable them)"}

type confirmPage struct {
	layout
	Action  string // retry, resolve, release
	R       mend.Record
	Changes []string
	Warning string
	Refused string
	CSRF    string
	Version int64
	Queue   string
	Epoch   int64
	Holder  string
	Post    string
}

// confirmRecord is the second page of retry and resolve: what will change,
// and the form that does it.
func (s *Server) confirmRecord(r *http.Request) (string, any, error) {
	if !s.cfg.AllowActions {
		return "", nil, errActionsOff
	}
	action := r.PathValue("action")
	if action != "retry" && action != "resolve" {
		return "", nil, &httpError{http.StatusNotFound, "no such page"}
	}
	rec, err := s.findRecord(r)
	if err != nil {
		return "", nil, err
	}
	p := confirmPage{layout: s.frame(r, action+" record "+rec.ID.String(), ""), Action: action, R: rec,
		CSRF: s.csrfToken(userOf(r), action, recordTarget(rec.ID.String(), rec.Version), time.Now()), Version: rec.Version,
		Post: "/record/" + rec.ID.String() + "/" + action}
	actor := actorOf(r)
	switch action {
	case "retry":
		if rec.State != mend.StateParked {
			p.Refused = fmt.Sprintf("it is %s, not parked: only parked records can be retried", rec.State)
		} else {
			p.Refused = noTarget(rec)
		}
		p.Changes = []string{
			"state: parked → pending, due now, attempts reset to 0 (the next reconciler pass repairs it)",
			fmt.Sprintf("one retried event, actor %q, with your reason and the park reason", actor),
		}
	case "resolve":
		if rec.State == mend.StateDone {
			p.Refused = "it is done already"
		}
		if rec.State.Due() {
			p.Warning = fmt.Sprintf("it is %s: its repair is still owed, perhaps running on a replica now; resolved, it is never done", rec.State)
		}
		p.Changes = []string{
			fmt.Sprintf("state: %s → done (it leaves the parked count and is pruned after the retention)", rec.State),
			fmt.Sprintf("one resolved event, actor %q, with your reason; last error becomes \"resolved by %s: <reason>\"", actor, actor),
		}
	}
	return "confirm", p, nil
}

// confirmLease is the second page of a lease release.
func (s *Server) confirmLease(r *http.Request) (string, any, error) {
	if !s.cfg.AllowActions {
		return "", nil, errActionsOff
	}
	queue, epoch, err := leaseArgs(r.URL.Query())
	if err != nil {
		return "", nil, err
	}
	l, err := s.cfg.Store.LeaseGet(r.Context(), queue)
	if err != nil {
		return "", nil, err
	}
	p := confirmPage{layout: s.frame(r, "end a lease term", ""), Action: "release", Queue: queue, Epoch: epoch,
		Holder: l.Term.Holder, CSRF: s.csrfToken(userOf(r), "release", leaseTarget(queue, epoch), time.Now()), Post: "/lease/release"}
	if l.Term.Epoch != epoch || !l.Live() {
		p.Refused = fmt.Sprintf("term %d is not the queue's live term (the live term is %d, %s)", epoch, l.Term.Epoch, leaseWord(l))
	}
	p.Changes = []string{
		fmt.Sprintf("the term of %q at epoch %d on this queue ends now, recorded as ended by the operator", l.Term.Holder, epoch),
		"its holder's writes are refused from then on; the next replica takes the queue at a higher epoch",
		"a newer term (another epoch) is never touched",
	}
	return "confirm", p, nil
}

func leaseArgs(v url.Values) (string, int64, error) {
	queue := v.Get("queue")
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return "", 0, badRequest("%v", err)
	}
	epoch, err := strconv.ParseInt(v.Get("epoch"), 10, 64)
	if err != nil || epoch < 1 {
		return "", 0, badRequest("epoch must be a term's epoch (1 or more)")
	}
	return queue, epoch, nil
}

type donePage struct {
	layout
	Message string
	Back    string
}

// action wraps a POST: read-only refusal first, then where it came from
// (Origin, Sec-Fetch-Site), then the action itself, which checks its CSRF
// token against the one change it is for before anything else.
func (s *Server) action(fn func(r *http.Request) (msg, back string, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.AllowActions && !s.skipReadOnly {
			s.log.Warn("action refused: read-only", "path", r.URL.Path, "user", userOf(r))
			s.fail(w, r, errActionsOff)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, badRequest("bad form: %v", err))
			return
		}
		if err := s.sameOrigin(r); err != nil {
			s.log.Warn("action refused: origin", "path", r.URL.Path, "user", userOf(r), "err", err)
			s.fail(w, r, &httpError{http.StatusForbidden, err.Error()})
			return
		}
		msg, back, err := fn(r)
		if err != nil {
			s.log.Warn("action failed", "path", r.URL.Path, "user", userOf(r), "err", err)
			s.fail(w, r, err)
			return
		}
		s.log.Info("action", "path", r.URL.Path, "user", userOf(r), "result", msg)
		s.render(w, http.StatusOK, "done", donePage{layout: s.frame(r, "done", ""), Message: msg, Back: back})
	}
}

func reasonOf(r *http.Request) (string, error) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	switch {
	case reason == "":
		return "", badRequest("a reason is required: say what was fixed or why the record is closed by hand; it is kept in the event")
	case len(reason) > maxReason:
		return "", badRequest("the reason is longer than %d bytes", maxReason)
	}
	return reason, nil
}

// csrfRefused is a token's refusal, logged and answered 403.
func (s *Server) csrfRefused(r *http.Request, action, target string) error {
	if err := s.csrfCheck(r, action, target, time.Now()); err != nil {
		s.log.Warn("action refused: csrf", "path", r.URL.Path, "user", userOf(r), "err", err)
		return &httpError{http.StatusForbidden, err.Error()}
	}
	return nil
}

func (s *Server) doRecord(r *http.Request) (string, string, error) {
	action := r.PathValue("action")
	if action != "retry" && action != "resolve" {
		return "", "", &httpError{http.StatusNotFound, "no such action"}
	}
	id, err := mend.ParseRecordID(r.PathValue("id"))
	if err != nil {
		return "", "", badRequest("%v", err)
	}
	// The token names this action on this record at the version the
	// confirmation showed: nothing else.
	version, verr := strconv.ParseInt(r.PostFormValue("version"), 10, 64)
	if verr != nil {
		version = -1
	}
	if err := s.csrfRefused(r, action, recordTarget(id.String(), version)); err != nil {
		return "", "", err
	}
	reason, err := reasonOf(r)
	if err != nil {
		return "", "", err
	}
	rec, err := s.findRecord(r)
	if err != nil {
		return "", "", err
	}
	back := "/record/" + rec.ID.String()
	// The confirmation described the record at this version; act on
	// nothing else. This comparison only words the refusal: the guard is
	// the storage call's, which changes the record only if it is still at
	// this version, in the same compare-and-set as the change.
	moved := func(now int64) error {
		return &httpError{http.StatusConflict, fmt.Sprintf("the record changed since the confirmation page (version %d, now %d): nothing was done; look at it again", version, now)}
	}
	expect := version
	if s.versionUnguarded {
		expect = 0
	} else if version != rec.Version {
		return "", "", moved(rec.Version)
	}
	if s.versionCheckOnly {
		expect = 0
	}
	ctx := r.Context()
	opID := mend.NewOpID()
	var after mend.Record
	switch action {
	case "retry":
		if rec.State != mend.StateParked && !s.parkedUnchecked {
			return "", "", &httpError{http.StatusConflict, fmt.Sprintf("it is %s, not parked: only parked records can be retried", rec.State)}
		}
		if why := noTarget(rec); why != "" {
			return "", "", &httpError{http.StatusConflict, why}
		}
		if s.beforeWrite != nil {
			s.beforeWrite()
		}
		after, err = s.cfg.Store.RecordRetry(ctx, storage.RetryParams{ID: rec.ID, Actor: actorOf(r), OpID: opID, Reason: reason, Version: expect})
	case "resolve":
		if s.beforeWrite != nil {
			s.beforeWrite()
		}
		after, err = s.cfg.Store.RecordResolve(ctx, storage.ResolveParams{ID: rec.ID, Actor: actorOf(r), OpID: opID, Reason: reason, Version: expect})
	}
	var amb *mend.AmbiguousError
	switch {
	case errors.As(err, &amb):
		return "", "", fmt.Errorf("the outcome is unknown (the connection broke at commit): look up op %s in queue %q before trying again: %w", opID, rec.Source.Queue, err)
	case errors.Is(err, mend.ErrConflict):
		now := after.Version
		if cur, ferr := s.cfg.Store.RecordFind(ctx, rec.ID); now == 0 && ferr == nil {
			now = cur.Version
		}
		return "", "", moved(now)
	case errors.Is(err, storage.ErrNotParked):
		return "", "", &httpError{http.StatusConflict, fmt.Sprintf("it is %s, not parked: only parked records can be retried", after.State)}
	case err != nil:
		return "", "", err
	}
	return fmt.Sprintf("record %s in queue %q: %s → %s (op %s)", after.ID, after.Source.Queue, rec.State, after.State, opID), back, nil
}

func (s *Server) doLease(r *http.Request) (string, string, error) {
	queue, epoch, err := leaseArgs(r.PostForm)
	if err != nil {
		return "", "", err
	}
	if err := s.csrfRefused(r, "release", leaseTarget(queue, epoch)); err != nil {
		return "", "", err
	}
	term, err := s.cfg.Store.LeaseEndByOperator(r.Context(), queue, epoch)
	if errors.Is(err, mend.ErrLeaseLost) {
		return "", "", &httpError{http.StatusConflict, fmt.Sprintf("queue %q has no live term at epoch %d (it ended already, or a newer term replaced it): nothing changed", queue, epoch)}
	}
	if err != nil {
		return "", "", err
	}
	s.log.Info("lease term ended", "queue", queue, "epoch", epoch, "holder", term.Holder, "user", userOf(r))
	return fmt.Sprintf("ended the term of %q at epoch %d on queue %q; the next replica takes it at epoch %d or later", term.Holder, term.Epoch, term.Queue, term.Epoch+1),
		"/queue?" + url.Values{"name": {queue}}.Encode(), nil
}

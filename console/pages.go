package console

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// httpError is an error with the status it answers.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// statusOf maps storage's errors to HTTP statuses.
func statusOf(err error) int {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.Is(err, mend.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, mend.ErrInvalid), errors.Is(err, mend.ErrLeaseLost), errors.Is(err, mend.ErrConflict):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// layout is what every page's frame shows.
type layout struct {
	Title     string
	User      string
	ActionsOn bool
	Refresh   int // seconds; 0: no reload
	Nav       string
}

type pageFunc func(r *http.Request) (name string, data any, err error)

func (s *Server) page(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, data, err := fn(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.render(w, http.StatusOK, name, data)
	}
}

func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.Error("render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorPage struct {
	layout
	Status  int
	Message string
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	st := statusOf(err)
	if st >= 500 {
		s.log.Error("page failed", "path", r.URL.Path, "err", err)
	}
	msg := err.Error()
	if s.cfg.Redact != nil {
		msg = s.cfg.Redact(msg)
	}
	s.render(w, st, "error", errorPage{layout: s.frame(r, http.StatusText(st), ""), Status: st, Message: msg})
}

func (s *Server) frame(r *http.Request, title, nav string) layout {
	l := layout{Title: title, User: userOf(r), ActionsOn: s.cfg.AllowActions, Nav: nav}
	if s.cfg.Refresh > 0 {
		l.Refresh = int(s.cfg.Refresh / time.Second)
	}
	return l
}

// ---- overview ----

type queueRow struct {
	storage.QueueStatus
	Open     int64
	Latency  storage.QueueLatencySummary
	LeaseTxt string
	Pages    bool // a paging condition names the queue
	Failing  bool // its repairs are failing now
}

type alertRow struct {
	Rule   string
	Queue  string
	Detail string
	Page   bool // fires now (else: will fire if it lasts, or a ticket: MendVerifyDivergent)
	// Ticket: the rule is a ticket, not a page (MendRecordsParked); the row
	// says so, and Page then says it fires now.
	Ticket bool
}

type overviewPage struct {
	layout
	// Failing is "failing now": the queues whose repairs are failing,
	// listed first on the page (ConsoleFailingQueues).
	Failing     []storage.FailingQueue
	FailingAll  int   // failing queues found (Failing lists the first failingShow)
	FailingRecs int64 // failing records read
	FailingMore bool  // the read reached its bound
	// Verify is the last recorded mend verify run (nil: none);
	// VerifyNote says why none is shown when the read could not tell.
	Verify     *storage.VerifyRun
	VerifyNote string
	Alerts     []alertRow
	AlertsMore bool
	Latency    storage.ConsoleLatency
	Totals     storage.ConsoleTotals
	Queues     []queueRow
	CountsPart bool // a count of this page's queues reached its bound
	Stuck      int  // queues listed first: paging, with work due, or parked
	StuckMore  bool // the due records read reached their bound
	First      bool // not the first page: link back to it
	Next       string
	Lag        []TopicLag
	LagOn      bool
	LagErr     string
	Binlog     []BinlogReader
	BinlogErr  string
	// Nothing is what "Nothing would page" says it checked, and the page
	// rules only Prometheus sees (pageRules).
	Nothing   nothingPages
	Health    *healthLine // nil without Config.Health
	Chart     chart
	ChartPart bool
}

// stuckQueue is a queue the overview lists before the others.
type stuckQueue struct {
	name      string
	failing   int // rank among the failing queues, from 1; 0: not failing
	pages     bool
	due       time.Duration // oldest due; 0 with nothing due
	hasDue    bool
	parked    time.Duration // longest parked among those read
	hasParked bool
}

// orderStuck orders the queues that need attention first: those whose
// repairs are failing now (in failing's order: the most attempts first),
// then those a paging condition names, then those with a record due now,
// then those with a parked record; within each, the longest overdue first,
// then the longest parked, then by name.
func orderStuck(failing []storage.FailingQueue, al storage.ConsoleAlerts, due []storage.QueueAge) []stuckQueue {
	by := map[string]*stuckQueue{}
	get := func(q string) *stuckQueue {
		if by[q] == nil {
			by[q] = &stuckQueue{name: q}
		}
		return by[q]
	}
	for i, q := range failing {
		get(q.Queue).failing = i + 1
	}
	for _, q := range due {
		s := get(q.Queue)
		s.hasDue, s.due = true, q.Age
	}
	for _, q := range al.Overdue {
		s := get(q.Queue)
		s.pages, s.hasDue, s.due = true, true, max(s.due, q.Age)
	}
	for _, q := range al.SlowRepairs {
		get(q.Queue).pages = true
	}
	for _, q := range al.Parked {
		s := get(q.Queue)
		// Listed first, but not paging: MendRecordsParked is a ticket.
		s.hasParked, s.parked = true, q.Age
	}
	out := make([]stuckQueue, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case (a.failing > 0) != (b.failing > 0):
			return a.failing > 0
		case a.failing != b.failing:
			return a.failing < b.failing
		case a.pages != b.pages:
			return a.pages
		case a.hasDue != b.hasDue:
			return a.hasDue
		case a.due != b.due:
			return a.due > b.due
		case a.parked != b.parked:
			return a.parked > b.parked
		}
		return a.name < b.name
	})
	return out
}

// The overview's pages: the stuck queues (orderStuck) from offset s, then
// the other queues by name after after. A page's link to the next is
// ?s=N while stuck queues remain, then ?after=NAME.
func (s *Server) overview(r *http.Request) (string, any, error) {
	ctx := r.Context()
	st := s.cfg.Store
	q := r.URL.Query()
	p := overviewPage{layout: s.frame(r, "mend console", "overview"), First: q.Has("s") || q.Has("after")}
	off := 0
	if v := q.Get("s"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", nil, badRequest("bad page offset %q", v)
		}
		off = n
	}
	// The reads that do not depend on this page's queues run at once, each
	// on a connection of its own: the page costs the slowest, not the sum
	// (docs/console.md, Performance).
	var (
		failing storage.FailingQueues
		al      storage.ConsoleAlerts
		run     storage.VerifyRun
		runOK   bool
		runErr  error
		due     []storage.QueueAge
		dueMore bool
		lag     []TopicLag
		lagErr  error
		readers []BinlogReader
		rdrErr  error
	)
	err := concurrently(
		func() (err error) { failing, err = st.ConsoleFailingQueues(ctx, failingRead, failingShow); return err },
		func() (err error) { al, err = st.ConsoleAlerts(ctx, alertParams); return err },
		func() error {
			run, runOK, runErr = st.VerifyRunLast(ctx)
			if errors.Is(runErr, storage.ErrNoVerifyRuns) {
				return nil
			}
			return runErr
		},
		func() (err error) { p.Totals, err = st.ConsoleTotals(ctx); return err },
		func() (err error) { due, dueMore, err = st.ConsoleDueQueues(ctx, dueQueuesRead); return err },
		func() error {
			if s.cfg.Lag != nil {
				lag, lagErr = s.cfg.Lag(ctx)
			}
			return nil // the host's queue database: shown on the page, never failing it
		},
		func() error {
			if s.cfg.Binlog != nil {
				readers, rdrErr = s.cfg.Binlog(ctx)
			}
			return nil // shown on the page, never failing it
		},
		func() error { p.Health = s.healthNow(ctx); return nil },
	)
	if err != nil {
		return "", nil, err
	}
	p.FailingAll, p.FailingRecs, p.FailingMore = len(failing.Queues), failing.Records, failing.Truncated
	p.Failing = failing.Queues[:min(len(failing.Queues), failingShow)]
	p.AlertsMore = al.Truncated
	// The failing queues listed (the worst failingShow): the rest are in
	// the queue table, first.
	p.AlertsMore = p.AlertsMore || p.FailingAll > len(p.Failing)
	for _, q := range p.Failing {
		p.Alerts = append(p.Alerts, alertRow{"MendRepairsFailing", q.Queue, fmt.Sprintf("%d record(s) whose every attempt fails, the longest for %s (%d attempts): see Failing now", q.Records, dur(q.FailingFor), q.Attempts), q.FailingFor > failingPagesAfter, false})
	}
	for _, q := range al.Overdue {
		p.Alerts = append(p.Alerts, alertRow{"MendRepairStuck", q.Queue, fmt.Sprintf("%d record(s) due for over %s, the oldest for %s", q.Count, dur(alertParams.OverdueAfter), dur(q.Age)), true, false})
	}
	for _, q := range al.SlowRepairs {
		p.Alerts = append(p.Alerts, alertRow{"MendRepairSLO", q.Queue, fmt.Sprintf("%d repair(s) in the last %s took over %s, the slowest %s", q.Count, dur(alertParams.SLOWindow), dur(alertParams.SLOBound), dur(q.Age)), true, false})
	}
	for _, q := range al.Parked {
		p.Alerts = append(p.Alerts, alertRow{Rule: "MendRecordsParked", Queue: q.Queue, Ticket: true,
			Detail: fmt.Sprintf("%d record(s) parked, the longest for %s: a person is needed (dead letters recorded for the audit are not counted)", q.Count, dur(q.Age)),
			Page:   q.Age >= parkedPagesAfter})
	}
	switch {
	case errors.Is(runErr, storage.ErrNoVerifyRuns):
		p.VerifyNote = "mend's schema is before migration 0015: verify runs are not recorded (mend migrate up)"
	case runOK:
		p.Verify = &run
		if run.Divergent > 0 {
			p.Alerts = append(p.Alerts, alertRow{Rule: "MendVerifyDivergent", Detail: fmt.Sprintf("the last mend verify (%s ago) found %d record(s) whose row differs from their events: see docs/operations.md (mend verify --rebuild)", dur(run.Age), run.Divergent)})
		}
	}
	stuck := orderStuck(failing.Queues, al, due)
	p.Stuck, p.StuckMore = len(stuck), dueMore
	size := s.cfg.PageSize
	var names []string
	pages, failingQ := map[string]bool{}, map[string]bool{}
	if !q.Has("after") {
		for _, sq := range stuck[min(off, len(stuck)):min(off+size, len(stuck))] {
			names = append(names, sq.name)
			pages[sq.name] = sq.pages
			failingQ[sq.name] = sq.failing > 0
		}
		if off+size < len(stuck) {
			p.Next = "/?s=" + strconv.Itoa(off+size)
		}
	}
	if p.Next == "" && len(names) < size {
		skip := make(map[string]bool, len(stuck))
		for _, sq := range stuck {
			skip[sq.name] = true
		}
		rest, next, more, err := s.restNames(ctx, q.Get("after"), size-len(names), skip)
		if err != nil {
			return "", nil, err
		}
		names = append(names, rest...)
		if more {
			p.Next = "/?" + url.Values{"after": {next}}.Encode()
		}
	}
	var (
		qs  []storage.QueueStatus
		act storage.ConsoleActivity
	)
	if err := concurrently(
		func() (err error) { qs, p.CountsPart, err = st.ConsoleQueueStatus(ctx, names); return err },
		func() (err error) { act, err = st.ConsoleActivity(ctx, chartMinutes, names); return err },
	); err != nil {
		return "", nil, err
	}
	p.Latency, p.Chart, p.ChartPart = act.Latency, makeChart(act.Minutes), act.Truncated
	for _, q := range qs {
		row := queueRow{QueueStatus: q, Latency: p.Latency.Queues[q.Queue], Pages: pages[q.Queue], Failing: failingQ[q.Queue]}
		row.Open = q.Counts[mend.StatePending] + q.Counts[mend.StateWaiting] + q.Counts[mend.StateSettled]
		if q.Lease != nil {
			row.LeaseTxt = leaseWord(*q.Lease)
		}
		p.Queues = append(p.Queues, row)
	}
	if s.cfg.Lag != nil {
		p.LagOn = true
		if lagErr != nil {
			// The queue database is the host's: its outage must not hide
			// mend's own state.
			p.LagErr = lagErr.Error()
			if s.cfg.Redact != nil {
				p.LagErr = s.cfg.Redact(p.LagErr)
			}
		}
		p.Lag = lag
		for _, l := range lag {
			if l.Age > lagPagesAfter {
				p.Alerts = append(p.Alerts, alertRow{"MendSubscriptionLagging", "", fmt.Sprintf("topic %s: %d dead letter(s) not released, the oldest for %s", l.Topic, l.Rows, dur(l.Age)), true, false})
			}
		}
	}
	p.Binlog = readers
	for _, r := range readers {
		src := quoteUnprintable([]byte(r.Source))
		if r.NotReading {
			why := "no replica holds its reader's lease"
			switch {
			case r.Holder != "":
				why = fmt.Sprintf("%s holds the reader's lease (for %s) but has not saved its position: its read loop is wedged or it cannot record", quoteUnprintable([]byte(r.Holder)), dur(r.Term))
			case r.FailedTerms > 0:
				why = fmt.Sprintf("its reader fails and retries (%d failed term(s) in %s: the reader's log and mend_binlog_failures_total say why)", r.FailedTerms, dur(binlogWindow))
			}
			p.Alerts = append(p.Alerts, alertRow{"MendBinlogNotReading", "", fmt.Sprintf("binlog source %s: not read for %s: %s", src, dur(r.Saved), why), r.Pages, false})
		}
		if r.Purged {
			p.Alerts = append(p.Alerts, alertRow{"MendBinlogPositionPurged", "", fmt.Sprintf("binlog source %s: %s: dead letters the host collected in the gap are lost (the page lasts until each replica that found it restarts)", src, r.Reset), true, false})
		}
	}
	p.Nothing = nothingPaged(p.LagOn, len(readers) > 0)
	if rdrErr != nil {
		p.BinlogErr = rdrErr.Error()
		if s.cfg.Redact != nil {
			p.BinlogErr = s.cfg.Redact(p.BinlogErr)
		}
	}
	return "overview", p, nil
}

// concurrently runs fns at once and waits for all of them; the error is
// the first in fns' order that failed.
func concurrently(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// restNames returns up to n queue names after after, by name, leaving out
// those in skip (listed among the stuck queues), from at most restRounds
// reads. more says names may follow; next is where the next page starts
// (past every name read, so a page of skipped names still moves on).
func (s *Server) restNames(ctx context.Context, after string, n int, skip map[string]bool) (names []string, next string, more bool, err error) {
	next = after
	for range restRounds {
		batch, batchMore, err := s.cfg.Store.ConsoleQueueNames(ctx, next, s.cfg.PageSize+1)
		if err != nil {
			return nil, "", false, err
		}
		for i, name := range batch {
			if skip[name] {
				next = name
				continue
			}
			if len(names) == n {
				return names, next, true, nil
			}
			names = append(names, name)
			next = name
			if len(names) == n && (i < len(batch)-1 || batchMore) {
				return names, next, true, nil
			}
		}
		if !batchMore {
			return names, next, false, nil
		}
	}
	return names, next, true, nil
}

// leaseWord is the lease vocabulary of mend status and mend lease list.
func leaseWord(l storage.LeaseStatus) string {
	switch {
	case l.Term.Epoch == 0:
		return "never held"
	case l.Live():
		return "held"
	case l.Ended != "":
		return l.Ended
	}
	return storage.LeaseEndedExpired
}

// ---- queue ----

type queuePage struct {
	layout
	Queue   string
	State   string
	States  []string
	Records []mend.Record
	Next    string
	Lease   *storage.LeaseStatus
	LeaseW  string
	History []storage.LeaseTerm
	Status  storage.QueueStatus
}

var allStates = []string{"pending", "waiting", "settled", "parked", "done"}

func (s *Server) queue(r *http.Request) (string, any, error) {
	ctx := r.Context()
	q := r.URL.Query()
	name := q.Get("name")
	if err := mend.ValidateIdentity("queue", name, true); err != nil {
		return "", nil, badRequest("%v", err)
	}
	state := mend.State(q.Get("state"))
	if state != "" && !state.Valid() {
		return "", nil, badRequest("state %q is not one of %s", state, strings.Join(allStates, ", "))
	}
	after, err := parseCursor(q.Get("after"))
	if err != nil {
		return "", nil, err
	}
	p := queuePage{layout: s.frame(r, "queue "+name, ""), Queue: name, State: string(state), States: allStates}
	st := s.cfg.Store
	if p.Records, err = st.ConsoleQueueRecords(ctx, name, state, after, s.cfg.PageSize); err != nil {
		return "", nil, err
	}
	if len(p.Records) == s.cfg.PageSize {
		last := p.Records[len(p.Records)-1]
		p.Next = cursor(last.CreatedAt, last.ID)
	}
	sts, _, err := st.ConsoleQueueStatus(ctx, []string{name})
	if err != nil {
		return "", nil, err
	}
	p.Status = sts[0]
	if p.Status.Lease != nil {
		p.Lease, p.LeaseW = p.Status.Lease, leaseWord(*p.Status.Lease)
	}
	if p.History, err = st.LeaseHistory(ctx, name, leaseHistoryRows); err != nil {
		return "", nil, err
	}
	return "queue", p, nil
}

// cursor is a page's start: after the record created at t with id.
func cursor(t time.Time, id mend.RecordID) string {
	return strconv.FormatInt(t.UnixMicro(), 10) + "." + id.String()
}

func parseCursor(s string) (storage.RecordCursor, error) {
	var c storage.RecordCursor
	if s == "" {
		return c, nil
	}
	us, idStr, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || n <= 0 {
		return c, badRequest("bad page cursor %q", s)
	}
	id, err := mend.ParseRecordID(idStr)
	if err != nil {
		return c, badRequest("bad page cursor: %v", err)
	}
	return storage.RecordCursor{CreatedAt: time.UnixMicro(n).UTC(), ID: id}, nil
}

// ---- record ----

type eventView struct {
	mend.Event
	DataText string
}

type recordPage struct {
	layout
	R         mend.Record
	Fields    []identField
	Payload   payloadView
	FailErr   payloadView
	LastError payloadView
	Events    []eventView
	EventsMax bool
	Settled   string // the batch outcome the repair settled, from the settled event
	WakeIDs   []string
	Retryable string // why a retry cannot help, or ""
	// Failing: every attempt of the record's step has failed so far
	// (storage.FailingCondition); the planner retries it by itself. Fix is
	// the GRANT its last error names, when a denied statement failed it.
	Failing bool
	Fix     string
}

type identField struct {
	Name string
	V    identView
}

func (s *Server) record(r *http.Request) (string, any, error) {
	ctx := r.Context()
	rec, err := s.findRecord(r)
	if err != nil {
		return "", nil, err
	}
	evs, err := s.cfg.Store.ConsoleRecordEvents(ctx, rec.Source.Queue, rec.ID, recordEventsMax)
	if err != nil {
		return "", nil, err
	}
	p := recordPage{layout: s.frame(r, "record "+rec.ID.String(), ""), R: rec,
		Payload: viewPayload(rec.Snapshot.Payload), FailErr: viewPayload([]byte(rec.Snapshot.LastError)),
		LastError: viewPayload([]byte(rec.LastError)), EventsMax: len(evs) == recordEventsMax, Retryable: noTarget(rec)}
	// Issue 57: a failing record's page offered resolve alone; it names the
	// fix and says the next attempt needs nobody.
	p.Failing = (rec.State == mend.StatePending || rec.State == mend.StateSettled) && rec.Attempts > 0
	if p.Failing {
		p.Fix = grantFix(rec.LastError)
	}
	p.Fields = []identField{
		{"queue", viewIdent(rec.Source.Queue)}, {"topic", viewIdent(rec.Source.Topic)},
		{"partition", viewIdent(rec.Source.Partition)}, {"message ID", viewIdent(rec.Source.MessageID)},
		{"original topic", viewIdent(rec.Snapshot.OriginalTopic)}, {"batch", viewIdent(rec.Target.BatchID)},
	}
	for _, ev := range evs {
		var d struct {
			Outcome   string `json:"outcome"`
			Divergent bool   `json:"divergent"`
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		if ev.Kind == mend.EventSettled && d.Outcome != "" {
			p.Settled = d.Outcome
			if d.Divergent {
				p.Settled += " (divergent: the host's batch had settled differently)"
			}
		}
		if (ev.Kind == mend.EventWoken || ev.Kind == mend.EventWakeIntent) && d.MessageID != "" && !contains(p.WakeIDs, d.MessageID) {
			p.WakeIDs = append(p.WakeIDs, d.MessageID)
		}
		p.Events = append(p.Events, eventView{Event: ev, DataText: prettyJSON(ev.Data)})
	}
	return "record", p, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Server) findRecord(r *http.Request) (mend.Record, error) {
	id, err := mend.ParseRecordID(r.PathValue("id"))
	if err != nil {
		return mend.Record{}, badRequest("%v", err)
	}
	return s.cfg.Store.RecordFind(r.Context(), id)
}

// noTarget is mend retry's refusal: a record that names nothing to repair
// would only fail again.
// stuckWake reports whether r was recorded by the stuck-queue scan (package
// stuck) rather than from a dead letter: a wake-up owed to a queue found
// with live batches and nothing in flight, whose synthetic source identity
// has topic mend.StuckTopic. Its snapshot's last error is the scan's reason.
func stuckWake(r mend.Record) bool { return r.Source.Topic == mend.StuckTopic }

// grantInError finds the GRANT a *mend.DeniedError's text names ("fix:
// GRANT ... TO 'user'").
var grantInError = regexp.MustCompile(`fix: (GRANT .+? TO '(?:[^'\\]|\\.)*')`)

// grantFix returns the GRANT a failing record's last error names, or "".
func grantFix(lastError string) string {
	if m := grantInError.FindStringSubmatch(lastError); m != nil {
		return m[1]
	}
	return ""
}

func noTarget(r mend.Record) string {
	if r.Target.BatchID == "" || r.Target.Desired == mend.OutcomeNone {
		return "its dead letter names no batch to repair (undecodable or not mend's topic); a retry would only fail again"
	}
	return ""
}

func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return string(raw)
	}
	return buf.String()
}

// ---- parked ----

type parkedPage struct {
	layout
	Queue   string
	Reason  string
	Scanned int  // with a reason: the parked records this page searched
	Capped  bool // the search stopped at parkedScan before the page filled
	// Recorded: the page lists the records recorded for the audit
	// (mend.TopicKind.Recorded) instead of the parked ones.
	Recorded bool
	Records  []mend.Record
	Next     string
	Query    string
}

func (s *Server) parked(r *http.Request) (string, any, error) {
	q := r.URL.Query()
	f := storage.ParkedFilter{Queue: q.Get("queue"), ReasonContains: q.Get("reason"), Recorded: q.Get("recorded") == "1", Limit: s.cfg.PageSize}
	if f.Queue != "" {
		if err := mend.ValidateIdentity("queue", f.Queue, true); err != nil {
			return "", nil, badRequest("%v", err)
		}
	}
	if len(f.ReasonContains) > 1000 {
		return "", nil, badRequest("reason filter is longer than 1000 bytes")
	}
	var err error
	if f.After, err = parseCursor(q.Get("after")); err != nil {
		return "", nil, err
	}
	title := "parked records"
	if f.Recorded {
		title = "recorded for the audit"
	}
	p := parkedPage{layout: s.frame(r, title, "parked"), Queue: f.Queue, Reason: f.ReasonContains, Recorded: f.Recorded}
	next := ""
	if f.ReasonContains == "" {
		if p.Records, err = s.cfg.Store.ConsoleParked(r.Context(), f); err != nil {
			return "", nil, err
		}
		if len(p.Records) == f.Limit {
			last := p.Records[len(p.Records)-1]
			next = cursor(last.UpdatedAt, last.ID)
		}
	} else {
		// The reason is in no index: each page searches a bounded number
		// of parked records and says when it stopped there.
		m, err := s.cfg.Store.ConsoleParkedMatching(r.Context(), f, parkedScan)
		if err != nil {
			return "", nil, err
		}
		p.Records, p.Scanned, p.Capped = m.Records, m.Scanned, m.Capped
		if len(p.Records) == f.Limit {
			last := p.Records[len(p.Records)-1]
			next = cursor(last.UpdatedAt, last.ID)
		} else if m.Capped {
			next = cursor(m.Resume.CreatedAt, m.Resume.ID)
		}
	}
	if next != "" {
		v := url.Values{"after": {next}}
		if f.Queue != "" {
			v.Set("queue", f.Queue)
		}
		if f.ReasonContains != "" {
			v.Set("reason", f.ReasonContains)
		}
		if f.Recorded {
			v.Set("recorded", "1")
		}
		p.Next = "/parked?" + v.Encode()
	}
	return "parked", p, nil
}

// ---- display of stored bytes ----

// identView shows an identity value byte for byte: the text when every
// character is printable, and the hex of the bytes when any is not.
type identView struct {
	Text      string
	Printable bool
	Hex       string
	Empty     bool
}

func viewIdent(s string) identView {
	v := identView{Text: quoteUnprintable([]byte(s)), Printable: printable([]byte(s)), Empty: s == ""}
	if !v.Printable {
		v.Hex = hex.EncodeToString([]byte(s))
	}
	return v
}

// payloadView shows a dead letter's bytes: as text with every invalid or
// control byte written \xNN, and as a hex dump when any was.
type payloadView struct {
	Text      any // a string, escaped by html/template (see renderPayload)
	Printable bool
	Dump      string
	Size      int
}

// renderPayload turns a dead letter's bytes into what the template prints.
// It returns a plain string, which html/template escapes. (The escaping
// test swaps in a template.HTML variant to show it would catch one.)
var renderPayload = func(b []byte) any { return quoteUnprintable(b) }

// maxShownPayload bounds the bytes of a payload a page shows.
const maxShownPayload = 64 << 10

func viewPayload(b []byte) payloadView {
	v := payloadView{Size: len(b)}
	if len(b) > maxShownPayload {
		b = b[:maxShownPayload]
	}
	v.Text, v.Printable = renderPayload(b), printable(b)
	if !v.Printable {
		v.Dump = hex.Dump(b)
	}
	return v
}

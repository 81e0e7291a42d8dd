package main

// Binlog mode (package binlog, issue 44) in mend run: its metrics. The
// mode itself is chosen by the front door (client.Subscription.Mode).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/storage"
)

// resetReasons are mend_binlog_resets_total's reason labels, by the first
// words of the reader's reason (binlog.Reset*).
var resetReasons = []struct{ prefix, label string }{
	{binlog.ResetFirstStart, "first_start"},
	{binlog.ResetPurged, "purged"},
	{binlog.ResetFailover, "failover"},
	{binlog.ResetFlavor, "flavor"},
}

// resetLabel is the reason label of a reset's reason.
func resetLabel(reason string, purged bool) string {
	if purged {
		return "purged"
	}
	for _, r := range resetReasons {
		if strings.HasPrefix(reason, r.prefix) {
			return r.label
		}
	}
	return "other"
}

// binlogMetrics are binlog mode's counters (from the reader's hooks) and
// gauges (from its Status at scrape time).
type binlogMetrics struct {
	mode     *prometheus.GaugeVec
	resets   *prometheus.CounterVec
	purged   prometheus.Gauge
	recorded prometheus.Counter
	failures *prometheus.CounterVec

	mu      sync.Mutex
	savedAt time.Time // the last position saved by this process, or the reader's start
	reader  *binlog.Reader

	lag, age, retention, state, statements *prometheus.Desc
}

// readerStates are mend_binlog_reader_state's state labels, the reader's
// roles (binlog.Status.Role).
var readerStates = []string{binlog.RoleReader, binlog.RoleStandby, binlog.RoleRetrying, binlog.RoleStopped}

func newBinlogMetrics(reg *prometheus.Registry) *binlogMetrics {
	bm := &binlogMetrics{
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mend_subscribe_mode",
			Help: "1 for the mode the subscription runs in (binlog: the queue database server's binary log; offsets: a consumer group of the *_dlq topics), 0 for the other; absent without a subscription."},
			[]string{"mode"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_binlog_resets_total",
			Help: "Times the binlog reader started over from the tables' contents, by reason: first_start, purged (the saved position was gone from the server: dead letters collected meanwhile are lost), failover (a new primary without GTIDs), flavor."},
			[]string{"reason"}),
		purged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mend_binlog_position_purged",
			Help: "1 once the binlog reader found its saved position purged from the server's binary log (mend was down past binlog_expire_logs_seconds), until mend run restarts: dead letters committed and collected by the host meanwhile are lost."}),
		recorded: prometheus.NewCounter(prometheus.CounterOpts{Name: "mend_binlog_recorded_total",
			Help: "Dead letters the binlog reader recorded (created or already there), from the stream or a reset's import."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_binlog_failures_total",
			Help: "Terms of this process's binlog reader that failed and are retried, by reason (binlog.FailureReason): auth, grant, setting, connect, gtid, columns, store, lease, config, other."},
			[]string{"reason"}),
		lag: prometheus.NewDesc("mend_binlog_lag_seconds",
			"How far behind the binlog reader's last event was when read (0 when the server says it is caught up); exported by the replica that reads.", nil, nil),
		age: prometheus.NewDesc("mend_binlog_position_age_seconds",
			"How long the binlog reader's saved position has been at risk of a purge: 0 after the server said it had nothing more to send, else the longer of the lag and the time since this process last saved it (or started); exported by the replica that reads and by one whose reader is retrying after failures. Compare with mend_binlog_retention_seconds.", nil, nil),
		retention: prometheus.NewDesc("mend_binlog_retention_seconds",
			"The queue database server's binlog_expire_logs_seconds as the binlog reader last read it (0: never purged by age).", nil, nil),
		state: prometheus.NewDesc("mend_binlog_reader_state",
			"1 for the state of this process's binlog reader, 0 for the others: reader (holds the lease and reads), standby (another replica holds it), retrying (its last term failed: mend_binlog_failures_total), stopped (not running); exported in binlog mode.",
			[]string{"state"}, nil),
		statements: prometheus.NewDesc("mend_binlog_statement_inserts_total",
			"Transactions in which this process's binlog reader found a dead letter's INSERT logged as a statement (a host session with binlog_format STATEMENT or MIXED): it imported the tables to record it; one collected by the host's GC before that import is lost. Fix the host's sessions (binlog_format=ROW).",
			nil, nil),
		savedAt: time.Now(),
	}
	reg.MustRegister(bm.mode, bm.resets, bm.purged, bm.recorded, bm.failures, bm)
	for _, r := range resetReasons {
		bm.resets.WithLabelValues(r.label)
	}
	for _, r := range binlog.FailureReasons {
		bm.failures.WithLabelValues(r)
	}
	return bm
}

// binlogMetrics returns m's binlog metrics, registering them on first use.
func (m *metrics) binlogMetrics() *binlogMetrics {
	m.binlogOnce.Do(func() { m.binlog = newBinlogMetrics(m.reg) })
	return m.binlog
}

// binlogHooks binds the reader's hooks to the metrics.
func (m *metrics) binlogHooks() binlog.Hooks {
	bm := m.binlogMetrics()
	return binlog.Hooks{
		OnReset: func(reason string, purged bool) {
			bm.resets.WithLabelValues(resetLabel(reason, purged)).Inc()
			if purged {
				bm.purged.Set(1)
			}
		},
		OnRecorded: func(rows []dlq.Row, parked int) {
			bm.recorded.Add(float64(len(rows) - parked))
		},
		OnSaved: func(storage.BinlogPosition) {
			bm.mu.Lock()
			bm.savedAt = time.Now()
			bm.mu.Unlock()
		},
		OnFailed: func(err error) {
			bm.failures.WithLabelValues(binlog.FailureReason(err)).Inc()
		},
	}
}

// setMode sets mend_subscribe_mode for the mode run runs in, and which
// reader the gauges read (nil outside binlog mode).
func (bm *binlogMetrics) setMode(mode string, r *binlog.Reader) {
	for _, m := range []string{doctor.ModeBinlog, doctor.ModeOffsets} {
		v := 0.0
		if m == mode {
			v = 1
		}
		bm.mode.WithLabelValues(m).Set(v)
	}
	bm.mu.Lock()
	bm.reader = r
	bm.mu.Unlock()
}

// Describe and Collect make bm a collector of the reader's gauges.
func (bm *binlogMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- bm.lag
	ch <- bm.age
	ch <- bm.retention
	ch <- bm.state
	ch <- bm.statements
}

func (bm *binlogMetrics) Collect(ch chan<- prometheus.Metric) {
	bm.mu.Lock()
	r, savedAt := bm.reader, bm.savedAt
	bm.mu.Unlock()
	if r == nil {
		return
	}
	st := r.Status()
	// Every state has its series, so a reader that fails or stops is a
	// value to alert on, not an absence.
	for _, s := range readerStates {
		v := 0.0
		if s == st.Role {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(bm.state, prometheus.GaugeValue, v, s)
	}
	ch <- prometheus.MustNewConstMetric(bm.statements, prometheus.CounterValue, float64(st.Statements))
	if st.Retention > 0 || st.Role == binlog.RoleReader {
		ch <- prometheus.MustNewConstMetric(bm.retention, prometheus.GaugeValue, st.Retention.Seconds())
	}
	if st.Role == binlog.RoleReader {
		ch <- prometheus.MustNewConstMetric(bm.lag, prometheus.GaugeValue, st.Lag.Seconds())
	}
	if age, ok := positionAge(st, savedAt, time.Now()); ok {
		ch <- prometheus.MustNewConstMetric(bm.age, prometheus.GaugeValue, age.Seconds())
	}
}

// positionAge is mend_binlog_position_age_seconds for a reader in st that
// this process last saved at savedAt (or started then): exported while it
// reads, and while it retries, when nobody may be reading (its age grows
// until a term saves again, so MendBinlogPositionAging can fire); not on a
// standby (the reader elsewhere exports it) or a stopped reader.
//
// While reading it is 0 only after the server's heartbeat, which the
// server sends when it has had nothing to send for the heartbeat period
// (1 s): on a server written to more often than that the reader is never
// "caught up" in that sense, and the age cycles between 0 and about the
// save interval (1 s), however current the reader is. mend's own saves are
// such writes when mend's database is on the queue server, which is why a
// reader with nothing to do reads 0.9 s there. That is the truth of the
// saved position (it is that old), and far below any retention.
func positionAge(st binlog.Status, savedAt, now time.Time) (time.Duration, bool) {
	switch st.Role {
	case binlog.RoleReader:
		if st.CaughtUp {
			return 0, true
		}
		// The saved position is at or before the last event read, so
		// its file is at least the lag old.
		return max(now.Sub(savedAt), st.Lag), true
	case binlog.RoleRetrying:
		// CaughtUp and Lag are the last term's: nothing is read now.
		return max(now.Sub(savedAt), 0), true
	}
	return 0, false
}

// The database-derived binlog series (binlogCollector), read by every
// replica at scrape time as mend_lease_held is, so they are there when the
// reader's own process is wedged or gone, or only standbys are alive.
// MendBinlogNotReading pages on them; mend status and the console show the
// same condition (binlogReaderView.NotReading): notReadingSaved and
// notReadingFor are the rule's thresholds, and TestBinlogNotReadingRule
// holds the rule file to them. A reader that reads saves its position at
// least every binlog.RefreshIntervalDefault (30 s), caught up on a quiet
// server too, so the saved row's age alone says whether anyone reads: a
// reader that holds its lease while its read loop is wedged pages as one
// that has none.
const (
	// notReadingSaved: the reader's position was saved longer ago than
	// this ...
	notReadingSaved = 5 * time.Minute
	// notReadingFor: ... for this long.
	notReadingFor = 10 * time.Minute
	// failedTermWithin: a term its holder ended within this is a failed
	// term (every failure ends the term; a reader that cannot read
	// lasts seconds), as mend status and the console count them.
	failedTermWithin = 3 * time.Minute
	// binlogSourcesMax bounds the sources the series are exported for
	// (the first by name): sources are queue databases, a few at most.
	binlogSourcesMax = 20
)

// binlogCollector exports, per binlog source (a mend_binlog_positions
// row), whether a replica holds its reader's lease now, how long that term
// has lasted, and how long ago the position was saved, all by the database
// clock. A failed read exports nothing (mend_status_up says so); a schema
// before migration 0019, or no row, exports nothing either.
type binlogCollector struct {
	ctx     context.Context
	store   binlogSource
	timeout time.Duration
	log     *slog.Logger

	live, term, saved *prometheus.Desc
}

func newBinlogCollector(ctx context.Context, store binlogSource, log *slog.Logger) *binlogCollector {
	return &binlogCollector{ctx: ctx, store: store, timeout: 5 * time.Second, log: log,
		live: prometheus.NewDesc("mend_binlog_reader_live",
			"1 if some replica holds the binlog reader's lease of the source now (a live term by the database clock), else 0; read from mend's database at scrape time by every replica.", []string{"source"}, nil),
		term: prometheus.NewDesc("mend_binlog_reader_term_seconds",
			"How long the live term of the source's binlog reader lease has lasted, by the database clock (0 with no live term). Every failure of the reader ends its term, so a long term is a reader that reads.", []string{"source"}, nil),
		saved: prometheus.NewDesc("mend_binlog_position_saved_age_seconds",
			"How long ago the source's binlog position was last saved (mend_binlog_positions.updated_at), by the database clock; read from mend's database at scrape time by every replica.", []string{"source"}, nil),
	}
}

func (c *binlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.live
	ch <- c.term
	ch <- c.saved
}

func (c *binlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	rs, err := binlogReaders(ctx, c.store, false)
	if err != nil {
		if !errors.Is(err, mend.ErrDenied) {
			c.log.Warn("metrics: read the binlog readers", "err", err)
		}
		return
	}
	for _, r := range rs {
		live := 0.0
		if r.Role == roleReading {
			live = 1
		}
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, live, r.Source)
		ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, r.TermSeconds, r.Source)
		ch <- prometheus.MustNewConstMetric(c.saved, prometheus.GaugeValue, r.SavedSeconds, r.Source)
	}
}

// Roles of a binlog reader as mend status and the console show it, from
// mend's database.
const (
	roleReading  = "reading"   // a replica holds the reader's lease
	roleNoReader = "no reader" // none does
)

// binlogReaderView is one binlog reader as mend status and the console show
// it, from mend's database: its saved position and lease.
type binlogReaderView struct {
	Source   string `json:"source"`
	Role     string `json:"role"` // "reading" (the lease is live) or "no reader"
	Holder   string `json:"holder,omitempty"`
	Epoch    int64  `json:"epoch,omitempty"`
	File     string `json:"file,omitempty"`
	Pos      uint64 `json:"pos,omitempty"`
	GTIDSet  string `json:"gtid_set,omitempty"`
	Position string `json:"position"`
	// SavedSeconds is how long ago the position was saved, LagSeconds how
	// far behind the last transaction read was when it was (its commit to
	// the save), both by the database clock.
	SavedSeconds float64 `json:"saved_seconds"`
	LagSeconds   float64 `json:"lag_seconds"`
	ResetReason  string  `json:"reset_reason,omitempty"`
	ResetAt      string  `json:"reset_at,omitempty"`
	// TermSeconds is how long the live term has lasted (reading);
	// NoReaderSeconds how long since the last term ended (no reader; the
	// saved position's age when the lease was never taken). Both by the
	// database clock.
	TermSeconds     float64 `json:"term_seconds,omitempty"`
	NoReaderSeconds float64 `json:"no_reader_seconds,omitempty"`
	// FailedTerms counts the reader's terms begun in the last
	// notReadingFor that its holder ended itself within failedTermWithin: a
	// reader fails, releases its lease and retries (its process's log and
	// mend_binlog_failures_total say why). Read only while the position is
	// older than notReadingSaved.
	FailedTerms int `json:"failed_terms,omitempty"`
	// NotReading is MendBinlogNotReading's condition now: the position
	// saved more than notReadingSaved ago and no live term older than
	// failedTermWithin. Pages says it has held for the rule's for
	// (notReadingFor) as far as the database tells: the position saved
	// more than notReadingSaved + notReadingFor ago, and no term in that
	// time lasted failedTermWithin.
	NotReading bool `json:"not_reading"`
	Pages      bool `json:"pages"`
}

// binlogSource is where status, the console and the metrics read binlog
// readers.
type binlogSource interface {
	BinlogPositions(ctx context.Context) ([]storage.BinlogPosition, error)
	LeaseGetMany(ctx context.Context, queues []string) ([]storage.LeaseStatus, error)
	LeaseHistory(ctx context.Context, queue string, limit int) ([]storage.LeaseTerm, error)
}

// binlogHistoryRead bounds the lease terms read per source to count the
// failed ones: a reader failing at once retries after 1, 2, 4 ... 60 s,
// so about 15 terms in notReadingFor.
const binlogHistoryRead = 30

// binlogReaders reads every binlog reader's position and lease (the first
// binlogSourcesMax by name); none on a schema before migration 0019. With
// history, it reads the lease history of each source whose position is
// older than notReadingSaved (FailedTerms, Pages).
func binlogReaders(ctx context.Context, store binlogSource, history bool) ([]binlogReaderView, error) {
	ps, err := store.BinlogPositions(ctx)
	if errors.Is(err, storage.ErrNoBinlogPositions) || (err == nil && len(ps) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ps = ps[:min(len(ps), binlogSourcesMax)]
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	leases, err := store.LeaseGetMany(ctx, names)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]storage.LeaseStatus, len(leases))
	for _, l := range leases {
		byName[l.Term.Queue] = l
	}
	out := make([]binlogReaderView, 0, len(ps))
	for _, p := range ps {
		v := binlogReaderView{Source: strings.TrimPrefix(p.Name, binlog.LeaseName("")), Role: roleNoReader,
			File: p.File, Pos: p.Pos, GTIDSet: p.GTIDSet, Position: doctor.DescribePosition(p),
			SavedSeconds: p.Age.Seconds(), ResetReason: p.ResetReason, NoReaderSeconds: p.Age.Seconds()}
		if !p.EventAt.IsZero() && p.Updated.After(p.EventAt) {
			v.LagSeconds = p.Updated.Sub(p.EventAt).Seconds()
		}
		if !p.ResetAt.IsZero() {
			v.ResetAt = p.ResetAt.UTC().Format(time.RFC3339)
		}
		l, leased := byName[p.Name]
		// The database's now, as the lease read saw it.
		dbNow := l.ExpiresAt.Add(-l.Remaining)
		switch {
		case leased && l.Live():
			v.Role, v.Holder, v.Epoch = roleReading, l.Term.Holder, l.Term.Epoch
			v.TermSeconds, v.NoReaderSeconds = max(dbNow.Sub(l.AcquiredAt), 0).Seconds(), 0
		case leased && l.Term.Epoch > 0:
			v.NoReaderSeconds = (-l.Remaining).Seconds()
		}
		v.NotReading = p.Age > notReadingSaved
		if history && p.Age > notReadingSaved && leased {
			terms, err := store.LeaseHistory(ctx, p.Name, binlogHistoryRead)
			if err != nil {
				return nil, err
			}
			v.FailedTerms, v.Pages = judgeTerms(terms, dbNow, p.Age)
			v.Pages = v.Pages && v.NotReading
		} else if v.NotReading {
			v.Pages = p.Age > notReadingSaved+notReadingFor
		}
		out = append(out, v)
	}
	return out, nil
}

// judgeTerms reads a reader's lease terms (newest first) at the database's
// now: how many begun in the last notReadingFor its holder ended itself
// within failedTermWithin (failed terms), and whether MendBinlogNotReading's
// condition has held for notReadingFor: the position (saved age ago) older
// than notReadingSaved all that time.
func judgeTerms(terms []storage.LeaseTerm, now time.Time, saved time.Duration) (failed int, held bool) {
	since := now.Add(-notReadingFor)
	for _, t := range terms {
		end := now
		if t.EndedAt != nil {
			end = *t.EndedAt
		}
		if end.Before(since) {
			break
		}
		if t.EndedAt != nil && t.EndedHow == storage.LeaseEndedHolder && end.Sub(t.AcquiredAt) < failedTermWithin && !t.AcquiredAt.Before(since) {
			failed++
		}
	}
	return failed, saved > notReadingSaved+notReadingFor
}

// printBinlogReaders is mend status's binlog section.
func printBinlogReaders(w io.Writer, rs []binlogReaderView) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Subscribe mode: binlog (the queue database server's binary log)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tROLE\tPOSITION\tSAVED\tLAG\tLAST RESET")
	for _, r := range rs {
		reset := "-"
		if r.ResetReason != "" {
			reset = escapeShown(r.ResetAt+" "+r.ResetReason, 80)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\t%s\n", escapeShown(r.Source, 60), readerRole(r), escapeShown(r.Position, 120),
			doctor.FormatAge(secs(r.SavedSeconds)), doctor.FormatAge(secs(r.LagSeconds)), reset)
	}
	_ = tw.Flush()
	for _, r := range rs {
		if r.NotReading {
			fmt.Fprintf(w, "%s: %s\n", escapeShown(r.Source, 60), notReadingLine(r))
		}
	}
}

// readerRole is a reader's role as mend status shows it: who reads and
// for how long, or for how long nobody has, and the failed terms.
func readerRole(r binlogReaderView) string {
	role := r.Role
	if r.NoReaderSeconds > 0 {
		role = fmt.Sprintf("%s for %s", r.Role, doctor.FormatAge(secs(r.NoReaderSeconds)))
	}
	if r.Holder != "" {
		role = fmt.Sprintf("reading: %s (epoch %d, for %s)", escapeShown(r.Holder, 60), r.Epoch, doctor.FormatAge(secs(r.TermSeconds)))
	}
	if r.FailedTerms > 0 {
		role += fmt.Sprintf(", %d failed term(s) in %s", r.FailedTerms, doctor.FormatAge(notReadingFor))
	}
	return role
}

// notReadingLine says why a reader is not reading and whether
// MendBinlogNotReading pages on it.
func notReadingLine(r binlogReaderView) string {
	when := "pages if it lasts " + doctor.FormatAge(notReadingFor)
	if r.Pages {
		when = "pages now"
	}
	why := "no replica holds its lease"
	switch {
	case r.Holder != "":
		why = fmt.Sprintf("%s holds the reader's lease (for %s) but has not saved its position: its read loop is wedged or it cannot record", escapeShown(r.Holder, 60), doctor.FormatAge(secs(r.TermSeconds)))
	case r.FailedTerms > 0:
		why = fmt.Sprintf("its reader fails and retries (%d failed term(s) in %s: the reader's log and mend_binlog_failures_total say why)", r.FailedTerms, doctor.FormatAge(notReadingFor))
	}
	return fmt.Sprintf("not read for %s: %s; MendBinlogNotReading %s while a replica runs binlog mode (docs/operations.md, \"When nobody reads the binary log\")",
		doctor.FormatAge(secs(r.SavedSeconds)), why, when)
}

// secs is a number of seconds as a duration.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

package main

// Binlog mode (package binlog, issue 44) in mend run: its metrics. The
// mode itself is chosen by the front door (client.Subscription.Mode).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

	mu      sync.Mutex
	savedAt time.Time // the last position saved by this process, or the reader's start
	reader  *binlog.Reader

	lag, age, retention *prometheus.Desc
}

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
		lag: prometheus.NewDesc("mend_binlog_lag_seconds",
			"How far behind the binlog reader's last event was when read (0 when the server says it is caught up); exported by the replica that reads.", nil, nil),
		age: prometheus.NewDesc("mend_binlog_position_age_seconds",
			"How long the binlog reader's saved position has been at risk of a purge: 0 while caught up, else seconds since this process last saved it; exported by the replica that reads. Compare with mend_binlog_retention_seconds.", nil, nil),
		retention: prometheus.NewDesc("mend_binlog_retention_seconds",
			"The queue database server's binlog_expire_logs_seconds as the binlog reader last read it (0: never purged by age).", nil, nil),
		savedAt: time.Now(),
	}
	reg.MustRegister(bm.mode, bm.resets, bm.purged, bm.recorded, bm)
	for _, r := range resetReasons {
		bm.resets.WithLabelValues(r.label)
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
}

func (bm *binlogMetrics) Collect(ch chan<- prometheus.Metric) {
	bm.mu.Lock()
	r, savedAt := bm.reader, bm.savedAt
	bm.mu.Unlock()
	if r == nil {
		return
	}
	st := r.Status()
	if st.Retention > 0 || st.Role == "reader" {
		ch <- prometheus.MustNewConstMetric(bm.retention, prometheus.GaugeValue, st.Retention.Seconds())
	}
	if st.Role != "reader" {
		return
	}
	ch <- prometheus.MustNewConstMetric(bm.lag, prometheus.GaugeValue, st.Lag.Seconds())
	// The saved position is at or before the last event read, so its
	// file is at least the lag old.
	age := max(time.Since(savedAt), st.Lag)
	if st.CaughtUp {
		age = 0
	}
	ch <- prometheus.MustNewConstMetric(bm.age, prometheus.GaugeValue, age.Seconds())
}

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
}

// binlogSource is where status and the console read binlog readers.
type binlogSource interface {
	BinlogPositions(ctx context.Context) ([]storage.BinlogPosition, error)
	LeaseList(ctx context.Context) ([]storage.LeaseStatus, error)
}

// binlogReaders reads every binlog reader's position and lease; none on a
// schema before migration 0019.
func binlogReaders(ctx context.Context, store binlogSource) ([]binlogReaderView, error) {
	ps, err := store.BinlogPositions(ctx)
	if errors.Is(err, storage.ErrNoBinlogPositions) || (err == nil && len(ps) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	leases, err := store.LeaseList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]binlogReaderView, 0, len(ps))
	for _, p := range ps {
		v := binlogReaderView{Source: strings.TrimPrefix(p.Name, binlog.LeaseName("")), Role: "no reader",
			File: p.File, Pos: p.Pos, GTIDSet: p.GTIDSet, Position: doctor.DescribePosition(p),
			SavedSeconds: p.Age.Seconds(), ResetReason: p.ResetReason}
		if !p.EventAt.IsZero() && p.Updated.After(p.EventAt) {
			v.LagSeconds = p.Updated.Sub(p.EventAt).Seconds()
		}
		if !p.ResetAt.IsZero() {
			v.ResetAt = p.ResetAt.UTC().Format(time.RFC3339)
		}
		for _, l := range leases {
			if l.Term.Queue == p.Name && l.Live() {
				v.Role, v.Holder, v.Epoch = "reading", l.Term.Holder, l.Term.Epoch
			}
		}
		out = append(out, v)
	}
	return out, nil
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
		role := r.Role
		if r.Holder != "" {
			role = fmt.Sprintf("reading: %s (epoch %d)", escapeShown(r.Holder, 60), r.Epoch)
		}
		reset := "-"
		if r.ResetReason != "" {
			reset = escapeShown(r.ResetAt+" "+r.ResetReason, 80)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\t%s\n", escapeShown(r.Source, 60), role, escapeShown(r.Position, 120),
			doctor.FormatAge(secs(r.SavedSeconds)), doctor.FormatAge(secs(r.LagSeconds)), reset)
	}
	_ = tw.Flush()
}

// secs is a number of seconds as a duration.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

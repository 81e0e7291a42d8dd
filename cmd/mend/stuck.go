package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mendq/mend"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/stuck"
)

// stuckEveryDefault is how often mend run scans for stuck queues: a scan
// is a handful of statements over the host's live batches and unconsumed
// messages, and a minute keeps a stuck queue's wait near the bound (it is
// recorded within --stuck-bound + one period, woken on the next pass).
const stuckEveryDefault = time.Minute

// stuckConfig is the stuck-queue scan's part of mend run and mend import.
type stuckConfig struct {
	Every time.Duration // run: the period; 0 turns the scan off
	Bound time.Duration
}

func addStuckFlags(f *flags, c *stuckConfig, run bool) {
	if run {
		f.DurationVar(&c.Every, "stuck-every", stuckEveryDefault, "scan for stuck queues this often: live batches and nothing in flight that will wake the host's planner\n(see docs/operations.md, \"Stuck queues\"; 0: off)")
	}
	f.DurationVar(&c.Bound, "stuck-bound", stuck.BoundDefault, "how long a queue must stay quiet (live batches, nothing in flight, nothing moving), by the host database's clock,\nbefore the stuck-queue scan records its wake-up")
}

func (c stuckConfig) validate() error {
	switch {
	case c.Every < 0:
		return usagef("--stuck-every must not be negative (0 turns the scan off), got %s", c.Every)
	case c.Every > 0 && c.Every < time.Second:
		return usagef("--stuck-every must be at least 1s, got %s", c.Every)
	case c.Bound != 0 && c.Bound < time.Second: // zero: stuck.BoundDefault
		return usagef("--stuck-bound must be at least 1s, got %s", c.Bound)
	}
	return nil
}

// stuckMetrics are the scan's metrics, registered when mend run scans.
type stuckMetrics struct {
	wakes  *prometheus.CounterVec
	queues *prometheus.GaugeVec
	errors prometheus.Counter
	scans  prometheus.Counter
}

// newStuckMetrics registers the scan's metrics on reg.
func newStuckMetrics(reg *prometheus.Registry) *stuckMetrics {
	s := &stuckMetrics{
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_stuck_wakes_total",
			Help: "Stuck-queue wake-ups this replica recorded: a queue seen with live batches and nothing in flight for --stuck-bound (the planner then wakes it)."}, []string{"queue"}),
		queues: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mend_stuck_queues",
			Help: "Queues with live batches in the last stuck-queue scan, by verdict: busy (something in flight), quiet (not yet for the bound), woken (recorded this scan), recorded (woken before in this state)."}, []string{"verdict"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "mend_stuck_scan_errors_total",
			Help: "Stuck-queue scans that failed (retried next period)."}),
		scans: prometheus.NewCounter(prometheus.CounterOpts{Name: "mend_stuck_scans_total",
			Help: "Stuck-queue scans that completed (one per --stuck-every)."}),
	}
	reg.MustRegister(s.wakes, s.queues, s.errors, s.scans)
	return s
}

func (s *stuckMetrics) hooks() stuck.Hooks {
	return stuck.Hooks{
		OnWake: func(queue string, _ mend.Record) { s.wakes.WithLabelValues(queue).Inc() },
		OnScan: func(r stuck.Report) {
			s.scans.Inc()
			for _, v := range []stuck.Verdict{stuck.Busy, stuck.Quiet, stuck.Woken, stuck.Recorded} {
				s.queues.WithLabelValues(string(v)).Set(float64(r.Count(v)))
			}
		},
	}
}

// startStuckScan runs the stuck-queue scan every c.Every beside the
// reconciler until ctx ends; the returned func waits for it to stop.
// The records it creates are due at once, so the reconciler's next pass
// wakes their queues under the fence.
func startStuckScan(ctx context.Context, c runConfig, svc *client.Client, log *slog.Logger, m *metrics) (func(), error) {
	if c.Once || c.Stuck.Every == 0 {
		return func() {}, nil
	}
	cfg := stuck.Config{Scanner: svc.Host(), Store: svc.Store(), Bound: c.Stuck.Bound, Actor: "stuck-scan/" + c.Holder, Logger: log}
	var onErr func(error)
	if m != nil {
		sm := newStuckMetrics(m.reg)
		cfg.Hooks, onErr = sm.hooks(), func(error) { sm.errors.Inc() }
	}
	d, err := stuck.New(cfg)
	if err != nil {
		return nil, usagef("stuck-queue scan settings: %v", err)
	}
	log.With("component", "mend").Info("scanning for stuck queues", "every", c.Stuck.Every.String(), "bound", c.Stuck.Bound.String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Loop(ctx, c.Stuck.Every, onErr)
	}()
	return func() { <-done }, nil
}

// summarizeStuck is mend import --stuck's summary line.
func summarizeStuck(r stuck.Report) string {
	s := fmt.Sprintf("%d queue(s) with live batches: %d woken (recorded; mend run wakes them under the fence), %d already woken in this state, %d busy, %d quiet for less than the bound",
		len(r.Queues), r.Count(stuck.Woken), r.Count(stuck.Recorded), r.Count(stuck.Busy), r.Count(stuck.Quiet))
	if r.Unattributed > 0 {
		s += fmt.Sprintf("; %d message(s) in flight name no queue, so none was woken", r.Unattributed)
	}
	return s
}

// printStuckReport lists the queues a scan woke or found quiet.
func printStuckReport(w io.Writer, r stuck.Report) {
	for _, q := range r.Queues {
		switch q.Verdict {
		case stuck.Woken, stuck.Recorded:
			fmt.Fprintf(w, "  %s: %s (record %s), %d live batch(es), wake-up names %s, quiet for %s\n", q.Queue, q.Verdict, q.Record, q.Live, q.Target, fmtAge(q.QuietFor))
		case stuck.Quiet:
			fmt.Fprintf(w, "  %s: quiet for %s, less than the bound\n", q.Queue, fmtAge(q.QuietFor))
		}
	}
}

// stuckWakesJSON is a queue's stuck-queue records in mend status --json.
type stuckWakesJSON struct {
	Total       int64   `json:"total"`
	Open        int64   `json:"open"`
	LastSeconds float64 `json:"last_seconds"`
}

// withStuckWakes adds each queue's stuck-queue records to status's JSON.
func withStuckWakes(js []queueStatusJSON, w map[string]storage.StuckWakes) []queueStatusJSON {
	for i := range js {
		if s, ok := w[js[i].Queue]; ok {
			js[i].StuckWakes = &stuckWakesJSON{Total: s.Total, Open: s.Open, LastSeconds: s.Last.Seconds()}
		}
	}
	return js
}

// printStuckWakes is mend status's line on stuck-queue wake-ups, when
// there are any.
func printStuckWakes(w io.Writer, sw map[string]storage.StuckWakes) {
	if len(sw) == 0 {
		return
	}
	qs := make([]string, 0, len(sw))
	for q := range sw {
		qs = append(qs, q)
	}
	sort.Strings(qs)
	parts := make([]string, 0, len(qs))
	for _, q := range qs {
		s := sw[q]
		parts = append(parts, fmt.Sprintf("%s %d (%d open, last %s ago)", q, s.Total, s.Open, fmtAge(s.Last)))
	}
	fmt.Fprintf(w, "stuck-queue wake-ups: %s\n", strings.Join(parts, ", "))
}

// runStuckImport is mend import --stuck: the stuck-queue scan once, for
// the day mend is adopted (a scan, the bound, a second scan); the records
// it creates are woken by mend run. It returns the second scan's report.
func runStuckImport(ctx context.Context, a *app, f *flags, c importConfig) (r stuck.Report, err error) {
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store, err := storage.Open(openCtx, c.DSN, storage.Options{})
	if err != nil {
		return r, fmt.Errorf("open mend's database: %w", err)
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	h, err := host.Open(openCtx, c.HostDSN, c.QueueDSN, host.Options{Logger: f.logger()})
	if err != nil {
		return r, fmt.Errorf("open the host's databases: %w", err)
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	d, err := stuck.New(stuck.Config{Scanner: h, Store: store, Bound: c.Stuck.Bound, Actor: c.Actor + "/stuck", Logger: f.logger()})
	if err != nil {
		return r, usagef("stuck-queue scan settings: %v", err)
	}
	return d.ScanAcross(ctx, func(first stuck.Report) {
		a.say("mend import --stuck: %d queue(s) quiet (live batches, nothing in flight); scanning again in %s to see them stay quiet across --stuck-bound",
			first.Count(stuck.Quiet), c.Stuck.Bound)
	})
}

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mendq/mend"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// metrics are the binary's Prometheus metrics, on a registry of its own
// (never the global one). Counters come from the library's hooks; record
// and lease gauges are read from SQL at scrape time, so every replica
// reports the same truth and nothing is lost on restart.
type metrics struct {
	reg *prometheus.Registry

	settles      *prometheus.CounterVec
	wakeups      *prometheus.CounterVec
	parked       *prometheus.CounterVec
	fenced       *prometheus.CounterVec
	leaseAcq     *prometheus.CounterVec
	leaseLost    *prometheus.CounterVec
	renewFailed  prometheus.Counter
	queueRuns    *prometheus.CounterVec
	plannerRun   prometheus.Histogram
	reconcilePas prometheus.Histogram
	// share is this replica's share of --cluster-concurrency, as of its
	// last pass that counted the working replicas.
	share    prometheus.Gauge
	replicas prometheus.Gauge
	// repairLatency is the repair SLO's histogram (planner.Hooks.OnRepaired).
	repairLatency prometheus.Histogram
	dangling      *prometheus.CounterVec
	attemptsFail  *prometheus.CounterVec
	buildInfo     *prometheus.GaugeVec

	seenMu sync.Mutex
	seen   map[string]bool // queues whose labelled counters exist

	subOnce sync.Once
	sub     *subscribeMetrics // registered when mend run subscribes (subscribe.go)

	binlogOnce sync.Once
	binlog     *binlogMetrics // registered when mend run subscribes (binlogmode.go)
}

// attemptSteps are the planner's failing steps (planner.Hooks.OnAttemptFailed),
// as the reason label of mend_attempt_failures_total.
var attemptSteps = map[string]string{
	"read batch":        "read_batch",
	"transition batch":  "transition_batch",
	"finish fan-out":    "finish_fanout",
	"list live batches": "list_live_batches",
	"publish wake-up":   "publish_wakeup",
}

// repairLatencyBuckets run from 100 ms to 1 h: a repair inline with the
// intake takes well under a second, one by the reconciler an interval or
// two, a storm or an outage minutes; past an hour is a page either way.
var repairLatencyBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// attemptReason is the metric label for a failing step; an unknown one
// (a newer planner) is "other", so the label set stays bounded.
func attemptReason(what string) string {
	if r, ok := attemptSteps[what]; ok {
		return r
	}
	return "other"
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_settles_total",
			Help: "Batch outcomes settled by the planner, by outcome and whether the host's outcome diverged from the dead letter's."},
			[]string{"outcome", "divergent"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_wakeups_total",
			Help: "Wake-up publishes by queue and result (sent or failed)."}, []string{"queue", "result"}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_parked_total",
			Help: "Records parked for an operator, by queue."}, []string{"queue"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_fenced_rejections_total",
			Help: "Planner writes refused because their lease term was no longer current, by queue."}, []string{"queue"}),
		leaseAcq: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_lease_acquisitions_total",
			Help: "Lease terms this process was granted, by queue."}, []string{"queue"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_lease_losses_total",
			Help: "Leases this process lost or stopped trusting before releasing them, by queue."}, []string{"queue"}),
		renewFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "mend_lease_renew_failures_total",
			Help: "Lease renew attempts that failed (transient or refused)."}),
		queueRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_planner_runs_total",
			Help: "Planner runs over one queue, by result (ok or error)."}, []string{"result"}),
		plannerRun: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mend_planner_run_duration_seconds",
			Help: "How long one planner run over one queue took.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		reconcilePas: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mend_reconcile_pass_duration_seconds",
			Help: "How long one reconciler pass over all due queues took.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		share: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mend_reconcile_share",
			Help: "Planner runs this replica may have in flight at once: its share of --cluster-concurrency (at most --concurrency), as of its last pass with queues to share."}),
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mend_reconcile_working_replicas",
			Help: "Working replicas (this one included) that replica's last pass with queues to share divided --cluster-concurrency among."}),
		repairLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mend_repair_latency_seconds",
			Help:    "Repair latency, the SLO's definition (storage.SLOStart): from a dead letter's failed_at, or its record's latest retry by an operator, to the record finished by the planner (wake-up durable, or done with nothing to wake); records an operator resolved are not repairs. Observed by the planner that finished it, computed by the database as mend status computes it.",
			Buckets: repairLatencyBuckets}),
		dangling: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_host_dangling_membership_rows_total",
			Help: "Host membership rows (queue_batch_state) seen naming a batch that does not exist, by queue. The host's own planner fails on such a row; mend skips it, but an operator should delete it."},
			[]string{"queue"}),
		attemptsFail: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_attempt_failures_total",
			Help: "Repair attempts that failed and were rescheduled or parked, by queue and the step that failed."},
			[]string{"queue", "reason"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mend_build_info",
			Help: "Always 1; the labels say which mend binary is running."}, []string{"version", "revision", "goversion"}),
		seen: map[string]bool{},
	}
	m.reg.MustRegister(m.settles, m.wakeups, m.parked, m.fenced, m.leaseAcq, m.leaseLost, m.renewFailed,
		m.queueRuns, m.plannerRun, m.reconcilePas, m.share, m.replicas, m.repairLatency, m.dangling, m.attemptsFail, m.buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bi := readBuildInfo()
	m.buildInfo.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion).Set(1)
	// Counters with fixed label values exist from the start, at zero, so
	// rate() and absent() work before the first event.
	for _, outcome := range []mend.BatchState{mend.BatchFailed, mend.BatchSucceeded, mend.BatchCancelled, ""} {
		for _, div := range []string{"false", "true"} {
			m.settles.WithLabelValues(outcomeLabel(outcome), div)
		}
	}
	m.queueRuns.WithLabelValues("ok")
	m.queueRuns.WithLabelValues("error")
	return m
}

// outcomeLabel names a settled outcome; the planner settles a batch the
// host does not have with no outcome, shown as not_found.
func outcomeLabel(o mend.BatchState) string {
	if o == "" {
		return "not_found"
	}
	return string(o)
}

// touchQueue creates every queue-labelled counter of queue at zero the first
// time the queue is seen (at start-up from mend's tables, or when this
// process first works on it), so a counter that never moved is 0 rather
// than absent.
func (m *metrics) touchQueue(queue string) {
	if storage.SlotLease(queue) {
		return // mend's own slot leases are not queues (see fenceHooks)
	}
	m.seenMu.Lock()
	defer m.seenMu.Unlock()
	if m.seen[queue] {
		return
	}
	m.seen[queue] = true
	m.wakeups.WithLabelValues(queue, "sent")
	m.wakeups.WithLabelValues(queue, "failed")
	m.parked.WithLabelValues(queue)
	m.fenced.WithLabelValues(queue)
	m.leaseAcq.WithLabelValues(queue)
	m.leaseLost.WithLabelValues(queue)
	m.dangling.WithLabelValues(queue)
	for _, r := range attemptSteps {
		m.attemptsFail.WithLabelValues(queue, r)
	}
	m.attemptsFail.WithLabelValues(queue, "other")
}

// onDangling is host.Options.OnDangling: it counts each dangling row the
// adapter skipped (the adapter logs it too).
func (m *metrics) onDangling(queue, _, _ string) { m.dangling.WithLabelValues(queue).Inc() }

func (m *metrics) plannerHooks() planner.Hooks {
	return planner.Hooks{
		OnSettled: func(_ string, outcome mend.BatchState, divergent bool) {
			m.settles.WithLabelValues(outcomeLabel(outcome), strconv.FormatBool(divergent)).Inc()
		},
		OnWake: func(queue string, err error) {
			result := "sent"
			if err != nil {
				result = "failed"
			}
			m.wakeups.WithLabelValues(queue, result).Inc()
		},
		OnParked:   func(queue, _ string) { m.parked.WithLabelValues(queue).Inc() },
		OnRepaired: func(_ string, d time.Duration) { m.repairLatency.Observe(d.Seconds()) },
		OnFenced:   func(queue string) { m.fenced.WithLabelValues(queue).Inc() },
		OnAttemptFailed: func(queue string, _ mend.RecordID, what string, _ error) {
			m.touchQueue(queue)
			m.attemptsFail.WithLabelValues(queue, attemptReason(what)).Inc()
		},
	}
}

func (m *metrics) reconcileHooks() reconcile.Hooks {
	return reconcile.Hooks{
		OnQueue: func(_ string, _ planner.Stats, d time.Duration, err error) {
			m.plannerRun.Observe(d.Seconds())
			result := "ok"
			if err != nil {
				result = "error"
			}
			m.queueRuns.WithLabelValues(result).Inc()
		},
		OnPass: func(ps reconcile.PassStats, d time.Duration) {
			m.reconcilePas.Observe(d.Seconds())
			if ps.Replicas > 0 {
				m.share.Set(float64(ps.Concurrency))
				m.replicas.Set(float64(ps.Replicas))
			}
		},
	}
}

func (m *metrics) fenceHooks() fence.Hooks {
	return fence.Hooks{
		// The fence also holds mend's own slot leases; a queue label per
		// slot would grow the series with replicas, not with queues.
		OnAcquired: func(t mend.Term) {
			if storage.SlotLease(t.Queue) {
				return
			}
			m.touchQueue(t.Queue)
			m.leaseAcq.WithLabelValues(t.Queue).Inc()
		},
		OnLost: func(t mend.Term, _ error) {
			if !storage.SlotLease(t.Queue) {
				m.leaseLost.WithLabelValues(t.Queue).Inc()
			}
		},
		OnRenew: func(_ mend.Term, _ time.Duration, err error) {
			if err != nil {
				m.renewFailed.Inc()
			}
		},
	}
}

// statusSource is the store as the SQL collector needs it.
type statusSource interface {
	Status(ctx context.Context) ([]storage.QueueStatus, error)
	OldestOpen(ctx context.Context) (map[string]time.Duration, error)
}

// sqlCollector reads record and lease gauges from the database at scrape
// time. A failed read reports mend_status_up 0 and no gauges, rather than
// stale numbers.
type sqlCollector struct {
	ctx     context.Context
	store   statusSource
	timeout time.Duration
	log     *slog.Logger
	onQueue func(queue string) // each queue the scrape saw (metrics.touchQueue)

	up, records, recorded, due, oldestDue, oldestOpen, failing, oldestFailing, leaseHeld, leaseEpoch, leaseLeft *prometheus.Desc
}

func newSQLCollector(ctx context.Context, store statusSource, log *slog.Logger) *sqlCollector {
	return &sqlCollector{
		ctx: ctx, store: store, timeout: 5 * time.Second, log: log,
		up:      prometheus.NewDesc("mend_status_up", "1 if the last scrape could read mend's tables, else 0.", nil, nil),
		records: prometheus.NewDesc("mend_records", "Records by queue and state, read from mend_records at scrape time; parked leaves out the records mend_records_recorded counts.", []string{"queue", "state"}, nil),
		// Issue 57: runway's dead letters and the request topics' are stored
		// parked but are nobody's to act on; counted here, they stay out of
		// mend_records{state="parked"}, which MendRecordsParked reads.
		recorded: prometheus.NewDesc("mend_records_recorded", "Dead letters recorded for the audit (kind audit: request topics and the request log) or repaired by their host's own DLQ controller (kind host: runway's), by queue and kind; stored parked but never counted as parked.", []string{"queue", "kind"}, nil),
		due:      prometheus.NewDesc("mend_records_due", "Records whose next attempt is due now, by queue.", []string{"queue"}, nil),
		// Two numbers with two names (issue 30): the page-worthy one is how
		// late the most overdue record is; a record waiting out a merge's
		// grace or a backoff is open but not due, and must not page.
		oldestDue:  prometheus.NewDesc("mend_oldest_due_seconds", "How long the queue's most overdue record has been due (its next attempt at or before now) without being repaired, by the database clock; 0 when nothing is due. Records waiting out a backoff or a merge's grace are not due.", []string{"queue"}, nil),
		oldestOpen: prometheus.NewDesc("mend_oldest_open_seconds", "Age of the queue's oldest unfinished record (pending, waiting or settled; due or waiting out a backoff or a merge's grace), by the database clock; absent when the queue has none.", []string{"queue"}, nil),
		// Issue 47: a record whose every attempt fails backs off, so it is
		// not due and mend_oldest_due_seconds stays near 0; this is the age
		// that pages on it (MendRepairsFailing), long before it is parked.
		failing:       prometheus.NewDesc("mend_records_failing", "Records whose every attempt in their current step has failed so far (pending or settled, backing off), by queue.", []string{"queue"}, nil),
		oldestFailing: prometheus.NewDesc("mend_oldest_failing_seconds", "How long the queue's longest-failing record has been in its step with every attempt failing (pending or settled, backing off; since its state_since, by the database clock); 0 when none is failing.", []string{"queue"}, nil),
		leaseHeld:     prometheus.NewDesc("mend_lease_held", "1 if the queue's lease term is current by the database clock.", []string{"queue"}, nil),
		leaseEpoch:    prometheus.NewDesc("mend_lease_epoch", "The queue's latest lease epoch.", []string{"queue"}, nil),
		leaseLeft:     prometheus.NewDesc("mend_lease_seconds_left", "Seconds until the queue's lease term expires by the database clock (negative: expired).", []string{"queue"}, nil),
	}
}

func (c *sqlCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.records, c.recorded, c.due, c.oldestDue, c.oldestOpen, c.failing, c.oldestFailing, c.leaseHeld, c.leaseEpoch, c.leaseLeft} {
		ch <- d
	}
}

var allStates = []mend.State{mend.StatePending, mend.StateWaiting, mend.StateSettled, mend.StateParked, mend.StateDone}

func (c *sqlCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	st, err := c.store.Status(ctx)
	if err != nil {
		c.log.Warn("metrics: read status", "err", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	oldest, err := c.store.OldestOpen(ctx)
	if err != nil {
		c.log.Warn("metrics: read the oldest unfinished records", "err", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, q := range st {
		if c.onQueue != nil {
			c.onQueue(q.Queue)
		}
		for _, s := range allStates {
			ch <- prometheus.MustNewConstMetric(c.records, prometheus.GaugeValue, float64(q.Counts[s]), q.Queue, string(s))
		}
		for _, k := range []mend.TopicKind{mend.TopicAudit, mend.TopicHost} {
			if n, ok := q.Recorded[k]; ok {
				ch <- prometheus.MustNewConstMetric(c.recorded, prometheus.GaugeValue, float64(n), q.Queue, string(k))
			}
		}
		ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(q.Due), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.oldestDue, prometheus.GaugeValue, q.OldestDue.Seconds(), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(q.Failing), q.Queue)
		ch <- prometheus.MustNewConstMetric(c.oldestFailing, prometheus.GaugeValue, q.OldestFailing.Seconds(), q.Queue)
		if age, ok := oldest[q.Queue]; ok {
			ch <- prometheus.MustNewConstMetric(c.oldestOpen, prometheus.GaugeValue, age.Seconds(), q.Queue)
		}
		if l := q.Lease; l != nil {
			held := 0.0
			if l.Live() {
				held = 1
			}
			ch <- prometheus.MustNewConstMetric(c.leaseHeld, prometheus.GaugeValue, held, q.Queue)
			ch <- prometheus.MustNewConstMetric(c.leaseEpoch, prometheus.GaugeValue, float64(l.Term.Epoch), q.Queue)
			ch <- prometheus.MustNewConstMetric(c.leaseLeft, prometheus.GaugeValue, l.Remaining.Seconds(), q.Queue)
		}
	}
}

// readyCollector reports /readyz as a gauge, mend_ready, checked at scrape
// time, so an alert (MendNotReady) needs no probe of its own.
type readyCollector struct {
	ctx   context.Context
	ready func(context.Context) error
	desc  *prometheus.Desc
}

func newReadyCollector(ctx context.Context, ready func(context.Context) error) *readyCollector {
	return &readyCollector{ctx: ctx, ready: ready,
		desc: prometheus.NewDesc("mend_ready", "1 if this replica could do its work at scrape time, as /readyz answers it (databases reachable, mend's schema current and clean), else 0.", nil, nil)}
}

func (c *readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *readyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
	defer cancel()
	v := 1.0
	if c.ready(ctx) != nil {
		v = 0
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v)
}

// readiness reports whether mend run can do its work: mend's database
// answers and holds a schema this binary runs on, clean, and the host's
// databases answer. A replica whose every pass would fail is not ready.
func readiness(db *sql.DB, hosts ...pool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("database unreachable: %w", err)
		}
		for _, h := range hosts {
			if err := h.db.PingContext(ctx); err != nil {
				return fmt.Errorf("host database (%s) unreachable: %w", h.flag, err)
			}
		}
		// A schema newer than this binary by expand migrations only is
		// ready (watchSchema logs it once); see schemarange.go.
		v, err := doctor.JudgeSchema(ctx, db)
		if err != nil {
			return err
		}
		if !v.OK {
			return schemaError(v)
		}
		return nil
	}
}

// newHTTPHandler serves /metrics, /healthz (the process answers) and
// /readyz (ready reports nil).
func newHTTPHandler(m *metrics, ready func(context.Context) error, scrub *scrubber) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, scrub.clean("not ready: "+oneLine(err.Error())), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// metricsServer serves the handler on addr until stopped.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// startMetrics listens on addr first, so a bad or taken address fails the
// command at once rather than in the background.
func startMetrics(addr string, h http.Handler) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	s := &metricsServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln: ln, done: make(chan error, 1)}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

func (s *metricsServer) Addr() string { return s.ln.Addr().String() }

func (s *metricsServer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(s.srv.Shutdown(ctx), <-s.done)
}

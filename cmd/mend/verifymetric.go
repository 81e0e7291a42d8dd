package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mendq/mend/storage"
)

// verifyRuns is the store as the verify collector needs it.
type verifyRuns interface {
	VerifyRunLast(ctx context.Context) (storage.VerifyRun, bool, error)
}

// verifyCollector reports the last recorded mend verify run (issue 46) at
// scrape time: how many records it found diverging from their events, and
// how long ago it finished. Nothing is reported before the first run, or
// on a schema before migration 0015; a failed read reports nothing (the
// SQL collector's mend_status_up says whether the database answers).
type verifyCollector struct {
	ctx       context.Context
	store     verifyRuns
	log       *slog.Logger
	divergent *prometheus.Desc
	age       *prometheus.Desc
}

func newVerifyCollector(ctx context.Context, store verifyRuns, log *slog.Logger) *verifyCollector {
	return &verifyCollector{ctx: ctx, store: store, log: log,
		divergent: prometheus.NewDesc("mend_verify_divergent_records", "Records the last mend verify run found diverging from their events (mend_verify_runs); absent before the first recorded run.", nil, nil),
		age:       prometheus.NewDesc("mend_verify_last_run_age_seconds", "Seconds since the last recorded mend verify run finished, by the database clock.", nil, nil),
	}
}

func (c *verifyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.divergent; ch <- c.age }

func (c *verifyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	run, ok, err := c.store.VerifyRunLast(ctx)
	if err != nil {
		if !errors.Is(err, storage.ErrNoVerifyRuns) {
			c.log.Warn("metrics: read the last verify run", "err", err)
		}
		return
	}
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.divergent, prometheus.GaugeValue, float64(run.Divergent))
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, run.Age.Seconds())
}

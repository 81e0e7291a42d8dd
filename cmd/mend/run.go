package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// runConfig is everything `mend run` needs, after flags and environment.
type runConfig struct {
	DSN, HostDSN, QueueDSN string
	Once                   bool
	Interval               time.Duration
	LeaseTTL               time.Duration
	Concurrency            int
	ClusterConcurrency     int
	Holder                 string
	MetricsAddr            string
	Retention              time.Duration
	MaxAttempts            int
	Grace                  time.Duration
	WakeTopic              string
	WakeTopicUnjoined      bool          // start although no host group joined WakeTopic yet (waketopic.go)
	RetryBase, RetryMax    time.Duration // zero: planner.RetryDefaults(Interval)
	Sub                    subscribeConfig
	Stuck                  stuckConfig   // the stuck-queue scan (stuck.go)
	VerifyEvery            time.Duration // the periodic verify (verifyevery.go); 0: off
}

func (c runConfig) validate() error {
	switch {
	case c.Interval < 10*time.Millisecond:
		return usagef("--interval must be at least 10ms, got %s", c.Interval)
	case checkLeaseTTL(c.LeaseTTL) != nil:
		return checkLeaseTTL(c.LeaseTTL)
	case c.Concurrency < 1 || c.Concurrency > 256:
		return usagef("--concurrency must be between 1 and 256, got %d", c.Concurrency)
	case c.ClusterConcurrency > 256*reconcile.ReplicaSlots:
		return usagef("--cluster-concurrency must be at most %d (negative: no cluster-wide bound), got %d", 256*reconcile.ReplicaSlots, c.ClusterConcurrency)
	case checkRunIdentities(c.Holder, c.WakeTopic) != nil:
		return checkRunIdentities(c.Holder, c.WakeTopic)
	case checkHostDSNs(c.HostDSN, c.QueueDSN) != nil:
		return checkHostDSNs(c.HostDSN, c.QueueDSN)
	case c.MaxAttempts < 1:
		return usagef("--max-attempts must be at least 1")
	case c.Grace <= 0:
		return usagef("--grace must be positive")
	case c.RetryBase < 0 || c.RetryMax < 0 || (c.RetryBase > 0 && c.RetryMax > 0 && c.RetryBase > c.RetryMax):
		return usagef("--retry-base and --retry-max must not be negative, and the base not above the max")
	case c.Retention == 0:
		// Zero would read as "keep nothing", which the pruner cannot mean
		// safely, or as "the default", which it does not say.
		return usagef("--retention 0 is ambiguous: give how long done records are kept (e.g. 336h), or a negative value to keep them forever")
	}
	if err := checkVerifyEvery(c.VerifyEvery); err != nil {
		return err
	}
	return c.Stuck.validate()
}

func newRunCmd(a *app) *cobra.Command {
	f := a.newCommand("run", "run the reconciler: repair due records under per-queue leases",
		"Run the reconciler: every --interval, find queues with due records, take each queue's lease and repair them.\n"+
			"With --queue-dsn it also records the host's dead letters (--subscribe-mode): binlog reads the queue server's binary log\n"+
			"(no consumer group), offsets joins the *_dlq topics as --group, auto (the default) picks binlog where its prerequisites\n"+
			"hold and logs which mode it runs and why (mend doctor lists the checks).\n"+
			"SIGINT or SIGTERM stops it cleanly: in-flight work is finished or abandoned, leases are released, exit 0.", withDSN|withLog)
	var c runConfig
	f.StringVar(&c.HostDSN, "host-dsn", "", "DSN of uber/submitqueue's application database (batch, queue_batch_state, request, build) (required;\n"+hostDSNSame+": the same database as --dsn)")
	f.StringVar(&c.QueueDSN, "queue-dsn", "", "DSN of uber/submitqueue's queue database (queue_messages); default: --host-dsn")
	f.BoolVar(&c.Once, "once", false, "record what the subscription finds now (binlog mode: the binary log read from the saved position to its end,\n"+
		"unless another replica reads it; offsets: the group drained), repair what is due (passes until the due queues are drained)\n"+
		"and exit, for cron; exit 1 if the read, any record's attempt or any queue's repair failed")
	f.DurationVar(&c.Interval, "interval", reconcile.IntervalDefault, "time between passes")
	f.DurationVar(&c.LeaseTTL, "lease-ttl", fence.TTLDefault, "lease term length by the database clock")
	f.IntVar(&c.Concurrency, "concurrency", reconcile.ConcurrencyDefault, "queues this replica repairs at once, at most")
	f.IntVar(&c.ClusterConcurrency, "cluster-concurrency", reconcile.ClusterConcurrencyDefault, "queues repaired at once by all the replicas sharing --dsn together: each working replica takes its share,\nat most --concurrency (negative: no cluster-wide bound)")
	f.StringVar(&c.Holder, "holder", fence.DefaultHolder(), "this process's name in lease rows (unique per process)")
	f.StringVar(&c.MetricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address, e.g. :9464 (empty: off)")
	f.DurationVar(&c.Retention, "retention", reconcile.RetentionDefault, "how long done records are kept (negative: never prune)")
	f.IntVar(&c.MaxAttempts, "max-attempts", planner.MaxAttemptsDefault, "failed attempts in a row before a record is parked")
	f.DurationVar(&c.Grace, "grace", planner.GraceDefault, "how long to wait on a merging batch before parking the record")
	f.StringVar(&c.WakeTopic, "wake-topic", host.WakeTopicDefault, "the planner topic wake-ups are published to (a consumer group of the host must have joined it)")
	addWakeTopicUnjoinedFlag(f, &c.WakeTopicUnjoined)
	f.DurationVar(&c.RetryBase, "retry-base", 0, "first backoff after a failed attempt, doubling per attempt (0: 1s or --interval if shorter)")
	f.DurationVar(&c.RetryMax, "retry-max", 0, "longest backoff; a failed wake-up is re-sent within --retry-max + --interval (0: 4 x --interval)")
	f.addTimeout(0)
	f.timeoutApplies = func() bool { return c.Once }
	addSubscribeFlags(f, &c.Sub)
	addStuckFlags(f, &c.Stuck, true)
	addVerifyEveryFlag(f, &c.VerifyEvery)
	var err error
	return f.run(func(ctx context.Context, args []string) error {
		if c.DSN, err = f.needDSN(); err != nil {
			return err
		}
		switch c.HostDSN {
		case "":
			return usagef("--host-dsn is required (or %s): the submit queue's application database; give --host-dsn=%s if its tables are in mend's own database (--dsn)", envName("host-dsn"), hostDSNSame)
		case hostDSNSame:
			c.HostDSN = c.DSN
		default:
			if _, err := checkDSN("--host-dsn", c.HostDSN); err != nil {
				return err
			}
		}
		if c.QueueDSN == "" {
			c.QueueDSN = c.HostDSN
		} else if _, err := checkDSN("--queue-dsn", c.QueueDSN); err != nil {
			return err
		}
		if err := c.validate(); err != nil {
			return err
		}
		if err := c.Sub.resolve(f); err != nil {
			return err
		}
		if err := preflight(ctx, c, f.logger().With("component", "mend")); err != nil {
			return err
		}
		return serve(ctx, c, f.logger(), a.scrub)
	})
}

// clientConfig is the front door's view of a run's configuration.
func clientConfig(c runConfig, log *slog.Logger) client.Config {
	return client.Config{DSN: c.DSN, HostDSN: c.HostDSN, QueueDSN: c.QueueDSN, Holder: c.Holder, LeaseTTL: c.LeaseTTL,
		WakeTopic: c.WakeTopic, WakeTopicUnjoined: c.WakeTopicUnjoined, SubscriptionGroup: c.Sub.Group,
		Interval: c.Interval, Concurrency: c.Concurrency, ClusterConcurrency: c.ClusterConcurrency, Retention: c.Retention,
		MaxAttempts: c.MaxAttempts, Grace: c.Grace, RetryBase: c.RetryBase, RetryMax: c.RetryMax, Logger: log, Subscription: subscription(c)}
}

// subscription is the front door's view of the subscription's flags, nil
// when run does not subscribe.
func subscription(c runConfig) *client.Subscription {
	if !c.Sub.On {
		return nil
	}
	return &client.Subscription{Group: c.Sub.Group, Interval: c.Sub.Interval, Settle: givenSettle(c.Sub), PageSize: c.Sub.PageSize,
		Mode: c.Sub.Mode, BinlogServerID: c.Sub.BinlogServerID, BinlogSource: c.Sub.BinlogSource, Once: c.Once}
}

// wire opens mend through the front door (client.Open; preflight ran the
// checks already, with the subscription's). Failed attempts are reported
// to failed (when set) as well as to m.
func wire(ctx context.Context, c runConfig, log *slog.Logger, m *metrics, failed *attemptLog) (*client.Client, error) {
	cfg := clientConfig(c, log)
	cfg.SkipChecks = true
	if m != nil {
		// The adapter reports the host rows it skips (dangling or
		// differently spelled membership rows, differently spelled
		// requests) to the log, and dangling ones to a metric too: the
		// host's own planner fails on them.
		cfg.Hooks = client.Hooks{Fence: m.fenceHooks(), Planner: m.plannerHooks(), Reconcile: m.reconcileHooks(), Subscribe: m.subscribeHooks(), OnDangling: m.onDangling,
			Binlog: m.binlogHooks()}
	}
	if failed != nil {
		cfg.Hooks.Planner.OnAttemptFailed = chainAttemptFailed(cfg.Hooks.Planner.OnAttemptFailed, failed.add)
	}
	if !c.Once {
		// A continuous run says what each pass did, as run --once does
		// (at debug level when a pass found nothing to do).
		clog := log.With("component", "mend")
		onPass := cfg.Hooks.Reconcile.OnPass
		cfg.Hooks.Reconcile.OnPass = func(ps reconcile.PassStats, d time.Duration) {
			if onPass != nil {
				onPass(ps, d)
			}
			logPass(clog, ps, d)
		}
	}
	cl, err := client.Open(ctx, cfg)
	if be := (*client.BinlogUnavailableError)(nil); errors.As(err, &be) {
		return nil, err
	}
	if ce := (*client.ConfigError)(nil); errors.As(err, &ce) {
		return nil, usagef("%v", err)
	}
	return cl, err
}

// serve runs the reconciler until ctx ends (or one pass, with Once).
func serve(ctx context.Context, c runConfig, log *slog.Logger, scrub *scrubber) (err error) {
	clog := log.With("component", "mend")
	var m *metrics
	if c.MetricsAddr != "" {
		m = newMetrics()
	}
	var failed *attemptLog
	if c.Once {
		failed = &attemptLog{}
	}
	svc, err := wire(ctx, c, log, m, failed)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, shutdownErr(err, svc.Close())) }()
	if m != nil {
		col := newSQLCollector(ctx, svc.Store(), clog)
		col.onQueue = m.touchQueue
		m.reg.MustRegister(col)
		m.reg.MustRegister(newVerifyCollector(ctx, svc.Store(), clog)) // issue 46: the last mend verify run
		m.reg.MustRegister(newBinlogCollector(ctx, svc.Store(), clog)) // issue 55: whether anyone reads each binlog source
		hostPools, err := openHostPools(ctx, c)
		defer func() {
			for _, p := range hostPools {
				_ = p.db.Close()
			}
		}()
		if err != nil {
			return err
		}
		ready := readiness(svc.Store().SQL(), hostPools...)
		m.reg.MustRegister(newReadyCollector(ctx, ready))
		ms, err := startMetrics(c.MetricsAddr, newHTTPHandler(m, ready, scrub))
		if err != nil {
			return err
		}
		clog.Info("serving metrics", "addr", ms.Addr(), "paths", "/metrics /healthz /readyz")
		defer func() { err = errors.Join(err, ms.stop()) }()
	}
	warnSameHolder(ctx, svc.Store(), c.Holder, clog)
	defer startSchemaWatch(ctx, svc.Store().SQL(), c.Interval, clog)() // schemarange.go
	clog.Info("mend run starting", "holder", c.Holder, "once", c.Once, "interval", c.Interval,
		"lease_ttl", c.LeaseTTL, "concurrency", c.Concurrency, "cluster_concurrency", c.ClusterConcurrency, "db", redactDSN(c.DSN))

	if mode, _ := svc.SubscribeMode(); mode != "" && m != nil {
		m.binlogMetrics().setMode(mode, svc.BinlogReader())
	}
	if mode, why := svc.SubscribeMode(); mode != "" {
		clog.Info("subscribe mode: "+mode, "mode", mode, "why", why, "queue_db", redactDSN(c.QueueDSN))
	}
	if c.Sub.On && svc.Subscriber() != nil {
		clog.Info("subscribing to the host's dead-letter topics", "group", c.Sub.Group,
			"interval", c.Sub.Interval.String(), "settle", c.Sub.Settle.String(), "queue_db", redactDSN(c.QueueDSN))
	}
	if c.Once {
		// Binlog mode reads the log to its end (never joining the
		// consumer group); a failed read still lets the reconciler drain
		// what is recorded, and fails the run after it.
		intakeErr := catchUpBinlog(ctx, svc, clog)
		if err := drainSubscription(ctx, svc.Subscriber(), clog); err != nil {
			return err
		}
		ps, err := svc.Reconciler().Drain(ctx)
		if ctx.Err() != nil {
			// Cron must not read an interrupted pass as a good one.
			clog.Info("interrupted; leases released")
			return errors.Join(errors.New("interrupted (SIGINT or SIGTERM) before the pass finished; leases released"), err)
		}
		if err != nil {
			return errors.Join(intakeErr, err)
		}
		if intakeErr != nil {
			logPass(clog, ps, -1)
			return intakeErr
		}
		logPass(clog, ps, -1)
		// For cron a pass is a success only if nothing it tried failed: a
		// failed attempt is rescheduled, but someone should look.
		if err := failed.err(); err != nil {
			return err
		}
		if ps.Failed > 0 {
			return fmt.Errorf("%d queue(s) could not be repaired this pass; see the log above", ps.Failed)
		}
		return nil
	}
	stopStuck, err := startStuckScan(ctx, c, svc, log, m)
	if err != nil {
		return err
	}
	defer stopStuck()
	defer startVerifyEvery(ctx, c, svc.Store(), log)()
	if err := svc.Start(ctx); err != nil { // the subscription and the reconciler
		return err
	}
	<-ctx.Done()
	clog.Info("signal received: stopping (finishing or abandoning in-flight work, releasing leases)")
	svc.Stop()
	clog.Info("stopped cleanly")
	return nil
}

// catchUpBinlog is run --once's intake in binlog mode (nothing in any
// other): the binary log read from the saved position to its end under the
// reader's lease (client.Client.CatchUpBinlog). While another replica holds
// that lease, intake is its job: that is said, and is no failure.
func catchUpBinlog(ctx context.Context, svc *client.Client, log *slog.Logger) error {
	r := svc.BinlogReader()
	if r == nil {
		return nil
	}
	lease := r.Status().Position.Name
	res, err := svc.CatchUpBinlog(ctx)
	switch {
	case errors.Is(err, mend.ErrLeaseHeld):
		log.Info("another replica reads the binary log (it holds the reader's lease): intake is left to it; this run only drains the reconciler",
			"lease", lease)
		return nil
	case err != nil:
		return fmt.Errorf("binlog mode: reading the binary log to its end (%s): %w", lease, err)
	}
	attrs := []any{"lease", lease, "from", doctor.DescribePosition(res.From), "to", doctor.DescribePosition(res.To),
		"recorded", res.Recorded, "parked", res.Parked}
	if res.Reset != "" {
		attrs = append(attrs, "reset", res.Reset)
	}
	log.Info("binlog caught up: the binary log read to its end", attrs...)
	return nil
}

// warnSameHolder warns when a live lease already carries this process's
// holder name: this process has taken none yet, so another process uses the
// same --holder, and the two would renew and write under each other's terms.
func warnSameHolder(ctx context.Context, store *storage.DB, holder string, log *slog.Logger) {
	leases, err := store.LeaseList(ctx)
	if err != nil {
		return // the pass will report a database problem
	}
	var queues []string
	for _, l := range leases {
		// The subscription's slot leases carry "<holder>/subscribe" and
		// are held for as long as a replica subscribes, so they catch a
		// twin that holds no queue right now.
		if l.Live() && (l.Term.Holder == holder || l.Term.Holder == holder+"/subscribe") {
			queues = append(queues, l.Term.Queue)
		}
	}
	if len(queues) > 0 {
		log.Warn("another process holds live leases under this --holder (or this holder's previous process, if it just restarted): give every replica its own (the default is unique per process)",
			"holder", holder, "queues", queues)
	}
}

// logPass logs what a pass did; d < 0: not measured.
func logPass(log *slog.Logger, ps reconcile.PassStats, d time.Duration) {
	r := ps.Records
	level := slog.LevelInfo
	if ps.Queues == 0 && ps.Pruned == 0 && d >= 0 {
		level = slog.LevelDebug
	}
	attrs := []any{"queues", ps.Queues, "ran", ps.Ran, "held_elsewhere", ps.Held, "failed", ps.Failed,
		"settled", r.Settled, "woken", r.Woken, "wake_failed", r.WakeFailed,
		// done counts every record that became done this pass: woken, or
		// with nothing to wake (the planner counts those apart; the
		// summary once said done=0 after three records finished).
		"done", r.Done + r.Woken, "done_without_wake", r.Done,
		"waiting", r.Waiting, "parked", r.Parked, "attempts_failed", r.Failed, "pruned", ps.Pruned}
	if ps.Replicas > 0 {
		attrs = append(attrs, "share", ps.Concurrency, "working_replicas", ps.Replicas)
	}
	if d >= 0 {
		attrs = append(attrs, "took", d.Round(time.Millisecond))
	}
	log.Log(context.Background(), level, "pass done", attrs...)
}

// attemptLog collects the attempts that failed during one pass, so that
// run --once can say which records failed and exit 1.
type attemptLog struct {
	mu     sync.Mutex
	failed []string
}

// maxNamed bounds how many failed records run --once names in its error.
const maxNamed = 5

func (l *attemptLog) add(queue string, id mend.RecordID, what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed = append(l.failed, fmt.Sprintf("record %s (queue %q): %s: %v", id, queue, what, err))
}

// err is nil when no attempt failed, else one line naming the records.
func (l *attemptLog) err() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failed) == 0 {
		return nil
	}
	named := l.failed[:min(len(l.failed), maxNamed)]
	more := ""
	if n := len(l.failed) - len(named); n > 0 {
		more = fmt.Sprintf("; and %d more (see the log)", n)
	}
	return fmt.Errorf("%d repair attempt(s) failed this pass and are retried later: %s%s", len(l.failed), strings.Join(named, "; "), more)
}

func chainAttemptFailed(fns ...func(string, mend.RecordID, string, error)) func(string, mend.RecordID, string, error) {
	return func(queue string, id mend.RecordID, what string, err error) {
		for _, fn := range fns {
			if fn != nil {
				fn(queue, id, what, err)
			}
		}
	}
}

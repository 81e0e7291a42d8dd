package main

// mend as a consumer group of the host's *_dlq topics (package subscribe):
// its flags on mend run, the mend subscribe command (lag, --remove), the
// lag section of mend status and the checks of mend doctor.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/storage"
	"github.com/mendq/mend/subscribe"
)

// subscribeConfig is the subscription's part of mend run's configuration.
type subscribeConfig struct {
	// On: subscribe. The default is on exactly when --queue-dsn is given
	// (flag or MEND_QUEUE_DSN): pointing mend at the queue database means
	// its dead letters should be recorded, and the alternative, a cron'd
	// import, loses those the queue's GC removes first. --subscribe=false
	// turns it off (a host that links dlq.Intake into its own DLQ
	// consumers); --subscribe turns it on with the defaulted queue DSN.
	On       bool
	Group    string
	Interval time.Duration
	Settle   time.Duration
	PageSize int
	// SettleGiven: --subscribe-settle was given; otherwise the window is
	// subscribe.SettleFor the queue database's waits (two lock waits and a semi-sync commit).
	SettleGiven bool
	// Mode is --subscribe-mode: doctor.ModeAuto (binlog where every
	// prerequisite holds), ModeBinlog or ModeOffsets; "" reads as auto.
	Mode string
	// BinlogServerID (0: derived from --holder) and BinlogSource ("":
	// the queue database's schema name) are binlog mode's.
	BinlogServerID uint32
	BinlogSource   string
}

// addSubscribeFlags defines the subscription's flags on mend run.
func addSubscribeFlags(f *flags, c *subscribeConfig) {
	f.BoolVar(&c.On, "subscribe", false, "record dead letters by joining the *_dlq topics as consumer group --group\n(default: on when --queue-dsn is given; --subscribe=false when the host links the intake in)")
	f.StringVar(&c.Group, "group", subscribe.GroupDefault, "the subscription's consumer group in the host's queue_offsets")
	f.DurationVar(&c.Interval, "subscribe-interval", subscribe.PollIntervalDefault, "time between the subscription's passes: a new dead letter is recorded within it")
	f.DurationVar(&c.Settle, "subscribe-settle", subscribe.SettleDefault, "how old an offset must be before the group's watermark passes it\n(longer than any transaction inserting into queue_messages; by default two of the queue database's\ninnodb_lock_wait_timeout plus its semi-sync commit timeout, plus 10s, at least a minute)")
	f.IntVar(&c.PageSize, "subscribe-page-size", subscribe.PageSizeDefault, "rows the subscription reads per query")
	addSubscribeModeFlags(f, c)
}

// addSubscribeModeFlags defines --subscribe-mode and binlog mode's flags
// (mend run, mend doctor).
func addSubscribeModeFlags(f *flags, c *subscribeConfig) {
	f.StringVar(&c.Mode, "subscribe-mode", doctor.ModeAuto, "how the subscription learns of dead letters: binlog (read the queue database server's binary log: no consumer group,\n"+
		"nothing held back; needs log_bin, ROW, FULL images, REPLICATION SLAVE and CLIENT), offsets (join the *_dlq topics as --group),\n"+
		"or auto (binlog where all its prerequisites hold, else offsets, but never offsets once the binary log has been read: a saved\n"+
		"position refuses the start until binlog mode can run; run logs which and why). With run --once, binlog reads the log from the\n"+
		"saved position to its end (auto: only where a position is saved, else offsets) and leaves intake to a replica that holds the reader's lease")
	f.Uint32Var(&c.BinlogServerID, "binlog-server-id", 0, "the server_id binlog mode's reader registers with, unique among the host's servers and replicas (0: derived from --holder)")
	f.StringVar(&c.BinlogSource, "binlog-source", "", "names binlog mode's saved position and lease; keep it across a failover of the host's primary (default: the queue database's schema name)")
}

// checkMode checks --subscribe-mode and binlog mode's flags.
func (c *subscribeConfig) checkMode() error {
	if err := doctor.ValidateMode(c.Mode); err != nil {
		return usagef("--subscribe-mode %v", err)
	}
	if c.BinlogSource != "" {
		if err := mend.ValidateIdentity("queue", binlog.LeaseName(c.BinlogSource), true); err != nil {
			return usagef("--binlog-source: %v", err)
		}
	}
	return nil
}

// resolve decides whether run subscribes (see On) and checks the values.
func (c *subscribeConfig) resolve(f *flags) error {
	if !f.given("subscribe") {
		c.On = f.given("queue-dsn")
	}
	c.SettleGiven = f.given("subscribe-settle")
	if !c.On {
		return nil
	}
	if err := c.checkMode(); err != nil {
		return err
	}
	switch {
	case c.Interval < 10*time.Millisecond:
		return usagef("--subscribe-interval must be at least 10ms, got %s", c.Interval)
	case c.Settle < time.Second:
		return usagef("--subscribe-settle must be at least 1s, got %s", c.Settle)
	case c.PageSize < 1 || c.PageSize > subscribe.PageSizeLimit:
		return usagef("--subscribe-page-size must be between 1 and %d, got %d", subscribe.PageSizeLimit, c.PageSize)
	}
	if err := mend.ValidateIdentity("group", c.Group, true); err != nil {
		return usagef("--group: %v", err)
	}
	return nil
}

// subscribeMetrics are the subscription's Prometheus metrics.
type subscribeMetrics struct {
	rows         *prometheus.CounterVec
	unrecordable *prometheus.CounterVec
	lagRows      *prometheus.GaugeVec
	lagSeconds   *prometheus.GaugeVec
	passes       prometheus.Histogram
	failing      prometheus.Gauge
	failures     *prometheus.CounterVec
	failingRow   *prometheus.GaugeVec
	openReads    *prometheus.CounterVec
	openLapsed   prometheus.Gauge
}

func newSubscribeMetrics(reg *prometheus.Registry) *subscribeMetrics {
	sm := &subscribeMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_subscribe_rows_total",
			Help: "Dead-letter rows the subscription read, by result: recorded, already (recorded before), unrecordable (parked stand-in), dropped (matched only through the collation)."},
			[]string{"result"}),
		unrecordable: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_subscribe_unrecordable_total",
			Help: "Rows the subscription could not record as themselves and passed after parking a stand-in naming the offset, by topic."}, []string{"topic"}),
		lagRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mend_subscribe_lag_rows",
			Help: "Rows above the group's watermarks, by DLQ topic: not recorded yet or within the settle window. The host's GC keeps them."}, []string{"topic"}),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mend_subscribe_lag_seconds",
			Help: "Age (by failed_at) of the oldest row above the group's watermarks, by DLQ topic; 0 when there is none."}, []string{"topic"}),
		passes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mend_subscribe_pass_seconds",
			Help: "Duration of the subscription's passes.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mend_subscribe_failing_partitions",
			Help: "Partitions whose recording is failing and waits out a backoff: each holds its watermark, and with it the host's GC of that partition, until it records or parks the row."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_subscribe_record_failures_total",
			Help: "Times recording a partition failed (the row is retried with backoff and parked after the bound), by topic."}, []string{"topic"}),
		failingRow: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mend_subscribe_failing_row_attempts",
			Help: "Per partition whose recording is failing now: how many times in a row its row failed (it is parked as a stand-in at --subscribe's park bound, 10); absent once it records. mend status and mend subscribe name the row, mend run's log the error."},
			[]string{"topic", "partition"}),
		openReads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mend_subscribe_open_reads_total",
			Help: "The passes' reads of the queue database's open transactions, by result: usable; stale (innodb_trx's cache predates the read: other readers keep it from refreshing); hidden (no PROCESS); failed."},
			[]string{"result"}),
		openLapsed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mend_subscribe_open_view_lapsed",
			Help: "1 while no read of the open transactions has been usable for longer than the settle window: the watermarks wait for the window alone, as without PROCESS, until one is."}),
	}
	reg.MustRegister(sm.rows, sm.unrecordable, sm.lagRows, sm.lagSeconds, sm.passes, sm.failing, sm.failures, sm.failingRow, sm.openReads, sm.openLapsed)
	// Every counter exists at 0 from the start, as the docs say of all of
	// them, so rate() and absent() work before the first event.
	for _, r := range []string{"recorded", "already", "unrecordable", "dropped"} {
		sm.rows.WithLabelValues(r)
	}
	for _, r := range []string{subscribe.OpenUsable, subscribe.OpenStale, subscribe.OpenHidden, subscribe.OpenFailed} {
		sm.openReads.WithLabelValues(r)
	}
	for _, t := range dlqTopics() {
		sm.unrecordable.WithLabelValues(t)
		sm.failures.WithLabelValues(t)
	}
	return sm
}

// subscribeHooks binds the subscription's hooks to its metrics.
func (m *metrics) subscribeHooks() subscribe.Hooks {
	m.subOnce.Do(func() { m.sub = newSubscribeMetrics(m.reg) })
	sm := m.sub
	return subscribe.Hooks{
		OnPass: func(st subscribe.PassStats) {
			sm.rows.WithLabelValues("recorded").Add(float64(st.Recorded))
			sm.rows.WithLabelValues("already").Add(float64(st.Already))
			sm.rows.WithLabelValues("unrecordable").Add(float64(st.Unrecordable))
			sm.rows.WithLabelValues("dropped").Add(float64(st.Dropped))
			now := time.Now()
			for _, l := range st.Lag {
				sm.lagRows.WithLabelValues(l.Topic).Set(float64(l.Rows))
				sm.lagSeconds.WithLabelValues(l.Topic).Set(l.Age(now).Seconds())
			}
			sm.passes.Observe(st.Duration.Seconds())
			if st.OpenRead != "" {
				sm.openReads.WithLabelValues(st.OpenRead).Inc()
			}
			lapsed := 0.0
			if st.OpenLapsed {
				lapsed = 1
			}
			sm.openLapsed.Set(lapsed)
			sm.failing.Set(float64(st.Failing))
			sm.failingRow.Reset()
			for _, f := range st.FailingRows {
				// A label value that is not UTF-8 is refused: that partition
				// shows in the count and the log only.
				if g, err := sm.failingRow.GetMetricWithLabelValues(f.Topic, f.Partition); err == nil {
					g.Set(float64(f.Attempts))
				}
			}
		},
		OnFailed: func(topic, _ string, _ uint64, _ int, _ error) {
			sm.failures.WithLabelValues(topic).Inc()
		},
		OnUnrecordable: func(topic, _ string, _ uint64, _ error) {
			sm.unrecordable.WithLabelValues(topic).Inc()
		},
	}
}

// subscriptionLag reads a group's lag from the host's queue database.
func subscriptionLag(ctx context.Context, queueDSN, group string) ([]subscribe.TopicLag, error) {
	db, err := subscribe.Open(ctx, queueDSN)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return subscribe.Lag(ctx, db, group)
}

// subscriptionLagHeld reads a group's lag from the host's queue database,
// and the partitions held longest.
func subscriptionLagHeld(ctx context.Context, queueDSN, group string, now time.Time) ([]subscribe.TopicLag, []subscribe.HeldRow, error) {
	db, err := subscribe.Open(ctx, queueDSN)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	lag, err := subscribe.Lag(ctx, db, group)
	if err != nil {
		return nil, nil, err
	}
	held, err := subscribe.Held(ctx, db, group, subscribeHeldShow, now, subscribeHeldLimit)
	return lag, held, err
}

// lagJSON is a topic's lag in --json output.
type lagJSON struct {
	Topic      string  `json:"topic"`
	Partitions int     `json:"partitions"`
	Rows       int64   `json:"rows"`
	AgeSeconds float64 `json:"age_seconds"`
}

func toLagJSON(lag []subscribe.TopicLag, now time.Time) []lagJSON {
	out := make([]lagJSON, 0, len(lag))
	for _, l := range lag {
		out = append(out, lagJSON{Topic: l.Topic, Partitions: l.Partitions, Rows: l.Rows, AgeSeconds: l.Age(now).Seconds()})
	}
	return out
}

// printLag prints a group's lag per topic, and the partitions held
// longest with the row each waits on.
func printLag(w io.Writer, group string, lag []subscribe.TopicLag, held []subscribe.HeldRow, now time.Time) error {
	if len(lag) == 0 {
		_, err := fmt.Fprintf(w, "subscription (offsets mode): group %q has joined no partition of the host's queue database\n", group)
		return err
	}
	fmt.Fprintf(w, "subscription (offsets mode): group %q (rows above its watermarks, which the host's GC keeps)\n", group)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TOPIC\tPARTITIONS\tROWS BEHIND\tOLDEST")
	for _, l := range lag {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\n", l.Topic, l.Partitions, l.Rows, fmtAge(l.Age(now)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(held) == 0 {
		return nil
	}
	fmt.Fprintf(w, "partitions held longer than %s, each by the row its watermark waits on (a failing row: mend run's log and\n"+
		"mend_subscribe_failing_row_attempts say why; it is parked as a stand-in after 10 attempts, about five minutes):\n", fmtAge(subscribeHeldShow))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TOPIC/PARTITION\tWATERMARK\tOFFSET\tWAITING\tMESSAGE ID\tHOST'S LAST ERROR")
	for _, h := range held {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\t%s\n", escapeShown(h.Topic+"/"+h.Partition, 80), h.Watermark, h.Offset,
			fmtAge(now.Sub(h.FailedAt)), escapeShown(h.ID, 60), escapeShown(h.LastError, 120))
	}
	return tw.Flush()
}

// subscribeHeldShow is how long a partition's watermark must have waited
// on a row before status and subscribe name it: past the default settle
// window and a few backoffs.
const subscribeHeldShow = 5 * time.Minute

// subscribeHeldLimit bounds the held partitions status and subscribe name.
const subscribeHeldLimit = 20

// escapeShown quotes text that comes from the host's rows (their IDs and
// errors may quote the payload) so that no byte of it reaches a terminal
// as itself, clipped to about n bytes.
func escapeShown(s string, n int) string {
	if len(s) > n {
		s = clipLine(s, n)
	}
	return strconv.Quote(s)
}

// heldJSON is a held partition in --json output.
type heldJSON struct {
	Topic      string  `json:"topic"`
	Partition  string  `json:"partition"`
	Watermark  uint64  `json:"watermark"`
	Offset     uint64  `json:"offset"`
	ID         string  `json:"message_id"`
	AgeSeconds float64 `json:"waiting_seconds"`
	LastError  string  `json:"host_last_error"`
}

func toHeldJSON(held []subscribe.HeldRow, now time.Time) []heldJSON {
	out := make([]heldJSON, 0, len(held))
	for _, h := range held {
		out = append(out, heldJSON{Topic: h.Topic, Partition: h.Partition, Watermark: h.Watermark, Offset: h.Offset, ID: h.ID,
			AgeSeconds: now.Sub(h.FailedAt).Seconds(), LastError: h.LastError})
	}
	return out
}

// refuseLiveSubscribers refuses --remove --yes while a mend run of group
// still holds one of the group's replica slot leases in mend's database
// (dsn; empty: not checked): a running replica rejoins every partition
// within a pass, so the removal would undo itself and hold GC back again.
func refuseLiveSubscribers(ctx context.Context, dsn, group string) error {
	if dsn == "" {
		return nil
	}
	if _, err := checkDSN("--dsn", dsn); err != nil {
		return err
	}
	return withStore(ctx, dsn, func(ctx context.Context, store *storage.DB) error {
		names := make([]string, subscribe.SlotsDefault)
		for j := range names {
			names[j] = subscribe.SlotName(group, j)
		}
		live, err := store.LeaseGetMany(ctx, names)
		if err != nil {
			return err
		}
		var holders []string
		for _, l := range live {
			if l.Live() {
				holders = append(holders, l.Term.Holder)
			}
		}
		if len(holders) > 0 {
			return fmt.Errorf("%d mend run replica(s) of group %q still subscribe (%s): stop them first (a running one joins again within a pass), then --remove --yes; nothing removed",
				len(holders), group, strings.Join(holders, ", "))
		}
		return nil
	})
}

// newSubscribeCmd is mend subscribe: the group's lag, or --remove.
func newSubscribeCmd(a *app) *cobra.Command {
	f := a.newCommand("subscribe", "show mend's consumer group on the host's *_dlq topics, or --remove it",
		"Show the consumer group mend run joins the host's *_dlq topics as: per topic, the rows above its watermarks\n"+
			"(dead letters not yet recorded, or within the settle window), which the host's GC keeps.\n\n"+
			"--remove --yes deregisters the group from every partition (the queue's own leave statement). A stopped mend that\n"+
			"stays registered holds the queue's garbage collection back on every *_dlq partition for good; remove the\n"+
			"group when you stop running mend for good. Stop every mend run first: a running one joins again.\n"+
			"After --remove the queue's GC deletes dead letters as soon as its own groups have acknowledged them,\n"+
			"including any mend never recorded. With --dsn (mend's database) --remove --yes first checks that no mend run of\n"+
			"the group still holds a replica slot there, and refuses while one does.", withDSN|withLog|withList)
	queueDSN := f.String("queue-dsn", "", "DSN of the host's queue database (queue_messages, queue_offsets) (required)")
	group := f.String("group", subscribe.GroupDefault, "the consumer group")
	remove := f.Bool("remove", false, "deregister the group from every partition (with --yes; without it, say what it would do)")
	yes := f.Bool("yes", false, "really --remove (command line only)")
	f.cmdLineOnly("yes")
	return f.run(func(ctx context.Context, args []string) error {
		if _, err := checkDSN("--queue-dsn", *queueDSN); err != nil {
			return err
		}
		if err := mend.ValidateIdentity("group", *group, true); err != nil {
			return usagef("--group: %v", err)
		}
		if *yes && !*remove {
			return usagef("--yes confirms --remove; nothing else needs it")
		}
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		db, err := subscribe.Open(ctx, *queueDSN)
		if err != nil {
			return err
		}
		defer db.Close()
		if *remove && *yes {
			if err := refuseLiveSubscribers(ctx, f.dsn, *group); err != nil {
				return err
			}
			n, err := subscribe.Remove(ctx, db, *group)
			if deniedError(err) {
				schema, grantee, _ := doctor.Account(ctx, db)
				return fmt.Errorf("this user may not delete the group's rows (%s): GRANT DELETE ON %s.queue_offsets TO %s (docs/operations.md grants it to a separate user, 'mend_leave')",
					oneLine(err.Error()), quoteIdent(schema), grantee)
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(a.stdout, map[string]any{"group": *group, "removed_partitions": n})
			}
			fmt.Fprintf(a.stdout, "mend subscribe: group %q left %d partition(s); the host's GC no longer waits for it\n", *group, n)
			return nil
		}
		lag, err := subscribe.Lag(ctx, db, *group)
		if err != nil {
			return err
		}
		now := time.Now()
		held, err := subscribe.Held(ctx, db, *group, subscribeHeldShow, now, subscribeHeldLimit)
		if err != nil {
			return err
		}
		if f.json {
			return writeJSON(a.stdout, map[string]any{"group": *group, "topics": toLagJSON(lag, now), "held": toHeldJSON(held, now), "removed": false})
		}
		if err := printLag(a.stdout, *group, lag, held, now); err != nil {
			return err
		}
		if *remove {
			var rows int64
			parts := 0
			for _, l := range lag {
				rows, parts = rows+l.Rows, parts+l.Partitions
			}
			fmt.Fprintf(a.stdout, "mend subscribe: --remove would leave %d partition(s); the host's GC would then delete dead letters its own groups acknowledged, including %d row(s) above this group's watermarks. Stop every mend run of the group first, then add --yes.\n", parts, rows)
		}
		return nil
	})
}

// drain is run --once's subscription: record every dead letter visible
// now and release the group's watermarks past them (this waits out the
// settle window when anything was read), ending within the bound it
// states at the start (subscribe.Subscriber.DrainBound) even beside a
// transaction held open on the queue database: then it says which
// partitions stay held and by which transaction, and the next run
// continues from there (exit 0: nothing failed).
func drainSubscription(ctx context.Context, sub *subscribe.Subscriber, log *slog.Logger) error {
	if sub == nil {
		return nil
	}
	log.Info("subscription draining", "ends_within", sub.DrainBound().String())
	st, err := sub.Drain(ctx)
	if err != nil {
		return fmt.Errorf("subscription: %w", err)
	}
	log.Info("subscription drained", "read", st.Read, "recorded", st.Recorded, "already", st.Already,
		"unrecordable", st.Unrecordable, "dropped", st.Dropped, "joined", st.Joined, "advanced", st.Advanced)
	for _, u := range st.Unreleased {
		attrs := []any{"topic", u.Topic, "partition", u.Partition, "watermark", u.Watermark, "recorded_to", u.Recorded}
		if st.HeldBy.Session != 0 {
			attrs = append(attrs, "held_by_session", st.HeldBy.Session, "transaction_began", st.HeldBy.Began.Format(time.RFC3339))
		}
		log.Warn("the partition's watermark stays: its rows are recorded, but not yet released (a transaction open on the queue database, or the settle window); the next run continues", attrs...)
	}
	return nil
}

// statusLag is mend status's subscription section.
type statusLag struct {
	queueDSN, group string
}

func addStatusLagFlags(f *flags) *statusLag {
	s := &statusLag{}
	f.StringVar(&s.queueDSN, "queue-dsn", "", "DSN of the host's queue database: also show the subscription's lag per dead-letter topic")
	f.StringVar(&s.group, "group", subscribe.GroupDefault, "the subscription's consumer group (with --queue-dsn)")
	return s
}

// print prints the queues (printQueues, or queues as JSON) and the
// subscription: binlog mode's readers where one reads (readers), else the
// offset mode's lag.
func (s *statusLag) print(ctx context.Context, a *app, f *flags, queues any, printQueues func() error, readers []binlogReaderView) error {
	if _, err := checkDSN("--queue-dsn", s.queueDSN); err != nil {
		return err
	}
	if err := mend.ValidateIdentity("group", s.group, true); err != nil {
		return usagef("--group: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if slices.ContainsFunc(readers, func(r binlogReaderView) bool { return r.Role == "reading" }) {
		// Binlog mode joins no group, but rows an earlier offsets mode (or
		// a run --once) left hold the host's GC back until removed.
		left, err := groupRowsHeld(ctx, s.queueDSN, s.group)
		if err != nil {
			return err
		}
		if f.json {
			return writeJSON(a.stdout, map[string]any{"queues": queues, "subscription": map[string]any{"mode": doctor.ModeBinlog, "binlog": readers,
				"group": s.group, "group_rows": toGroupRowsJSON(left)}})
		}
		if err := printQueues(); err != nil {
			return err
		}
		printBinlogReaders(a.stdout, readers)
		printGroupRowsHeld(a.stdout, s.group, left)
		return nil
	}
	now := time.Now()
	lag, held, err := subscriptionLagHeld(ctx, s.queueDSN, s.group, now)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(a.stdout, map[string]any{"queues": queues, "subscription": map[string]any{"mode": doctor.ModeOffsets, "group": s.group, "topics": toLagJSON(lag, now), "held": toHeldJSON(held, now), "binlog": readers}})
	}
	if err := printQueues(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	if err := printLag(a.stdout, s.group, lag, held, now); err != nil {
		return err
	}
	printBinlogReaders(a.stdout, readers) // a binlog reader's position, kept while none reads
	return nil
}

// groupRowsHeld reads the offset mode's group's rows in the host's
// queue_offsets, each with its watermark and the rows above it the host's
// GC keeps (subscribe.GroupPartitions): in binlog mode they are left over
// and hold the GC back until removed. mend status shows them (and the
// console may, through this function).
func groupRowsHeld(ctx context.Context, queueDSN, group string) ([]subscribe.GroupPartition, error) {
	db, err := subscribe.Open(ctx, queueDSN)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return subscribe.GroupPartitions(ctx, db, group, 0)
}

// groupRowJSON is one of groupRowsHeld's rows in --json output.
type groupRowJSON struct {
	Topic     string `json:"topic"`
	Partition string `json:"partition"`
	Watermark uint64 `json:"offset_acked"`
	Behind    int64  `json:"rows_held"`
}

func toGroupRowsJSON(rows []subscribe.GroupPartition) []groupRowJSON {
	out := make([]groupRowJSON, 0, len(rows))
	for _, r := range rows {
		out = append(out, groupRowJSON{Topic: r.Topic, Partition: r.Partition, Watermark: r.Watermark, Behind: r.Behind})
	}
	return out
}

// printGroupRowsHeld says, in binlog mode, that the offset mode's group
// still has rows in queue_offsets and what they hold back; nothing when it
// has none.
func printGroupRowsHeld(w io.Writer, group string, rows []subscribe.GroupPartition) {
	if len(rows) == 0 {
		return
	}
	var held int64
	for _, r := range rows {
		held += r.Behind
	}
	fmt.Fprintf(w, "\noffsets group %q still has %d row(s) in queue_offsets (binlog mode joins none; left by offsets mode or a run --once): "+
		"they hold the host's GC of %d dead-letter row(s) back. Remove them: mend subscribe --group %s --remove --yes, as a user with DELETE on queue_offsets\n",
		group, len(rows), held, group)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TOPIC/PARTITION\tOFFSET_ACKED\tROWS HELD")
	for i, r := range rows {
		if i == subscribeHeldLimit {
			fmt.Fprintf(tw, "  (and %d more)\t\t\n", len(rows)-i)
			break
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", escapeShown(r.Topic+"/"+r.Partition, 80), r.Watermark, r.Behind)
	}
	_ = tw.Flush()
}

// subscribeLagWarn is when doctor (and run's preflight) warn that the
// subscription's oldest unreleased dead letter is old.
const subscribeLagWarn = 10 * time.Minute

// doctorSubscribe is mend doctor's subscription options, mirroring run's.
type doctorSubscribe struct {
	subscribe bool
	group     string
	warnAge   time.Duration
	settle    time.Duration
	mode      subscribeConfig // --subscribe-mode, --binlog-server-id, --binlog-source
}

// params are the subscription checks' inputs for mend's database dsn and
// the queue database queueDSN.
func (d *doctorSubscribe) params(dsn, queueDSN string) (doctor.SubscriptionParams, error) {
	if err := d.mode.checkMode(); err != nil {
		return doctor.SubscriptionParams{}, err
	}
	return doctor.SubscriptionParams{QueueDSN: queueDSN, Group: d.group, WarnAge: d.warnAge, Settle: d.settle,
		Mode: d.mode.Mode, DSN: dsn, ServerID: cmp.Or(d.mode.BinlogServerID, client.BinlogServerID(fence.DefaultHolder())), Source: d.mode.BinlogSource}, nil
}

func addDoctorSubscribeFlags(f *flags) *doctorSubscribe {
	d := &doctorSubscribe{}
	addSubscribeModeFlags(f, &d.mode)
	f.BoolVar(&d.subscribe, "subscribe", false, "check the subscription as mend run would run it (default: on when --queue-dsn is given)")
	f.StringVar(&d.group, "group", subscribe.GroupDefault, "the subscription's consumer group")
	f.DurationVar(&d.warnAge, "lag-warn", subscribeLagWarn, "warn when the subscription's oldest unreleased dead letter is older than this")
	f.DurationVar(&d.settle, "subscribe-settle", 0, "the settle window mend run is given, checked against the queue database's waits (two innodb_lock_wait_timeout and the semi-sync commit timeout; default: follows them)")
	return d
}

// on decides, as mend run does, whether the subscription is checked.
func (d *doctorSubscribe) on(f *flags) bool {
	if f.given("subscribe") {
		return d.subscribe
	}
	return f.given("queue-dsn")
}

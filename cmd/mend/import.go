package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"strings"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/storage"
)

// importPageDefault is how many queue_messages rows mend import reads per
// query: enough to amortise the round trip, small enough that a table of
// millions is never held in memory.
const importPageDefault = 500

// importConfig is everything `mend import` needs, after flags and environment.
type importConfig struct {
	DSN, QueueDSN, HostDSN string
	Topic                  string // a DLQ topic with its suffix, or empty
	Queue                  string // the record queue to keep, or empty
	Since                  time.Duration
	PageSize               int
	Actor                  string
	Stuck                  stuckConfig // with StuckScan: the stuck-queue scan after the import (stuck.go)
	StuckScan              bool
}

// importCounts is what an import did.
type importCounts struct {
	read     int // dead-letter rows read (after --topic and --since)
	skipped  int // rows of another queue than --queue
	recorded int // new records, due for repair
	already  int // rows recorded before (by this command or a linked-in consumer)
	parked   int // new records parked: undecodable, or not mend's to repair
	refused  int // rows the intake refused (see the warnings)
}

func (c importCounts) summary() string {
	s := fmt.Sprintf("recorded %d / already recorded %d / parked undecodable %d (of %d dead letters read", c.recorded, c.already, c.parked, c.read)
	if c.skipped > 0 {
		s += fmt.Sprintf(", %d of other queues skipped", c.skipped)
	}
	if c.refused > 0 {
		s += fmt.Sprintf(", %d refused", c.refused)
	}
	return s + ")"
}

func newImportCmd(a *app) *cobra.Command {
	f := a.newCommand("import", "record every dead letter already in the host's queue database (adopting mend), idempotently",
		"Record every dead letter already in the host's queue database (rows of *_dlq topics in queue_messages),\n"+
			"in offset order, through the same intake as a linked-in DLQ consumer: adopting mend on a live system.\n"+
			"Idempotent: a row already recorded is left as it is, so running it again records nothing new.\n"+
			"Progress goes to stderr, the summary to stdout.", withDSN|withLog)
	var c importConfig
	addImportFlags(f, &c, true)
	return f.run(func(ctx context.Context, args []string) error { return c.runCmd(ctx, a, f, "mend import") })
}

// addImportFlags registers mend import's flags (mend adopt's too; stuckFlag:
// --stuck, which adopt always does).
func addImportFlags(f *flags, c *importConfig, stuckFlag bool) {
	f.StringVar(&c.QueueDSN, "queue-dsn", "", "DSN of the host's queue database (queue_messages) (required)")
	f.StringVar(&c.HostDSN, "host-dsn", "", "DSN of the host's application database, to find a buildsignal's batch in table build;\nwithout it buildsignal dead letters are recorded parked")
	f.StringVar(&c.Topic, "topic", "", "only this dead-letter topic, e.g. speculate_dlq (the _dlq suffix may be left out)")
	f.StringVar(&c.Queue, "queue", "", "only dead letters of this queue: the queue a record is filed under (the payload's queue,\nelse the partition key where it is the queue)")
	f.DurationVar(&c.Since, "since", 0, "only dead letters whose failed_at is within this long of now, e.g. 72h (0: all)")
	f.IntVar(&c.PageSize, "page-size", importPageDefault, "rows read per query")
	f.StringVar(&c.Actor, "actor", "import", "who records them, kept in the event log")
	if stuckFlag {
		f.BoolVar(&c.StuckScan, "stuck", false, "then find queues stuck without a dead letter (live batches, nothing in flight that will wake the host's planner)\nand record their wake-ups for mend run: two scans --stuck-bound apart (needs --host-dsn)")
	}
	addStuckFlags(f, &c.Stuck, false)
	f.completeValues("topic", dlqTopics()...)
	f.addTimeout(0)
	f.setDefault("log-level", "warn") // one intake line per row would drown the progress lines
}

// runCmd is mend import's (and mend adopt's) action: the dead letters, then
// with c.StuckScan the stuck-queue scan. name prefixes the summary lines.
func (c importConfig) runCmd(ctx context.Context, a *app, f *flags, name string) (err error) {
	if c.DSN, err = f.needDSN(); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	counts, err := runImportWith(ctx, a, f, c)
	fmt.Fprintf(a.stdout, "%s: %s\n", name, counts.summary())
	if err != nil {
		return err
	}
	if counts.refused > 0 {
		return fmt.Errorf("%d dead letter(s) were refused by the intake (see the lines above); they stay in the DLQ", counts.refused)
	}
	if !c.StuckScan {
		return nil
	}
	r, err := runStuckImport(ctx, a, f, c)
	fmt.Fprintf(a.stdout, "%s --stuck: %s\n", name, summarizeStuck(r))
	printStuckReport(a.stdout, r)
	return err
}

// check validates the flags and normalises --topic.
func (c *importConfig) check() error {
	if c.QueueDSN == "" {
		return usagef("--queue-dsn is required (or %s): the host's queue database holding queue_messages", envName("queue-dsn"))
	}
	if _, err := checkDSN("--queue-dsn", c.QueueDSN); err != nil {
		return err
	}
	if c.HostDSN != "" {
		if _, err := checkDSN("--host-dsn", c.HostDSN); err != nil {
			return err
		}
	}
	c.Topic = dlqTopic(c.Topic)
	if c.Topic != "" && !knownDLQTopic(c.Topic) {
		return usagef("--topic %q is none of the host's dead-letter topics (%s): a filter on it would read nothing", c.Topic, strings.Join(dlqTopics(), ", "))
	}
	if err := mend.ValidateIdentity("topic", c.Topic, false); err != nil {
		return usagef("--topic: %v", err)
	}
	if err := mend.ValidateIdentity("queue", c.Queue, false); err != nil {
		return usagef("--queue: %v", err)
	}
	if c.Since < 0 {
		return usagef("--since must not be negative, got %s", c.Since)
	}
	if c.PageSize < 1 || c.PageSize > host.DeadLetterPageLimit {
		return usagef("--page-size must be between 1 and %d, got %d", host.DeadLetterPageLimit, c.PageSize)
	}
	if c.Actor == "" || len(c.Actor) > 255 {
		return usagef("--actor must be 1 to 255 bytes")
	}
	if c.StuckScan {
		if c.HostDSN == "" {
			return usagef("--stuck needs --host-dsn (or %s): the scan reads the host's batches", envName("host-dsn"))
		}
		if err := c.Stuck.validate(); err != nil {
			return err
		}
	}
	return nil
}

// runImportWith opens the databases and records every matching dead letter,
// returning the counts so far even when it fails part way (a rerun picks up
// where it stopped, since recording is idempotent).
func runImportWith(ctx context.Context, a *app, f *flags, c importConfig) (counts importCounts, err error) {
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store, err := storage.Open(openCtx, c.DSN, storage.Options{})
	if err != nil {
		return counts, fmt.Errorf("open mend's database: %w", err)
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	letters, err := host.OpenDeadLetters(openCtx, c.QueueDSN)
	if err != nil {
		return counts, fmt.Errorf("open the host's queue database: %w", err)
	}
	defer func() { err = errors.Join(err, letters.Close()) }()
	cfg := dlq.Config{Actor: c.Actor, Logger: f.logger()}
	if c.HostDSN != "" {
		var builds *host.DB
		if builds, err = host.Open(openCtx, c.HostDSN, c.QueueDSN, host.Options{}); err != nil {
			return counts, fmt.Errorf("open the host's databases: %w", err)
		}
		defer func() { err = errors.Join(err, builds.Close()) }()
		cfg.Builds = builds
	} else {
		a.say("mend import: no --host-dsn: buildsignal dead letters will be recorded parked (their build's batch cannot be looked up)")
	}
	in, err := dlq.New(store, cfg)
	if err != nil {
		return counts, err
	}

	filter := host.DeadLetterFilter{Topic: c.Topic}
	if c.Since > 0 {
		filter.FailedSinceMS = uint64(max(time.Now().Add(-c.Since).UnixMilli(), 0))
	}
	var after uint64
	for {
		page, err := letters.Page(ctx, filter, after, c.PageSize)
		if err != nil {
			return counts, err
		}
		if err := importPage(ctx, a, in, c, page.Rows, &counts); err != nil {
			return counts, err
		}
		after = page.Next
		if len(page.Rows) > 0 {
			a.say("mend import: up to offset %d: %s", after, counts.summary())
		}
		if page.Done {
			return counts, nil
		}
	}
}

// importPage records a page of dead letters with one RecordMany (one
// transaction) and counts what happened. A row the intake refuses (it
// cannot be stored exactly) is reported and skipped; any other failure
// stops the import, before the page is counted.
func importPage(ctx context.Context, a *app, in *dlq.Intake, c importConfig, rows []dlq.Row, counts *importCounts) error {
	var ds []dlq.Delivery
	var kept []dlq.Row
	for _, row := range rows {
		counts.read++
		d := row.Delivery()
		if c.Queue != "" && dlq.RecordQueue(d) != c.Queue {
			counts.skipped++
			continue
		}
		ds = append(ds, d)
		kept = append(kept, row)
	}
	if len(ds) == 0 {
		return nil
	}
	results, err := in.RecordMany(ctx, ds)
	if err != nil {
		return fmt.Errorf("record offsets %d to %d: %w", kept[0].Offset, kept[len(kept)-1].Offset, err)
	}
	for i, res := range results {
		row := kept[i]
		switch {
		case errors.Is(res.Err, mend.ErrInvalid):
			counts.refused++
			a.say("mend import: refused offset %d (topic %q, partition %q, id %q): %s", row.Offset, row.Topic, row.PartitionKey, row.ID, oneLine(res.Err.Error()))
		case res.Err != nil:
			return fmt.Errorf("record offset %d (topic %q, id %q): %w", row.Offset, row.Topic, row.ID, res.Err)
		case !res.Created:
			counts.already++
		case res.Record.State == mend.StateParked:
			counts.parked++
		default:
			counts.recorded++
		}
	}
	return nil
}

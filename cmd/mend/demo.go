package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// The demo's scenario: domain.md's "bug that started this project", on
// uber/submitqueue's real tables and with its real ID shapes
// (<queue>/batch/<n> for batches, <queue>/<n> for requests).
const (
	demoQueue     = "monorepo/main"
	demoBatch1    = demoQueue + "/batch/1"
	demoBatch2    = demoQueue + "/batch/2"
	demoTopic     = "speculate"
	demoDLQTopic  = demoTopic + "_dlq"
	demoAttempts  = 5
	demoLastError = "speculate: build farm unreachable (5 attempts)"
	demoTimeout   = 2 * time.Minute
)

// demoRequests are the member requests of each batch, in batch.contains order.
var demoRequests = map[string][]string{
	demoBatch1: {demoQueue + "/1", demoQueue + "/2"},
	demoBatch2: {demoQueue + "/3"},
}

func newDemoCmd(a *app) *cobra.Command {
	f := a.newCommand("demo", "run the stuck-queue scenario on a throwaway server and print its timeline",
		"Build the stuck-queue scenario on a throwaway database, let mend repair it, and print the timeline.\n"+
			"Without --dsn it starts a throwaway server (a Docker container, else a local mariadbd/mysqld) and removes it afterwards;\n"+
			"with --dsn (or MEND_TEST_DSN) it creates and drops its own database on that server. Exit 0 only if the queue was repaired.", withDSN|withLog)
	// The library's own logs would drown the story; -log-level info shows them.
	f.setDefault("log-level", "error")
	// The demo creates and drops databases: it must never pick up the
	// MEND_DSN an operator exported for production (the README's own
	// export once sent it there). Only --dsn or MEND_TEST_DSN.
	f.cmdLineOnly("dsn")
	return f.run(func(ctx context.Context, args []string) (err error) {
		parent := ctx
		ctx, cancel := context.WithTimeout(ctx, demoTimeout)
		defer cancel()
		// A reader that goes away (mend demo | head -3) must stop the demo, not
		// kill it before it removes its server and database: with SIGPIPE
		// caught, a write to the closed pipe fails instead, and the output
		// cancels the run and swallows every later line.
		sigpipe := make(chan os.Signal, 1)
		signal.Notify(sigpipe, syscall.SIGPIPE)
		defer signal.Stop(sigpipe)
		out := &demoOutput{w: a.stdout, cancel: cancel}
		a = &app{stdout: out, stderr: a.stderr, getenv: a.getenv, scrub: a.scrub, logFormat: a.logFormat}
		defer func() {
			// Cleanup ran by now (the defers above this one run later, so
			// say it from the deferred errors only): name what stopped the
			// demo instead of the context errors it caused.
			switch {
			case out.closed():
				err = errors.New("the output was closed, so the demo stopped; its database and server were removed")
			case parent.Err() != nil:
				err = errors.New("interrupted; the demo's database and server were removed")
			}
		}()
		fmt.Fprintln(out, "mend demo: a quiet submit queue gets stuck, and mend repairs it")
		fmt.Fprintln(out)

		serverDSN := f.dsn
		if serverDSN == "" {
			serverDSN = a.getenv("MEND_TEST_DSN")
			if serverDSN != "" {
				a.scrub.addDSN(serverDSN)
			}
		}
		var where string
		if serverDSN != "" {
			cfg, err := mysql.ParseDSN(serverDSN)
			if err != nil {
				return usagef("--dsn cannot be parsed (%v); expected user:pass@tcp(host:port)/", err)
			}
			where = fmt.Sprintf("the server at %s (as %s)", cfg.Addr, cfg.User)
		} else {
			srv, err := startDemoServer(ctx, a)
			if err != nil {
				return err
			}
			defer stopDemoServer(a, srv)
			serverDSN = srv.RootDSN("")
			where = fmt.Sprintf("a throwaway %s", srv)
		}
		dbDSN, drop, err := createDemoDatabase(ctx, serverDSN)
		if err != nil {
			return err
		}
		// The drop runs after the run returns, so the deferred message above
		// (registered earlier) runs after it, once everything is removed.
		defer func() {
			if err := drop(); err != nil {
				fmt.Fprintf(a.stderr, "mend demo: %s\n", a.scrub.clean(err.Error()))
			}
		}()
		a.scrub.addDSN(dbDSN)
		d := &demo{out: out, log: f.logger(), start: time.Now()}
		return d.run(ctx, dbDSN, where)
	})
}

// createDemoDatabase creates a fresh database on the server and returns its
// DSN and a function that drops it.
func createDemoDatabase(ctx context.Context, serverDSN string) (string, func() error, error) {
	cfg, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return "", nil, usagef("--dsn cannot be parsed: %v", err)
	}
	cfg.DBName = ""
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return "", nil, err
	}
	admin := sql.OpenDB(connector)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "mend_demo_" + hex.EncodeToString(b[:])
	if err := storage.DatabaseCreateFresh(ctx, admin, name); err != nil {
		_ = admin.Close()
		return "", nil, fmt.Errorf("the demo database on %s: %w", cfg.Addr, err)
	}
	drop := func() error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return errors.Join(storage.DatabaseDrop(dctx, admin, name), admin.Close())
	}
	db := cfg.Clone()
	db.DBName = name
	return db.FormatDSN(), drop, nil
}

// demo runs the scenario and prints its timeline.
type demo struct {
	out   io.Writer
	log   *slog.Logger
	start time.Time

	store  *storage.DB
	host   *host.DB
	world  sqtest.World        // the submit queue's side: seeding, and reading as its consumers do
	waker  *sqtest.FaultyWaker // the host's Waker, with one publish refused
	rec    mend.Record
	seen   int64 // events already printed
	firstT time.Time

	mu    sync.Mutex
	terms []mend.Term // granted during the current pass
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

// run builds the stuck queue in the database dsn names (empty, or holding
// nothing of mend's or the host's), lets mend repair it and checks the
// result as the host's own consumers would see it.
func (d *demo) run(ctx context.Context, dsn, where string) (err error) {
	if err := migrations.Up(ctx, dsn); err != nil {
		return err
	}
	// The host's tables, shaped as uber/submitqueue creates them. Only the
	// demo and the tests create them; mend run never touches a host's schema.
	if err := sqtest.Apply(ctx, dsn); err != nil {
		return err
	}
	if d.store, err = storage.Open(ctx, dsn, storage.Options{}); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.store.Close()) }()
	// One database plays both of the host's: its application database
	// (batches, requests) and its queue database (messages).
	if d.host, err = host.Open(ctx, dsn, dsn, host.Options{Logger: d.log}); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.host.Close()) }()
	raw, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, raw.Close()) }()
	d.world = sqtest.World{App: raw, Queue: raw}
	d.waker = &sqtest.FaultyWaker{Next: d.host}
	version, _, err := migrations.Version(ctx, dsn)
	if err != nil {
		return err
	}

	d.say("Setup")
	d.say("  server    %s, in a throwaway database", where)
	d.say("  schemas   mend's (version %d) and uber/submitqueue's real tables (batch, queue_batch_state, request, queue_messages, ...)", version)
	for _, b := range []struct {
		id, state string
	}{{demoBatch1, string(mend.BatchSpeculating)}, {demoBatch2, string(mend.BatchCreated)}} {
		if err := d.world.SeedBatch(ctx, demoQueue, b.id, b.state, demoRequests[b.id]...); err != nil {
			return err
		}
		d.say("  batch     %s  %-11s version 1, contains %s", b.id, b.state, strings.Join(demoRequests[b.id], ", "))
	}
	d.say("            Queue %q is quiet: only a message on topic %q makes its planner run.", demoQueue, demoTopic)
	d.say("")

	d.say("What breaks")
	row, err := d.deadLetter(ctx)
	if err != nil {
		return err
	}
	d.say("  1. The speculate message for %s failed %d times; the queue's store moved it to %s:", demoBatch1, row.FailureCount, row.Topic)
	d.say("       offset %d  partition_key %q  id %q  payload %s", row.Offset, row.PartitionKey, row.ID, row.Payload)
	d.say("       failure_count %d  last_error %q  original_topic %q", row.FailureCount, row.LastError, row.OriginalTopic)
	d.say("       failure_detail %s", row.FailureDetail)
	d.waker.RefuseNext(1)
	d.say("  2. Injected fault: the next wake-up publish fails. The demo wraps the host adapter's Waker in")
	d.say("     sqtest.FaultyWaker and refuses one publish before it reaches queue_messages.")
	d.say("     Without mend: the DLQ handler fails %s, its retrigger publish fails, the redelivery sees", demoBatch1)
	d.say("     \"already failed, no progress\" and acknowledges. %s is stuck for good.", demoBatch2)
	d.say("")

	d.say("What mend records and does")
	delivery := deliveryFromRow(row)
	rec, created, err := d.record(ctx, delivery)
	if err != nil {
		return err
	}
	d.rec = rec
	d.say("  intake      recorded the dead letter as record %s, state %s (created: %v).", d.rec.ID, d.rec.State, created)
	d.say("              The DLQ row can be acknowledged now: the obligation lives in MySQL.")
	if err := d.printNewEvents(ctx); err != nil {
		return err
	}
	again, created, err := d.record(ctx, delivery)
	if err != nil {
		return err
	}
	d.say("  intake      the same dead letter redelivered: same record %s (created again: %v), nothing new.", again.ID, created)

	// Two replicas, as in production: each pass below is run by one of them.
	pl, err := planner.New(planner.Config{Store: d.store, Batches: d.host, Waker: d.waker, Actor: "planner",
		BackoffBase: 300 * time.Millisecond, BackoffMax: time.Second, Logger: d.log})
	if err != nil {
		return err
	}
	var recs []*reconcile.Reconciler
	for _, holder := range []string{"replica-a", "replica-b"} {
		fn, err := fence.New(d.store, fence.Config{Holder: holder, TTL: 10 * time.Second, Logger: d.log,
			Hooks: fence.Hooks{OnAcquired: d.onAcquired}})
		if err != nil {
			return err
		}
		rc, err := reconcile.New(reconcile.Config{Store: d.store, Fence: fn, Planner: pl, Interval: time.Second, Logger: d.log})
		if err != nil {
			return err
		}
		recs = append(recs, rc)
	}
	for pass := 1; pass <= 6; pass++ {
		if err := d.waitDue(ctx); err != nil {
			return err
		}
		if _, err := recs[(pass-1)%len(recs)].RunOnce(ctx); err != nil {
			return err
		}
		d.mu.Lock()
		terms := d.terms
		d.terms = nil
		d.mu.Unlock()
		for _, t := range terms {
			d.say("  reconciler  pass %d: %s took the queue's lease, epoch %d", pass, t.Holder, t.Epoch)
		}
		if err := d.printNewEvents(ctx); err != nil {
			return err
		}
		for _, t := range terms {
			d.say("              %s released the lease (epoch %d)", t.Holder, t.Epoch)
		}
		if d.rec, err = d.store.RecordGetByID(ctx, demoQueue, d.rec.ID); err != nil {
			return err
		}
		if d.rec.State == mend.StateDone || d.rec.State == mend.StateParked {
			break
		}
	}
	d.say("")
	return d.verify(ctx)
}

// deadLetter makes batch 1's speculate message a dead letter the way the
// submit queue does: dependency-analysis publishes it (ID = the batch ID,
// partition = the queue, the BatchID payload), and after the last failed
// delivery the store moves it to speculate_dlq, blaming the batch.
func (d *demo) deadLetter(ctx context.Context) (sqtest.Message, error) {
	payload, err := json.Marshal(sqtest.BatchID{ID: demoBatch1, Queue: demoQueue})
	if err != nil {
		return sqtest.Message{}, err
	}
	if err := d.world.Publish(ctx, demoTopic, demoQueue, demoBatch1, payload, nil); err != nil {
		return sqtest.Message{}, err
	}
	if err := d.world.MoveToDLQ(ctx, demoTopic, demoQueue, demoBatch1, sqtest.Failure{Count: demoAttempts,
		LastError: demoLastError, Subjects: []sqtest.Subject{{Type: "batch", ID: demoBatch1}}}); err != nil {
		return sqtest.Message{}, err
	}
	rows, err := d.world.Messages(ctx, demoDLQTopic, demoQueue)
	if err != nil {
		return sqtest.Message{}, err
	}
	if len(rows) != 1 {
		return sqtest.Message{}, fmt.Errorf("demo: want one row on %s, found %d", demoDLQTopic, len(rows))
	}
	return rows[0], nil
}

// deliveryFromRow is what a DLQ consumer of the submit queue hands the
// intake: the row of queue_messages on a *_dlq topic, its identity, payload
// and failure columns, converted by the one conversion mend import uses too.
func deliveryFromRow(row sqtest.Message) dlq.Delivery {
	return dlq.Row{Offset: row.Offset, Topic: row.Topic, PartitionKey: row.PartitionKey, ID: row.ID,
		Payload: row.Payload, Metadata: row.Metadata, FailedAtMS: row.FailedAt, FailureCount: row.FailureCount,
		LastError: row.LastError, OriginalTopic: row.OriginalTopic, FailureDetail: row.FailureDetail}.Delivery()
}

// record hands the delivery to the intake, as a linked-in DLQ consumer does.
func (d *demo) record(ctx context.Context, dl dlq.Delivery) (mend.Record, bool, error) {
	in, err := dlq.New(d.store, dlq.Config{Builds: d.host, Logger: d.log})
	if err != nil {
		return mend.Record{}, false, err
	}
	res, err := in.Record(ctx, dl)
	return res.Record, res.Created, err
}

func (d *demo) onAcquired(t mend.Term) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.terms = append(d.terms, t)
}

// waitDue polls until the record's next attempt is due by the database
// clock (the demo's backoff is a few hundred milliseconds).
func (d *demo) waitDue(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		due, err := d.store.RecordsDue(ctx, demoQueue, 1)
		if err != nil || len(due) > 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("record %s never became due again: %w", d.rec.ID, ctx.Err())
		case <-t.C:
		}
	}
}

// printNewEvents prints the record's events not printed yet.
func (d *demo) printNewEvents(ctx context.Context) error {
	evs, err := d.store.RecordHistory(ctx, demoQueue, d.rec.ID)
	if err != nil {
		return err
	}
	for _, e := range evs {
		if e.Seq <= d.seen {
			continue
		}
		d.seen = e.Seq
		if d.firstT.IsZero() {
			d.firstT = e.CreatedAt
		}
		var data map[string]any
		_ = json.Unmarshal(e.Data, &data)
		str := func(k string) string { s, _ := data[k].(string); return s }
		var what string
		switch e.Kind {
		case mend.EventCreated:
			what = fmt.Sprintf("recorded: batch %s should end %s", str("batch_id"), str("desired"))
		case mend.EventSettled:
			what = fmt.Sprintf("settled: %s is %s (%s)", str("batch_id"), str("outcome"), str("action"))
			var rs []string
			for _, id := range demoRequests[str("batch_id")] {
				if r, err := d.world.Request(ctx, demoQueue, id); err == nil {
					rs = append(rs, fmt.Sprintf("%s %s v%d", r.ID, r.State, r.Version))
				}
			}
			if len(rs) > 0 {
				what += "; requests: " + strings.Join(rs, ", ")
			}
			what += "; a wake-up is owed"
		case mend.EventWakeFailed:
			cause := clipLine(str("error"), 120)
			if strings.Contains(cause, sqtest.ErrInjected.Error()) {
				cause = "the demo's injected fault: " + cause
			}
			what = fmt.Sprintf("wake-up %s for %s FAILED (%s); will re-send under a new message ID", str("message_id"), str("batch_id"), cause)
		case mend.EventWoken:
			what = fmt.Sprintf("woke the queue: published %s for %s; record done", str("message_id"), str("batch_id"))
		case mend.EventParked:
			what = "parked for an operator: " + str("reason")
		default:
			what = compactJSON(e.Data)
		}
		d.say("    event %d  +%.3fs  %-12s epoch %d  %s", e.Seq, e.CreatedAt.Sub(d.firstT).Seconds(), e.Kind, e.Epoch, what)
	}
	return nil
}

// verify checks the outcome in the host's own tables, reading them as the
// host's consumers do, and prints it.
func (d *demo) verify(ctx context.Context) error {
	d.say("Result, read as the submit queue reads it")
	evs, err := d.store.RecordHistory(ctx, demoQueue, d.rec.ID)
	if err != nil {
		return err
	}
	var wokenID string
	var wokenEpoch int64
	for _, e := range evs {
		if e.Kind == mend.EventWoken {
			var data struct {
				MessageID string `json:"message_id"`
			}
			_ = json.Unmarshal(e.Data, &data)
			wokenID, wokenEpoch = data.MessageID, e.Epoch
		}
	}
	var problems []string
	b1, err := d.world.Batch(ctx, demoQueue, demoBatch1)
	if err != nil {
		return err
	}
	d.say("  batch     %s is %s at version %d", b1.ID, b1.State, b1.Version)
	if b1.State != string(mend.BatchFailed) {
		problems = append(problems, fmt.Sprintf("%s is %s, not failed", demoBatch1, b1.State))
	}
	for _, id := range demoRequests[demoBatch1] {
		r, err := d.world.Request(ctx, demoQueue, id)
		if err != nil {
			return err
		}
		// The gateway learns a request's status only from topic log:
		// decode it as its materializer would.
		logs, err := d.world.ConsumeLog(ctx, id)
		if err != nil {
			return fmt.Errorf("the gateway could not read the log of %s: %w", id, err)
		}
		rows, err := d.world.Messages(ctx, host.LogTopic, id)
		if err != nil || len(rows) != len(logs) {
			return errors.Join(fmt.Errorf("the log partition of %s changed while it was read", id), err)
		}
		d.say("  request   %s is %s at version %d; %d RequestLog message(s) on topic %q", r.ID, r.State, r.Version, len(logs), host.LogTopic)
		for i, l := range logs {
			meta, _ := json.Marshal(l.Metadata)
			d.say("              id %q: status %s, request_version %d, last_error %q", rows[i].ID, l.Status, l.RequestVersion, l.LastError)
			d.say("              metadata %s", meta)
		}
		if r.State != host.RequestError || len(logs) == 0 || logs[len(logs)-1].Status != host.RequestError {
			problems = append(problems, fmt.Sprintf("request %s is %s with %d log message(s)", id, r.State, len(logs)))
		}
	}
	// The real speculate consumer's rules, strictly: a metadata value that
	// is not a string, or a payload without {"id","queue"}, fails here.
	wakes, err := d.world.ConsumeSpeculate(ctx, demoQueue, true)
	if err != nil {
		problems = append(problems, "the speculate consumer refused the partition: "+err.Error())
	}
	var woke *sqtest.Wake
	for i, w := range wakes {
		if w.ID == wokenID && w.Batch.ID == demoBatch2 {
			woke = &wakes[i]
		}
	}
	if woke != nil {
		meta, _ := json.Marshal(woke.Meta)
		detail := "NULL"
		if woke.FailureDetail != nil {
			detail = string(woke.FailureDetail)
		}
		d.say("  wake-up   queue_messages offset %d, as the speculate consumer decodes it:", woke.Offset)
		d.say("              topic %q  partition_key %q  id %q", woke.Topic, woke.PartitionKey, woke.ID)
		d.say("              payload  %s  (names live batch %s of queue %s)", woke.Payload, woke.Batch.ID, woke.Batch.Queue)
		d.say("              metadata %s  (a string map, as the store reads it)", meta)
		d.say("              created_at %d ms, published_at %d ms, failed_at %d, failure_count %d, last_error %q, original_topic %q, failure_detail %s",
			woke.CreatedAt, woke.PublishedAt, woke.FailedAt, woke.FailureCount, woke.LastError, woke.OriginalTopic, detail)
	} else {
		problems = append(problems, fmt.Sprintf("no wake-up %q naming %s on topic %q", wokenID, demoBatch2, demoTopic))
	}
	d.say("  record    %s is %s after %d events", d.rec.ID, d.rec.State, len(evs))
	if d.rec.State != mend.StateDone {
		problems = append(problems, fmt.Sprintf("record %s is %s, not done", d.rec.ID, d.rec.State))
	}
	d.say("  on your own database: mend status, mend inspect --record <id>, and the views in docs/sql.md")
	d.say("")
	if len(problems) > 0 {
		return fmt.Errorf("FAILED: the queue was not repaired: %s", strings.Join(problems, "; "))
	}
	d.say("OK: %s was woken by message %q, sent under epoch %d after the first publish failed;", demoBatch2, wokenID, wokenEpoch)
	d.say("    the strict speculate consumer accepts it, and record %s is done. Repaired in %.2fs.", d.rec.ID, time.Since(d.start).Seconds())
	return nil
}

// demoOutput is the demo's stdout: after the first failed write (the
// reader went away) it cancels the demo and drops everything else.
type demoOutput struct {
	w      io.Writer
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
}

func (o *demoOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return len(p), nil
	}
	if _, err := o.w.Write(p); err != nil {
		o.err = err
		o.cancel()
	}
	return len(p), nil
}

func (o *demoOutput) closed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err != nil
}

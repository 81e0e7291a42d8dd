package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// The demo's scenario: domain.md's "bug that started this project".
const (
	demoQueue     = "monorepo/main"
	demoBatch1    = "batch-1"
	demoBatch2    = "batch-2"
	demoDLQTopic  = "speculate_dlq"
	demoMessageID = "speculate/batch-1/1"
	demoTimeout   = 2 * time.Minute
)

func runDemo(ctx context.Context, a *app, args []string) error {
	f := a.newFlags("demo", "", "Build the stuck-queue scenario on a throwaway database, let mend repair it, and print the timeline.\n"+
		"Without --dsn it starts a throwaway server (a Docker container, else a local mariadbd/mysqld) and removes it afterwards;\n"+
		"with --dsn (or MEND_TEST_DSN) it creates and drops its own database on that server. Exit 0 only if the queue was repaired.", false)
	// The library's own logs would drown the story; -log-level info shows them.
	f.setDefault("log-level", "error")
	if err := f.parseNoArgs(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	out := a.stdout
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
	defer func() {
		if err := drop(); err != nil {
			fmt.Fprintf(a.stderr, "mend demo: %s\n", a.scrub.clean(err.Error()))
		}
	}()
	a.scrub.addDSN(dbDSN)
	d := &demo{out: out, log: f.logger(), start: time.Now()}
	return d.run(ctx, dbDSN, where)
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
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		_ = admin.Close()
		return "", nil, fmt.Errorf("create the demo database on %s: %w", cfg.Addr, err)
	}
	drop := func() error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, err := admin.ExecContext(dctx, "DROP DATABASE IF EXISTS "+name)
		return errors.Join(err, admin.Close())
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
	rec    mend.Record
	seen   int64 // events already printed
	firstT time.Time

	mu    sync.Mutex
	terms []mend.Term // granted during the current pass
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) run(ctx context.Context, dsn, where string) (err error) {
	if err := migrations.Up(ctx, dsn); err != nil {
		return err
	}
	if err := host.Migrate(ctx, dsn, ""); err != nil {
		return err
	}
	if d.store, err = storage.Open(ctx, dsn, storage.Options{}); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.store.Close()) }()
	if d.host, err = host.Open(ctx, dsn, "", host.Options{}); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.host.Close()) }()
	version, _, err := migrations.Version(ctx, dsn)
	if err != nil {
		return err
	}

	d.say("Setup")
	d.say("  server    %s, in a throwaway database", where)
	d.say("  schemas   mend's (version %d) and the reference host's (batches, requests, messages)", version)
	if err := d.host.SeedBatch(ctx, demoQueue, demoBatch1, mend.BatchSpeculating, "req-101", "req-102"); err != nil {
		return err
	}
	if err := d.host.SeedBatch(ctx, demoQueue, demoBatch2, mend.BatchCreated, "req-201"); err != nil {
		return err
	}
	d.say("  queue     %q: %s speculating (req-101, req-102), %s created (req-201)", demoQueue, demoBatch1, demoBatch2)
	d.say("            The queue is quiet: only a message on topic \"speculate\" makes its planner run.")
	d.say("")

	d.say("What breaks")
	payload, err := json.Marshal(map[string]string{"id": demoBatch1, "queue": demoQueue}) // the host's BatchID
	if err != nil {
		return err
	}
	failedAt := time.Now().UTC()
	const lastErr = "speculate: build farm unreachable (5 attempts)"
	if _, err := d.host.Publish(ctx, host.Message{Topic: demoDLQTopic, Partition: demoQueue, ID: demoMessageID,
		Payload: payload, FailureCount: 5, LastError: lastErr, FailedAt: failedAt}); err != nil {
		return err
	}
	d.say("  1. The speculate message for %s failed 5 times and was dead-lettered to %s", demoBatch1, demoDLQTopic)
	d.say("     (message ID %q, last error %q).", demoMessageID, lastErr)
	if err := d.host.FailNextPublish(ctx, host.WakeTopicDefault, demoQueue); err != nil {
		return err
	}
	d.say("  2. The queue database will refuse the next publish to \"speculate\" (injected with host.FailNextPublish).")
	d.say("     Without mend: the DLQ handler fails %s, its wake-up publish fails, the redelivery sees", demoBatch1)
	d.say("     \"already failed, nothing to do\" and acknowledges. %s is stuck for good.", demoBatch2)
	d.say("")

	d.say("What mend records and does")
	in, err := dlq.New(d.store, dlq.Config{Logger: d.log})
	if err != nil {
		return err
	}
	delivery := dlq.Delivery{Source: mend.SourceID{Queue: demoQueue, Topic: demoDLQTopic, Partition: demoQueue, MessageID: demoMessageID},
		Payload: payload, FailureCount: 5, LastError: lastErr, FailedAt: failedAt}
	res, err := in.Record(ctx, delivery)
	if err != nil {
		return err
	}
	d.rec = res.Record
	d.say("  intake      recorded the dead letter as record %s, state %s.", d.rec.ID, d.rec.State)
	d.say("              The DLQ message can be acknowledged now: the obligation lives in MySQL.")
	if err := d.printNewEvents(ctx); err != nil {
		return err
	}
	again, err := in.Record(ctx, delivery)
	if err != nil {
		return err
	}
	d.say("  intake      the same dead letter redelivered: same record %s (created again: %v), nothing new.", again.Record.ID, again.Created)

	// Two replicas, as in production: each pass below is run by one of them.
	pl, err := planner.New(planner.Config{Store: d.store, Batches: d.host, Waker: d.host, Actor: "planner",
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
			if b, err := d.host.Requests(ctx, demoQueue, str("batch_id")); err == nil {
				var rs []string
				for _, r := range b {
					rs = append(rs, r.ID+" "+string(r.State))
				}
				what += "; requests: " + strings.Join(rs, ", ")
			}
			what += "; a wake-up is owed"
		case mend.EventWakeFailed:
			msg := str("error")
			if i := strings.Index(msg, "Error "); i >= 0 {
				msg = msg[i:] // the server's own words
			}
			what = fmt.Sprintf("wake-up %s for %s FAILED (%s); will re-send under a new message ID", str("message_id"), str("batch_id"), clipLine(msg, 120))
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

// verify checks the outcome in the host's own tables and prints the result.
func (d *demo) verify(ctx context.Context) error {
	d.say("Result")
	b1, err := d.host.BatchGet(ctx, demoQueue, demoBatch1)
	if err != nil {
		return err
	}
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
	msgs, err := d.host.Messages(ctx, host.WakeTopicDefault, demoQueue)
	if err != nil {
		return err
	}
	var woke *host.Message
	for i, m := range msgs {
		var p host.WakePayload
		if m.ID == wokenID && json.Unmarshal(m.Payload, &p) == nil && p.BatchID == demoBatch2 {
			woke = &msgs[i]
		}
	}
	d.say("  %s is %s; record %s is %s after %d events", demoBatch1, b1.State, d.rec.ID, d.rec.State, len(evs))
	if woke != nil {
		d.say("  sq_messages now holds %q on topic %q for %s, metadata %s", woke.ID, woke.Topic, demoBatch2, compactJSON(woke.Metadata))
	}
	d.say("  on your own database: mend status, mend inspect --record <id>, and the views in docs/sql.md")
	d.say("")
	if d.rec.State != mend.StateDone || woke == nil {
		return fmt.Errorf("FAILED: the queue was not repaired (record %s is %s, wake-up for %s published: %v)",
			d.rec.ID, d.rec.State, demoBatch2, woke != nil)
	}
	d.say("OK: %s was woken by message %q, sent under epoch %d after the first publish failed,", demoBatch2, wokenID, wokenEpoch)
	d.say("    and record %s is done. Repaired in %.2fs.", d.rec.ID, time.Since(d.start).Seconds())
	return nil
}

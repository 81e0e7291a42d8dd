package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// TestOpenValidates: settings Open refuses before it connects to anything
// are a *client.ConfigError naming the field.
func TestOpenValidates(t *testing.T) {
	t.Parallel()
	const dsn = "mend:pw@tcp(127.0.0.1:1)/mend" // never dialled
	for _, tt := range []struct {
		name string
		cfg  client.Config
		want string
	}{
		{"no DSN", client.Config{HostDSN: dsn}, "Config.DSN is required"},
		{"no HostDSN", client.Config{DSN: dsn}, "Config.HostDSN is required"},
		{"a lease shorter than the lock wait allows", client.Config{DSN: dsn, HostDSN: dsn, LeaseTTL: time.Millisecond}, "LeaseTTL must be between"},
		{"a lease of days", client.Config{DSN: dsn, HostDSN: dsn, LeaseTTL: 48 * time.Hour}, "LeaseTTL must be between"},
		{"a wake topic that cannot be stored", client.Config{DSN: dsn, HostDSN: dsn, WakeTopic: strings.Repeat("x", 300)}, "WakeTopic"},
		{"a holder that cannot be stored", client.Config{DSN: dsn, HostDSN: dsn, Holder: strings.Repeat("h", 300)}, "Holder"},
		{"a backoff base above its max", client.Config{DSN: dsn, HostDSN: dsn, RetryBase: time.Minute, RetryMax: time.Second}, "RetryBase"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := client.Open(context.Background(), tt.cfg)
			var ce *client.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open = %v; want a *client.ConfigError naming %q", err, tt.want)
			}
		})
	}
}

// TestOpenRefusesWhatRunRefuses: the front door runs mend run's preflight
// (the same doctor checks) and refuses each unsafe setting run refuses,
// with the check's advice, before it writes anything; the control opens.
func TestOpenRefusesWhatRunRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, w *world, cfg *client.Config)
		check string   // the first failed check, as doctor names it; "" for the control
		want  []string // in the error: detail and fix
	}{
		{name: "the control opens", setup: func(*testing.T, *world, *client.Config) {}},
		{name: "schema older than the range", check: "schema",
			setup: func(t *testing.T, w *world, _ *client.Config) {
				exec(t, w.mendDB, "UPDATE mend_schema_migrations SET version = 12")
			},
			want: []string{"this binary runs on schema", "mend migrate up"}},
		{name: "mend's tables missing", check: "schema",
			setup: func(t *testing.T, w *world, cfg *client.Config) {
				cfg.DSN = mysqltest.NewDB(t).DSN
			},
			want: []string{"mend migrate up"}},
		{name: "a wake topic nobody reads", check: "host queue wake topic",
			setup: func(_ *testing.T, _ *world, cfg *client.Config) { cfg.WakeTopic = "speculat" },
			want:  []string{`no consumer group of the host reads "speculat"`, "--wake-topic speculate"}},
		{name: "a host table missing", check: "host app build",
			setup: func(t *testing.T, w *world, _ *client.Config) { exec(t, w.hostDB, "DROP TABLE build") },
			want:  []string{"table build is missing"}},
		{name: "clientFoundRows in the DSN", check: "clientFoundRows",
			setup: func(t *testing.T, w *world, cfg *client.Config) {
				c, err := mysql.ParseDSN(w.mendDB.DSN)
				if err != nil {
					t.Fatal(err)
				}
				c.ClientFoundRows = true
				cfg.DSN = c.FormatDSN()
			},
			want: []string{"create-if-absent could not tell an insert from a duplicate", "remove clientFoundRows"}},
		{name: "a mend user that cannot delete (retention)", check: "grants",
			setup: func(t *testing.T, w *world, cfg *client.Config) {
				cfg.DSN = w.mendDB.User(t, "SELECT, INSERT, UPDATE ON %s.*")
			},
			want: []string{"DELETE on mend_records (retention pruning)", "GRANT DELETE ON"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			cfg := client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN}
			tt.setup(t, w, &cfg)
			c, err := client.Open(ctx, cfg)
			if tt.check == "" {
				if err != nil {
					t.Fatalf("Open = %v; want the control to open", err)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				_ = c.Close()
				t.Fatalf("Open succeeded; want it refused by the %q check", tt.check)
			}
			var re *doctor.RefusedError
			if !errors.As(err, &re) || !errors.Is(err, doctor.ErrRefused) {
				t.Fatalf("Open = %v; want a *doctor.RefusedError", err)
			}
			if re.Failed[0].Name != tt.check {
				t.Errorf("first failed check %q (%s); want %q", re.Failed[0].Name, re.Failed[0].Detail, tt.check)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if n := countRows(t, w.mendDB, "mend_leases"); n != 0 {
				t.Errorf("%d lease rows; a refused Open writes nothing", n)
			}
		})
	}
}

// TestRecordRepairsInline: a dead letter recorded through the front door
// is durable when Record returns, and the inline repair has failed its
// batch and woken the queue's next live batch.
func TestRecordRepairsInline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	c, err := client.Open(ctx, client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	dead := w.deadLetter(t)
	res, err := c.Record(ctx, delivery(dead))
	if err != nil || !res.Created || res.RepairErr != nil {
		t.Fatalf("Record = created %v, repair %v, %v; want created and repaired", res.Created, res.RepairErr, err)
	}
	if res.Record.State != mend.StateDone {
		t.Errorf("record is %s; want done", res.Record.State)
	}
	b, err := w.sq.Batch(ctx, queue, batch1)
	if err != nil || b.State != "failed" {
		t.Errorf("batch 1 is %q (%v); want failed", b.State, err)
	}
	ups, err := w.sq.ConsumeSpeculate(ctx, queue, true)
	if err != nil || len(ups) != 1 || ups[0].Batch.ID != batch2 {
		t.Errorf("wake-ups %+v (%v); want one, for batch 2", ups, err)
	}
	again, err := c.Record(ctx, delivery(dead)) // redelivered
	if err != nil || again.Created || again.Record.ID != res.Record.ID {
		t.Errorf("redelivery = created %v, record %s, %v; want the same record", again.Created, again.Record.ID, err)
	}
}

// TestStartStop: the background reconciler finishes what the intake left
// (NoInlineRepair), and Stop and Close are idempotent.
func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	c, err := client.Open(ctx, client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, NoInlineRepair: true, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.Stop() // before Start: a no-op
	res, err := c.Record(ctx, delivery(w.deadLetter(t)))
	if err != nil || res.Record.State != mend.StatePending {
		t.Fatalf("Record = %s, %v; want pending (no inline repair)", res.Record.State, err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := c.Store().RecordGet(ctx, res.Record.Source)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == mend.StateDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record still %s after 30s of passes", r.State)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	c.Stop()
	c.Stop()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// delivery is what a DLQ consumer hands the intake for a DLQ row.
func delivery(m sqtest.Message) dlq.Delivery {
	return dlq.Row{Offset: m.Offset, Topic: m.Topic, PartitionKey: m.PartitionKey, ID: m.ID, Payload: m.Payload,
		Metadata: m.Metadata, FailedAtMS: m.FailedAt, FailureCount: m.FailureCount, LastError: m.LastError,
		OriginalTopic: m.OriginalTopic, FailureDetail: m.FailureDetail}.Delivery()
}

func exec(t *testing.T, db *mysqltest.DB, query string) {
	t.Helper()
	if _, err := db.SQL(t).Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func countRows(t *testing.T, db *mysqltest.DB, table string) int {
	t.Helper()
	var n int
	if err := db.SQL(t).QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSubscription: with Config.Subscription the Client records the host's
// dead letters itself, as a consumer group of the *_dlq topics (mend run
// --queue-dsn), and its reconciler repairs them; the subscription's check
// runs in Open.
func TestSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	dead := w.deadLetter(t)
	c, err := client.Open(ctx, client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN,
		Subscription: &client.Subscription{Interval: 20 * time.Millisecond, Settle: time.Second, Mode: doctor.ModeOffsets}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if mode, _ := c.SubscribeMode(); mode != doctor.ModeOffsets || c.BinlogReader() != nil {
		t.Fatalf("mode %q, reader %v; want offsets, as asked, and no binlog reader", mode, c.BinlogReader())
	}
	if c.Subscriber() == nil || c.Config().SubscriptionGroup != "mend" {
		t.Fatalf("subscriber %v, group %q; want one, of group mend", c.Subscriber(), c.Config().SubscriptionGroup)
	}
	st, err := c.Subscriber().Drain(ctx)
	if err != nil || st.Recorded != 1 {
		t.Fatalf("drain = %+v, %v; want the dead letter recorded", st, err)
	}
	if _, err := c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.Store().RecordGet(ctx, delivery(dead).Source)
	if err != nil || r.State != mend.StateDone {
		t.Fatalf("record %s, %v; want done", r.State, err)
	}
}

// TestSubscriptionBinlog: where every prerequisite of binlog mode holds
// (the test servers log ROW with FULL images, the user is root, mend's
// schema has migration 0019) auto mode reads the binary log: the dead
// letter is recorded and repaired, the position saved, and mend joins no
// consumer group.
func TestSubscriptionBinlog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	dead := w.deadLetter(t)
	c, err := client.Open(ctx, client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, Interval: 20 * time.Millisecond,
		Subscription: &client.Subscription{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	mode, why := c.SubscribeMode()
	if mode != doctor.ModeBinlog || c.BinlogReader() == nil || c.Subscriber() != nil {
		t.Fatalf("mode %q (%s), reader %v, subscriber %v; want binlog mode, auto", mode, why, c.BinlogReader(), c.Subscriber())
	}
	if !strings.HasPrefix(why, "auto:") {
		t.Errorf("why %q; want it to say auto chose", why)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := c.Store().RecordGet(ctx, delivery(dead).Source)
		_, perr := c.Store().BinlogPositionGet(ctx, binlog.LeaseName(w.hostDB.Name))
		if err == nil && r.State == mend.StateDone && perr == nil {
			break // recorded, repaired, and the position after the import saved
		}
		if err != nil && !errors.Is(err, mend.ErrNotFound) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %v (%v), position %v after 60s; want it recorded from the tables and done, and a position saved (reader %+v)", r.State, err, perr, c.BinlogReader().Status())
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	c.Stop()
	if st := c.BinlogReader().Status(); st.Role != "stopped" || st.Recorded < 1 {
		t.Errorf("reader status %+v; want stopped after Stop, with the dead letter recorded", st)
	}
	if n := countRows(t, w.hostDB, "queue_offsets WHERE consumer_group = 'mend'"); n != 0 {
		t.Errorf("%d queue_offsets rows of group mend; binlog mode joins no consumer group", n)
	}
}

// TestSubscriptionModeRefused: a queue database user without REPLICATION
// SLAVE makes auto mode run offsets, saying why, and binlog mode asked for
// is refused with the grant that fixes it, before anything is written.
func TestSubscriptionModeRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	queueDSN := w.hostDB.User(t, "SELECT, INSERT, UPDATE, DELETE ON %s.*", "REPLICATION CLIENT ON *.*")
	cfg := func(mode string) client.Config {
		return client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, QueueDSN: queueDSN,
			Subscription: &client.Subscription{Settle: time.Second, Mode: mode}}
	}
	c, err := client.Open(ctx, cfg(doctor.ModeAuto))
	if err != nil {
		t.Fatal(err)
	}
	mode, why := c.SubscribeMode()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if mode != doctor.ModeOffsets || !strings.Contains(why, "REPLICATION SLAVE") {
		t.Errorf("auto mode %q (%s); want offsets, naming REPLICATION SLAVE", mode, why)
	}
	for _, skip := range []bool{false, true} {
		c2 := cfg(doctor.ModeBinlog)
		c2.SkipChecks = skip
		c, err := client.Open(ctx, c2)
		if err == nil {
			_ = c.Close()
			t.Fatalf("binlog mode opened (checks skipped: %v); want it refused", skip)
		}
		var be *client.BinlogUnavailableError
		var re *doctor.RefusedError
		switch {
		case errors.As(err, &be) && errors.Is(err, client.ErrBinlogUnavailable):
		case !skip && errors.As(err, &re) && re.Failed[0].Name == "binlog REPLICATION SLAVE":
		default:
			t.Fatalf("binlog mode (checks skipped: %v): %v; want it refused on REPLICATION SLAVE", skip, err)
		}
		if !strings.Contains(err.Error(), "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.*") {
			t.Errorf("error lacks the grant that fixes it: %v", err)
		}
	}
	if n := countRows(t, w.mendDB, "mend_binlog_positions"); n != 0 {
		t.Errorf("%d position rows; a refused Open writes nothing", n)
	}
}

// TestAutoStickyRefused: auto mode beside a saved binary-log position of
// the source never falls back to offsets: with binlog mode impossible (the
// queue user lacks REPLICATION SLAVE), Open refuses as an explicit binlog
// mode does, naming the saved position, what offsets mode would lose, the
// fix, and the queue database's user (where the failing check ran), not
// mend's. Without the saved position the same Open runs offsets
// (TestSubscriptionModeRefused).
func TestAutoStickyRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	queueDSN := w.hostDB.User(t, "SELECT, INSERT, UPDATE, DELETE ON %s.*", "REPLICATION CLIENT ON *.*")
	qc, err := mysql.ParseDSN(queueDSN)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, w.mendDB, "INSERT INTO mend_binlog_positions (name, flavor, server_uuid, binlog_file, binlog_pos, gtid_set, updated_at) "+
		"VALUES ('"+binlog.LeaseName(w.hostDB.Name)+"', 'mysql', 'uuid-a', 'saved-bin.000007', 1234, '', NOW(6))")
	for _, skip := range []bool{true, false} {
		c, err := client.Open(ctx, client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, QueueDSN: queueDSN, SkipChecks: skip,
			Subscription: &client.Subscription{Settle: time.Second}})
		if err == nil {
			mode, why := c.SubscribeMode()
			_ = c.Close()
			t.Fatalf("auto beside a saved position opened in mode %q (%s), checks skipped: %v; want it refused", mode, why, skip)
		}
		var be *client.BinlogUnavailableError
		var re *doctor.RefusedError
		switch {
		case errors.As(err, &be) && errors.Is(err, client.ErrBinlogUnavailable):
			if be.Saved == nil || be.Saved.File != "saved-bin.000007" {
				t.Errorf("refusal's saved position %+v; want saved-bin.000007", be.Saved)
			}
		case !skip && errors.As(err, &re) && re.Failed[0].Name == "subscribe mode":
		default:
			t.Fatalf("auto beside a saved position (checks skipped: %v): %v; want a refusal naming the position", skip, err)
		}
		for _, want := range []string{"saved-bin.000007:1234", "never record the dead letters committed after that position",
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.*", "--subscribe-mode offsets", "--queue-dsn", " as " + qc.User} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal (checks skipped: %v) lacks %q:\n%v", skip, want, err)
			}
		}
	}
	if n := countRows(t, w.hostDB, "queue_offsets WHERE consumer_group = 'mend'"); n != 0 {
		t.Errorf("%d queue_offsets rows of group mend; a refused Open joins nothing", n)
	}
}

// TestRefusalNamesQueueTarget: a check of the queue database that fails
// (a wake topic nobody reads) refuses naming the queue database's address,
// schema and user, not mend's.
func TestRefusalNamesQueueTarget(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	queueDSN := w.hostDB.User(t, "SELECT, INSERT, UPDATE ON %s.*")
	qc, err := mysql.ParseDSN(queueDSN)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Open(context.Background(), client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, QueueDSN: queueDSN, WakeTopic: "speculat"})
	if err == nil {
		_ = c.Close()
		t.Fatal("Open succeeded with a wake topic nobody reads")
	}
	var re *doctor.RefusedError
	if !errors.As(err, &re) || re.Failed[0].Name != "host queue wake topic" {
		t.Fatalf("Open = %v; want refused by the wake topic check", err)
	}
	want := "doctor check failed on --queue-dsn " + qc.Addr + "/" + w.hostDB.Name + " as " + qc.User + ":"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q; want it to name %q", err, want)
	}
}

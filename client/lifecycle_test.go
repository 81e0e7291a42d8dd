package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/subscribe"
)

// TestStartAfterClose: Start on a closed Client, or racing its Close,
// starts nothing on the closed pools: it returns client.ErrClosed, or it
// ran first and Close stopped what it started. Either way no goroutine of
// the Client outlives Close. Not parallel: the leak check compares the
// goroutines with those before the Client was opened.
func TestStartAfterClose(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	cfg := client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, Interval: 10 * time.Millisecond, SkipChecks: true,
		Subscription: &client.Subscription{}} // binlog mode on the test servers: the reader too
	t.Run("after", func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		c, err := client.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.BinlogReader() == nil {
			t.Fatal("no binlog reader; the test servers allow binlog mode")
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Start after Close = %v; want client.ErrClosed", err)
		}
		if c.ReaderRunning() {
			t.Error("the binlog reader runs after Close")
		}
		if err := goleak.Find(before); err != nil {
			t.Errorf("goroutines left running after Start on a closed Client: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("a second Close = %v; want nil", err)
		}
	})
	t.Run("racing", func(t *testing.T) {
		for i := range 5 {
			before := goleak.IgnoreCurrent()
			c, err := client.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var startErr, closeErr error
			ready := make(chan struct{})
			wg.Go(func() { <-ready; startErr = c.Start(ctx) })
			wg.Go(func() { <-ready; closeErr = c.Close() })
			close(ready)
			wg.Wait()
			if closeErr != nil {
				t.Fatalf("round %d: Close = %v", i, closeErr)
			}
			if startErr != nil && !errors.Is(startErr, client.ErrClosed) {
				t.Fatalf("round %d: Start racing Close = %v; want nil or client.ErrClosed", i, startErr)
			}
			if c.ReaderRunning() {
				t.Fatalf("round %d: the binlog reader runs after Close (Start: %v)", i, startErr)
			}
			if err := goleak.Find(before); err != nil {
				t.Fatalf("round %d: goroutines left running after Close (Start: %v): %v", i, startErr, err)
			}
		}
	})
}

// TestStartUndoesOnFailure: when the reconciler cannot start (here: it
// runs already), Start returns its error and stops the binlog reader it
// had started, instead of leaving it reading beside a caller told that
// Start failed.
func TestStartUndoesOnFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	c, err := client.Open(ctx, client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, Interval: time.Hour, SkipChecks: true,
		Subscription: &client.Subscription{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if c.BinlogReader() == nil {
		t.Fatal("no binlog reader; the test servers allow binlog mode")
	}
	if err := c.Reconciler().Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err == nil {
		t.Fatal("Start succeeded beside a running reconciler; want its error")
	}
	if c.ReaderRunning() {
		t.Error("Start failed and left the binlog reader running")
	}
	if st := c.BinlogReader().Status(); st.Role != binlog.RoleStopped {
		t.Errorf("reader role %q after the failed Start; want %q", st.Role, binlog.RoleStopped)
	}
}

// TestOpenRefusesMode: a subscribe mode Open does not know (a typo) is a
// *client.ConfigError naming the valid values, as mend run refuses it,
// before anything is dialled.
func TestOpenRefusesMode(t *testing.T) {
	t.Parallel()
	const dsn = "mend:pw@tcp(127.0.0.1:1)/mend" // never dialled
	_, err := client.Open(context.Background(), client.Config{DSN: dsn, HostDSN: dsn, Subscription: &client.Subscription{Mode: "binlgo"}})
	var ce *client.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Open = %v; want a *client.ConfigError", err)
	}
	for _, want := range []string{"Subscription.Mode", `"binlgo"`, doctor.ModeBinlog, doctor.ModeOffsets, doctor.ModeAuto} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestSubscriptionGroupPrecedence: Subscription.Group, the more specific,
// wins when set; Config.SubscriptionGroup is the group while it is empty;
// with neither, subscribe.GroupDefault. The checks (and the wake topic's
// ignored groups) use the same group as the Client.
func TestSubscriptionGroupPrecedence(t *testing.T) {
	t.Parallel()
	const dsn = "mend:pw@tcp(127.0.0.1:1)/mend" // never dialled
	for _, tt := range []struct {
		name           string
		outer, inner   string
		subscription   bool
		want, wakeSkip string
	}{
		{"Subscription.Group wins", "outer", "inner", true, "inner", "inner"},
		{"SubscriptionGroup when Subscription.Group is empty", "outer", "", true, "outer", "outer"},
		{"neither: the default", "", "", true, subscribe.GroupDefault, subscribe.GroupDefault},
		{"SubscriptionGroup without a Subscription", "outer", "", false, "outer", "outer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := client.Config{DSN: dsn, HostDSN: dsn, SubscriptionGroup: tt.outer}
			if tt.subscription {
				cfg.Subscription = &client.Subscription{Group: tt.inner, Mode: doctor.ModeOffsets}
			}
			p := client.CheckParams(cfg)
			if tt.subscription && p.Subscription.Group != tt.want {
				t.Errorf("the subscription's group %q; want %q", p.Subscription.Group, tt.want)
			}
			if p.WakeIgnore[0] != tt.wakeSkip {
				t.Errorf("wake topic ignores %v; want %q first", p.WakeIgnore, tt.wakeSkip)
			}
		})
	}
}

// TestSubscriptionGroupOpened: the Client opened joins the group the
// precedence names, in both directions.
func TestSubscriptionGroupOpened(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct{ name, outer, inner, want string }{
		{"Subscription.Group wins", "outer", "inner", "inner"},
		{"SubscriptionGroup when Subscription.Group is empty", "outer", "", "outer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.deadLetter(t)
			c, err := client.Open(ctx, client.Config{DSN: w.mendDB.DSN, HostDSN: w.hostDB.DSN, SubscriptionGroup: tt.outer, SkipChecks: true,
				Subscription: &client.Subscription{Group: tt.inner, Settle: time.Second, Mode: doctor.ModeOffsets}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if got := c.Config(); got.SubscriptionGroup != tt.want || got.Subscription.Group != tt.want {
				t.Errorf("Config() groups %q and %q; want %q in both", got.SubscriptionGroup, got.Subscription.Group, tt.want)
			}
			if _, err := c.Subscriber().Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if n := countRows(t, w.hostDB, "queue_offsets WHERE consumer_group = '"+tt.want+"'"); n == 0 {
				t.Errorf("no queue_offsets row of group %q after a drain", tt.want)
			}
		})
	}
}

package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The overview's binlog section shows each reader's role, saved position,
// lag and last reset, escaped as everything the console shows (a source or
// reason with markup and an unprintable byte stays text), and a failed read
// on the page without failing it; without readers there is no section.
func TestConsoleBinlog(t *testing.T) {
	b := setup(t)
	get := func(t *testing.T, base string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("alice", password)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("overview: %d\n%s", resp.StatusCode, body)
		}
		return string(body)
	}
	readers := []BinlogReader{
		{Source: "queue<i>\x01", Role: "reading", Holder: "replica-1", Epoch: 3, Position: "mysql-bin.000007:1234 GTIDs 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77",
			Saved: 2 * time.Second, Lag: 300 * time.Millisecond, Reset: "2026-12-07T03:00:00Z first start"},
		{Source: "other", Role: "no reader", Position: "mysql-bin.000002:4", Saved: time.Hour, Reset: "2026-12-07T03:00:00Z the saved position was purged: <b>gone</b>"},
	}
	_, base := b.serve(t, func(c *Config, _ *Server) {
		c.Binlog = func(context.Context) ([]BinlogReader, error) { return readers, nil }
	})
	page := get(t, base)
	for _, want := range []string{`id="binlog"`, "Subscribe mode: binlog", "reading: replica-1 · epoch 3", "mysql-bin.000007:1234 GTIDs 3e11fa47",
		`queue&lt;i&gt;\x01`, "no reader", "&lt;b&gt;gone&lt;/b&gt;", "300ms"} {
		if !strings.Contains(page, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if strings.Contains(page, "<i>") || strings.Contains(page, "<b>gone") {
		t.Error("markup of a reader's source or reason reached the page as elements")
	}

	_, base = b.serve(t, func(c *Config, _ *Server) {
		c.Binlog = func(context.Context) ([]BinlogReader, error) {
			return nil, errors.New("no SELECT on mend_binlog_positions")
		}
	})
	if page := get(t, base); !strings.Contains(page, "positions could not be read: no SELECT on mend_binlog_positions") || !strings.Contains(page, `id="queues"`) {
		t.Error("a failed read is not shown beside the rest of the overview")
	}
	// Rows the offset mode's group left in queue_offsets (a deployment
	// switched to binlog mode, a run --once of before): said beside the
	// readers, with what they hold back; none, nothing said.
	for _, lag := range [][]TopicLag{{{Topic: "speculate_dlq", Rows: 3, Age: time.Hour}}, nil} {
		_, base = b.serve(t, func(c *Config, _ *Server) {
			c.Binlog = func(context.Context) ([]BinlogReader, error) { return readers, nil }
			c.Lag = func(context.Context) ([]TopicLag, error) { return lag, nil }
		})
		if got := strings.Contains(get(t, base), `id="group-rows"`); got != (lag != nil) {
			t.Errorf("group rows %v: the leftover-rows warning shown: %v", lag, got)
		}
	}
	_, base = b.serve(t, func(c *Config, _ *Server) {
		c.Binlog = func(context.Context) ([]BinlogReader, error) { return nil, nil }
	})
	if page := get(t, base); strings.Contains(page, `id="binlog"`) {
		t.Error("a binlog section without readers")
	}
}

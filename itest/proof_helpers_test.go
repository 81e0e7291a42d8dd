package itest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
)

// EnvProof selects the size of the proof suites (linearizability, crash,
// partition): "full" for the sizes `make proof` runs; anything else (the
// default, and what `make test` and CI use) for reduced sizes that keep the
// suites well under a minute and a half together.
const EnvProof = "MEND_PROOF"

// proofFull reports whether the full-size proof suites were asked for.
func proofFull() bool { return os.Getenv(EnvProof) == "full" && !testing.Short() }

// sized picks the reduced (CI) or the full size.
func sized[T any](ci, full T) T {
	if proofFull() {
		return full
	}
	return ci
}

// prooff logs one line of what a proof test checked. `make proof` collects
// these lines (they start with "PROOF ") into its summary.
func prooff(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf("PROOF %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

var quietOnce sync.Once

// quietDriver silences the driver's own logger, which prints a line for
// every connection a fault test breaks on purpose.
func quietDriver() {
	quietOnce.Do(func() { _ = mysql.SetLogger(log.New(io.Discard, "", 0)) })
}

// commitCutter is a driver network (see mysql.RegisterDialContext) that
// dials the server over TCP and, with a given probability, breaks a
// connection exactly when the client sends COMMIT: either before the
// command leaves (the server rolls back) or right after it (the server
// commits, the reply is lost). Both look the same to the client, which is
// the point: the outcome is ambiguous and must be reported as such.
type commitCutter struct {
	network string
	prob    float64

	reqLost   atomic.Int64 // COMMIT never sent
	replyLost atomic.Int64 // COMMIT sent, reply dropped

	mu   sync.Mutex
	cuts []faultEvent // every cut, for a failure's evidence
}

// faultEvent is one injected fault, for a failed proof's evidence: what,
// and when (wall clock; a proof converts it to its history's time).
type faultEvent struct {
	At    time.Time
	Until time.Time // zero for an instant fault (a cut)
	What  string
}

func (c *commitCutter) logCut(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cuts = append(c.cuts, faultEvent{At: time.Now(), What: what})
}

var cutterSeq atomic.Int64

// newCommitCutter registers a fresh network name with the driver. prob is
// the probability that a COMMIT is cut.
func newCommitCutter(prob float64) *commitCutter {
	c := &commitCutter{network: "mendcut" + strconv.FormatInt(cutterSeq.Add(1), 10), prob: prob}
	mysql.RegisterDialContext(c.network, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn, c: c}, nil
	})
	return c
}

// DSN rewrites a harness DSN to dial through the cutter.
func (c *commitCutter) DSN(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	cfg.Net = c.network
	return cfg.FormatDSN()
}

// Cuts returns how many COMMITs were cut before and after being sent.
func (c *commitCutter) Cuts() (requestLost, replyLost int64) {
	return c.reqLost.Load(), c.replyLost.Load()
}

type cutConn struct {
	net.Conn
	c *commitCutter
}

var errCut = errors.New("itest: connection cut at COMMIT (injected)")

// isCommit recognises the driver's COMMIT: one COM_QUERY packet (3-byte
// length, sequence number, command 0x03) whose text is exactly COMMIT.
func isCommit(b []byte) bool {
	return len(b) == 4+1+6 && b[4] == 0x03 && string(b[5:]) == "COMMIT"
}

func (cc *cutConn) Write(b []byte) (int, error) {
	if !isCommit(b) || rand.Float64() >= cc.c.prob {
		return cc.Conn.Write(b)
	}
	if rand.IntN(2) == 0 {
		cc.c.reqLost.Add(1)
		cc.c.logCut("commit-cut/request-lost")
		_ = cc.Conn.Close()
		return 0, errCut
	}
	n, err := cc.Conn.Write(b)
	cc.c.replyLost.Add(1)
	cc.c.logCut("commit-cut/reply-lost")
	_ = cc.Conn.Close()
	return n, err
}

// chaos injects network faults into a toxiproxy until stopped: at random
// moments it adds a reset_peer or a timeout toxic for a few milliseconds,
// under a permanent latency toxic. The schedule is driven by timers; nothing
// waits on it for synchronisation.
type chaos struct {
	proxy  *mysqltest.Proxy
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	counts map[string]int
	events []faultEvent
	errs   []error
}

// startChaos starts injecting faults into p; stop it with Stop.
func startChaos(t testing.TB, p *mysqltest.Proxy) *chaos {
	t.Helper()
	if err := p.AddToxic("latency", "latency", "downstream", 1, map[string]any{"latency": 1, "jitter": 2}); err != nil {
		t.Fatalf("add latency: %v", err)
	}
	c := &chaos{proxy: p, stop: make(chan struct{}), done: make(chan struct{}), counts: map[string]int{"latency": 1}}
	go c.run()
	t.Cleanup(c.Stop)
	return c
}

func (c *chaos) run() {
	defer close(c.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
		select {
		case <-c.stop:
			return
		case <-timer.C:
		}
		name := "fault" + strconv.Itoa(i)
		var typ, stream string
		var attrs map[string]any
		switch rand.IntN(3) {
		case 0:
			typ, stream, attrs = "reset_peer", "downstream", map[string]any{"timeout": rand.IntN(5)}
		case 1:
			typ, stream, attrs = "reset_peer", "upstream", map[string]any{"timeout": rand.IntN(5)}
		default:
			typ, stream, attrs = "timeout", "upstream", map[string]any{"timeout": 20 + rand.IntN(30)}
		}
		if err := c.proxy.AddToxic(name, typ, stream, 0.5, attrs); err != nil {
			c.record(err)
			return
		}
		c.mu.Lock()
		c.counts[typ+"/"+stream]++
		c.events = append(c.events, faultEvent{At: time.Now(), What: fmt.Sprintf("%s/%s %v", typ, stream, attrs)})
		c.mu.Unlock()
		// The fault lasts a few milliseconds, then the network is healthy
		// for a while.
		timer.Reset(time.Duration(2+rand.IntN(8)) * time.Millisecond)
		select {
		case <-c.stop:
			_ = c.proxy.RemoveToxic(name)
			return
		case <-timer.C:
		}
		if err := c.proxy.RemoveToxic(name); err != nil {
			c.record(err)
			return
		}
		c.mu.Lock()
		c.events[len(c.events)-1].Until = time.Now()
		c.mu.Unlock()
		timer.Reset(time.Duration(20+rand.IntN(40)) * time.Millisecond)
	}
}

func (c *chaos) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// Stop ends the fault schedule and waits for it; idempotent.
func (c *chaos) Stop() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// Faults returns the faults injected so far, by toxic type and stream, and
// any error the schedule hit.
func (c *chaos) Faults() (map[string]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out, errors.Join(c.errs...)
}

// faultLog returns the faults injected so far in time order, with times
// in nanoseconds since start (a proof's history's origin).
func faultLog(start time.Time, ch *chaos, cut *commitCutter) []map[string]any {
	var evs []faultEvent
	ch.mu.Lock()
	evs = append(evs, ch.events...)
	ch.mu.Unlock()
	cut.mu.Lock()
	evs = append(evs, cut.cuts...)
	cut.mu.Unlock()
	sort.Slice(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	out := make([]map[string]any, len(evs))
	for i, e := range evs {
		m := map[string]any{"at_ns": e.At.Sub(start).Nanoseconds(), "fault": e.What}
		if !e.Until.IsZero() {
			m["until_ns"] = e.Until.Sub(start).Nanoseconds()
		}
		out[i] = m
	}
	return out
}

// pollUntil calls cond every interval until it reports true or the deadline
// passes; it returns cond's last error on timeout.
func pollUntil(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not reached within %s: %w", timeout, errors.Join(ctx.Err(), last))
		case <-tick.C:
		}
	}
}

package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// MySQL client commands the tap looks at.
const (
	comQuit         = 0x01
	comQuery        = 0x03
	comStmtPrepare  = 0x16
	comStmtLongData = 0x18
	comStmtClose    = 0x19
)

// isRoundTrip reports whether a packet the client writes starts a command
// the server answers: a round trip. A command is the packet with sequence
// number 0 (handshake and authentication packets carry higher ones); of
// the commands only COM_QUIT, COM_STMT_CLOSE and COM_STMT_SEND_LONG_DATA go
// unanswered. With interpolateParams every statement mend sends, and every
// BEGIN, COMMIT and SET TRANSACTION the driver sends for it, is one
// COM_QUERY, so this is the number of times the client waits for the
// server. A multi-statement COM_QUERY is one round trip however many
// statements it carries: the server answers all of them in one stream.
func isRoundTrip(b []byte) bool {
	if len(b) < 5 || b[3] != 0 {
		return false
	}
	switch b[4] {
	case comQuit, comStmtClose, comStmtLongData:
		return false
	}
	return true
}

// tap records, per worker, the statements mend sends on its connections, in
// the order they were sent. A worker is one goroutine of the benchmark; it
// may own several connections (e.g. mend's pool and the host's), each dialed
// through its own driver network so the tap knows whose it is.
type tap struct {
	on       atomic.Bool
	prepared atomic.Int64 // server-side prepares seen: not replayable
	rts      atomic.Int64 // round trips (see isRoundTrip) while on
	workers  []*tapWorker
	nets     [][]string // [worker][role] driver network name
}

type tapWorker struct {
	mu    sync.Mutex
	stmts []tapStmt
}

type tapStmt struct {
	role int
	text string
}

var tapSeq atomic.Int64

// newTap registers workers×roles driver networks.
func newTap(workers, roles int) *tap {
	t := &tap{workers: make([]*tapWorker, workers), nets: make([][]string, workers)}
	for w := range workers {
		t.workers[w] = &tapWorker{}
		t.nets[w] = make([]string, roles)
		for r := range roles {
			name := "mendtap" + strconv.FormatInt(tapSeq.Add(1), 10)
			t.nets[w][r] = name
			mysql.RegisterDialContext(name, func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				conn, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return &tapConn{Conn: conn, t: t, w: t.workers[w], role: r}, nil
			})
		}
	}
	return t
}

// DSN rewrites dsn to dial through worker w's network for role r.
func (t *tap) DSN(tb testing.TB, dsn string, w, r int) string {
	tb.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatalf("parse dsn: %v", err)
	}
	cfg.Net = t.nets[w][r]
	return cfg.FormatDSN()
}

// Statements returns how many statements were recorded.
func (t *tap) Statements() int {
	n := 0
	for _, w := range t.workers {
		w.mu.Lock()
		n += len(w.stmts)
		w.mu.Unlock()
	}
	return n
}

type tapConn struct {
	net.Conn
	t    *tap
	w    *tapWorker
	role int
}

// Write sees whole packets: the driver writes each packet (header and
// payload) with one call, and compression is off.
func (c *tapConn) Write(b []byte) (int, error) {
	if c.t.on.Load() && isRoundTrip(b) {
		c.t.rts.Add(1)
	}
	if c.t.on.Load() && len(b) > 4 {
		switch b[4] {
		case comQuery:
			c.w.mu.Lock()
			c.w.stmts = append(c.w.stmts, tapStmt{role: c.role, text: string(b[5:])})
			c.w.mu.Unlock()
		case comStmtPrepare:
			c.t.prepared.Add(1)
		}
	}
	return c.Conn.Write(b)
}

// isQuery reports whether a statement returns rows.
func isQuery(text string) bool {
	s := text
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		if !strings.HasPrefix(s, "--") {
			break
		}
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return false
		}
		s = s[i+1:]
	}
	word := strings.ToUpper(s[:min(len(s), 6)])
	return word == "SELECT" || strings.HasPrefix(word, "SHOW") || strings.HasPrefix(word, "WITH")
}

// replay issues every worker's recorded statements through database/sql
// against dsn (a clone of the database mend ran on), one goroutine per
// worker with one pinned connection per role, and returns the wall time.
// Rows are read to the end. It fails the benchmark if any statement fails
// (the recorded run had none: mend returned no error) or if mend used a
// server-side prepare, which the tap cannot replay. The replay's own round
// trips are counted on the wire, the same way as mend's and the limit's.
func (t *tap) replay(b *testing.B, dsn string) measured {
	b.Helper()
	if n := t.prepared.Load(); n > 0 {
		b.Fatalf("tap: mend prepared %d statements on the server; the baseline replays text only", n)
	}
	ctx := context.Background()
	cfg, err := storage.NormalizeDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	wire := newWire()
	cfg.Net = wire.net
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	roles := len(t.nets[0])
	conns := make([][]*sql.Conn, len(t.workers))
	for w := range t.workers {
		conns[w] = make([]*sql.Conn, roles)
		for r := range roles {
			c, err := db.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			conns[w][r] = c
		}
	}
	errs := make([]error, len(t.workers))
	wire.on.Store(true)
	elapsed := measure(len(t.workers), func(w int) {
		for _, st := range t.workers[w].stmts {
			c := conns[w][st.role]
			if !isQuery(st.text) {
				if _, err := c.ExecContext(ctx, st.text); err != nil {
					errs[w] = fmt.Errorf("replay %.80q: %w", st.text, err)
					return
				}
				continue
			}
			rows, err := c.QueryContext(ctx, st.text)
			if err != nil {
				errs[w] = fmt.Errorf("replay %.80q: %w", st.text, err)
				return
			}
			if err := drain(rows); err != nil {
				errs[w] = fmt.Errorf("replay %.80q: %w", st.text, err)
				return
			}
		}
	})
	wire.on.Store(false)
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("tap: the baseline diverged from mend's run: %v", err)
	}
	return measured{took: elapsed, rts: wire.rts.Load()}
}

// measured is one side of a comparison: its wall time and the round trips
// it made on the wire.
type measured struct {
	took time.Duration
	rts  int64
}

// wire counts the round trips of every connection dialed through its
// driver network while on is set. It records nothing else: the replay and
// the limit implementations use it, where only the count is wanted.
type wire struct {
	on  atomic.Bool
	rts atomic.Int64
	net string
}

func newWire() *wire {
	w := &wire{net: "mendwire" + strconv.FormatInt(tapSeq.Add(1), 10)}
	mysql.RegisterDialContext(w.net, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: conn, w: w}, nil
	})
	return w
}

type wireConn struct {
	net.Conn
	w *wire
}

func (c *wireConn) Write(b []byte) (int, error) {
	if c.w.on.Load() && isRoundTrip(b) {
		c.w.rts.Add(1)
	}
	return c.Conn.Write(b)
}

// drain reads every row into raw bytes, as a caller scanning results would.
func drain(rows *sql.Rows) error {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	dest := make([]any, len(cols))
	for i := range dest {
		dest[i] = new(sql.RawBytes)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
	}
	return rows.Err()
}

// measure runs fn(0..workers-1) concurrently and returns the wall time.
func measure(workers int, fn func(w int)) time.Duration {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			fn(w)
		})
	}
	begin := time.Now()
	close(start)
	wg.Wait()
	return time.Since(begin)
}

// cloneDB copies every table of src (structure and rows) into a fresh
// database on the same server, for the baseline to replay against.
func cloneDB(b testing.TB, src *mysqltest.DB) *mysqltest.DB {
	b.Helper()
	ctx := context.Background()
	dst := mysqltest.NewDBOn(b, src.Server)
	admin, err := sql.Open("mysql", src.Server.RootDSN())
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	c, err := admin.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rows, err := c.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_type = 'BASE TABLE'", src.Name)
	if err != nil {
		b.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			b.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	rows.Close()
	for _, tbl := range tables {
		from, to := "`"+src.Name+"`.`"+tbl+"`", "`"+dst.Name+"`.`"+tbl+"`"
		// Generated columns (mend_records.failing_attempts) take no value.
		var cols string
		if err := c.QueryRowContext(ctx, `SELECT GROUP_CONCAT(CONCAT('`+"`"+`', column_name, '`+"`"+`') ORDER BY ordinal_position)
			FROM information_schema.columns WHERE table_schema = ? AND table_name = ? AND extra NOT LIKE '%GENERATED%'
			AND extra NOT LIKE '%VIRTUAL%' AND extra NOT LIKE '%STORED%'`, src.Name, tbl).Scan(&cols); err != nil {
			b.Fatalf("clone %s: %v", tbl, err)
		}
		for _, q := range []string{"CREATE TABLE " + to + " LIKE " + from, "INSERT INTO " + to + " (" + cols + ") SELECT " + cols + " FROM " + from} {
			if _, err := c.ExecContext(ctx, q); err != nil {
				b.Fatalf("clone %s: %v", tbl, err)
			}
		}
	}
	return dst
}

// Mix returns the recorded statements counted by kind: the "-- name:"
// label mend puts on each statement, or the statement's first two words.
func (t *tap) Mix() string {
	counts := map[string]int{}
	var order []string
	for _, w := range t.workers {
		w.mu.Lock()
		for _, st := range w.stmts {
			k := stmtKind(st.text)
			if counts[k] == 0 {
				order = append(order, k)
			}
			counts[k]++
		}
		w.mu.Unlock()
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s×%d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

func stmtKind(text string) string {
	s := strings.TrimSpace(text)
	if rest, ok := strings.CutPrefix(s, "-- name: "); ok {
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			rest = rest[:i]
		}
		return strings.TrimSpace(rest)
	}
	f := strings.Fields(s)
	if len(f) > 2 {
		f = f[:2]
	}
	return strings.Join(f, " ")
}

// printMix prints the statement mix once per benchmark name, for
// cmd/benchreport, normalised per operation.
func printMix(b *testing.B, t *tap, ops int) {
	if ops < 100 {
		return // the probe run with b.N = 1
	}
	b.Logf("mend-bench: mix %s (%d ops): %s", b.Name(), ops, t.Mix())
}

// report sets the benchmark's metrics: the throughput of mend, of the
// replay of its statements and of the limit implementation, mend's ratio to
// each, the statements mend sent per operation and the round trips per
// operation of all three, as counted on the wire.
func report(b *testing.B, ops int, lib, raw, limit measured, stmts int) {
	rate := func(m measured) float64 { return float64(ops) / m.took.Seconds() }
	perOp := func(m measured) float64 { return float64(m.rts) / float64(ops) }
	b.ReportMetric(rate(lib), "ops/s")
	b.ReportMetric(rate(raw), "raw-ops/s")
	b.ReportMetric(rate(limit), "limit-ops/s")
	b.ReportMetric(rate(lib)/rate(raw), "lib/raw")
	b.ReportMetric(rate(lib)/rate(limit), "lib/limit")
	b.ReportMetric(float64(stmts)/float64(ops), "stmts/op")
	b.ReportMetric(perOp(lib), "rt/op")
	b.ReportMetric(perOp(raw), "raw-rt/op")
	b.ReportMetric(perOp(limit), "limit-rt/op")
}

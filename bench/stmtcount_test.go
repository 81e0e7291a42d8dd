package bench

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
)

// stmtCounter is a TCP proxy in front of one database that counts the
// statements clients send through it (COM_QUERY and COM_STMT_EXECUTE
// packets, what the server's Questions counts): the cost one component
// puts on the queue database alone, when mend's database is on the same
// server (the harness's) and the server keeps no performance_schema. It
// reads the client's side of the protocol only (no TLS, no compression:
// the harness's DSNs use neither); the server's side is copied as is. It is
// a TCP proxy rather than the tap (tap_test.go), which sees only what
// database/sql dials: the binlog reader's replication connection is the
// go-mysql client's own.
type stmtCounter struct {
	ln    net.Listener
	stmts atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// newStmtCounter starts a counter in front of db's server and returns it
// with db's DSN routed through it; both stop at b's cleanup.
func newStmtCounter(b *testing.B, db *mysqltest.DB) (*stmtCounter, string) {
	b.Helper()
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		b.Fatal(err)
	}
	if cfg.TLS != nil {
		b.Skip("the statement counter reads the protocol in the clear; this server's DSN uses TLS")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	c := &stmtCounter{ln: ln}
	upstream := cfg.Addr
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = client.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, client, server)
			c.mu.Unlock()
			c.wg.Add(2)
			go func() {
				defer c.wg.Done()
				_, _ = io.Copy(client, server)
				_ = client.Close()
			}()
			go func() {
				defer c.wg.Done()
				c.count(server, client)
				_ = server.Close()
			}()
		}
	}()
	b.Cleanup(c.close)
	return c, db.DSNVia(ln.Addr().String())
}

// count copies the client's packets to the server, counting the commands
// that are statements.
func (c *stmtCounter) count(dst io.Writer, src io.Reader) {
	r := bufio.NewReaderSize(src, 64<<10)
	w := bufio.NewWriterSize(dst, 64<<10)
	var head [4]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(head[:3:3], 0)))
		seq := head[3]
		if _, err := w.Write(head[:]); err != nil {
			return
		}
		if seq == 0 && n > 0 {
			cmd, err := r.Peek(1)
			if err != nil {
				return
			}
			switch cmd[0] {
			case 0x03, 0x17: // COM_QUERY, COM_STMT_EXECUTE
				c.stmts.Add(1)
			}
		}
		if _, err := io.CopyN(w, r, int64(n)); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// Statements is how many statements have gone through so far.
func (c *stmtCounter) Statements() int64 { return c.stmts.Load() }

func (c *stmtCounter) close() {
	_ = c.ln.Close()
	c.mu.Lock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

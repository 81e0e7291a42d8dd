package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// errNotPrivate is returned by fault methods on a server the harness does not own as a process.
var errNotPrivate = errors.New("mysqltest: fault injection needs a private server (use StartPrivate)")

// Server is a MySQL-compatible server the harness hands out databases on: an existing one
// (EnvDSN), a Docker container, or a private process started from a local binary. Only a
// private server supports the fault methods Kill, Pause, Resume and Restart.
type Server struct {
	kind      sourceKind
	flavor    string        // "mariadb", "mysql" or "" when unknown
	cfg       *mysql.Config // root credentials, no database name
	startedIn time.Duration
	shared    bool // the package's shared server (drop failures are test failures)

	local   *localServer // non-nil for a private server
	closeFn func() error // extra teardown (Docker purge); nil if none

	closeOnce sync.Once
	closeErr  error
}

// Addr returns the server's TCP address, "127.0.0.1:PORT" for private servers.
func (s *Server) Addr() string { return s.cfg.Addr }

// RootDSN returns a DSN for the administrative user with no database selected, with
// parseTime=true, loc=UTC and interpolateParams=true.
func (s *Server) RootDSN() string { return formatDSN(s.cfg, "") }

// Private reports whether the harness owns the server process, so the fault methods work.
func (s *Server) Private() bool { return s.local != nil }

// StartedIn returns how long the harness took to make the server ready (for a private
// server: data directory initialisation plus first start; zero for EnvDSN).
func (s *Server) StartedIn() time.Duration { return s.startedIn }

// Flavor returns "mariadb" or "mysql" when known (from the binary or image), else "".
func (s *Server) Flavor() string { return s.flavor }

// String describes the server for logs.
func (s *Server) String() string {
	f := s.flavor
	if f == "" {
		f = "server"
	}
	return fmt.Sprintf("%s %s at %s", s.kind, f, s.cfg.Addr)
}

// Kill sends SIGKILL to a private server and waits for the process to exit. The data directory
// is kept, so Restart brings the server back with every acknowledged commit.
// Returns an error on a non-private server or one that is not running.
func (s *Server) Kill() error {
	if s.local == nil {
		return errNotPrivate
	}
	return s.local.kill()
}

// Pause freezes a private server with SIGSTOP: connections stay open but nothing is answered.
// It returns once the process is stopped. Returns an error on a non-private server or one that
// is not running.
func (s *Server) Pause() error {
	if s.local == nil {
		return errNotPrivate
	}
	return s.local.pause()
}

// Resume continues a server frozen by Pause (SIGCONT).
// Returns an error on a non-private server or one that is not running.
func (s *Server) Resume() error {
	if s.local == nil {
		return errNotPrivate
	}
	return s.local.resume()
}

// Restart starts a private server again on the same data directory and port and waits until it
// answers. A server that is still running is first stopped gracefully.
// Returns an error on a non-private server, or if the server does not become ready before ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	if s.local == nil {
		return errNotPrivate
	}
	return s.local.restart(ctx, s.cfg)
}

// Close stops the server (gracefully, SIGKILL after a timeout) and removes its temporary files;
// for a Docker server it removes the container; for an EnvDSN server it does nothing.
// It is idempotent: later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.local != nil {
			errs = append(errs, s.local.close())
		}
		if s.closeFn != nil {
			errs = append(errs, s.closeFn())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// dsnParams are forced on every DSN the harness hands out.
func applyParams(cfg *mysql.Config) {
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
}

// formatDSN renders cfg with dbName selected and the harness parameters. The driver omits
// loc=UTC as its default; it is written out so the DSN says what it means.
func formatDSN(cfg *mysql.Config, dbName string) string {
	c := cfg.Clone()
	c.DBName = dbName
	applyParams(c)
	dsn := c.FormatDSN()
	if !strings.Contains(dsn, "loc=") {
		if strings.Contains(dsn, "?") {
			dsn += "&loc=UTC"
		} else {
			dsn += "?loc=UTC"
		}
	}
	return dsn
}

// replaceAddr returns dsn with its network address replaced by addr (TCP).
func replaceAddr(dsn, addr string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("mysqltest: parse dsn: %w", err)
	}
	cfg.Net = "tcp"
	cfg.Addr = addr
	return formatDSN(cfg, cfg.DBName), nil
}

// ping opens one connection with cfg and pings it, bounded by timeout.
func ping(ctx context.Context, cfg *mysql.Config, timeout time.Duration) error {
	c := cfg.Clone()
	c.Timeout = timeout
	connector, err := mysql.NewConnector(c)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return db.PingContext(ctx)
}

// waitReady polls ping until it answers, ctx ends, or exited is closed (the process died).
func waitReady(ctx context.Context, cfg *mysql.Config, exited <-chan struct{}) error {
	const interval = 20 * time.Millisecond
	var last error
	for {
		if last = ping(ctx, cfg, time.Second); last == nil {
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-exited:
			t.Stop()
			return fmt.Errorf("mysqltest: server exited before it was ready (last ping: %v)", last)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("mysqltest: server not ready: %w (last ping: %v)", context.Cause(ctx), last)
		case <-t.C:
		}
	}
}

// freePort asks the kernel for an unused port on 127.0.0.1. Another process may take it before
// the server binds; startLocal retries on that.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("mysqltest: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package mysqltest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/localdb"
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

	local   *localdb.Server // non-nil for a private server
	closeFn func() error    // extra teardown (Docker purge); nil if none

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
	return s.local.Kill()
}

// Pause freezes a private server with SIGSTOP: connections stay open but nothing is answered.
// It returns once the process is stopped. Returns an error on a non-private server or one that
// is not running.
func (s *Server) Pause() error {
	if s.local == nil {
		return errNotPrivate
	}
	return s.local.Pause()
}

// Resume continues a server frozen by Pause (SIGCONT).
// Returns an error on a non-private server or one that is not running.
func (s *Server) Resume() error {
	if s.local == nil {
		return errNotPrivate
	}
	return s.local.Resume()
}

// Restart starts a private server again on the same data directory and port and waits until it
// answers. A server that is still running is first stopped gracefully.
// Returns an error on a non-private server, or if the server does not become ready before ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	if s.local == nil {
		return errNotPrivate
	}
	return s.local.Restart(ctx)
}

// Close stops the server (gracefully, SIGKILL after a timeout) and removes its temporary files;
// for a Docker server it removes the container; for an EnvDSN server it does nothing.
// It is idempotent: later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.local != nil {
			errs = append(errs, s.local.Close())
		}
		if s.closeFn != nil {
			errs = append(errs, s.closeFn())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// rootConfig is the driver config for a private or Docker server's passwordless root over TCP.
func rootConfig(addr string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = addr
	applyParams(cfg)
	return cfg
}

// applyParams forces the parameters of every DSN the harness hands out.
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

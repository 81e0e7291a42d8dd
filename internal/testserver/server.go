package testserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/dockerdb"
	"github.com/mendq/mend/internal/localdb"
	"github.com/mendq/mend/internal/vitessdb"
	"github.com/mendq/mend/migrations"
)

// ErrNotOwned is returned by the fault methods on a server the caller does
// not own (an EnvDSN server).
var ErrNotOwned = errors.New("testserver: fault injection needs a server the harness owns (a container or a local process)")

// Server is a MySQL-compatible server: an existing one (EnvDSN), a container,
// or a local process. On the last two the fault methods work: Kill (SIGKILL,
// or docker kill), Pause and Resume (SIGSTOP/SIGCONT, or docker
// pause/unpause), Restart on the same data and address.
type Server struct {
	backend   Backend
	image     string
	flavor    string        // "mariadb", "mysql" or "" when unknown
	version   string        // the server's version number, e.g. 9.7.4 or 10.11.14
	cfg       *mysql.Config // root credentials, no database name
	startedIn time.Duration

	local  *localdb.Server
	docker *dockerdb.Server
	vitess *vitessdb.Server

	closeOnce sync.Once
	closeErr  error
}

// Start brings up the server c names and asks it what it is (Engine). ctx
// bounds only the start.
func Start(ctx context.Context, c Choice) (*Server, error) {
	s, err := start(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := s.identify(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	// An engine name with a version (mariadb-11.8) is a promise the log names: a server of
	// another version (an image or binary given some other way) is refused, not tested.
	if WantVersion(c.Engine) != "" && (s.flavor != Product(c.Engine) || !VersionMatches(c.Engine, s.version)) {
		return nil, errors.Join(fmt.Errorf("testserver: %s=%s, but the server answers as %s", EnvEngine, c.Engine, s.Engine()), s.Close())
	}
	return s, nil
}

func start(ctx context.Context, c Choice) (*Server, error) {
	begin := time.Now()
	switch c.Backend {
	case BackendDSN:
		cfg, err := mysql.ParseDSN(c.DSN)
		if err != nil {
			return nil, fmt.Errorf("testserver: parse %s: %w", EnvDSN, err)
		}
		cfg.DBName = ""
		ApplyParams(cfg)
		if err := localdb.Ping(ctx, cfg, 10*time.Second); err != nil {
			return nil, fmt.Errorf("testserver: server from %s at %s does not answer: %w", EnvDSN, cfg.Addr, err)
		}
		return &Server{backend: BackendDSN, cfg: cfg, startedIn: time.Since(begin)}, nil
	case BackendDocker:
		if err := dockerdb.Reap(ctx); err != nil {
			return nil, err
		}
		d, err := dockerdb.StartWith(ctx, c.Image, dockerdb.Options{Args: c.Args})
		if err != nil {
			return nil, err
		}
		return &Server{backend: BackendDocker, image: c.Image, flavor: d.Flavor, cfg: d.Config(), docker: d, startedIn: time.Since(begin)}, nil
	case BackendLocal:
		l, err := localdb.Start(ctx, localdb.Config{Binary: c.Binary, DirPrefix: "mend-testserver-", Args: c.Args})
		if err != nil {
			return nil, err
		}
		cfg, err := mysql.ParseDSN(l.RootDSN(""))
		if err != nil {
			return nil, errors.Join(err, l.Close())
		}
		return &Server{backend: BackendLocal, flavor: l.Flavor, cfg: cfg, local: l, startedIn: time.Since(begin)}, nil
	case BackendVitess:
		schema, err := vitessdb.MendSchema()
		if err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		v, err := vitessdb.Start(ctx, vitessdb.Config{VitessDir: c.Binary, Schema: schema, VSchema: migrations.VSchema, DirPrefix: "mend-testserver-vitess-"})
		if err != nil {
			return nil, err
		}
		cfg, err := mysql.ParseDSN(v.DSN(""))
		if err != nil {
			return nil, errors.Join(err, v.Close())
		}
		return &Server{backend: BackendVitess, flavor: EngineMySQL, cfg: cfg, vitess: v, startedIn: time.Since(begin)}, nil
	default:
		return nil, fmt.Errorf("testserver: %s", c.Reason)
	}
}

// ErrVitess is returned by the fault methods on a Vitess server: its mysqld and vtcombo are
// not killed, paused or restarted from here, so the fault suites skip there.
var ErrVitess = fmt.Errorf("testserver: fault injection is %w", vitessdb.ErrUnsupported)

// Vitess returns the Vitess cluster behind a BackendVitess server (its keyspace pool and the
// mysqld under it), nil for other backends.
func (s *Server) Vitess() *vitessdb.Server { return s.vitess }

// identify reads the server's product and version from VERSION(): tests and
// the end-of-run report name what really answered, not what was asked for.
func (s *Server) identify(ctx context.Context) error {
	db, err := sql.Open("mysql", s.RootDSN(""))
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return fmt.Errorf("testserver: ask %s for its version: %w", s.cfg.Addr, err)
	}
	s.flavor, s.version = ParseVersion(v)
	return nil
}

// ParseVersion splits a VERSION() string into the engine ("mariadb" or
// "mysql") and the version number: "10.11.14-MariaDB-0+deb12u1" is mariadb
// 10.11.14, "9.7.4" and "8.4.6-Vitess" are mysql.
func ParseVersion(v string) (engine, version string) {
	engine = EngineMySQL
	if strings.Contains(strings.ToLower(v), "mariadb") {
		engine = EngineMariaDB
	}
	version, _, _ = strings.Cut(v, "-")
	return engine, version
}

// ApplyParams forces the parameters of every DSN the harness hands out.
func ApplyParams(cfg *mysql.Config) {
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
}

// Backend says where the server came from.
func (s *Server) Backend() Backend { return s.backend }

// Addr returns the server's TCP address (127.0.0.1:PORT for owned servers).
func (s *Server) Addr() string { return s.cfg.Addr }

// Config returns a copy of the root driver config, no database selected.
func (s *Server) Config() *mysql.Config { return s.cfg.Clone() }

// RootDSN returns a DSN for the administrative user with dbName selected
// (may be empty), with parseTime=true, loc=UTC and interpolateParams=true.
func (s *Server) RootDSN(dbName string) string { return FormatDSN(s.cfg, dbName) }

// FormatDSN renders cfg with dbName selected and the harness parameters. The
// driver omits loc=UTC as its default; it is written out so the DSN says what it means.
func FormatDSN(cfg *mysql.Config, dbName string) string {
	c := cfg.Clone()
	c.DBName = dbName
	ApplyParams(c)
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

// Owned reports whether the harness owns the server (container or process), so the fault methods work.
func (s *Server) Owned() bool { return s.local != nil || s.docker != nil }

// StartedIn returns how long the start took (for a container: engine start plus initialisation).
func (s *Server) StartedIn() time.Duration { return s.startedIn }

// Flavor returns "mariadb" or "mysql", as the server reported it.
func (s *Server) Flavor() string { return s.flavor }

// Version returns the server's version number (e.g. 9.7.4), as it reported it.
func (s *Server) Version() string { return s.version }

// Engine returns the product and version, e.g. "mysql 9.7.4" or "mariadb 10.11.14".
func (s *Server) Engine() string { return s.flavor + " " + s.version }

// Dir returns a local server's temporary directory, "" for other backends.
func (s *Server) Dir() string {
	if s.local != nil {
		return s.local.Dir
	}
	if s.vitess != nil {
		return s.vitess.Dir
	}
	return ""
}

// ContainerID returns a container server's ID, "" for other backends.
func (s *Server) ContainerID() string {
	if s.docker != nil {
		return s.docker.ID()
	}
	return ""
}

// String describes the server for logs: engine and version, backend, image, address.
func (s *Server) String() string {
	if s.image != "" {
		return fmt.Sprintf("%s via %s (%s) at %s", s.Engine(), s.backend, s.image, s.cfg.Addr)
	}
	return fmt.Sprintf("%s via %s at %s", s.Engine(), s.backend, s.cfg.Addr)
}

// Kill stops the server with SIGKILL (docker kill for a container) and waits
// until it is gone. Its data is kept, so Restart brings it back with every
// acknowledged commit. Returns an error on a server not owned or not running.
func (s *Server) Kill() error {
	switch {
	case s.vitess != nil:
		return ErrVitess
	case s.local != nil:
		return s.local.Kill()
	case s.docker != nil:
		return s.docker.Kill()
	}
	return ErrNotOwned
}

// Pause freezes the server (SIGSTOP, or docker pause): connections stay open
// but nothing is answered. Returns an error on a server not owned or not running.
func (s *Server) Pause() error {
	switch {
	case s.vitess != nil:
		return ErrVitess
	case s.local != nil:
		return s.local.Pause()
	case s.docker != nil:
		return s.docker.Pause()
	}
	return ErrNotOwned
}

// Resume continues a paused server. Returns an error on a server not owned or not running.
func (s *Server) Resume() error {
	switch {
	case s.vitess != nil:
		return ErrVitess
	case s.local != nil:
		return s.local.Resume()
	case s.docker != nil:
		return s.docker.Resume()
	}
	return ErrNotOwned
}

// Restart starts the server again on the same data and address and waits
// until it answers; a running server is first stopped gracefully.
func (s *Server) Restart(ctx context.Context) error {
	switch {
	case s.vitess != nil:
		return ErrVitess
	case s.local != nil:
		return s.local.Restart(ctx)
	case s.docker != nil:
		return s.docker.Restart(ctx)
	}
	return ErrNotOwned
}

// Running reports whether an owned server is up (it may be paused); an
// EnvDSN server is always taken to be running.
func (s *Server) Running() bool {
	switch {
	case s.vitess != nil:
		return s.vitess.Running()
	case s.local != nil:
		return s.local.Running()
	case s.docker != nil:
		return s.docker.Running()
	}
	return true
}

// Crash describes an exit of an owned server that nobody asked for, with its
// log's tail, or returns nil.
func (s *Server) Crash() error {
	switch {
	case s.vitess != nil:
		return s.vitess.Crash()
	case s.local != nil:
		return s.local.Crash()
	case s.docker != nil:
		return s.docker.Crash()
	}
	return nil
}

// Close stops an owned server and removes everything it left (temporary
// directory, or container and volume); an EnvDSN server is left alone. It is
// idempotent: later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		switch {
		case s.local != nil:
			s.closeErr = s.local.Close()
		case s.docker != nil:
			s.closeErr = s.docker.Close()
		case s.vitess != nil:
			s.closeErr = s.vitess.Close()
		}
	})
	return s.closeErr
}

package mysqltest

import (
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/testserver"
)

// Environment variables read by the harness (see package testserver).
const (
	EnvDSN     = testserver.EnvDSN
	EnvImage   = testserver.EnvImage
	EnvBackend = testserver.EnvBackend
	EnvEngine  = testserver.EnvEngine
	EnvCI      = testserver.EnvCI
)

// Server is a MySQL-compatible server the harness hands out databases on: an
// existing one (EnvDSN), a container, or a private local process. On the last
// two the fault methods Kill, Pause, Resume and Restart work (see
// testserver.Server).
type Server struct {
	*testserver.Server
	shared bool // the package's shared server (drop failures are test failures)
}

// RootDSN returns a DSN for the administrative user with no database
// selected, with parseTime=true, loc=UTC and interpolateParams=true.
func (s *Server) RootDSN() string { return s.Server.RootDSN("") }

// Private reports whether the harness owns the server (container or
// process), so the fault methods work.
func (s *Server) Private() bool { return s.Owned() }

// replaceAddr returns dsn with its network address replaced by addr (TCP).
func replaceAddr(dsn, addr string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("mysqltest: parse dsn: %w", err)
	}
	cfg.Net = "tcp"
	cfg.Addr = addr
	return testserver.FormatDSN(cfg, cfg.DBName), nil
}

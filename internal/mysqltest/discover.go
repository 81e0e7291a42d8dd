package mysqltest

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/ory/dockertest/v3"

	"github.com/mendq/mend/internal/localdb"
)

// Environment variables read by the harness.
const (
	// EnvDSN names an existing server (a go-sql-driver DSN, user with CREATE/DROP DATABASE rights).
	EnvDSN = "MEND_TEST_DSN"
	// EnvImage overrides the Docker image used when a Docker engine answers.
	EnvImage = "MEND_TEST_IMAGE"
	// EnvCI, when true, turns "no server available" from a skip into a failure.
	EnvCI = "CI"
)

// DefaultImage is the Docker image used when a Docker engine answers and EnvImage is unset:
// the MySQL the users run in production.
const DefaultImage = "mysql:8.4"

// noServerHelp names the three ways to give the tests a server.
const noServerHelp = "no MySQL-compatible server available: set " + EnvDSN +
	" to an existing server (e.g. root:pass@tcp(127.0.0.1:3306)/), run a Docker engine (image " + DefaultImage +
	", override with " + EnvImage + "), or install mariadb-server or mysql-server so mariadbd/mysqld is on PATH or in /usr/sbin"

// noBinaryHelp is the message when a private server is needed but no local binary exists.
const noBinaryHelp = "no local mariadbd or mysqld binary for a private server (needed for fault tests; " +
	EnvDSN + " and Docker are not used for them): install mariadb-server or mysql-server"

// sourceKind says where the shared server comes from.
type sourceKind int

const (
	sourceNone   sourceKind = iota // nothing available: skip, or fail under CI
	sourceDSN                      // an existing server named by EnvDSN
	sourceDocker                   // a container started through dockertest
	sourceBinary                   // a private process from a local binary
)

func (k sourceKind) String() string {
	switch k {
	case sourceDSN:
		return "dsn"
	case sourceDocker:
		return "docker"
	case sourceBinary:
		return "local"
	default:
		return "none"
	}
}

// source is the outcome of discovery.
type source struct {
	kind   sourceKind
	dsn    string // sourceDSN
	image  string // sourceDocker
	binary string // sourceBinary
	fatal  bool   // sourceNone: fail (CI) rather than skip
	reason string // sourceNone: what to do about it
}

// probes are discover's view of the machine, injected so discovery is testable without a server.
type probes struct {
	getenv     func(string) string
	dockerPing func() error           // nil error means an engine answered
	findBinary func() (string, error) // path of mariadbd or mysqld (localdb.FindBinary)
}

// discover picks the shared server's source, in order: EnvDSN, a Docker engine, a local binary, nothing.
// Probes are called lazily: Docker is not pinged when EnvDSN is set.
func discover(p probes) source {
	if dsn := p.getenv(EnvDSN); dsn != "" {
		return source{kind: sourceDSN, dsn: dsn}
	}
	if p.dockerPing() == nil {
		image := p.getenv(EnvImage)
		if image == "" {
			image = DefaultImage
		}
		return source{kind: sourceDocker, image: image}
	}
	if bin, err := p.findBinary(); err == nil {
		return source{kind: sourceBinary, binary: bin}
	}
	return source{kind: sourceNone, fatal: isCI(p.getenv), reason: noServerHelp}
}

// discoverPrivate picks the binary for a private server: only a local binary will do.
func discoverPrivate(p probes) source {
	if bin, err := p.findBinary(); err == nil {
		return source{kind: sourceBinary, binary: bin}
	}
	return source{kind: sourceNone, fatal: isCI(p.getenv), reason: noBinaryHelp}
}

func isCI(getenv func(string) string) bool {
	ci, err := strconv.ParseBool(getenv(EnvCI))
	return err == nil && ci
}

// systemProbes looks at the real machine.
func systemProbes() probes {
	return probes{getenv: os.Getenv, dockerPing: pingDocker, findBinary: localdb.FindBinary}
}

// pingDocker reports whether a Docker engine answers within a couple of seconds.
func pingDocker() error {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return pool.Client.PingWithContext(ctx)
}

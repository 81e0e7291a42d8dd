package testserver

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/mendq/mend/internal/dockerdb"
	"github.com/mendq/mend/internal/localdb"
	"github.com/mendq/mend/internal/vitessdb"
)

// Environment variables read by discovery.
const (
	// EnvDSN names an existing server (a go-sql-driver DSN; its user may create and drop databases).
	EnvDSN = "MEND_TEST_DSN"
	// EnvImage overrides the Docker image (its engine is read from the server it starts).
	EnvImage = "MEND_TEST_IMAGE"
	// EnvBackend forces one backend: dsn, docker or local.
	EnvBackend = "MEND_TEST_BACKEND"
	// EnvEngine picks the server product for the docker and local backends: mysql, mariadb
	// (10.11, Debian 12's) or mariadb-11.8 (the 11.8 LTS, Debian unstable's); vitess picks the
	// Vitess backend (a private 2-shard cluster, see package vitessdb).
	EnvEngine = "MEND_TEST_ENGINE"
	// EnvCI, when true, turns "no server available" from a skip into a failure.
	EnvCI = "CI"
)

// The engines a private server can run.
const (
	EngineMySQL   = "mysql"
	EngineMariaDB = "mariadb"
	// EngineMariaDB118 is MariaDB 11.8 LTS (Debian unstable's mariadb-server): the MariaDB
	// product with a version selector. Its servers report flavor "mariadb"; discovery refuses
	// one whose version is not 11.8.x.
	EngineMariaDB118 = "mariadb-11.8"
	// EngineVitess is a sharded Vitess cluster (vttestserver over MySQL 9.7) reached through
	// vtgate: its own backend, BackendVitess, whatever EnvBackend says.
	EngineVitess = "vitess"
)

// DefaultEngine is the engine used when EnvEngine is unset: MySQL, the engine the real submit
// queue runs on (MySQL 8 only), and the one whose rules differ from the rest (NO PAD collations,
// definer checks, removed functions). When it is unset and no MySQL image or binary exists,
// discovery falls back to MariaDB and says so; when it is set, there is no fallback.
const DefaultEngine = EngineMySQL

// DefaultImage is the MySQL image used where a registry answers: the MySQL the users run in production.
const DefaultImage = "mysql:8.4"

// DefaultMariaDBImage is the MariaDB image used where a registry answers and none was built here.
const DefaultMariaDBImage = "mariadb:10.11"

// DefaultMariaDB118Image is the MariaDB 11.8 image used where a registry answers and none was built here.
const DefaultMariaDB118Image = "mariadb:11.8"

// Product returns the server product an engine name runs: "mariadb" for mariadb and
// mariadb-11.8, else the name itself.
func Product(engine string) string {
	if engine == EngineMariaDB118 {
		return EngineMariaDB
	}
	return engine
}

// WantVersion returns the major.minor an engine name selects ("11.8" for mariadb-11.8), ""
// when it selects none.
func WantVersion(engine string) string {
	if p, v, ok := strings.Cut(engine, "-"); ok && p == EngineMariaDB {
		return v
	}
	return ""
}

// VersionMatches reports whether a server version number (11.8.9) is of the major.minor an
// engine name selects; any version matches an engine that selects none.
func VersionMatches(engine, version string) bool {
	want := WantVersion(engine)
	return want == "" || version == want || strings.HasPrefix(version, want+".")
}

// Backend names where a server comes from.
type Backend string

// The backends, in discovery order.
const (
	BackendNone   Backend = ""       // nothing available: skip, or fail under CI
	BackendDSN    Backend = "dsn"    // an existing server named by EnvDSN
	BackendDocker Backend = "docker" // a container started through dockertest
	BackendLocal  Backend = "local"  // a private process from a local mariadbd/mysqld
	BackendVitess Backend = "vitess" // a private vttestserver (EnvEngine=vitess)
)

// Choice is the outcome of discovery.
type Choice struct {
	Backend Backend
	DSN     string // BackendDSN
	Image   string // BackendDocker
	Binary  string // BackendLocal
	// Engine is the engine discovery chose for a docker or local server ("" for BackendDSN:
	// the server says what it is once connected).
	Engine string
	// Note is a one-line account of a fallback (Docker answered but had no
	// image, or the default engine was not available), printed by the caller;
	// empty when discovery went as expected.
	Note string
	// Fatal and Reason apply to BackendNone: fail (CI) rather than skip, and what to do.
	Fatal  bool
	Reason string
	// Args are extra server options for a docker or local server, after
	// the usual ones (a test of a server configured another way).
	Args []string
}

// Probes are discovery's view of the machine, injected so discovery is testable without one.
type Probes struct {
	Getenv     func(string) string
	DockerPing func() error                        // nil error: an engine answered
	HasImage   func(image string) bool             // the engine holds image locally
	Pull       func(image string) error            // fetch image from its registry
	FindBinary func(engine string) (string, error) // path of a server binary of that engine
	LocalImage func(engine string) string          // the tag scripts/build-test-image.sh builds for engine, "" if none applies
	FindVitess func() (string, error)              // the directory of the built Vitess binaries (EngineVitess)
}

var systemOnce struct {
	sync.Once
	p Probes
}

// SystemProbes looks at the real machine. Answers are cached per process, so
// every test of a binary sees the same machine and Docker is asked once.
func SystemProbes() Probes {
	systemOnce.Do(func() {
		var pingOnce sync.Once
		var pingErr error
		systemOnce.p = Probes{
			Getenv: os.Getenv,
			DockerPing: func() error {
				pingOnce.Do(func() { pingErr = dockerdb.Ping(context.Background()) })
				return pingErr
			},
			HasImage: func(image string) bool {
				ok, err := dockerdb.HasImage(image)
				return err == nil && ok
			},
			Pull:       func(image string) error { return dockerdb.Pull(context.Background(), image) },
			FindBinary: localdb.FindBinaryFor,
			LocalImage: LocalImage,
			FindVitess: vitessdb.Find,
		}
	})
	return systemOnce.p
}

// LocalImage returns the tag scripts/build-test-image.sh gives the image it
// builds for engine: mend-test/mariadb:debian-<VERSION_ID> (this machine's
// Debian release), mend-test/mariadb:11.8 (Debian unstable's MariaDB 11.8)
// or mend-test/mysql:sid (Debian unstable's MySQL). It returns "" on a
// machine that is not Debian, where none can be built.
func LocalImage(engine string) string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return ""
	}
	var id, version string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			version = v
		}
	}
	if id != "debian" || version == "" {
		return ""
	}
	switch engine {
	case EngineMySQL:
		return "mend-test/mysql:sid"
	case EngineMariaDB118:
		return "mend-test/mariadb:11.8"
	}
	return "mend-test/mariadb:debian-" + version
}

// buildHint says how to build engine's image.
func buildHint(engine string) string {
	return "bash scripts/build-test-image.sh " + engine + " builds one from Debian packages (make test runs it)"
}

func noServer(p Probes) Choice {
	return Choice{Fatal: isCI(p.Getenv), Reason: "no MySQL-compatible server available: set " + EnvDSN +
		" to an existing server (e.g. root:pass@tcp(127.0.0.1:3306)/), run a Docker engine (image " + DefaultImage +
		" where a registry answers, else " + buildHint("mysql|mariadb") + "; " + EnvImage + " overrides), or install mariadb-server " +
		"or mysql-server so mariadbd/mysqld is on PATH or in /usr/sbin"}
}

// Engine returns the engine EnvEngine asks for (DefaultEngine when unset) and
// whether it was asked for explicitly; an unknown name is an error.
func Engine(getenv func(string) string) (engine string, explicit bool, err error) {
	switch e := strings.ToLower(strings.TrimSpace(getenv(EnvEngine))); e {
	case "":
		return DefaultEngine, false, nil
	case EngineMySQL, EngineMariaDB, EngineMariaDB118, EngineVitess:
		return e, true, nil
	default:
		return "", false, fmt.Errorf("%s=%q: want mysql, mariadb, %s or vitess", EnvEngine, e, EngineMariaDB118)
	}
}

// otherEngine is the fallback when the default engine is not available.
func otherEngine(engine string) string {
	if engine == EngineMySQL {
		return EngineMariaDB
	}
	return EngineMySQL
}

// Discover picks the shared server's source. Without EnvBackend the order is:
// EnvDSN; a Docker engine with an image of the engine (EnvImage; else the
// registry image if held or pullable; else the locally built image); a local
// binary of the engine; nothing. EnvBackend=dsn|docker|local allows only that
// backend. EnvEngine picks the engine (see DefaultEngine).
func Discover(p Probes) Choice {
	if c, ok := discoverVitess(p); ok {
		return c
	}
	switch b := Backend(strings.ToLower(p.Getenv(EnvBackend))); b {
	case BackendNone:
	case BackendDSN:
		if dsn := p.Getenv(EnvDSN); dsn != "" {
			return Choice{Backend: BackendDSN, DSN: dsn}
		}
		return Choice{Fatal: isCI(p.Getenv), Reason: EnvBackend + "=dsn but " + EnvDSN + " is empty"}
	case BackendDocker, BackendLocal:
		return DiscoverPrivate(p)
	default:
		return Choice{Fatal: true, Reason: fmt.Sprintf("%s=%q: want dsn, docker or local", EnvBackend, b)}
	}
	if dsn := p.Getenv(EnvDSN); dsn != "" {
		return Choice{Backend: BackendDSN, DSN: dsn}
	}
	return DiscoverPrivate(p)
}

// DiscoverPrivate picks the source of a server the caller owns as a process
// or container (fault tests, the demo): never EnvDSN. Docker first when it
// answers and an image of the engine is available, else a local binary of the
// engine; EnvBackend=docker or local allows only that one. With EnvEngine
// unset and the default engine unavailable on the backend, it takes the other
// engine and says so in Note.
func DiscoverPrivate(p Probes) Choice {
	if c, ok := discoverVitess(p); ok {
		return c
	}
	engine, explicit, err := Engine(p.Getenv)
	if err != nil {
		return Choice{Fatal: true, Reason: err.Error()}
	}
	forced := Backend(strings.ToLower(p.Getenv(EnvBackend)))
	var notes []string
	if forced != BackendLocal {
		if err := p.DockerPing(); err == nil {
			image, why := pickImage(p, engine)
			if image == "" && !explicit {
				if alt, _ := pickImage(p, otherEngine(engine)); alt != "" {
					return Choice{Backend: BackendDocker, Image: alt, Engine: otherEngine(engine),
						Note: "no " + engine + " image (" + why + "); using " + alt + " (set " + EnvEngine + " to insist)"}
				}
			}
			if image != "" {
				return Choice{Backend: BackendDocker, Image: image, Engine: engine}
			}
			if forced == BackendDocker {
				return Choice{Fatal: isCI(p.Getenv), Reason: EnvBackend + "=docker but " + why}
			}
			notes = append(notes, "Docker answers but "+why+"; falling back to a local server binary")
		} else if forced == BackendDocker {
			return Choice{Fatal: isCI(p.Getenv), Reason: fmt.Sprintf("%s=docker but no Docker engine answers: %v", EnvBackend, err)}
		}
	}
	if bin, err := p.FindBinary(engine); err == nil {
		return Choice{Backend: BackendLocal, Binary: bin, Engine: engine, Note: strings.Join(notes, "; ")}
	}
	if !explicit {
		if bin, err := p.FindBinary(otherEngine(engine)); err == nil {
			notes = append(notes, "no "+engine+" server binary; using "+bin+" (set "+EnvEngine+" to insist)")
			return Choice{Backend: BackendLocal, Binary: bin, Engine: otherEngine(engine), Note: strings.Join(notes, "; ")}
		}
	}
	c := noServer(p)
	if forced == BackendLocal || explicit {
		c.Reason = fmt.Sprintf("no %s server binary was found (%s=%s): install %s-server, or choose another engine or backend", engine, EnvEngine, engine, engine)
		if forced == BackendLocal {
			c.Reason = EnvBackend + "=local but " + c.Reason
		}
	}
	if len(notes) > 0 {
		c.Reason = strings.Join(notes, "; ") + ", and " + c.Reason
	}
	return c
}

// discoverVitess returns the Vitess backend when EnvEngine=vitess (ok true): the cache
// directory of the built binaries, or, when they are not built, a skip (a failure under CI)
// saying how to build them.
func discoverVitess(p Probes) (Choice, bool) {
	if engine, _, err := Engine(p.Getenv); err != nil || engine != EngineVitess {
		return Choice{}, false
	}
	if p.FindVitess == nil {
		return Choice{Fatal: isCI(p.Getenv), Reason: EnvEngine + "=vitess but this machine has no Vitess probe"}, true
	}
	dir, err := p.FindVitess()
	if err != nil {
		return Choice{Fatal: isCI(p.Getenv), Reason: fmt.Sprintf("%s=vitess: %v (make test-vitess runs it)", EnvEngine, err)}, true
	}
	return Choice{Backend: BackendVitess, Binary: dir, Engine: EngineVitess}, true
}

// pickImage returns the image of engine to run, or "" and why there is none.
func pickImage(p Probes, engine string) (image, why string) {
	if img := p.Getenv(EnvImage); img != "" {
		if p.HasImage(img) {
			return img, ""
		}
		if err := p.Pull(img); err != nil {
			return "", fmt.Sprintf("image %s (from %s) is neither present nor pullable (%v)", img, EnvImage, oneLine(err))
		}
		return img, ""
	}
	registry := DefaultImage
	switch engine {
	case EngineMariaDB:
		registry = DefaultMariaDBImage
	case EngineMariaDB118:
		registry = DefaultMariaDB118Image
	}
	local := p.LocalImage(engine)
	// A registry image already held wins for MySQL (the one production runs); for MariaDB the
	// image built here from Debian's MariaDB (10.11, or unstable's 11.8) comes first.
	if engine == EngineMySQL && p.HasImage(registry) {
		return registry, ""
	}
	if local != "" && p.HasImage(local) {
		return local, ""
	}
	if p.HasImage(registry) {
		return registry, ""
	}
	if err := p.Pull(registry); err == nil {
		return registry, ""
	}
	if local == "" {
		return "", registry + " cannot be pulled and this machine is not Debian, so no image can be built here (set " + EnvImage + ")"
	}
	return "", fmt.Sprintf("%s cannot be pulled and %s was not built (%s)", registry, local, buildHint(engine))
}

func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func isCI(getenv func(string) string) bool {
	ci, err := strconv.ParseBool(getenv(EnvCI))
	return err == nil && ci
}

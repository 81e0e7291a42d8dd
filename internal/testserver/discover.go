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
)

// Environment variables read by discovery.
const (
	// EnvDSN names an existing server (a go-sql-driver DSN; its user may create and drop databases).
	EnvDSN = "MEND_TEST_DSN"
	// EnvImage overrides the Docker image.
	EnvImage = "MEND_TEST_IMAGE"
	// EnvBackend forces one backend: dsn, docker or local.
	EnvBackend = "MEND_TEST_BACKEND"
	// EnvCI, when true, turns "no server available" from a skip into a failure.
	EnvCI = "CI"
)

// DefaultImage is the image used where a registry answers: the MySQL the users run in production.
const DefaultImage = "mysql:8.4"

// Backend names where a server comes from.
type Backend string

// The backends, in discovery order.
const (
	BackendNone   Backend = ""       // nothing available: skip, or fail under CI
	BackendDSN    Backend = "dsn"    // an existing server named by EnvDSN
	BackendDocker Backend = "docker" // a container started through dockertest
	BackendLocal  Backend = "local"  // a private process from a local mariadbd/mysqld
)

// Choice is the outcome of discovery.
type Choice struct {
	Backend Backend
	DSN     string // BackendDSN
	Image   string // BackendDocker
	Binary  string // BackendLocal
	// Note is a one-line account of a fallback (Docker answered but had no
	// image), printed by the caller; empty when discovery went as expected.
	Note string
	// Fatal and Reason apply to BackendNone: fail (CI) rather than skip, and what to do.
	Fatal  bool
	Reason string
}

// Probes are discovery's view of the machine, injected so discovery is testable without one.
type Probes struct {
	Getenv     func(string) string
	DockerPing func() error             // nil error: an engine answered
	HasImage   func(image string) bool  // the engine holds image locally
	Pull       func(image string) error // fetch image from its registry
	FindBinary func() (string, error)   // path of mariadbd or mysqld
	LocalImage func() string            // the tag scripts/build-test-image.sh builds, "" if none applies
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
			FindBinary: localdb.FindBinary,
			LocalImage: LocalImage,
		}
	})
	return systemOnce.p
}

// LocalImage returns the tag scripts/build-test-image.sh gives the MariaDB
// image it builds from this machine's Debian release,
// mend-test/mariadb:debian-<VERSION_ID>, or "" on a machine that is not Debian.
func LocalImage() string {
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
	return "mend-test/mariadb:debian-" + version
}

const buildHint = "bash scripts/build-test-image.sh builds one from Debian packages (make test runs it)"

func noServer(p Probes) Choice {
	return Choice{Fatal: isCI(p.Getenv), Reason: "no MySQL-compatible server available: set " + EnvDSN +
		" to an existing server (e.g. root:pass@tcp(127.0.0.1:3306)/), run a Docker engine (image " + DefaultImage +
		" where a registry answers, else " + buildHint + "; " + EnvImage + " overrides), or install mariadb-server " +
		"or mysql-server so mariadbd/mysqld is on PATH or in /usr/sbin"}
}

// Discover picks the shared server's source. Without EnvBackend the order is:
// EnvDSN; a Docker engine with an image (EnvImage; else DefaultImage if held
// or pullable; else the locally built MariaDB image); a local binary; nothing.
// EnvBackend=dsn|docker|local allows only that backend.
func Discover(p Probes) Choice {
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
// answers and an image is available, else a local binary; EnvBackend=docker
// or local allows only that one.
func DiscoverPrivate(p Probes) Choice {
	forced := Backend(strings.ToLower(p.Getenv(EnvBackend)))
	var note string
	if forced != BackendLocal {
		if err := p.DockerPing(); err == nil {
			image, why := pickImage(p)
			if image != "" {
				return Choice{Backend: BackendDocker, Image: image}
			}
			if forced == BackendDocker {
				return Choice{Fatal: isCI(p.Getenv), Reason: EnvBackend + "=docker but " + why}
			}
			note = "Docker answers but " + why + "; falling back to a local mariadbd/mysqld"
		} else if forced == BackendDocker {
			return Choice{Fatal: isCI(p.Getenv), Reason: fmt.Sprintf("%s=docker but no Docker engine answers: %v", EnvBackend, err)}
		}
	}
	if bin, err := p.FindBinary(); err == nil {
		return Choice{Backend: BackendLocal, Binary: bin, Note: note}
	}
	c := noServer(p)
	if forced == BackendLocal {
		c.Reason = EnvBackend + "=local but no mariadbd or mysqld binary was found: install mariadb-server or mysql-server"
	}
	if note != "" {
		c.Reason = note + ", and " + c.Reason
	}
	return c
}

// pickImage returns the image to run, or "" and why there is none.
func pickImage(p Probes) (image, why string) {
	if img := p.Getenv(EnvImage); img != "" {
		if p.HasImage(img) {
			return img, ""
		}
		if err := p.Pull(img); err != nil {
			return "", fmt.Sprintf("image %s (from %s) is neither present nor pullable (%v)", img, EnvImage, oneLine(err))
		}
		return img, ""
	}
	if p.HasImage(DefaultImage) {
		return DefaultImage, ""
	}
	local := p.LocalImage()
	if local != "" && p.HasImage(local) {
		return local, ""
	}
	if err := p.Pull(DefaultImage); err == nil {
		return DefaultImage, ""
	}
	if local == "" {
		return "", DefaultImage + " cannot be pulled and this machine is not Debian, so no image can be built here (set " + EnvImage + ")"
	}
	return "", fmt.Sprintf("%s cannot be pulled and %s was not built (%s)", DefaultImage, local, buildHint)
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

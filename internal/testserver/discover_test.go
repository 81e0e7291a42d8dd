package testserver

import (
	"errors"
	"strings"
	"testing"

	"github.com/mendq/mend/internal/localdb"
)

// machine is a fake machine for discovery.
type machine struct {
	env      map[string]string
	dockerUp bool
	images   map[string]bool // held locally
	pullable map[string]bool
	binary   string // "" means none; a MariaDB binary unless its name says mysqld-of-mysql
	mysqlBin string // a MySQL binary, "" means none
	local    string // LocalImage's answer for MariaDB
	localMy  string // LocalImage's answer for MySQL
	local118 string // LocalImage's answer for MariaDB 11.8
	bin118   string // a MariaDB 11.8 binary, "" means none

	pinged bool
	pulled []string
}

func (m *machine) probes() Probes {
	return Probes{
		Getenv: func(k string) string { return m.env[k] },
		DockerPing: func() error {
			m.pinged = true
			if m.dockerUp {
				return nil
			}
			return errors.New("no engine")
		},
		HasImage: func(image string) bool { return m.images[image] },
		Pull: func(image string) error {
			m.pulled = append(m.pulled, image)
			if m.pullable[image] {
				return nil
			}
			return errors.New("no registry\nsecond line")
		},
		FindBinary: func(engine string) (string, error) {
			bin := m.binary
			switch engine {
			case EngineMySQL:
				bin = m.mysqlBin
			case EngineMariaDB118:
				bin = m.bin118
			}
			if bin == "" {
				return "", localdb.ErrNoBinary
			}
			return bin, nil
		},
		LocalImage: func(engine string) string {
			switch engine {
			case EngineMySQL:
				return m.localMy
			case EngineMariaDB118:
				return m.local118
			}
			return m.local
		},
	}
}

const (
	built    = "mend-test/mariadb:debian-12"
	builtMy  = "mend-test/mysql:sid"
	built118 = "mend-test/mariadb:11.8"
)

func TestDiscover(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		m          machine
		want       Choice
		wantPinged bool
		noteHas    string
	}{
		{
			name: "dsn wins and docker is not pinged",
			m:    machine{env: map[string]string{EnvDSN: "root@tcp(127.0.0.1:3306)/"}, dockerUp: true, binary: "/usr/sbin/mariadbd"},
			want: Choice{Backend: BackendDSN, DSN: "root@tcp(127.0.0.1:3306)/"},
		},
		{
			name: "mysql:8.4 when the registry answers", wantPinged: true,
			m:    machine{dockerUp: true, pullable: map[string]bool{DefaultImage: true}, local: built, images: map[string]bool{}},
			want: Choice{Backend: BackendDocker, Image: DefaultImage},
		},
		{
			name: "mysql:8.4 already held beats the built image", wantPinged: true,
			m:    machine{dockerUp: true, images: map[string]bool{DefaultImage: true, built: true}, local: built},
			want: Choice{Backend: BackendDocker, Image: DefaultImage},
		},
		{
			name: "the locally built image without a registry", wantPinged: true,
			m:    machine{dockerUp: true, images: map[string]bool{built: true}, local: built, binary: "/usr/sbin/mariadbd"},
			want: Choice{Backend: BackendDocker, Image: built},
		},
		{
			name: "image override", wantPinged: true,
			m:    machine{env: map[string]string{EnvImage: "mariadb:10.11"}, dockerUp: true, images: map[string]bool{"mariadb:10.11": true, built: true}, local: built},
			want: Choice{Backend: BackendDocker, Image: "mariadb:10.11"},
		},
		{
			name: "docker without any image falls back to a binary and says so", wantPinged: true,
			m:       machine{dockerUp: true, local: built, localMy: builtMy, binary: "/usr/sbin/mariadbd"},
			want:    Choice{Backend: BackendLocal, Binary: "/usr/sbin/mariadbd", Engine: EngineMariaDB},
			noteHas: "was not built",
		},
		{
			name: "forced docker without an image fails under CI", wantPinged: true,
			m:    machine{env: map[string]string{EnvBackend: "docker", EnvCI: "true"}, dockerUp: true, local: built, binary: "/usr/sbin/mariadbd"},
			want: Choice{Fatal: true},
		},
		{
			name: "forced docker without an engine skips outside CI", wantPinged: true,
			m:    machine{env: map[string]string{EnvBackend: "docker"}, binary: "/usr/sbin/mariadbd"},
			want: Choice{},
		},
		{
			name: "the built MySQL image is the default engine's", wantPinged: true,
			m:    machine{dockerUp: true, images: map[string]bool{built: true, builtMy: true}, local: built, localMy: builtMy},
			want: Choice{Backend: BackendDocker, Image: builtMy, Engine: EngineMySQL},
		},
		{
			name: "engine mariadb picks the MariaDB image", wantPinged: true,
			m:    machine{env: map[string]string{EnvEngine: "mariadb"}, dockerUp: true, images: map[string]bool{built: true, builtMy: true, DefaultImage: true}, local: built, localMy: builtMy},
			want: Choice{Backend: BackendDocker, Image: built, Engine: EngineMariaDB},
		},
		{
			name: "engine mysql prefers the registry's mysql:8.4 when held", wantPinged: true,
			m:    machine{env: map[string]string{EnvEngine: "MySQL"}, dockerUp: true, images: map[string]bool{built: true, builtMy: true, DefaultImage: true}, local: built, localMy: builtMy},
			want: Choice{Backend: BackendDocker, Image: DefaultImage, Engine: EngineMySQL},
		},
		{
			name: "default engine falls back to MariaDB and says so", wantPinged: true,
			m:       machine{dockerUp: true, images: map[string]bool{built: true}, local: built, localMy: builtMy},
			want:    Choice{Backend: BackendDocker, Image: built, Engine: EngineMariaDB},
			noteHas: "using " + built,
		},
		{
			name: "an explicit engine never falls back", wantPinged: true,
			m:    machine{env: map[string]string{EnvEngine: "mysql", EnvBackend: "docker", EnvCI: "true"}, dockerUp: true, images: map[string]bool{built: true}, local: built, localMy: builtMy, binary: "/usr/sbin/mariadbd"},
			want: Choice{Fatal: true},
		},
		{
			name: "an explicit engine's local binary",
			m:    machine{env: map[string]string{EnvEngine: "mysql", EnvBackend: "local"}, binary: "/usr/sbin/mariadbd", mysqlBin: "/opt/mysql/bin/mysqld"},
			want: Choice{Backend: BackendLocal, Binary: "/opt/mysql/bin/mysqld", Engine: EngineMySQL},
		},
		{
			name: "an explicit engine without its binary fails under CI",
			m:    machine{env: map[string]string{EnvEngine: "mysql", EnvBackend: "local", EnvCI: "true"}, binary: "/usr/sbin/mariadbd"},
			want: Choice{Fatal: true},
		},
		{
			name: "engine mariadb-11.8 picks the 11.8 image, not 10.11's", wantPinged: true,
			m: machine{env: map[string]string{EnvEngine: "mariadb-11.8"}, dockerUp: true, images: map[string]bool{built: true, builtMy: true, built118: true},
				local: built, localMy: builtMy, local118: built118},
			want: Choice{Backend: BackendDocker, Image: built118, Engine: EngineMariaDB118},
		},
		{
			name: "engine mariadb-11.8 without its image never takes 10.11's", wantPinged: true,
			m: machine{env: map[string]string{EnvEngine: "mariadb-11.8", EnvBackend: "docker", EnvCI: "true"}, dockerUp: true, images: map[string]bool{built: true, builtMy: true},
				local: built, localMy: builtMy, local118: built118, binary: "/usr/sbin/mariadbd"},
			want: Choice{Fatal: true},
		},
		{
			name: "engine mariadb-11.8 takes an 11.8 binary, not the 10.11 one",
			m:    machine{env: map[string]string{EnvEngine: "mariadb-11.8", EnvBackend: "local"}, binary: "/usr/sbin/mariadbd", bin118: "/cache/mariadb-11.8-bin/sbin/mariadbd"},
			want: Choice{Backend: BackendLocal, Binary: "/cache/mariadb-11.8-bin/sbin/mariadbd", Engine: EngineMariaDB118},
		},
		{
			name: "engine mariadb-11.8 without an 11.8 binary fails under CI",
			m:    machine{env: map[string]string{EnvEngine: "mariadb-11.8", EnvBackend: "local", EnvCI: "true"}, binary: "/usr/sbin/mariadbd"},
			want: Choice{Fatal: true},
		},
		{
			name: "an unknown engine is an error",
			m:    machine{env: map[string]string{EnvEngine: "postgres"}, binary: "/usr/sbin/mariadbd"},
			want: Choice{Fatal: true},
		},
		{
			name: "forced local ignores docker and the dsn",
			m:    machine{env: map[string]string{EnvBackend: "local", EnvDSN: "x@tcp(127.0.0.1:1)/"}, dockerUp: true, images: map[string]bool{built: true}, local: built, mysqlBin: "/x/mysqld"},
			want: Choice{Backend: BackendLocal, Binary: "/x/mysqld", Engine: EngineMySQL},
		},
		{
			name: "forced dsn without one fails under CI",
			m:    machine{env: map[string]string{EnvBackend: "dsn", EnvCI: "1"}},
			want: Choice{Fatal: true},
		},
		{
			name: "an unknown backend is an error",
			m:    machine{env: map[string]string{EnvBackend: "podman"}},
			want: Choice{Fatal: true},
		},
		{
			name: "local binary when docker does not answer", wantPinged: true,
			m:    machine{binary: "/usr/sbin/mariadbd"},
			want: Choice{Backend: BackendLocal, Binary: "/usr/sbin/mariadbd"},
		},
		{
			name: "nothing outside CI skips", wantPinged: true,
			m:    machine{},
			want: Choice{},
		},
		{
			name: "nothing under CI=true fails", wantPinged: true,
			m:    machine{env: map[string]string{EnvCI: "true"}},
			want: Choice{Fatal: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := tt.m
			got := Discover(m.probes())
			if got.Backend != tt.want.Backend || got.DSN != tt.want.DSN || got.Image != tt.want.Image ||
				got.Binary != tt.want.Binary || got.Fatal != tt.want.Fatal ||
				(tt.want.Engine != "" && got.Engine != tt.want.Engine) {
				t.Errorf("Discover() = %+v, want %+v", got, tt.want)
			}
			if got.Backend == BackendNone && got.Reason == "" {
				t.Error("no server and no reason given")
			}
			if m.pinged != tt.wantPinged {
				t.Errorf("docker pinged = %v, want %v", m.pinged, tt.wantPinged)
			}
			if tt.noteHas != "" && !strings.Contains(got.Note, tt.noteHas) {
				t.Errorf("note %q does not say %q", got.Note, tt.noteHas)
			}
			if strings.Contains(got.Note+got.Reason, "\n") {
				t.Errorf("note or reason is not one line: %q %q", got.Note, got.Reason)
			}
		})
	}
}

func TestEngineVersionSelector(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		engine, version string
		product         string
		matches         bool
	}{
		{EngineMariaDB118, "11.8.9", EngineMariaDB, true},
		{EngineMariaDB118, "11.8", EngineMariaDB, true},
		{EngineMariaDB118, "10.11.18", EngineMariaDB, false},
		{EngineMariaDB118, "11.80.1", EngineMariaDB, false},
		{EngineMariaDB, "10.11.18", EngineMariaDB, true},
		{EngineMariaDB, "11.8.9", EngineMariaDB, true},
		{EngineMySQL, "9.7.4", EngineMySQL, true},
	} {
		if got := Product(tt.engine); got != tt.product {
			t.Errorf("Product(%s) = %s, want %s", tt.engine, got, tt.product)
		}
		if got := VersionMatches(tt.engine, tt.version); got != tt.matches {
			t.Errorf("VersionMatches(%s, %s) = %v, want %v", tt.engine, tt.version, got, tt.matches)
		}
	}
	if e, explicit, err := Engine(func(string) string { return "MariaDB-11.8" }); err != nil || e != EngineMariaDB118 || !explicit {
		t.Errorf("Engine(MariaDB-11.8) = %q %v %v, want %s", e, explicit, err, EngineMariaDB118)
	}
	if _, _, err := Engine(func(string) string { return "mariadb-11.4" }); err == nil {
		t.Error("Engine(mariadb-11.4) accepted a version nothing here builds")
	}
}

func TestDiscoverPrivateNeverUsesTheDSN(t *testing.T) {
	t.Parallel()
	m := machine{env: map[string]string{EnvDSN: "root@tcp(127.0.0.1:3306)/"}, binary: "/usr/sbin/mariadbd"}
	if got := DiscoverPrivate(m.probes()); got.Backend != BackendLocal {
		t.Fatalf("DiscoverPrivate() = %+v; want the local binary", got)
	}
	m = machine{env: map[string]string{EnvDSN: "root@tcp(127.0.0.1:3306)/"}, dockerUp: true, images: map[string]bool{built: true}, local: built}
	if got := DiscoverPrivate(m.probes()); got.Backend != BackendDocker || got.Image != built {
		t.Fatalf("DiscoverPrivate() = %+v; want the built image", got)
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for v, want := range map[string][2]string{
		"10.11.14-MariaDB-0+deb12u1":   {EngineMariaDB, "10.11.14"},
		"9.7.4":                        {EngineMySQL, "9.7.4"},
		"8.4.6-Vitess":                 {EngineMySQL, "8.4.6"},
		"8.0.36-0ubuntu0.22.04.1":      {EngineMySQL, "8.0.36"},
		"11.8.9-MariaDB-4 from Debian": {EngineMariaDB, "11.8.9"},
	} {
		if e, ver := ParseVersion(v); e != want[0] || ver != want[1] {
			t.Errorf("ParseVersion(%q) = %s %s, want %s %s", v, e, ver, want[0], want[1])
		}
	}
}

func TestFaultsNeedAnOwnedServer(t *testing.T) {
	t.Parallel()
	srv := &Server{backend: BackendDSN}
	for name, f := range map[string]func() error{
		"Kill": srv.Kill, "Pause": srv.Pause, "Resume": srv.Resume,
		"Restart": func() error { return srv.Restart(t.Context()) },
	} {
		if err := f(); !errors.Is(err, ErrNotOwned) {
			t.Errorf("%s() = %v, want ErrNotOwned", name, err)
		}
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close of a DSN server: %v", err)
	}
}

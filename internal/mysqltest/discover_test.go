package mysqltest

import (
	"errors"
	"strings"
	"testing"

	"github.com/mendq/mend/internal/localdb"
)

func TestDiscover(t *testing.T) {
	t.Parallel()
	errNoEngine := errors.New("no engine")
	tests := []struct {
		name       string
		env        map[string]string
		dockerUp   bool
		binary     string // "" means none found
		want       source
		wantPinged bool
	}{
		{
			name:   "dsn wins over everything and docker is not pinged",
			env:    map[string]string{EnvDSN: "root@tcp(127.0.0.1:3306)/", EnvCI: "true"},
			binary: "/usr/sbin/mariadbd", dockerUp: true,
			want: source{kind: sourceDSN, dsn: "root@tcp(127.0.0.1:3306)/"},
		},
		{
			name: "docker when it answers and no dsn", dockerUp: true, binary: "/usr/sbin/mariadbd",
			want: source{kind: sourceDocker, image: DefaultImage}, wantPinged: true,
		},
		{
			name: "docker image override", dockerUp: true,
			env:  map[string]string{EnvImage: "mariadb:10.11"},
			want: source{kind: sourceDocker, image: "mariadb:10.11"}, wantPinged: true,
		},
		{
			name: "local binary when docker does not answer", binary: "/usr/sbin/mariadbd",
			want: source{kind: sourceBinary, binary: "/usr/sbin/mariadbd"}, wantPinged: true,
		},
		{
			name: "nothing outside CI skips",
			want: source{kind: sourceNone, fatal: false, reason: noServerHelp}, wantPinged: true,
		},
		{
			name: "nothing under CI=true fails", env: map[string]string{EnvCI: "true"},
			want: source{kind: sourceNone, fatal: true, reason: noServerHelp}, wantPinged: true,
		},
		{
			name: "CI=false skips", env: map[string]string{EnvCI: "false"},
			want: source{kind: sourceNone, fatal: false, reason: noServerHelp}, wantPinged: true,
		},
		{
			name: "empty dsn is unset", env: map[string]string{EnvDSN: ""}, binary: "/x/mysqld",
			want: source{kind: sourceBinary, binary: "/x/mysqld"}, wantPinged: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pinged := false
			p := probes{
				getenv: func(k string) string { return tt.env[k] },
				dockerPing: func() error {
					pinged = true
					if tt.dockerUp {
						return nil
					}
					return errNoEngine
				},
				findBinary: func() (string, error) {
					if tt.binary == "" {
						return "", localdb.ErrNoBinary
					}
					return tt.binary, nil
				},
			}
			if got := discover(p); got != tt.want {
				t.Errorf("discover() = %+v, want %+v", got, tt.want)
			}
			if pinged != tt.wantPinged {
				t.Errorf("docker pinged = %v, want %v", pinged, tt.wantPinged)
			}
		})
	}
}

func TestDiscoverPrivate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    map[string]string
		binary string
		want   source
	}{
		{
			name: "binary even when a dsn is set", env: map[string]string{EnvDSN: "root@tcp(127.0.0.1:3306)/"},
			binary: "/usr/sbin/mariadbd", want: source{kind: sourceBinary, binary: "/usr/sbin/mariadbd"},
		},
		{name: "no binary skips", want: source{kind: sourceNone, reason: noBinaryHelp}},
		{
			name: "no binary under CI fails", env: map[string]string{EnvCI: "1"},
			want: source{kind: sourceNone, fatal: true, reason: noBinaryHelp},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := probes{
				getenv: func(k string) string { return tt.env[k] },
				dockerPing: func() error {
					t.Error("docker pinged for a private server")
					return nil
				},
				findBinary: func() (string, error) {
					if tt.binary == "" {
						return "", localdb.ErrNoBinary
					}
					return tt.binary, nil
				},
			}
			if got := discoverPrivate(p); got != tt.want {
				t.Errorf("discoverPrivate() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNoServerHelpNamesTheOptions(t *testing.T) {
	t.Parallel()
	for _, want := range []string{EnvDSN, "Docker", "mariadb-server", "mysql-server"} {
		if !strings.Contains(noServerHelp, want) {
			t.Errorf("help %q does not mention %q", noServerHelp, want)
		}
	}
}

func TestSplitImage(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, repo, tag string }{
		{"mysql:8.4", "mysql", "8.4"},
		{"mariadb", "mariadb", "latest"},
		{"registry.local:5000/mariadb:10.11", "registry.local:5000/mariadb", "10.11"},
		{"registry.local:5000/mysql", "registry.local:5000/mysql", "latest"},
	}
	for _, tt := range tests {
		repo, tag := splitImage(tt.in)
		if repo != tt.repo || tag != tt.tag {
			t.Errorf("splitImage(%q) = %q, %q; want %q, %q", tt.in, repo, tag, tt.repo, tt.tag)
		}
	}
}

func TestDSN(t *testing.T) {
	t.Parallel()
	srv := &Server{kind: sourceDSN, cfg: rootConfig("127.0.0.1:3306")}
	if got, want := srv.RootDSN(), "root@tcp(127.0.0.1:3306)/?interpolateParams=true&parseTime=true&loc=UTC"; got != want {
		t.Errorf("RootDSN() = %q, want %q", got, want)
	}
	db := &DB{Name: "mend_t_1", DSN: formatDSN(srv.cfg, "mend_t_1"), Server: srv}
	if got, want := db.DSNVia("127.0.0.1:4000"), "root@tcp(127.0.0.1:4000)/mend_t_1?interpolateParams=true&parseTime=true&loc=UTC"; got != want {
		t.Errorf("DSNVia() = %q, want %q", got, want)
	}
}

func TestFaultsNeedPrivate(t *testing.T) {
	t.Parallel()
	srv := &Server{kind: sourceDSN, cfg: rootConfig("127.0.0.1:3306")}
	if srv.Private() {
		t.Fatal("Private() = true for a DSN server")
	}
	for name, f := range map[string]func() error{
		"Kill": srv.Kill, "Pause": srv.Pause, "Resume": srv.Resume,
		"Restart": func() error { return srv.Restart(t.Context()) },
	} {
		if err := f(); !errors.Is(err, errNotPrivate) {
			t.Errorf("%s() = %v, want %v", name, err, errNotPrivate)
		}
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
}

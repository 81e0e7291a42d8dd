package localdb

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no server's wait goroutine outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// start starts a server from the local binary and closes it in t.Cleanup; it skips t when
// there is no binary, or fails it when CI=true (as the test harness does).
func start(t *testing.T) *Server {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := Start(t.Context(), Config{Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestCrashIsReported(t *testing.T) {
	t.Parallel()
	s := start(t)
	// A crash the caller did not cause (here SIGKILL from outside; in real life a server bug).
	s.mu.Lock()
	pid, exited := s.pid, s.exited
	s.mu.Unlock()
	if err := signalKill(pid); err != nil {
		t.Fatal(err)
	}
	<-exited
	if s.Running() {
		t.Error("Running() = true after the process exited")
	}
	if err := s.Crash(); err == nil || !strings.Contains(err.Error(), "exited unexpectedly") {
		t.Errorf("Crash() = %v, want an error saying the server exited unexpectedly", err)
	}
	err := s.Close()
	if err == nil || !strings.Contains(err.Error(), "exited unexpectedly") {
		t.Errorf("Close after a crash = %v, want an error saying the server exited unexpectedly", err)
	}
}

func TestKillIsNotACrash(t *testing.T) {
	t.Parallel()
	s := start(t)
	if !strings.HasPrefix(s.Dir, os.TempDir()) || !strings.Contains(s.Dir, DirPrefixDefault) {
		t.Errorf("Dir = %q, want a %s* directory in %s", s.Dir, DirPrefixDefault, os.TempDir())
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := s.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Kill = %v, want %v", err, ErrNotRunning)
	}
	if err := s.Crash(); err != nil {
		t.Errorf("Crash() after Kill = %v, want nil", err)
	}
	addr := s.Addr()
	if err := s.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.Addr() != addr {
		t.Errorf("Addr() after Restart = %s, want %s", s.Addr(), addr)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s after Close: %v", s.Dir, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestStartNeedsBinary(t *testing.T) {
	t.Parallel()
	if _, err := Start(t.Context(), Config{}); err == nil {
		t.Error("Start with an empty Config.Binary returned nil")
	}
}

// TestFindBinaryForAVersion: an engine name with a version (mariadb-11.8) takes only a server
// whose --version is of that major.minor, the one on PATH first, else the root file system's
// wrapper under the cache directory; a MariaDB of another version (Debian 12's 10.11) does not
// count, and "mariadb" alone takes any MariaDB.
func TestFindBinaryForAVersion(t *testing.T) {
	fake := func(t *testing.T, dir, name, version string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\necho '" + p + "  Ver " + version + "-MariaDB-4 from Debian for debian-linux-gnu on x86_64'\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		name, onPath, inRootfs, engine string
		want                           string // "path", "rootfs" or "" for ErrNoBinary
	}{
		{"11.8 on PATH", "11.8.9", "", "mariadb-11.8", "path"},
		{"10.11 on PATH is not 11.8", "10.11.18", "", "mariadb-11.8", ""},
		{"11.80 is not 11.8", "11.80.1", "", "mariadb-11.8", ""},
		{"the root file system's 11.8 after a 10.11 on PATH", "10.11.18", "11.8.9", "mariadb-11.8", "rootfs"},
		{"mariadb takes any MariaDB", "10.11.18", "", "mariadb", "path"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := fake(t, filepath.Join(dir, "bin"), "mariadbd", tt.onPath)
			t.Setenv("PATH", filepath.Join(dir, "bin"))
			t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
			rootfs := ""
			if tt.inRootfs != "" {
				rootfs = fake(t, filepath.Join(dir, "cache", "mend", "rootfs", "mariadb-11.8-bin", "sbin"), "mariadbd", tt.inRootfs)
			}
			got, err := FindBinaryFor(tt.engine)
			want := map[string]string{"path": path, "rootfs": rootfs}[tt.want]
			if want == "" && err == nil && !strings.HasPrefix(got, dir) {
				// A system binary (binaryDirs) of the version asked for: right, on such a machine.
				if v, verr := BinaryVersion(t.Context(), got); verr == nil && strings.HasPrefix(v, "11.8.") {
					return
				}
			}
			switch {
			case want == "" && !errors.Is(err, ErrNoBinary):
				t.Fatalf("FindBinaryFor(%s) = %q, %v; want ErrNoBinary", tt.engine, got, err)
			case want != "" && (err != nil || got != want):
				t.Fatalf("FindBinaryFor(%s) = %q, %v; want %s", tt.engine, got, err, want)
			}
		})
	}
}

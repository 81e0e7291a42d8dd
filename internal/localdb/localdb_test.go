package localdb

import (
	"errors"
	"os"
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

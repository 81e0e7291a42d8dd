package sqreal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before SIGKILL. The orchestrator's own shutdown gives
// its pipeline 30 s; a test should not wait that long for a clean exit it does not check.
const StopGrace = 15 * time.Second

// Service is one process of the stack (or mend beside it): its binary, environment and log file.
type Service struct {
	// Name names the service in logs and failures.
	Name string
	// Bin and Args are the command.
	Bin  string
	Args []string
	// Env is the environment beyond PATH, HOME and TMPDIR.
	Env []string
	// Addr is the loopback address it listens on ("" when it does not).
	Addr string
	// Log is the file its stdout and stderr go to, appended to across restarts.
	Log string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the running process exits
	err    error         // its exit status, once exited
}

// Start starts the process in a process group of its own and, when Addr is set, waits until it accepts
// connections there. A process that exits first fails t with the tail of its log.
func (s *Service) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		t.Fatalf("sqreal: %s is already running", s.Name)
	}
	log, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("sqreal: %v", err)
	}
	fmt.Fprintf(log, "==== sqreal: start %s at %s\n", s.Name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(s.Bin, s.Args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}, s.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group (Stop signals the group), killed with the test binary should that die
	// without its cleanups (a go test -timeout): no service outlives the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("sqreal: start %s: %v", s.Name, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() {
		err := cmd.Wait()
		log.Close()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(exited)
	}()
	if s.Addr == "" {
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-exited:
			s.cmd = nil
			t.Fatalf("sqreal: %s exited before it listened on %s: %v\n%s", s.Name, s.Addr, s.err, Tail(s.Log, 40))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sqreal: %s does not listen on %s after 2 minutes\n%s", s.Name, s.Addr, Tail(s.Log, 40))
		}
	}
}

// Running reports whether the process is running.
func (s *Service) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the running process exits (nil when none runs).
func (s *Service) Exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

// Stop sends SIGTERM to the process group and waits up to StopGrace, then SIGKILLs it. It returns the
// exit error of a process that exited by itself before the SIGTERM (nil if it was still running). Stop
// on a stopped service does nothing.
func (s *Service) Stop() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	var early error
	select {
	case <-exited:
		s.mu.Lock()
		early = fmt.Errorf("sqreal: %s had exited by itself: %v", s.Name, s.err)
		s.mu.Unlock()
	default:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(StopGrace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	s.mu.Lock()
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	return early
}

// Kill SIGKILLs the process group, as a crash or an OOM kill would end it (no shutdown of its own: leases
// are not released, open transactions are cut), and waits until it has exited. Kill on a stopped service
// does nothing.
func (s *Service) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	s.mu.Lock()
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
}

// Restart stops the service and starts it again.
func (s *Service) Restart(t testing.TB) {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	s.Start(t)
}

// Run runs bin once with args and env (beyond PATH, HOME, TMPDIR) and returns its combined output and
// exit code; a command that cannot start fails t.
func Run(t testing.TB, timeout time.Duration, env []string, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	default:
		t.Fatalf("sqreal: run %s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String())
		return "", -1
	}
}

// Tail returns the last n lines of a file (or why it cannot be read).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("---- last %d lines of %s ----\n%s", len(lines), path, strings.Join(lines, "\n"))
}

// FreeAddr returns a loopback address with a port free at the time of the call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sqreal: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

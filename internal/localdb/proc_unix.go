//go:build unix

package localdb

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// signalGroup sends sig to the process group led by pid (the server runs in its own group).
func signalGroup(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pid, sig); err != nil {
		return fmt.Errorf("localdb: signal %v to process group %d: %w", sig, pid, err)
	}
	return nil
}

func signalTerm(pid int) error { return signalGroup(pid, syscall.SIGTERM) }
func signalKill(pid int) error { return signalGroup(pid, syscall.SIGKILL) }
func signalStop(pid int) error { return signalGroup(pid, syscall.SIGSTOP) }
func signalCont(pid int) error { return signalGroup(pid, syscall.SIGCONT) }

// waitStopped polls /proc until pid is in the stopped state, so Pause returns only once the
// server is really frozen. Without /proc it returns at once.
func waitStopped(pid int, timeout time.Duration) error {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil // no procfs: nothing more we can check
		}
		// Format: pid (comm) state ...; comm may hold spaces, so find the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			if st := b[i+2]; st == 'T' || st == 't' {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localdb: process %d not stopped after %v", pid, timeout)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, bounded by the deadline above
	}
}

//go:build unix

package localdb

import "syscall"

// signalGroup sends SIGTERM (or SIGKILL) to the server's process group.
func signalGroup(pid int, kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	return syscall.Kill(-pid, sig)
}

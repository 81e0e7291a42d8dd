//go:build unix && !linux

package localdb

import "syscall"

// sysProcAttr puts the server in its own process group, so signals reach only it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

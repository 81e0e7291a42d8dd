package localdb

import "syscall"

// sysProcAttr puts the server in its own process group (so signals reach only it, and a
// terminal's Ctrl-C reaches only the caller, which then stops the server itself) and kills it
// if the calling process dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

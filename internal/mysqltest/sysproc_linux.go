package mysqltest

import "syscall"

// sysProcAttr puts the server in its own process group (so signals reach only it, and a
// terminal's Ctrl-C does not) and kills it if the test binary dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

package localdb

import "syscall"

// sysProcAttr puts the server in its own process group (a terminal's Ctrl-C
// reaches only mend, which then stops the server itself) and kills it if
// mend dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

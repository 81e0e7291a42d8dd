package vitessdb

import "syscall"

// sysProcAttr puts vttestserver in its own process group (mysqlctl, mysqld and vtcombo
// inherit it, so one signal reaches them all) and kills it if the test binary dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

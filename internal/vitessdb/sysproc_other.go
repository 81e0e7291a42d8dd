//go:build !linux

package vitessdb

import "syscall"

// sysProcAttr: the Vitess backend runs on Linux only (Start refuses elsewhere).
func sysProcAttr() *syscall.SysProcAttr { return nil }

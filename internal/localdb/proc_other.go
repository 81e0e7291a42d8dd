//go:build !unix

package localdb

import (
	"errors"
	"syscall"
	"time"
)

var errNoSignals = errors.New("localdb: process faults need a unix system")

func sysProcAttr() *syscall.SysProcAttr    { return nil }
func signalTerm(int) error                 { return errNoSignals }
func signalKill(int) error                 { return errNoSignals }
func signalStop(int) error                 { return errNoSignals }
func signalCont(int) error                 { return errNoSignals }
func waitStopped(int, time.Duration) error { return nil }

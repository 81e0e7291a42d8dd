//go:build !unix

package localdb

import (
	"errors"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(int, bool) error {
	return errors.New("localdb: stopping a server needs a Unix system")
}

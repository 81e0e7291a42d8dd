package mysqltest

import (
	"fmt"
	"os"
	"sync"

	"github.com/go-sql-driver/mysql"
)

// driverLog keeps the driver's own log lines ("packets.go:58 unexpected
// EOF" whenever a test kills a server or cuts a connection, hundreds per
// run) out of the test output: Main installs it, and prints the last
// driverLogKeep lines only when the package's tests failed, where they may
// say why. A passing package discards them.
type driverLog struct {
	mu    sync.Mutex
	lines []string // the last driverLogKeep
	total int
}

const driverLogKeep = 200

func (l *driverLog) Print(v ...any) {
	line := fmt.Sprint(v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if len(l.lines) == driverLogKeep {
		l.lines = append(l.lines[:0], l.lines[1:]...)
	}
	l.lines = append(l.lines, line)
}

// flush prints the kept lines to stderr, saying how many were dropped.
func (l *driverLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "mysqltest: the driver logged %d lines during the failed run; the last %d:\n", l.total, len(l.lines))
	for _, line := range l.lines {
		fmt.Fprintln(os.Stderr, "[mysql] "+line)
	}
}

// quietDriver routes the driver's log to a driverLog and returns it.
func quietDriver() *driverLog {
	l := &driverLog{}
	_ = mysql.SetLogger(l) // fails only for a nil logger
	return l
}

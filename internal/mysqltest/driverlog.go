package mysqltest

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/go-sql-driver/mysql"
)

// driverLog keeps the driver's own log lines ("packets.go:58 unexpected
// EOF" whenever a test kills a server or cuts a connection, hundreds per
// run) out of the test output: Main installs it, and prints the last
// driverLogKeep distinct runs of lines only when the package's tests
// failed, where they may say why. A passing package discards them. A line
// repeated back to back is kept once with its count, so two hundred
// "unexpected EOF" lines cannot bury the one that differs.
type driverLog struct {
	mu    sync.Mutex
	runs  []driverLine // the last driverLogKeep runs
	total int
}

// driverLine is a line and how many times in a row the driver logged it.
type driverLine struct {
	text string
	n    int
}

const driverLogKeep = 200

func (l *driverLog) Print(v ...any) {
	line := fmt.Sprint(v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if k := len(l.runs); k > 0 && l.runs[k-1].text == line {
		l.runs[k-1].n++
		return
	}
	if len(l.runs) == driverLogKeep {
		l.runs = append(l.runs[:0], l.runs[1:]...)
	}
	l.runs = append(l.runs, driverLine{text: line, n: 1})
}

// flush prints the kept lines to stderr, saying how many were dropped.
func (l *driverLog) flush() { l.writeTo(os.Stderr) }

func (l *driverLog) writeTo(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total == 0 {
		return
	}
	kept := 0
	for _, r := range l.runs {
		kept += r.n
	}
	fmt.Fprintf(w, "mysqltest: the driver logged %d lines during the failed run; the last %d, repeats counted:\n", l.total, kept)
	for _, r := range l.runs {
		if r.n > 1 {
			fmt.Fprintf(w, "[mysql] %s (%d times in a row)\n", r.text, r.n)
		} else {
			fmt.Fprintln(w, "[mysql] "+r.text)
		}
	}
}

// quietDriver routes the driver's log to a driverLog and returns it.
func quietDriver() *driverLog {
	l := &driverLog{}
	_ = mysql.SetLogger(l) // fails only for a nil logger
	return l
}

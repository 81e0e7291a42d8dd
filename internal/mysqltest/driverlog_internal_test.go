package mysqltest

import (
	"strings"
	"testing"
)

// TestDriverLogCountsRepeats: lines the driver repeats back to back are
// printed once with their count, a different line between them stays in
// its place, and the oldest runs go past driverLogKeep.
func TestDriverLogCountsRepeats(t *testing.T) {
	var l driverLog
	for range 300 {
		l.Print("packets.go:58 unexpected EOF")
	}
	l.Print("connection.go:49 closing bad idle connection: broken pipe")
	for range 5 {
		l.Print("packets.go:58 unexpected EOF")
	}
	var b strings.Builder
	l.writeTo(&b)
	want := "mysqltest: the driver logged 306 lines during the failed run; the last 306, repeats counted:\n" +
		"[mysql] packets.go:58 unexpected EOF (300 times in a row)\n" +
		"[mysql] connection.go:49 closing bad idle connection: broken pipe\n" +
		"[mysql] packets.go:58 unexpected EOF (5 times in a row)\n"
	if b.String() != want {
		t.Fatalf("printed:\n%s\nwant:\n%s", b.String(), want)
	}

	var m driverLog
	for i := range driverLogKeep + 10 {
		m.Print("line ", i)
	}
	b.Reset()
	m.writeTo(&b)
	if !strings.Contains(b.String(), "the last 200,") || strings.Contains(b.String(), "[mysql] line 9\n") || !strings.Contains(b.String(), "[mysql] line 10\n") {
		t.Fatalf("kept the wrong runs:\n%s", b.String()[:300])
	}
}

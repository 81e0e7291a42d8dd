package binlog_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/internal/mysqltest"
)

// envPlant names a planted variant (binlog.Plant) for a whole run of the
// test binary (TestMain).
const envPlant = "MEND_BINLOG_PLANT"

// Each planted variant of the reader makes the test named beside it fail:
// the test binary runs that test alone, with the variant planted for the
// whole run, on this package's server (MEND_TEST_DSN). The variants the
// path scenarios guard run as their ...NegativeControl tests instead.
func TestPlantedBugsFailTheirTests(t *testing.T) {
	if os.Getenv(envPlant) != "" {
		t.Skip("already a run with a planted variant")
	}
	srv := mysqltest.SharedServer(t)
	for _, c := range []struct{ plant, test string }{
		{"resumeFileAnywhere", "TestPositionOfAnotherServer/gtids=false"}, // a saved file:offset resumed on a different server
		{"everyResetPurged", "TestFirstStartImportsThenStreams"},          // every start-over counted as a purge
		{"skipProblems", "TestPathSettingFlipped"},                        // a MINIMAL row image read by a reader built directly
		{"flushDeadlineSlides", "TestSteadyTrickleFlushes"},               // a steady trickle never flushed
	} {
		t.Run(c.plant, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // only catches a hang
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+strings.ReplaceAll(c.test, "/", "$/^")+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envPlant+"="+c.plant, mysqltest.EnvDSN+"="+srv.RootDSN(), mysqltest.EnvBackend+"=dsn")
			out, err := cmd.CombinedOutput()
			switch {
			case ctx.Err() != nil:
				t.Fatalf("%s with %s planted hung:\n%s", c.test, c.plant, out)
			case err == nil:
				t.Fatalf("%s passed with %s planted: it does not catch it\n%s", c.test, c.plant, out)
			case !strings.Contains(string(out), "--- FAIL: "+strings.Split(c.test, "/")[0]):
				t.Fatalf("%s with %s planted did not fail as a test (%v):\n%s", c.test, c.plant, err, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "_test.go:") && !strings.Contains(line, "mysqltest:") {
					t.Logf("caught: %s", strings.TrimSpace(line))
				}
			}
		})
	}
}

// A steady trickle of dead letters, each committed before the last one's
// flush came due, is flushed FlushInterval after the first, by the
// reader's clock: the deadline is the oldest pending row's, not moved by
// later commits.
func TestSteadyTrickleFlushes(t *testing.T) {
	w := newWorld(t)
	var ahead atomic.Int64 // how far the reader's clock is moved on
	r := w.start(t, "a", func(c *binlog.Config) {
		c.FlushInterval = 10 * time.Minute
		c.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	readThrough(t, r)
	for i := range 4 {
		w.deadLetter(t, "q1", fmt.Sprintf("trickle-%d", i))
		readThrough(t, r) // the reader has read it
		ahead.Add(int64(4 * time.Minute))
	}
	beats := r.r.Status().Heartbeats
	err := outcome(t, r, "the first of the trickle", w.has(t, "trickle-0"), func(st binlog.Status) string {
		if st.Heartbeats > beats+20 {
			return "waited on, 16 minutes by its clock after the first row, with no flush"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
}

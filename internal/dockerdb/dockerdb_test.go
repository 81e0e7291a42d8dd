package dockerdb_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mendq/mend/internal/dockerdb"
	"github.com/mendq/mend/internal/testserver"
)

// childEnv makes the test binary a child that starts a container and then
// passes, fails, or hangs until it is killed.
const childEnv = "MEND_DOCKERDB_CHILD"

// image returns the image the harness would run, skipping (or failing under
// CI with MEND_TEST_BACKEND=docker) when Docker has none.
func image(t *testing.T) string {
	t.Helper()
	c := testserver.DiscoverPrivate(testserver.SystemProbes())
	if c.Backend != testserver.BackendDocker {
		if os.Getenv(testserver.EnvBackend) == string(testserver.BackendDocker) && c.Fatal {
			t.Fatalf("docker backend forced but unavailable: %s", c.Reason)
		}
		t.Skipf("no Docker engine with an image: %s%s", c.Reason, c.Note)
	}
	return c.Image
}

// TestChild is the child's body; it does nothing in a normal run.
func TestChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("only run as a child of TestNothingLeftBehind")
	}
	srv, err := dockerdb.Start(t.Context(), os.Getenv("MEND_DOCKERDB_IMAGE"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	os.Stdout.WriteString("ready " + srv.ID() + "\n")
	switch mode {
	case "fail":
		t.Fatal("failing on purpose")
	case "hang":
		<-t.Context().Done() // until SIGKILL
	}
}

func owned(t *testing.T, pid int) []dockerdb.Leftover {
	t.Helper()
	all, err := dockerdb.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerdb.Leftover
	for _, l := range all {
		if l.OwnerPID == pid {
			out = append(out, l)
		}
	}
	return out
}

// TestNothingLeftBehind runs a child test binary that starts a container and
// passes, fails, or is killed with SIGKILL mid-run, and checks that no
// container or volume of the child remains: the first two clean up after
// themselves, the third is reaped by the next harness start.
func TestNothingLeftBehind(t *testing.T) {
	t.Parallel()
	img := image(t)
	for _, mode := range []string{"pass", "fail", "hang"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+mode, "MEND_DOCKERDB_IMAGE="+img)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			sc := bufio.NewScanner(out)
			var log strings.Builder
			ready := false
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if strings.HasPrefix(sc.Text(), "ready ") {
					ready = true
					break
				}
			}
			if !ready {
				_ = cmd.Wait()
				t.Fatalf("child never started its container:\n%s", log.String())
			}
			if mode == "hang" {
				if got := owned(t, pid); len(got) == 0 {
					t.Fatal("the running child owns no container: the test would prove nothing")
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
			}
			err = cmd.Wait()
			switch {
			case mode == "pass" && err != nil:
				t.Fatalf("child failed: %v\n%s", err, log.String())
			case mode != "pass" && err == nil:
				t.Fatalf("child passed; want it to %s\n%s", mode, log.String())
			}
			if mode == "hang" {
				if got := owned(t, pid); len(got) == 0 {
					t.Fatal("the killed child left nothing: the reap below would prove nothing")
				}
				// Three reapers at once, as test binaries starting side by side are: the
				// ones that lose the race to a removal already under way must not fail.
				errs := make(chan error, 3)
				for range 3 {
					go func() { _, err := dockerdb.ReapDead(ctx); errs <- err }()
				}
				for range 3 {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := owned(t, pid); len(got) != 0 {
				t.Fatalf("left behind by the %s child (pid %s): %+v", mode, strconv.Itoa(pid), got)
			}
		})
	}
}

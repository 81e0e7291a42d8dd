// Package realqueue runs mend beside the real uber/submitqueue: its gateway, orchestrator and runway built
// from the queue's source (package sqreal), in fake provider mode on the test MySQL, with the mend binary
// run as docs/operations.md says. Every scenario has a control that runs the same without mend and must
// stay stuck. `make test-realqueue` runs it (MEND_TEST_REALQUEUE=1, MySQL); `make test` skips it.
package realqueue

import (
	"os"
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
)

// envRun opts in: the suite takes minutes and runs as a CI job of its own (make test-realqueue).
const envRun = "MEND_TEST_REALQUEUE"

func TestMain(m *testing.M) {
	mysqltest.Main(m)
}

// requireOptIn skips t unless the suite was asked for.
func requireOptIn(t *testing.T) {
	t.Helper()
	if os.Getenv(envRun) == "" {
		t.Skipf("the real-queue suite runs only when %s=1 (make test-realqueue): it builds and runs uber/submitqueue's own services", envRun)
	}
}

package fence_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/mendq/mend/internal/mysqltest"
)

// sharedServer is the harness's shared server, remembered so TestMain can
// stop it before looking for leaked goroutines.
var sharedServer atomic.Pointer[mysqltest.Server]

// TestMain is mysqltest.Main plus a leak check: it stops the shared server
// first (Close is idempotent), so only goroutines of ours can remain.
func TestMain(m *testing.M) {
	code := m.Run()
	if srv := sharedServer.Load(); srv != nil {
		if err := srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

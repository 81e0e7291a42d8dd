package fence_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/mendq/mend/internal/mysqltest"
)

// TestMain is mysqltest.Main plus a leak check, which runs after the shared
// server is stopped, so only goroutines of ours can remain.
func TestMain(m *testing.M) {
	mysqltest.Main(m, func() error { return goleak.Find() })
}

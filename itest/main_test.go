package itest

import (
	"os"
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
)

func TestMain(m *testing.M) {
	// Silence the driver's global logger before any test runs: setting it
	// later would race with connections other tests are opening.
	quietDriver()
	if os.Getenv(envVerifyOnDrop) != "" {
		mysqltest.BeforeDrop = verifyBeforeDrop
	}
	mysqltest.Main(m)
}

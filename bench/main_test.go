package bench

import (
	"testing"

	"github.com/mendq/mend/internal/mysqltest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

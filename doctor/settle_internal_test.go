package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/subscribe"
)

// TestSettleCheck: a settle window given that does not cover the queue
// database's waits (two lock waits, the semi-sync commit, the margin) is a
// warning naming the window that would; one that covers them is ok.
func TestSettleCheck(t *testing.T) {
	t.Parallel()
	waits := subscribe.Waits{LockWait: 50 * time.Second, SemiSync: 10 * time.Second}
	c := settleCheck(Check{Status: OK}, waits, 90*time.Second)
	if c.Status != Warn || !strings.Contains(c.Fix, "2m0s") {
		t.Errorf("doctor with 90s: %+v; want a warning naming 2m0s", c)
	}
	if c := settleCheck(Check{Status: OK}, waits, 120*time.Second); c.Status != OK {
		t.Errorf("doctor with 2m0s: %+v; want ok", c)
	}
}

package client_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/client"
	"github.com/mendq/mend/subscribe"
)

// TestSettleFrom: without a settle window the subscription's follows the
// server (two lock waits, the semi-sync commit, the margin); a window
// given that does not cover them is kept but warned about, by the bound
// doctor checks (doctor.TestSettleCheck). Moved from cmd/mend with the
// subscription's wiring.
func TestSettleFrom(t *testing.T) {
	t.Parallel()
	waits := subscribe.Waits{LockWait: 50 * time.Second, SemiSync: 10 * time.Second}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if got := client.SettleFrom(waits, 0, log); got != 120*time.Second {
		t.Errorf("default window = %v; want 2m0s (2 x 50s + 10s semi-sync + 10s margin)", got)
	}
	if logs.Len() != 0 {
		t.Errorf("the default window warned:\n%s", logs.String())
	}
	if got := client.SettleFrom(waits, 90*time.Second, log); got != 90*time.Second || !strings.Contains(logs.String(), "does not cover") {
		t.Errorf("a 90s window = %v, log %q; want kept, with a warning", got, logs.String())
	}
}

package planner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/planner"
)

// Issue 47: a missing grant (1142) ended a run as "mend: database
// unavailable", the message of ErrHostFailing, so the operator reading
// mend run's log ("queue repair failed", the reconciler's wrap of this
// error) went looking for a database outage. A run stopped by a failing
// host now ends with a *HostFailingError naming the host's last failure: a
// denied statement with the GRANT that fixes it, for a failing batch read
// and for a failing publish. It still matches ErrHostFailing and
// mend.ErrUnavailable (the reconciler retries the queue next pass). The
// planted variant (the bare ErrHostFailing, the behaviour before) fails
// the same checks.
func TestHostFailingNamesTheLastFailure(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		denied *mend.DeniedError
		// fail makes the host refuse the step with denied; maxErrs is
		// the run's MaxHostErrors.
		fail    func(*fakeHost, error)
		maxErrs int
	}{
		{"a denied batch read", &mend.DeniedError{Privilege: "SELECT", User: "mend_host", Database: "app", Table: "batch",
			Err: errors.New("Error 1142 (42000): SELECT command denied to user 'mend_host'@'10.0.0.7' for table `app`.`batch`")},
			func(h *fakeHost, err error) {
				h.BatchGetFunc = func(string, string) (mend.Batch, error) { return mend.Batch{}, err }
			}, 3},
		{"a denied publish", &mend.DeniedError{Privilege: "INSERT", User: "mend_host", Database: "queue", Table: "queue_messages",
			Err: errors.New("Error 1142 (42000): INSERT command denied to user 'mend_host'@'10.0.0.7' for table `queue`.`queue_messages`")},
			func(h *fakeHost, err error) { h.WakeFunc = func(mend.WakeUp) error { return err } }, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if p := hostFailingProblems(t, tt.denied, tt.fail, tt.maxErrs, false); len(p) > 0 {
				t.Fatal(p)
			}
		})
		t.Run(tt.name+": the bare ErrHostFailing is caught", func(t *testing.T) {
			t.Parallel()
			if len(hostFailingProblems(t, tt.denied, tt.fail, tt.maxErrs, true)) == 0 {
				t.Fatal("the planted slip passed the test meant to catch it")
			}
		})
	}
}

// hostFailingProblems runs a queue of five records against a host that
// refuses a step with denied until the run stops, and says what is wrong
// with the run's error. With bare, the planner ends such a run with the
// bare ErrHostFailing (planner.PlantBareHostFailing).
func hostFailingProblems(t *testing.T, denied *mend.DeniedError, fail func(*fakeHost, error), maxErrs int, bare bool) (problems []string) {
	t.Helper()
	ctx := context.Background()
	b := setup(t)
	// Batch 2 is live, so the repaired records owe it a wake-up.
	h := newFakeHost(mend.Batch{ID: "1", State: mend.BatchSpeculating, Version: 1}, mend.Batch{ID: "2", State: mend.BatchCreated, Version: 1})
	fail(h, denied)
	for n := range 5 {
		b.record(t, "q", fmt.Sprintf("m%d", n), "1")
	}
	p := newPlanner(t, b, h, func(c *planner.Config) {
		c.MaxHostErrors = maxErrs
		c.MaxAttempts = 100
		c.BackoffFunc = func(int) time.Duration { return time.Hour } // one attempt each: the run ends
	})
	if bare {
		planner.PlantBareHostFailing(p)
	}
	_, err := p.Run(ctx, b.lease(t, "q"))
	// What both variants keep (so the planted one can fail only on the
	// naming below): the reconciler and the metrics read a stopped run
	// as the host failing, retryable next pass.
	if !errors.Is(err, planner.ErrHostFailing) || !errors.Is(err, mend.ErrUnavailable) || !mend.IsRetryable(err) {
		t.Fatalf("Run = %v; want a retryable error matching ErrHostFailing", err)
	}
	var hf *planner.HostFailingError
	if !errors.As(err, &hf) || hf.InARow != maxErrs {
		problems = append(problems, fmt.Sprintf("Run = %#v; want a *HostFailingError after %d errors in a row", err, maxErrs))
	}
	var de *mend.DeniedError
	if !errors.Is(err, mend.ErrDenied) || !errors.As(err, &de) || de.Grant() != denied.Grant() {
		problems = append(problems, fmt.Sprintf("Run = %v; want it to match the host's denial (%v)", err, denied))
	}
	// As the operator reads it, wrapped as the reconciler logs it.
	msg := fmt.Errorf("reconcile: queue %q: %w", "q", err).Error()
	if !strings.Contains(msg, denied.Grant()) || strings.Contains(msg, mend.ErrUnavailable.Error()) {
		problems = append(problems, fmt.Sprintf("the run's error reads %q; want the GRANT %q named, and no %q", msg, denied.Grant(), mend.ErrUnavailable.Error()))
	}
	return problems
}

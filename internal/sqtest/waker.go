package sqtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mendq/mend"
)

// Waker is the planner's wake-up port (planner.Waker), restated here so
// that this package does not import the planner.
type Waker interface {
	Wake(ctx context.Context, w mend.WakeUp) error
}

// ErrInjected is the error FaultyWaker returns for a publish it refused.
var ErrInjected = errors.New("sqtest: injected wake-up failure")

// FaultyWaker wraps a Waker (normally a *host.DB) and makes chosen
// publishes fail, so tests and the demo can lose a wake-up without touching
// the host's tables: mend never installs triggers on them. It is safe for
// concurrent use.
type FaultyWaker struct {
	Next Waker

	mu      sync.Mutex
	refuse  int // the next n publishes fail without reaching Next
	lose    int // the next n publishes reach Next, then report failure
	calls   []mend.WakeUp
	outcome []error
}

// RefuseNext makes the next n publishes fail with ErrInjected before they
// reach the host: nothing is published.
func (f *FaultyWaker) RefuseNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = n
}

// LoseNextAnswer makes the next n publishes reach the host and then fail
// with an error matching mend.ErrAmbiguous, as when the connection drops
// after the server committed: the message is published, the caller is
// told it may not be.
func (f *FaultyWaker) LoseNextAnswer(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lose = n
}

// Wake publishes w through Next unless a fault is armed.
func (f *FaultyWaker) Wake(ctx context.Context, w mend.WakeUp) error {
	f.mu.Lock()
	refuse, lose := f.refuse > 0, f.lose > 0 && f.refuse == 0
	if refuse {
		f.refuse--
	} else if lose {
		f.lose--
	}
	f.mu.Unlock()

	var err error
	switch {
	case refuse:
		err = fmt.Errorf("wake %q: %w", w.MessageID, ErrInjected)
	default:
		err = f.Next.Wake(ctx, w)
		if err == nil && lose {
			err = fmt.Errorf("%w: wake %q: answer lost (%w)", mend.ErrAmbiguous, w.MessageID, ErrInjected)
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, w)
	f.outcome = append(f.outcome, err)
	f.mu.Unlock()
	return err
}

// Calls returns every wake-up asked for, in order, with what Wake
// returned for each.
func (f *FaultyWaker) Calls() ([]mend.WakeUp, []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]mend.WakeUp(nil), f.calls...), append([]error(nil), f.outcome...)
}

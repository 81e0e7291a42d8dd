package fence_test

import (
	"context"
	"errors"
	"log"

	"github.com/mendq/mend"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/storage"
)

// Example_hostPlanner shows the host's own planner (the speculate consumer)
// taking the queue's fence, so it never plans a queue while mend's planner
// repairs it, and letting mend finish due repairs first. It needs a MySQL
// server, so it is compiled but not run (it has no Output comment).
func Example_hostPlanner() {
	ctx := context.Background()
	store, err := storage.Open(ctx, "mend:secret@tcp(127.0.0.1:3306)/mend", storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	f, err := fence.New(store, fence.Config{Holder: "speculate-worker-1"})
	if err != nil {
		log.Fatal(err)
	}

	speculate := func(ctx context.Context, queue string) error {
		lease, err := f.TryAcquire(ctx, queue)
		if errors.Is(err, mend.ErrLeaseHeld) {
			return err // redeliver later: someone is planning this queue
		}
		if err != nil {
			return err
		}
		defer lease.Release(ctx) //nolint:errcheck // best effort; the term expires anyway
		// ... plan the queue; stop as soon as lease.Done() closes, and have
		// every planner write check lease.Term() (fenced writes).
		select {
		case <-lease.Done():
			return mend.ErrLeaseLost
		default:
		}
		return nil
	}
	_ = speculate
}

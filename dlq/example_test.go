package dlq_test

import (
	"context"
	"log"
	"strconv"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/reconcile"
	"github.com/mendq/mend/storage"
)

// DLQMessage stands for the host message queue's delivery on a _dlq topic:
// the message and the metadata its store attaches at poll time, all strings
// (fact sheet §5).
type DLQMessage struct {
	ID       string
	Payload  []byte
	Metadata map[string]string // topic, partition_key, offset, dlq.failed_at, dlq.failure_count, dlq.last_error, dlq.original_topic
	// FailureDetail is the row's failure_detail JSON (the subjects and
	// detail the delivery's Failure() is rebuilt from), nil when NULL.
	FailureDetail []byte
}

// Example_dlqConsumer wires mend into a dead-letter consumer: record the
// delivery durably, then acknowledge it. The inline repair runs under the
// queue's fence when it is free; otherwise the periodic reconciler finishes.
func Example_dlqConsumer() {
	ctx := context.Background()
	store, err := storage.Open(ctx, "mend:secret@tcp(127.0.0.1:3306)/mend", storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	hostDB, err := host.Open(ctx, "app:secret@tcp(127.0.0.1:3306)/app", "", host.Options{})
	if err != nil {
		log.Fatal(err)
	}
	f, err := fence.New(store, fence.Config{})
	if err != nil {
		log.Fatal(err)
	}
	p, err := planner.New(planner.Config{Store: store, Batches: hostDB, Waker: hostDB})
	if err != nil {
		log.Fatal(err)
	}
	rec, err := reconcile.New(reconcile.Config{Store: store, Fence: f, Planner: p})
	if err != nil {
		log.Fatal(err)
	}
	// Builds resolves buildsignal dead letters; the host adapter provides
	// it (dlq.Builds). Without one they are recorded parked.
	var builds dlq.Builds
	intake, err := dlq.New(store, dlq.Config{Repairer: rec, Builds: builds})
	if err != nil {
		log.Fatal(err)
	}

	handle := func(ctx context.Context, m DLQMessage) (ack bool) {
		md := m.Metadata
		failedAt, _ := strconv.ParseUint(md["dlq.failed_at"], 10, 64)
		count, _ := strconv.ParseUint(md["dlq.failure_count"], 10, 32)
		row := dlq.Row{
			Topic: md["topic"], PartitionKey: md["partition_key"], ID: m.ID, Payload: m.Payload,
			FailedAtMS: failedAt, FailureCount: uint32(count), LastError: md["dlq.last_error"],
			OriginalTopic: md["dlq.original_topic"], FailureDetail: m.FailureDetail,
		}
		_, err := intake.Record(ctx, row.Delivery())
		// Acknowledge only once the obligation is durable in MySQL.
		return err == nil
	}
	_ = handle
}

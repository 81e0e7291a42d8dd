package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/client"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/doctor"
)

// DLQMessage stands for the host queue's delivery of a dead letter: the
// queue_messages row on a _dlq topic.
type DLQMessage struct {
	Topic, Partition, ID string
	Payload              []byte
	FailedAtMS           uint64
	Failures             uint32
	LastError            string
	OriginalTopic        string
}

// Example_linkedIn links mend into a dead-letter consumer: one Open (which
// refuses a server, schema, grant or wake topic mend run would refuse),
// then Record each dead letter and acknowledge it once Record returns nil.
// The repair is finished inline when the queue's fence is free.
func Example_linkedIn() {
	mendDSN, hostDSN, m, drop := exampleWorld() // a test server's databases and a dead letter on speculate_dlq
	defer drop()
	ctx := context.Background()

	c, err := client.Open(ctx, client.Config{DSN: mendDSN, HostDSN: hostDSN})
	if err != nil {
		log.Fatal(err) // a failed check names its fix
	}
	defer c.Close()

	res, err := c.Record(ctx, dlq.Row{Topic: m.Topic, PartitionKey: m.Partition, ID: m.ID, Payload: m.Payload,
		FailedAtMS: m.FailedAtMS, FailureCount: m.Failures, LastError: m.LastError, OriginalTopic: m.OriginalTopic}.Delivery())
	if err != nil {
		return // not recorded: do not acknowledge; the queue redelivers
	}
	// Durable now: acknowledge the dead letter.
	fmt.Println("recorded:", res.Created)
	fmt.Println("repaired inline:", res.Record.State == mend.StateDone)
	// Output:
	// recorded: true
	// repaired inline: true
}

// Example_backgroundReconciler runs the reconciler inside the worker: the
// intake only records (NoInlineRepair), and a pass every Interval finishes
// the repairs, as mend run would.
func Example_backgroundReconciler() {
	mendDSN, hostDSN, m, drop := exampleWorld()
	defer drop()
	ctx := context.Background()

	c, err := client.Open(ctx, client.Config{DSN: mendDSN, HostDSN: hostDSN, NoInlineRepair: true, Interval: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer c.Stop() // finishes or abandons the pass in flight, releases the leases

	res, err := c.Record(ctx, dlq.Row{Topic: m.Topic, PartitionKey: m.Partition, ID: m.ID, Payload: m.Payload,
		FailedAtMS: m.FailedAtMS, FailureCount: m.Failures, LastError: m.LastError, OriginalTopic: m.OriginalTopic}.Delivery())
	if err != nil {
		return
	}
	fmt.Println("recorded:", res.Record.State)

	// Only to show the outcome: wait for a pass to finish the record.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r, err := c.Store().RecordGet(ctx, res.Record.Source); err == nil && r.State == mend.StateDone {
			fmt.Println("then:", r.State)
			break
		}
	}
	// Output:
	// recorded: pending
	// then: done
}

// Example_subscription is mend for a host whose dead-letter consumers
// cannot be changed: the Client joins the *_dlq topics as a consumer group
// of its own (the host's GC keeps each dead letter until mend has recorded
// it) and its reconciler repairs what it records. Start runs both in the
// background; here one drain of each shows the path.
func Example_subscription() {
	mendDSN, hostDSN, _, drop := exampleWorld() // the dead letter is on speculate_dlq; nobody calls Record
	defer drop()
	ctx := context.Background()

	c, err := client.Open(ctx, client.Config{DSN: mendDSN, HostDSN: hostDSN,
		// Mode offsets: a consumer group, whose passes Drain runs (auto reads the
		// binary log where the server allows it, and streams). Settle: 0 follows
		// the queue database's waits.
		Subscription: &client.Subscription{Settle: time.Second, Mode: doctor.ModeOffsets}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	st, err := c.Subscriber().Drain(ctx) // in a service: c.Start(ctx), then c.Stop() at shutdown
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("recorded by the subscription:", st.Recorded)
	ps, err := c.Drain(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("woken:", ps.Records.Woken)
	// Output:
	// recorded by the subscription: 1
	// woken: 1
}

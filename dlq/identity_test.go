package dlq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
)

// TestBlamedBatchThatCannotBeNamed: a speculate failure blaming one batch
// targets that batch, so its ID is checked like every identity mend
// stores: an empty, over-long or invalid UTF-8 batch subject is recorded
// parked with the reason, never refused (the dead letter would stay in the
// DLQ) and never recorded pending (the planner would look for a batch that
// cannot exist). A control shows a valid subject is targeted.
func TestBlamedBatchThatCannotBeNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, subject := range map[string]string{
		"empty":        "",
		"256 chars":    strings.Repeat("b", 256),
		"not UTF-8":    "q/batch/\xff",
		"valid (ctrl)": "q/batch/7",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, dlq.Config{})
			d := delivery(`{"id":"q/batch/1","queue":"q"}`)
			d.Subjects = []mend.Subject{{Kind: "batch", ID: subject}}
			res, err := b.in.Record(ctx, d)
			if err != nil {
				t.Fatalf("Record = %v; want the dead letter recorded", err)
			}
			r := res.Record
			if subject == "q/batch/7" {
				wantPending(t, r, "q", "q/batch/7", mend.OutcomeFailed)
				return
			}
			wantParked(t, r, "q", "blames a batch mend cannot name")
		})
	}
}

// TestPlaceholderQueueCollision: a dead letter whose queue is literally
// mend's placeholder "(unresolved)" is parked with the reason, not filed as
// a repairable record among the unresolved ones.
func TestPlaceholderQueueCollision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, dlq.Config{})
	for i, d := range []dlq.Delivery{
		delivery(`{"id":"q/batch/1","queue":"(unresolved)"}`),
		{Source: mend.SourceID{Topic: "speculate_dlq", Partition: dlq.QueueUnresolved, MessageID: "m-2"}, Payload: []byte(`{"id":"q/batch/1","queue":""}`)},
	} {
		res, err := b.in.Record(ctx, d)
		if err != nil {
			t.Fatalf("%d: Record = %v", i, err)
		}
		wantParked(t, res.Record, dlq.QueueUnresolved, "placeholder")
	}
}

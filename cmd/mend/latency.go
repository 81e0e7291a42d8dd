package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/mendq/mend/storage"
)

// worstQueuesShown is how many of the slowest queues mend status lists.
const worstQueuesShown = 5

// printRepairLatency prints the repair latency over the last hour (p50,
// p99, max and the slowest queues), computed by the database from
// mend_records, so every replica and operator sees the same numbers.
func printRepairLatency(ctx context.Context, w io.Writer, store *storage.DB) error {
	l, err := store.RepairLatency(ctx, storage.RepairLatencyWindowDefault, worstQueuesShown)
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	if l.Count == 0 {
		fmt.Fprintf(w, "repair latency (the SLO: dead letter failed_at, or its retry, to its repair; resolved records left out), last %s: no repairs finished\n", fmtAge(l.Window))
		return nil
	}
	fmt.Fprintf(w, "repair latency (the SLO: dead letter failed_at, or its retry, to its repair; resolved records left out), last %s: %d repairs, p50 %s, p99 %s, max %s\n",
		fmtAge(l.Window), l.Count, fmtAge(l.P50), fmtAge(l.P99), fmtAge(l.Max))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOWEST QUEUE\tREPAIRS\tMAX")
	for _, q := range l.Worst {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", q.Queue, q.Count, fmtAge(q.Max))
	}
	return tw.Flush()
}

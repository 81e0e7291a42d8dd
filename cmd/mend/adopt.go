package main

import (
	"context"

	"github.com/spf13/cobra"
)

// newAdoptCmd is mend adopt, the one command of the day mend is adopted
// (docs/operations.md, "Adopting mend"): what mend import does for the
// dead letters already in the host's queue database, then what mend
// import --stuck adds, the stuck-queue scan for a queue stuck before mend
// came (its dead letter acknowledged and collected, nothing left to
// import). Its flags are import's, --stuck always on; --host-dsn is
// required since the scan reads the host's batches.
func newAdoptCmd(a *app) *cobra.Command {
	f := a.newCommand("adopt", "adopting mend: import the host's dead letters, then find and record wake-ups for queues already stuck",
		"The day mend is adopted on a live host: record every dead letter already in the host's queue database\n"+
			"(as mend import), then scan for queues stuck without a dead letter (as mend import --stuck: live\n"+
			"batches and nothing in flight that will wake the host's planner, two scans --stuck-bound apart) and\n"+
			"record their wake-ups. mend run then wakes them under the fence. Idempotent: run again, it records\n"+
			"nothing new. Progress goes to stderr, the summary to stdout.", withDSN|withLog)
	c := importConfig{StuckScan: true}
	addImportFlags(f, &c, false)
	f.setDefault("actor", "adopt")
	return f.run(func(ctx context.Context, args []string) error { return c.runCmd(ctx, a, f, "mend adopt") })
}

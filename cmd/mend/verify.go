package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// verifyConfig is mend verify's input.
type verifyConfig struct {
	Queue, Record string
	Since         time.Duration
	PageSize      int
	// Rebuild lists the records a rebuild would rewrite; with Yes it
	// rewrites them, under each queue's lease taken as Holder for LeaseTTL.
	Rebuild, Yes bool
	Holder       string
	LeaseTTL     time.Duration
}

// maxRebuildRecords bounds how many divergent records one run remembers
// for --rebuild (memory stays bounded); run it again for the rest.
const maxRebuildRecords = 100_000

// verifyLeaseTTLDefault is the term --rebuild takes each queue's lease for.
const verifyLeaseTTLDefault = 30 * time.Second

// runVerify re-folds the selected records' events, prints every divergence
// and a summary with the rate, and with Rebuild and Yes rewrites the
// divergent projections from the fold, fenced by each queue's lease.
// Returns an error (exit 1) if a divergence remains.
//
// Every run that reads records is recorded in mend_verify_runs (what it
// covered, what it found, how it ended) for mend console's overview; a
// failure to record (a schema before migration 0015, no INSERT grant) is
// said on w and does not change the run's outcome.
func runVerify(ctx context.Context, store *storage.DB, c verifyConfig, w io.Writer) error {
	run := storage.VerifyRun{Queue: c.Queue, Since: c.Since, Started: time.Now()}
	run.Host, _ = os.Hostname()
	read := false
	err := verifyOnce(ctx, store, c, w, &run, &read)
	if !read {
		return err
	}
	run.Finished = time.Now()
	if err != nil && run.Divergent == 0 {
		run.Error = err.Error()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := store.VerifyRunRecord(rctx, run); rerr != nil {
		fmt.Fprintf(w, "this run is not recorded for mend console: %v\n", rerr)
	}
	return err
}

func verifyOnce(ctx context.Context, store *storage.DB, c verifyConfig, w io.Writer, run *storage.VerifyRun, read *bool) error {
	p := storage.VerifyParams{Queue: c.Queue, Since: c.Since, PageSize: c.PageSize}
	if c.Record != "" {
		// A prefix of 4 or more hex characters, as every other --record.
		if err := checkRecordRef(c.Record); err != nil {
			return err
		}
		rec, err := findRecord(ctx, store, c.Record)
		if err != nil {
			return schemaFix(err)
		}
		p.Record = rec.ID
		run.Record = rec.ID
	}
	if c.Rebuild && c.Yes && c.Holder == "" {
		return usagef("--holder must not be empty")
	}
	byQueue := map[string][]mend.RecordID{}
	remembered, last := 0, mend.RecordID{}
	*read = true
	st, err := store.Verify(ctx, p, func(d storage.Divergence) error {
		fmt.Fprintln(w, d.String())
		if c.Rebuild && d.RecordID != last && remembered < maxRebuildRecords {
			byQueue[d.Queue] = append(byQueue[d.Queue], d.RecordID)
			remembered++
			last = d.RecordID
		}
		return nil
	})
	run.Records, run.Events, run.Divergent, run.Legacy = int64(st.Records), int64(st.Events), int64(st.Divergent), int64(st.Legacy)
	if err != nil {
		return schemaFix(err)
	}
	fmt.Fprintf(w, "verified %d records (%d events) in %s, %.0f records/s: %d divergent", st.Records, st.Events,
		st.Took.Round(time.Millisecond), st.Rate(), st.Divergent)
	if st.Legacy > 0 {
		fmt.Fprintf(w, "; %d with events from before migration 0013 (only version, identity, target and epoch compared)", st.Legacy)
	}
	fmt.Fprintln(w)
	if st.Divergent == 0 {
		return nil
	}
	if !c.Rebuild {
		return fmt.Errorf("%d record(s) diverge from their events; 'mend verify --rebuild' shows what a rebuild would write", st.Divergent)
	}
	if !c.Yes {
		fmt.Fprintf(w, "dry run: --rebuild --yes would rewrite %d record(s) in %d queue(s) from their events, under each queue's lease\n",
			remembered, len(byQueue))
		return fmt.Errorf("%d record(s) diverge from their events (dry run: nothing written)", st.Divergent)
	}
	fixed, err := rebuild(ctx, store, c, byQueue, w)
	run.Rebuilt = int64(fixed)
	return err
}

// rebuild rewrites the records of byQueue, queue by queue, under the
// queue's lease.
func rebuild(ctx context.Context, store *storage.DB, c verifyConfig, byQueue map[string][]mend.RecordID, w io.Writer) (int, error) {
	queues := make([]string, 0, len(byQueue))
	for q := range byQueue {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	var errs []error
	fixed := 0
	for _, q := range queues {
		term, err := store.LeaseAcquire(ctx, q, c.Holder, c.LeaseTTL)
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %q: %w", q, err))
			continue
		}
		for _, id := range byQueue[q] {
			cols, err := store.RebuildRecord(ctx, term, id)
			if err != nil {
				errs = append(errs, err)
				if errors.Is(err, mend.ErrFenced) {
					break
				}
				continue
			}
			fixed++
			for _, d := range cols {
				fmt.Fprintf(w, "rebuilt %s\n", d)
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := store.LeaseRelease(rctx, term); err != nil && !errors.Is(err, mend.ErrLeaseLost) {
			errs = append(errs, fmt.Errorf("queue %q: release lease: %w", q, err))
		}
		cancel()
	}
	fmt.Fprintf(w, "rebuilt %d record(s) from their events\n", fixed)
	if len(errs) > 0 {
		return fixed, fmt.Errorf("rebuild: %w", errors.Join(errs...))
	}
	return fixed, nil
}

func newVerifyCmd(a *app) *cobra.Command {
	f := a.newCommand("verify", "re-fold every record's events and compare with the projection; --rebuild repairs",
		"Re-fold each record's events and compare the fold with its row in mend_records, column by column.\n"+
			"Prints every divergence and exits 1 if there is one. --rebuild lists what a rebuild would write;\n"+
			"--rebuild --yes rewrites the divergent rows from their events, each queue under its lease (fenced).",
		withDSN|withLog)
	var c verifyConfig
	f.StringVar(&c.Queue, "queue", "", "only this queue")
	f.StringVar(&c.Record, "record", "", "only this record (its hex ID)")
	f.DurationVar(&c.Since, "since", 0, "only records updated within this long (e.g. 24h); 0 means all")
	f.IntVar(&c.PageSize, "page-size", storage.VerifyPageDefault, "records read (with their events) at a time")
	f.BoolVar(&c.Rebuild, "rebuild", false, "list the divergent records a rebuild would rewrite (with --yes: rewrite them)")
	f.BoolVar(&c.Yes, "yes", false, "with --rebuild: rewrite the divergent records")
	f.cmdLineOnly("yes")
	host, _ := os.Hostname()
	f.StringVar(&c.Holder, "holder", fmt.Sprintf("mend-verify-%s-%d", host, os.Getpid()), "lease holder name for --rebuild")
	f.DurationVar(&c.LeaseTTL, "lease-ttl", verifyLeaseTTLDefault, "term of each queue's lease --rebuild takes")
	return f.run(func(ctx context.Context, args []string) error {
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		if c.Since < 0 || c.PageSize < 1 || c.LeaseTTL <= 0 {
			return usagef("--since must not be negative, --page-size and --lease-ttl must be positive")
		}
		// Not withStore: a verify of a large database outlasts its
		// one-minute bound; it runs until done or interrupted.
		store, err := storage.Open(ctx, dsn, storage.Options{})
		if err != nil {
			return fmt.Errorf("open mend's database: %w", err)
		}
		defer store.Close()
		return runVerify(ctx, store, c, a.stdout)
	})
}

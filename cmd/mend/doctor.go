package main

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"text/tabwriter"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
)

func newDoctorCmd(a *app) *cobra.Command {
	f := a.newCommand("doctor", "check the server, schema and settings, and the host's tables and grants, for what breaks mend",
		"Check the server, the schema and the settings mend depends on, and with --host-dsn/--queue-dsn the submit queue's\n"+
			"tables and the privileges mend's statements need on them. It only reads. Exits 1 if anything is wrong.", withDSN|withLog|withJSON)
	f.addTimeout(opTimeout)
	ttl := f.Duration("lease-ttl", fence.TTLDefault, "the lease TTL mend run uses, to compare the lock wait timeout with")
	hostDSN := f.String("host-dsn", "", "DSN of uber/submitqueue's application database, as mend run gets it: check batch, queue_batch_state, request, build\n("+hostDSNSame+": the same database as --dsn; empty: the host is not checked)")
	queueDSN := f.String("queue-dsn", "", "DSN of uber/submitqueue's queue database, as mend run gets it: check queue_messages; default: --host-dsn")
	sub := addDoctorSubscribeFlags(f)
	wakeTopic := f.String("wake-topic", host.WakeTopicDefault, "the wake topic mend run publishes to: check that a consumer group of the host has joined it")
	var wakeUnjoined bool
	addWakeTopicUnjoinedFlag(f, &wakeUnjoined)
	return f.run(func(ctx context.Context, args []string) error {
		if f.dsn == "" {
			return usagef("--dsn is required (or MEND_DSN), e.g. user:pass@tcp(127.0.0.1:3306)/mend")
		}
		// The same rules as mend run's: doctor checks what run would use.
		hostChecked := *hostDSN != ""
		if *hostDSN == hostDSNSame {
			*hostDSN = f.dsn
		}
		if *queueDSN == "" {
			*queueDSN = *hostDSN
		}
		if err := checkLeaseTTL(*ttl); err != nil {
			return err
		}
		if err := host.ValidateWakeTopic(*wakeTopic); err != nil {
			return usagef("--wake-topic: %v", err)
		}
		if err := sub.mode.checkMode(); err != nil {
			return err
		}
		checks, target := doctor.Database(ctx, f.dsn, *ttl)
		checks = append(checks, doctor.Host(ctx, *hostDSN, *queueDSN)...)
		if *queueDSN != "" {
			checks = append(checks, doctor.WakeTopic(ctx, doctor.WakeTopicParams{QueueDSN: *queueDSN, Topic: *wakeTopic, Ignore: doctor.WakeTopicIgnore(sub.group), UnjoinedOK: wakeUnjoined}))
		}
		if hostChecked && !f.given("queue-dsn") {
			checks = append(checks, doctor.Check{Name: "queue dsn", Status: doctor.OK,
				Detail: "--queue-dsn not given: the queue database is --host-dsn's, as mend run takes it (its tables were checked there)"})
		}
		if !hostChecked {
			checks = append(checks, doctor.Check{Name: "host", Status: doctor.Warn, Detail: "not checked: no --host-dsn",
				Fix: "give --host-dsn as mend run gets it (--host-dsn=" + hostDSNSame + " when the submit queue's tables are in mend's database)"})
		}
		if sub.on(f) {
			sp, err := sub.params(f.dsn, *queueDSN)
			if err != nil {
				return err
			}
			checks = append(checks, doctor.Subscription(ctx, sp)...)
		}
		failed := 0
		for _, c := range checks {
			if c.Status == doctor.Fail {
				failed++
			}
		}
		if f.json {
			if err := writeJSON(a.stdout, map[string]any{"target": target, "checks": checks, "problems": failed}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(a.stdout, "mend doctor: %s\n", target)
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			for _, c := range checks {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Status, c.Name, c.Detail)
				if c.Fix != "" {
					fmt.Fprintf(tw, "  \t\tfix: %s\n", c.Fix)
				}
			}
			_ = tw.Flush()
		}
		if failed > 0 {
			return fmt.Errorf("%d problem(s) found; see the list above", failed)
		}
		if !f.json {
			fmt.Fprintln(a.stdout, "no problems found")
		}
		return nil
	})
}

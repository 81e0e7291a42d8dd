package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// opTimeout is the one-shot operator commands' default --timeout.
const opTimeout = 30 * time.Second

// withStore runs fn on mend's database, opened for one operator command (ctx
// carries its --timeout); the store is closed when fn returns.
func withStore(ctx context.Context, dsn string, fn func(context.Context, *storage.DB) error) error {
	store, err := storage.Open(ctx, dsn, storage.Options{})
	if err != nil {
		return fmt.Errorf("open mend's database: %w", err)
	}
	defer store.Close()
	return fn(ctx, store)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ---- migrate ----

func newMigrateCmd(a *app) *cobra.Command {
	f := a.newCommand("migrate up [N]|down [N]|goto V|version|force V|sql", "apply, revert, show or print mend's schema; force records a version by hand",
		"Apply (up: all, or the next N), revert (down: all, or the last N), move to a version (goto), show the\n"+
			"version (exit 1 if dirty), record a version by hand after repairing a dirty schema (force), or print the\n"+
			"migrations as SQL for a DBA who applies them by hand (sql; needs no database).", withDSN|withLog|withJSON)
	yes := f.Bool("yes", false, "confirm 'down' or a 'goto' below the current version (they drop mend's tables and data), or 'force' on a clean schema")
	force := f.Bool("force", false, "with --yes: 'down' or a lower 'goto' even while a lease is live or records are open (they are lost)")
	createDB := f.Bool("create-database", false, "up: create the DSN's database first if it does not exist")
	f.cmdLineOnly("yes")
	f.cmdLineOnly("force")
	f.addTimeout(5 * time.Minute)
	// The action and its number may come before or after the flags.
	f.cmd.Args = cobra.ArbitraryArgs
	f.cmd.ValidArgs = []string{"up", "down", "goto", "version", "force", "sql"}
	return f.run(func(ctx context.Context, pos []string) error {
		if len(pos) == 0 {
			return usagef("name an action: mend migrate up [N]|down [N]|goto V|version|force V|sql")
		}
		action, rest := pos[0], pos[1:]
		num := -1 // the action's number; -1: none given
		switch action {
		case "up", "down", "goto", "force":
			if len(rest) > 1 {
				return usagef("unexpected argument %q after %q", rest[1], action+" "+rest[0])
			}
			if len(rest) == 1 {
				n, err := strconv.Atoi(rest[0])
				if err != nil || n < 0 {
					return usagef("'migrate %s' takes a non-negative number, got %q", action, rest[0])
				}
				num = n
			} else if action == "goto" || action == "force" {
				return usagef("'migrate %s' needs a version, e.g. mend migrate %s 7", action, action)
			}
		case "version", "sql":
			if len(rest) > 0 {
				return usagef("unexpected argument %q after %q", rest[0], action)
			}
		default:
			return usagef("unknown action %q; use up, down, goto, version, force or sql", action)
		}
		list, err := migrations.Mend.List()
		if err != nil {
			return err
		}
		latest := list[len(list)-1].Version
		if action == "sql" {
			return migrations.Mend.WriteScript(a.stdout, list)
		}
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		cur, dirty, err := schemaVersion(ctx, dsn)
		if isUnknownDB(err) {
			if action != "up" || !*createDB {
				return fmt.Errorf("%s; create it first (CREATE DATABASE %s) or run mend migrate up --create-database", oneLine(err.Error()), dbNameOf(dsn))
			}
			if err := createDatabase(ctx, dsn); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "created database %s\n", dbNameOf(dsn))
			cur, dirty, err = 0, false, nil
		}
		if err != nil {
			return err
		}
		if dirty && action != "version" && action != "force" {
			return fmt.Errorf("mend's schema is dirty at version %d: a migration failed half way; repair it by hand, then mend migrate force <version> (docs/operations.md, 'Dirty schema')", cur)
		}
		target := cur
		switch action {
		case "up":
			target = latest
			if num >= 0 {
				target = min(versionAfter(list, cur, num), latest)
			}
		case "down":
			target = 0
			if num >= 0 {
				target = versionBefore(list, cur, num)
			}
			if !*yes {
				return usagef("'migrate down' %s; add --yes to confirm", revertSays(list, cur, target))
			}
		case "goto":
			if uint(num) > latest {
				return usagef("version %d is beyond this binary's latest (%d)", num, latest)
			}
			if num != 0 && !slices.ContainsFunc(list, func(m migrations.Migration) bool { return m.Version == uint(num) }) {
				return usagef("there is no migration %d", num)
			}
			target = uint(num)
			if target < cur && !*yes {
				return usagef("'migrate goto %d' %s; add --yes to confirm", num, revertSays(list, cur, target))
			}
		case "force":
			if uint(num) > latest {
				return usagef("version %d is beyond this binary's latest (%d)", num, latest)
			}
			if !dirty && !*yes {
				return usagef("the schema is clean at version %d: force only records a version after a dirty migration was repaired by hand, and running no migration; add --yes if you really mean it", cur)
			}
			if err := migrations.Mend.Force(ctx, dsn, num); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "recorded version %d as clean (no migration ran)\n", num)
			cur, dirty = uint(num), false
		}
		if target < cur {
			if err := a.refuseIfAtRisk(ctx, dsn, list, cur, target, *force); err != nil {
				return err
			}
		}
		for cur != target {
			step, m := 1, migrationAt(list, cur, true)
			if target < cur {
				step, m = -1, migrationAt(list, cur, false)
			}
			began := time.Now()
			if err := migrations.Mend.Step(ctx, dsn, step); err != nil {
				return migrateFix(err)
			}
			verb := "applied"
			if step < 0 {
				verb = "reverted"
			}
			fmt.Fprintf(a.stdout, "%s %04d_%s in %s\n", verb, m.Version, m.Name, time.Since(began).Round(time.Millisecond))
			if cur, dirty, err = schemaVersion(ctx, dsn); err != nil {
				return err
			}
		}
		if f.json {
			if err := writeJSON(a.stdout, map[string]any{"version": cur, "latest": latest, "dirty": dirty}); err != nil {
				return err
			}
		} else {
			state := "clean"
			if dirty {
				state = "DIRTY (a migration failed half way; repair it by hand, then mend migrate force <version>; see docs/operations.md)"
			}
			fmt.Fprintf(a.stdout, "mend schema at version %d of %d, %s\n", cur, latest, state)
		}
		if dirty {
			return fmt.Errorf("mend's schema is dirty at version %d", cur)
		}
		return nil
	})
}

// revertSays is what reverting from cur to target does, for the refusal
// without --yes: the same verdict (migrations.RevertDropsTables) that the run with
// --yes reports (issue 47: without --yes, every revert "dropped mend's
// tables", and the same revert with --yes "dropped no table").
func revertSays(list []migrations.Migration, cur, target uint) string {
	switch {
	case target >= cur:
		return fmt.Sprintf("reverts nothing (the schema is at %d)", cur)
	case migrations.RevertDropsTables(list, cur, target):
		return fmt.Sprintf("reverts to %d, dropping mend's tables and their data (records, events, leases)", target)
	}
	if migrations.RevertDropsPositions(list, cur, target) {
		return fmt.Sprintf("reverts to %d, which drops mend_binlog_positions (the binary-log reader's saved position goes: a reader started later starts over from the host's tables) and no table of records, events or leases: they stay", target)
	}
	return fmt.Sprintf("reverts to %d, which drops no table: records, events and leases stay", target)
}

// refuseIfAtRisk says what reverting from cur to target would lose, and
// refuses while a replica holds a lease or a repair is still owed, unless
// force. Reverting expand steps that drop no table (a rollback's
// migrate down) loses no record and is not refused. `mend migrate down --yes` once deleted every record while a
// replica ran, a queue still waiting among them.
func (a *app) refuseIfAtRisk(ctx context.Context, dsn string, list []migrations.Migration, cur, target uint, force bool) error {
	dropsPositions := migrations.RevertDropsPositions(list, cur, target)
	if !migrations.RevertDropsTables(list, cur, target) && !dropsPositions {
		fmt.Fprintf(a.stderr, "mend migrate: reverting to %d drops no table: records, events and leases stay, and replicas of a binary that runs on %d keep working\n", target, target)
		return nil
	}
	cfg, err := storage.NormalizeDSN(dsn)
	if err != nil {
		return usagef("--dsn: %v", err)
	}
	db, err := mysqlx.OpenConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	risk, err := storage.ReadAtRisk(ctx, db)
	if err != nil {
		return err
	}
	if !migrations.RevertDropsTables(list, cur, target) {
		// Only migration 0019's table goes: refused while a binary-log
		// reader holds its lease (it would lose its position mid-read and
		// fail every save after), whatever else runs.
		fmt.Fprintf(a.stderr, "mend migrate: reverting to %d drops mend_binlog_positions (migration 0019): the binary-log reader's saved position goes, "+
			"and a reader started later starts over from the host's tables; records, events and leases stay\n", target)
		var readers []string
		for _, t := range risk.Live {
			if strings.HasPrefix(t.Queue, binlog.LeaseName("")) {
				readers = append(readers, fmt.Sprintf("%s held by %q", t.Queue, t.Holder))
			}
		}
		switch {
		case len(readers) == 0:
			return nil
		case !force:
			return fmt.Errorf("refusing to drop mend_binlog_positions while a binary-log reader holds its lease (%s): it would lose its saved position while it reads; "+
				"stop every mend run in binlog mode first (mend lease list), or add --force", strings.Join(readers, ", "))
		}
		fmt.Fprintf(a.stderr, "mend migrate: --force: dropping mend_binlog_positions although a binary-log reader holds its lease (%s)\n", strings.Join(readers, ", "))
		return nil
	}
	var names []string
	for _, m := range slices.Backward(list) {
		if m.Version <= cur && m.Version > target {
			names = append(names, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
	}
	fmt.Fprintf(a.stderr, "mend migrate: reverting %s; at stake: %s\n", strings.Join(names, ", "), risk)
	if !risk.Lost() {
		return nil
	}
	if !force {
		return fmt.Errorf("refusing to revert while replicas work or repairs are owed: %s; stop every mend run and let the open records finish (mend status), or add --force to lose them", risk)
	}
	fmt.Fprintf(a.stderr, "mend migrate: --force: reverting although %s\n", risk)
	return nil
}

// schemaVersion reads the version without creating the bookkeeping table.
func schemaVersion(ctx context.Context, dsn string) (uint, bool, error) {
	cfg, err := storage.NormalizeDSN(dsn)
	if err != nil {
		return 0, false, usagef("--dsn: %v", err)
	}
	db, err := mysqlx.OpenConfig(ctx, cfg)
	if err != nil {
		return 0, false, err
	}
	defer db.Close()
	return storage.ReadSchemaVersion(ctx, db)
}

// isUnknownDB reports the server's "Unknown database" (1049).
func isUnknownDB(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1049
}

func dbNameOf(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "<database>"
	}
	return quoteIdent(cfg.DBName)
}

// createDatabase creates the DSN's database with the binary collation
// mend's tables use anyway.
func createDatabase(ctx context.Context, dsn string) error {
	cfg, err := storage.NormalizeDSN(dsn)
	if err != nil {
		return usagef("--dsn: %v", err)
	}
	name := cfg.DBName
	cfg.DBName = ""
	db, err := mysqlx.OpenConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	return storage.DatabaseCreate(ctx, db, name)
}

// migrationAt is the migration that moves the schema from cur: the next one
// up, or cur's own one down.
func migrationAt(list []migrations.Migration, cur uint, up bool) migrations.Migration {
	for i, m := range list {
		if up && m.Version > cur {
			return m
		}
		if !up && m.Version == cur {
			return list[i]
		}
	}
	return migrations.Migration{Version: cur, Name: "?"}
}

// versionAfter is the version n migrations above cur.
func versionAfter(list []migrations.Migration, cur uint, n int) uint {
	v := cur
	for _, m := range list {
		if n == 0 {
			break
		}
		if m.Version > cur {
			v, n = m.Version, n-1
		}
	}
	return v
}

// versionBefore is the version n migrations below cur (0: none applied).
func versionBefore(list []migrations.Migration, cur uint, n int) uint {
	var below []uint
	for _, m := range list {
		if m.Version < cur {
			below = append(below, m.Version)
		}
	}
	if n > len(below) {
		return 0
	}
	if n == 0 {
		return cur
	}
	if i := len(below) - n; i >= 0 && i < len(below) {
		return below[i]
	}
	return 0
}

// ---- status ----

type leaseJSON struct {
	Status      string  `json:"status"` // as leaseWord says it
	Holder      string  `json:"holder"`
	Epoch       int64   `json:"epoch"`
	Held        bool    `json:"held"`
	SecondsLeft float64 `json:"seconds_left"`
	ExpiresAt   string  `json:"expires_at"`
}

type queueStatusJSON struct {
	Queue             string           `json:"queue"`
	Counts            map[string]int64 `json:"counts"`
	Due               int64            `json:"due"`
	OldestDueSeconds  float64          `json:"oldest_due_seconds"`           // as mend_oldest_due_seconds: the most overdue record's lateness (pages)
	OldestOpenSeconds float64          `json:"oldest_open_seconds"`          // as mend_oldest_open_seconds: the oldest unfinished record's age, intended waits included
	Failing           int64            `json:"failing"`                      // as mend_records_failing: records whose every attempt in their step failed, backing off
	OldestFailingSecs float64          `json:"oldest_failing_seconds"`       // as mend_oldest_failing_seconds (MendRepairsFailing pages on it)
	FailingLastError  string           `json:"failing_last_error,omitempty"` // the longest-failing record's last error (a denied statement names its GRANT)
	// Recorded is the queue's dead letters recorded for the audit ("audit")
	// or repaired by their host's own DLQ controller ("host"): stored
	// parked, but left out of counts' parked (and of mend_records).
	Recorded   map[string]int64 `json:"recorded,omitempty"`
	Lease      *leaseJSON       `json:"lease"`
	StuckWakes *stuckWakesJSON  `json:"stuck_wakes,omitempty"` // the queue's stuck-queue records (stuck.go)
}

func newStatusCmd(a *app) *cobra.Command {
	f := a.newCommand("status", "per queue: records by state, oldest due age, lease holder",
		"Per queue: records by state, how many are due and for how long, and the lease.\n"+
			"With --queue-dsn, also the subscription's lag per dead-letter topic (see mend subscribe).", withDSN|withLog|withList)
	queue := f.String("queue", "", "only this queue")
	f.addTimeout(opTimeout)
	sub := addStatusLagFlags(f)
	return f.run(func(ctx context.Context, args []string) error {
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		return withStore(ctx, dsn, func(ctx context.Context, store *storage.DB) error {
			st, err := store.Status(ctx)
			if err != nil {
				return err
			}
			// The same numbers as the metrics: mend_oldest_due_seconds is
			// Status's OldestDue, mend_oldest_open_seconds this (a record
			// in backoff or a merge's grace is owed a repair, but not due).
			oldest, err := store.OldestOpen(ctx)
			if err != nil {
				return err
			}
			for i := range st {
				st[i].OldestOpen = oldest[st[i].Queue]
			}
			failing, err := statusFailing(ctx, store, st)
			if err != nil {
				return err
			}
			if f.given("queue") {
				st = slices.DeleteFunc(st, func(q storage.QueueStatus) bool { return q.Queue != *queue })
			}
			wakes, err := store.StuckWakes(ctx)
			if err != nil {
				return err
			}
			readers, err := binlogReaders(ctx, store, true)
			var readersDenied error
			if errors.Is(err, mend.ErrDenied) {
				// A user granted before migration 0019 (the documented
				// grants include it): the rest of status stands.
				readers, readersDenied, err = nil, err, nil
			}
			if err != nil {
				return err
			}
			// The latency summary and the stuck-queue line are across queues
			// and for people: a filtered or headerless table (scripts) is the
			// table alone. With --queue-dsn or without, people read the same
			// blocks (issue 57: --queue-dsn showed the table alone).
			forPeople := !f.given("queue") && !f.noHeaders
			queues := func() error {
				if err := printStatus(a.stdout, st, f.listOpts()); err != nil {
					return err
				}
				if !f.noHeaders {
					printFailing(a.stdout, failing, st)
				}
				if forPeople {
					printStuckWakes(a.stdout, wakes)
				}
				return nil
			}
			tail := func() error {
				if !forPeople {
					return nil
				}
				if readersDenied != nil {
					fmt.Fprintf(a.stdout, "\nbinlog mode's readers not shown: %s\n", escapeShown(readersDenied.Error(), 400))
				}
				return printRepairLatency(ctx, a.stdout, store)
			}
			if sub.queueDSN != "" {
				if err := sub.print(ctx, a, f, withStuckWakes(toStatusJSON(st), wakes), queues, readers); err != nil || f.json {
					return err
				}
				return tail()
			}
			if f.json {
				return writeJSON(a.stdout, withStuckWakes(toStatusJSON(st), wakes))
			}
			if err := queues(); err != nil {
				return err
			}
			if forPeople {
				printBinlogReaders(a.stdout, readers)
			}
			return tail()
		})
	})
}

// toStatusJSON is status's --json form.
func toStatusJSON(st []storage.QueueStatus) []queueStatusJSON {
	out := make([]queueStatusJSON, 0, len(st))
	for _, q := range st {
		j := queueStatusJSON{Queue: q.Queue, Counts: map[string]int64{}, Due: q.Due, OldestDueSeconds: q.OldestDue.Seconds(),
			OldestOpenSeconds: q.OldestOpen.Seconds(), Failing: q.Failing, OldestFailingSecs: q.OldestFailing.Seconds(), FailingLastError: q.FailingLastError}
		for s, n := range q.Counts {
			j.Counts[string(s)] = n
		}
		for k, n := range q.Recorded {
			if j.Recorded == nil {
				j.Recorded = map[string]int64{}
			}
			j.Recorded[string(k)] = n
		}
		if q.Lease != nil {
			j.Lease = &leaseJSON{Status: leaseWord(*q.Lease), Holder: q.Lease.Term.Holder, Epoch: q.Lease.Term.Epoch, Held: q.Lease.Live(),
				SecondsLeft: max(q.Lease.Remaining.Seconds(), 0), ExpiresAt: q.Lease.ExpiresAt.Format(time.RFC3339Nano)}
		}
		out = append(out, j)
	}
	return out
}

// leaseWord is a queue's lease in the one vocabulary of every surface
// (mend lease list, mend status, the view mend_lease_status): never held,
// held, or how the last term ended (holder released, operator released,
// expired).
func leaseWord(l storage.LeaseStatus) string {
	switch {
	case l.Term.Epoch == 0:
		return "never held"
	case l.Live():
		return "held"
	}
	return cmp.Or(l.Ended, storage.LeaseEndedExpired)
}

// failingShown is how many failing records mend status lists.
const failingShown = 5

// statusFailing reads the longest-failing records when a queue of st has
// any (one more statement only then) and fills each queue's
// FailingLastError from its longest-failing record among them.
func statusFailing(ctx context.Context, store *storage.DB, st []storage.QueueStatus) ([]storage.FailingRecord, error) {
	if !slices.ContainsFunc(st, func(q storage.QueueStatus) bool { return q.Failing > 0 }) {
		return nil, nil
	}
	failing, err := store.StatusFailing(ctx, failingShown)
	if err != nil {
		return nil, err
	}
	for i := range st {
		if j := slices.IndexFunc(failing, func(r storage.FailingRecord) bool { return r.Queue == st[i].Queue }); j >= 0 {
			st[i].FailingLastError = failing[j].LastError
		}
	}
	return failing, nil
}

// printFailing lists the failing records of the queues shown, longest
// first, with their last error: what MendRepairsFailing pages on, and
// for a denied statement the GRANT that fixes it.
func printFailing(w io.Writer, failing []storage.FailingRecord, st []storage.QueueStatus) {
	shown := map[string]bool{}
	for _, q := range st {
		shown[q.Queue] = true
	}
	first := true
	for _, r := range failing {
		if !shown[r.Queue] {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nfailing repairs (every attempt of the step failed so far; backing off, not due):")
			first = false
		}
		fmt.Fprintf(w, "  %s  record %s  for %s, %d attempts: %s\n", clipLine(r.Queue, listIdentityWidth), r.ID, fmtAge(r.For), r.Attempts, clipLine(r.LastError, 400))
	}
}

// leaseExpiresCell is the EXPIRES column of a lease row: when a live or
// expired term runs or ran out; a released term did not expire ("-": the
// lease's status says who released it; issue 47: it showed its release
// instant as an expiry).
func leaseExpiresCell(l storage.LeaseStatus) string {
	if !l.Live() && (l.Ended == storage.LeaseEndedHolder || l.Ended == storage.LeaseEndedOperator) {
		return "-"
	}
	return l.ExpiresAt.UTC().Format("2006-01-02 15:04:05.000")
}

// printStatus prints status as a table for people.
// With -o wide it adds the lease's holder, epoch and expiry as columns.
func printStatus(w io.Writer, st []storage.QueueStatus, o listOpts) error {
	if len(st) == 0 {
		if !o.noHeaders {
			fmt.Fprintln(w, "no records and no leases (for this selection)")
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cols := "QUEUE\tPENDING\tWAITING\tSETTLED\tPARKED\tDONE\tDUE\tOLDEST DUE\tOLDEST OPEN\tLEASE"
	if o.wide {
		cols += "\tHOLDER\tEPOCH\tEXPIRES (UTC)"
	}
	// FAILING, then RECORDED, are last, so scripts reading the columns
	// before them are unchanged.
	cols += "\tFAILING\tRECORDED"
	o.header(tw, cols)
	for _, q := range st {
		lease := "never held"
		if l := q.Lease; l != nil {
			switch {
			case l.Live():
				lease = fmt.Sprintf("held by %s, epoch %d, %s left", l.Term.Holder, l.Term.Epoch, fmtAge(l.Remaining))
			case l.Term.Epoch > 0:
				lease = fmt.Sprintf("free (last epoch %d, %s, %s)", l.Term.Epoch, l.Term.Holder, leaseWord(*l))
			}
		}
		c := q.Counts
		oldestDue := "-"
		if q.Due > 0 {
			oldestDue = fmtAge(q.OldestDue)
		}
		// FAILING: records whose every attempt in their step failed (they
		// back off, so they are not due), and for how long the oldest has.
		failing := "-"
		if q.Failing > 0 {
			failing = fmt.Sprintf("%d for %s", q.Failing, fmtAge(q.OldestFailing))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s", q.Queue, c[mend.StatePending], c[mend.StateWaiting],
			c[mend.StateSettled], c[mend.StateParked], c[mend.StateDone], q.Due, oldestDue, fmtAge(q.OldestOpen), lease)
		if o.wide {
			holder, epoch, expires := "-", "-", "-"
			if l := q.Lease; l != nil && l.Term.Epoch > 0 {
				holder, epoch, expires = l.Term.Holder, fmt.Sprint(l.Term.Epoch), leaseExpiresCell(*l)
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s", holder, epoch, expires)
		}
		fmt.Fprintf(tw, "\t%s\t%s\n", failing, recordedCell(q.Recorded))
	}
	return tw.Flush()
}

// recordedCell is status's RECORDED column: the queue's dead letters
// recorded for the audit or handled by their host (mend.TopicKind), which
// PARKED leaves out: "-" when none, else the total and each kind.
func recordedCell(r map[mend.TopicKind]int64) string {
	a, h := r[mend.TopicAudit], r[mend.TopicHost]
	if a+h == 0 {
		return "-"
	}
	var parts []string
	if a > 0 {
		parts = append(parts, fmt.Sprintf("audit %d", a))
	}
	if h > 0 {
		parts = append(parts, fmt.Sprintf("host %d", h))
	}
	return fmt.Sprintf("%d (%s)", a+h, strings.Join(parts, ", "))
}

// ---- inspect ----

type recordJSON struct {
	ID        string `json:"record_id"`
	Queue     string `json:"queue"`
	Topic     string `json:"topic"`
	Partition string `json:"partition"`
	MessageID string `json:"message_id"`
	BatchID   string `json:"batch_id"`
	Desired   string `json:"desired_outcome"`
	State     string `json:"state"`
	Version   int64  `json:"version"`
	Attempts  int    `json:"attempts"` // tries of the current step (backoff and parking counter)
	// Failures is every failed attempt of the record's life (listings and
	// history only; omitted where it was not counted).
	Failures      *int           `json:"failures,omitempty"`
	NextAttemptAt *time.Time     `json:"next_attempt_at"`
	LastError     string         `json:"last_error"`
	Epoch         int64          `json:"epoch"`
	CreatedAt     time.Time      `json:"created_at"`
	UpdatedAt     time.Time      `json:"updated_at"`
	StateSince    time.Time      `json:"state_since"`
	Snapshot      snapshotJSON   `json:"snapshot"`
	Subjects      []mend.Subject `json:"subjects"`
}

type snapshotJSON struct {
	FailureCount int    `json:"failure_count"`
	LastError    string `json:"last_error"`
	FailedAt     string `json:"failed_at,omitempty"`
	Payload      string `json:"payload,omitempty"`     // when valid UTF-8
	PayloadHex   string `json:"payload_hex,omitempty"` // otherwise
}

type eventJSON struct {
	Seq       int64           `json:"seq"`
	Kind      string          `json:"kind"`
	Epoch     int64           `json:"epoch"`
	Actor     string          `json:"actor"`
	OpID      string          `json:"op_id"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

func toRecordJSON(r mend.Record) recordJSON {
	j := recordJSON{ID: r.ID.String(), Queue: r.Source.Queue, Topic: r.Source.Topic, Partition: r.Source.Partition,
		MessageID: r.Source.MessageID, BatchID: r.Target.BatchID, Desired: string(r.Target.Desired), State: string(r.State),
		Version: r.Version, Attempts: r.Attempts, NextAttemptAt: r.NextAttemptAt, LastError: r.LastError, Epoch: r.Epoch,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, StateSince: r.StateSince, Subjects: r.Snapshot.Subjects,
		Snapshot: snapshotJSON{FailureCount: r.Snapshot.FailureCount, LastError: r.Snapshot.LastError}}
	if !r.Snapshot.FailedAt.IsZero() {
		j.Snapshot.FailedAt = r.Snapshot.FailedAt.Format(time.RFC3339Nano)
	}
	if utf8.Valid(r.Snapshot.Payload) {
		j.Snapshot.Payload = string(r.Snapshot.Payload)
	} else {
		j.Snapshot.PayloadHex = fmt.Sprintf("%x", r.Snapshot.Payload)
	}
	if j.Subjects == nil {
		j.Subjects = []mend.Subject{}
	}
	return j
}

func toEventsJSON(evs []mend.Event) []eventJSON {
	out := make([]eventJSON, len(evs))
	for i, e := range evs {
		data := e.Data
		if !json.Valid(data) {
			data = json.RawMessage(`{}`)
		}
		out[i] = eventJSON{Seq: e.Seq, Kind: string(e.Kind), Epoch: e.Epoch, Actor: e.Actor, OpID: e.OpID, Data: data, CreatedAt: e.CreatedAt}
	}
	return out
}

func newInspectCmd(a *app) *cobra.Command {
	f := a.newCommand("inspect", "a record and its full event history (or a queue's records)",
		"Show a record and its full event history. With only --queue, list the queue's newest records;\nwith --state, list the records in that state across queues (or in --queue), least recently changed first.", withDSN|withLog|withList)
	f.addTimeout(opTimeout)
	queue := f.String("queue", "", "the queue (optional with --record)")
	state := f.String("state", "", "list records in this state (pending, waiting, settled, parked, done), across queues unless --queue is given")
	recordID := f.String("record", "", "record ID (32 hex characters), or its first 4 or more as with git")
	topic := f.String("topic", "", "with --message-id: the source topic, e.g. speculate_dlq (the _dlq suffix may be left out)")
	partition := f.String("partition", "", "with --message-id: the source partition key (default: --queue, which it usually is; --partition '' for an empty one)")
	messageID := f.String("message-id", "", "look the record up by its source message ID (needs --queue and --topic)")
	limit := f.Int("limit", 50, "how many records to list (with --queue or --state)")
	f.completeValues("state", stateNames()...)
	f.completeValues("topic", dlqTopics()...)
	return f.run(func(ctx context.Context, args []string) error {
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		switch {
		case *recordID != "":
			if err := checkRecordRef(*recordID); err != nil {
				return err
			}
		case *messageID != "":
			if *queue == "" || *topic == "" {
				return usagef("--message-id needs --queue and --topic (and --partition if it is not the queue)")
			}
		case *state != "":
			if !mend.State(*state).Valid() {
				return usagef("--state %q is not a record state: pending, waiting, settled, parked or done", *state)
			}
		case *queue == "":
			return usagef("name what to inspect: --record ID, --state S, or --queue Q (with --topic and --message-id for one message)")
		}
		if *limit < 1 {
			return usagef("--limit must be at least 1")
		}
		return withStore(ctx, dsn, func(ctx context.Context, store *storage.DB) error {
			var rec mend.Record
			var err error
			switch {
			case *recordID != "":
				if rec, err = findRecord(ctx, store, *recordID); err != nil {
					return err
				}
				if *queue != "" && rec.Source.Queue != *queue {
					return fmt.Errorf("record %s is in queue %q, not %q", rec.ID, rec.Source.Queue, *queue)
				}
			case *messageID != "":
				part := *partition
				if !f.given("partition") {
					part = *queue
				}
				src := mend.SourceID{Queue: *queue, Topic: dlqTopic(*topic), Partition: part, MessageID: *messageID}
				if rec, err = store.RecordGet(ctx, src); err != nil {
					if errors.Is(err, mend.ErrInvalid) {
						return usagef("%v", err)
					}
					return err
				}
			case *state != "":
				recs, err := store.RecordsSelect(ctx, storage.RecordFilter{State: mend.State(*state), Queue: *queue, Limit: *limit})
				if err != nil {
					return err
				}
				return a.printRecordList(ctx, store, f.json, f.listOpts(), "state "+*state, recs)
			default:
				recs, err := store.RecordsList(ctx, *queue, *limit)
				if err != nil {
					return err
				}
				return a.printRecordList(ctx, store, f.json, f.listOpts(), "queue "+strconv.Quote(*queue), recs)
			}
			evs, err := store.RecordHistory(ctx, rec.Source.Queue, rec.ID)
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(a.stdout, map[string]any{"record": withFailures(toRecordJSON(rec), countFailures(evs)), "events": toEventsJSON(evs)})
			}
			return printHistory(a.stdout, rec, evs)
		})
	})
}

// printHistory prints a record and its events for people.
func printHistory(w io.Writer, rec mend.Record, evs []mend.Event) error {
	printRecord(w, rec, countFailures(evs))
	fmt.Fprintln(w, "history:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SEQ\tAT (UTC)\tKIND\tEPOCH\tACTOR\tDATA")
	for _, e := range evs {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\n", e.Seq, e.CreatedAt.UTC().Format("2006-01-02 15:04:05.000"), e.Kind, e.Epoch, e.Actor, compactJSON(e.Data))
	}
	return tw.Flush()
}

// printRecordList prints records; -o wide adds the partition, version and
// next attempt, and the whole last error.
//
// FAILED REPAIRS is every repair attempt of mend's that failed in the
// record's life, counted from its events (not the host's failures of the
// dead letter, which inspect --record shows as the dead letter's); STEP
// TRIES (wide) is the current step's counter that backoff and
// --max-attempts use, which starts again when the outcome settles. Issue
// 57: the column said FAILURES, which read as either.
func (a *app) printRecordList(ctx context.Context, store *storage.DB, asJSON bool, o listOpts, what string, recs []mend.Record) error {
	failures, err := store.RecordFailures(ctx, recs)
	if err != nil {
		return err
	}
	if asJSON {
		out := make([]recordJSON, len(recs))
		for i, r := range recs {
			out[i] = withFailures(toRecordJSON(r), failures[r.ID])
		}
		return writeJSON(a.stdout, out)
	}
	if len(recs) == 0 {
		if !o.noHeaders {
			fmt.Fprintf(a.stdout, "no records (%s)\n", what)
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	if o.wide {
		o.header(tw, "RECORD\tQUEUE\tSTATE\tFAILED REPAIRS\tSTEP TRIES\tTOPIC\tPARTITION\tMESSAGE ID\tBATCH\tVERSION\tCREATED (UTC)\tNEXT TRY (UTC)\tLAST ERROR")
	} else {
		o.header(tw, "RECORD\tQUEUE\tSTATE\tFAILED REPAIRS\tTOPIC\tMESSAGE ID\tBATCH\tCREATED (UTC)\tLAST ERROR")
	}
	for _, r := range recs {
		if o.wide {
			next := "-"
			if r.NextAttemptAt != nil {
				next = r.NextAttemptAt.UTC().Format("2006-01-02 15:04:05.000")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Source.Queue, r.State, failures[r.ID], r.Attempts, r.Source.Topic,
				r.Source.Partition, r.Source.MessageID, r.Target.BatchID, r.Version, r.CreatedAt.UTC().Format("2006-01-02 15:04:05.000"), next, oneLine(r.LastError))
			continue
		}
		// Identities are clipped as the console clips them (issue 47: a
		// 250-byte message ID ran the rows hundreds of columns wide);
		// -o wide and -o json show them whole.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, clipLine(r.Source.Queue, listIdentityWidth), r.State, failures[r.ID], r.Source.Topic,
			clipLine(r.Source.MessageID, listIdentityWidth), clipLine(r.Target.BatchID, listIdentityWidth), r.CreatedAt.UTC().Format("2006-01-02 15:04:05"), clipLine(r.LastError, 80))
	}
	return tw.Flush()
}

// listIdentityWidth is how many bytes of a queue, message ID or batch ID a
// record listing's row shows (a clipped one ends in "…").
const listIdentityWidth = 48

// printRecord prints a record for people; failures is its failed attempts
// over its whole life (see printRecordList).
func printRecord(w io.Writer, r mend.Record, failures int) {
	fmt.Fprintf(w, "record %s\n", r.ID)
	fmt.Fprintf(w, "  queue:      %s\n", r.Source.Queue)
	fmt.Fprintf(w, "  source:     topic %q, partition %q, message ID %q\n", r.Source.Topic, r.Source.Partition, r.Source.MessageID)
	fmt.Fprintf(w, "  target:     batch %q, desired outcome %q\n", r.Target.BatchID, r.Target.Desired)
	fmt.Fprintf(w, "  state:      %s for %s (version %d, last epoch %d)\n", r.State, fmtAge(r.StateAge), r.Version, r.Epoch)
	// A waiting record (a merge in flight) parks when --grace runs out,
	// not after --max-attempts tries: waiting is not failing.
	parks := "parks at --max-attempts"
	if r.State == mend.StateWaiting {
		parks = "waiting on a merge: parks when --grace runs out"
	}
	fmt.Fprintf(w, "  failures:   %s of mend's in all; %s in this step (%s)\n", plural(failures, "failed repair attempt", "failed repair attempts"),
		plural(r.Attempts, "try", "tries"), parks)
	if r.NextAttemptAt != nil {
		fmt.Fprintf(w, "  next try:   %s UTC\n", r.NextAttemptAt.UTC().Format("2006-01-02 15:04:05.000"))
	}
	if r.LastError != "" {
		fmt.Fprintf(w, "  last error: %s\n", clipLine(r.LastError, 300))
	}
	fmt.Fprintf(w, "  dead letter: failed %d times, last error %q\n", r.Snapshot.FailureCount, clipLine(r.Snapshot.LastError, 200))
}

// plural is n with the noun in the number n takes: "1 try", "2 tries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func withFailures(j recordJSON, n int) recordJSON {
	j.Failures = &n
	return j
}

// countFailures counts the failed attempts in a record's history, as
// storage.RecordFailures does in SQL.
func countFailures(evs []mend.Event) int {
	n := 0
	for _, e := range evs {
		switch e.Kind {
		case mend.EventAttemptFailed, mend.EventWakeFailed:
			n++
		case mend.EventParked:
			// The failed attempt that parked a record is its parked event,
			// with the attempt's number (as RecordFailures counts it).
			var d struct {
				Attempt *int `json:"attempt"`
			}
			if json.Unmarshal(e.Data, &d) == nil && d.Attempt != nil {
				n++
			}
		}
	}
	return n
}

func compactJSON(b []byte) string {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || len(m) == 0 {
		return "{}"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		v, _ := json.Marshal(m[k])
		parts = append(parts, k+"="+string(v))
	}
	return strings.Join(parts, " ")
}

func clipLine(s string, n int) string {
	s = oneLine(s)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ---- record ----

func newRecordCmd(a *app) *cobra.Command {
	f := a.newCommand("record", "record a dead letter by hand (replaying old dead letters)",
		"Record a dead letter by hand, e.g. when replaying old dead letters. It is decoded like the intake does;\nan undecodable one is recorded parked. Recording the same message with the same payload again returns the\nexisting record; with a different payload it is an error that shows both.", withDSN|withLog|withJSON)
	f.addTimeout(opTimeout)
	queue := f.String("queue", "", "the queue (required; it must be the queue the payload names, which the record is filed under)")
	topic := f.String("topic", "", "the dead letter's topic, e.g. speculate_dlq (required; the _dlq suffix may be left out)")
	partition := f.String("partition", "", "the partition key, usually the queue (required; pass --partition '' for an empty one)")
	messageID := f.String("message-id", "", "the message ID (required)")
	payloadFile := f.String("payload-file", "", "file holding the payload; - reads stdin (this or --payload is required)")
	payload := f.String("payload", "", "the payload inline; - reads stdin (this or --payload-file is required)")
	failures := f.Int("failure-count", 0, "how often the message failed")
	lastErr := f.String("last-error", "", "the message's last error")
	actor := f.String("actor", defaultActor(), "who records it, kept in the event log; operator/<OS user> unless given")
	f.completeValues("topic", dlqTopics()...)
	f.setDefault("log-level", "warn") // the command prints what it did; the intake's info line would repeat it
	return f.run(func(ctx context.Context, args []string) error {
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		for _, req := range []struct{ name, v string }{{"queue", *queue}, {"topic", *topic}, {"message-id", *messageID}} {
			if err := requireFlag(req.name, req.v); err != nil {
				return err
			}
		}
		// An omitted partition must not silently mean "": the record's
		// identity would not match the dead letter's.
		if !f.given("partition") {
			return usagef("--partition is required (or MEND_PARTITION): the dead letter's partition key, usually the queue; pass --partition '' if it really is empty")
		}
		pay := func() ([]byte, error) {
			switch {
			case f.given("payload") && f.given("payload-file"):
				return nil, usagef("give --payload or --payload-file, not both")
			case *payload == "-" || *payloadFile == "-":
				b, err := io.ReadAll(os.Stdin)
				if err != nil {
					return nil, fmt.Errorf("read the payload from stdin: %w", err)
				}
				return b, nil
			case f.given("payload-file"):
				b, err := os.ReadFile(*payloadFile)
				if err != nil {
					return nil, usagef("--payload-file: %v", err)
				}
				return b, nil
			case f.given("payload"):
				return []byte(*payload), nil
			}
			return nil, usagef("the payload is required: --payload TEXT, --payload-file FILE, or - for stdin (without it the record could never be repaired)")
		}
		body, err := pay()
		if err != nil {
			return err
		}
		d := dlq.Delivery{
			Source:       mend.SourceID{Queue: *queue, Topic: dlqTopic(*topic), Partition: *partition, MessageID: *messageID},
			Payload:      body,
			FailureCount: *failures,
			LastError:    *lastErr,
		}
		if err := d.Source.Validate(); err != nil {
			return usagef("%v", err)
		}
		// The intake files a record under the queue its payload names; a
		// different --queue was only a warning, and the record landed
		// elsewhere than the operator said.
		if q := dlq.RecordQueue(d); q != *queue && q != dlq.QueueUnresolved {
			return usagef("--queue %q, but the payload names queue %q (the record is filed under that one): check the dead letter, or give --queue %q", *queue, q, q)
		}
		return withStore(ctx, dsn, func(ctx context.Context, store *storage.DB) error {
			in, err := dlq.New(store, dlq.Config{Actor: *actor, Logger: f.logger()})
			if err != nil {
				return usagef("%v", err)
			}
			res, err := in.Record(ctx, d)
			if err != nil {
				if errors.Is(err, mend.ErrInvalid) {
					return usagef("%v", err)
				}
				return err
			}
			if !res.Created && !bytes.Equal(res.Record.Snapshot.Payload, body) {
				// First writer wins: the stored payload is what will be
				// repaired, so the operator must know theirs was not taken.
				return fmt.Errorf("message %q is already recorded as %s with a different payload, which is kept: stored %s, given %s; "+
					"record the corrected dead letter under a new --message-id (and mend resolve the old record once it is handled)",
					*messageID, res.Record.ID, quotePayload(res.Record.Snapshot.Payload), quotePayload(body))
			}
			if f.json {
				return writeJSON(a.stdout, map[string]any{"created": res.Created, "record": toRecordJSON(res.Record)})
			}
			verb := "recorded"
			if !res.Created {
				verb = "already recorded (same payload)"
			}
			fmt.Fprintf(a.stdout, "%s %s in queue %q: state %s", verb, res.Record.ID, res.Record.Source.Queue, res.Record.State)
			if res.Record.State == mend.StateParked {
				fmt.Fprintf(a.stdout, " (%s)", clipLine(res.Record.LastError, 200))
			}
			fmt.Fprintln(a.stdout)
			return nil
		})
	})
}

// quotePayload shows a payload in an error line: quoted, clipped, and in
// hex when it is not text.
func quotePayload(b []byte) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("(hex) %x", b[:min(len(b), 200)])
	}
	return strconv.Quote(clipLine(string(b), 300))
}

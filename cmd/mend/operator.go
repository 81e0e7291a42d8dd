package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/storage"
)

// ---- retry and resolve ----

// selection is how retry and resolve pick their records: one by --record,
// or every record matching --queue, --state and --reason-contains, shown
// first (a dry run) and changed only with --yes.
type selection struct {
	record, queue, state, contains *string
	limit                          *int
	yes                            *bool
}

func addSelection(f *flags, verb string) *selection {
	s := &selection{
		record:   f.String("record", "", "the record's ID, or its first 4 or more hex characters as with git; or select several with --queue, --state, --reason-contains"),
		queue:    f.String("queue", "", "select the records of this queue"),
		state:    f.String("state", string(mend.StateParked), "select records in this state"),
		contains: f.String("reason-contains", "", "select records whose last error (why they were parked) contains this text, case-sensitively"),
		limit:    f.Int("limit", 1000, "at most this many selected records"),
		yes:      f.Bool("yes", false, "with a selection: "+verb+" the records listed (without it, only list them and count)"),
	}
	f.cmdLineOnly("yes")
	f.completeValues("state", stateNames()...)
	return s
}

// stateNames are the record states, for completion.
func stateNames() []string {
	return []string{string(mend.StatePending), string(mend.StateWaiting), string(mend.StateSettled), string(mend.StateParked), string(mend.StateDone)}
}

// dlqTopic is a topic as dead letters carry it: speculate and
// speculate_dlq both name speculate_dlq, so `record --topic speculate`
// cannot make a second identity for one dead letter.
func dlqTopic(topic string) string {
	if topic == "" || strings.HasSuffix(topic, dlq.DLQSuffix) {
		return topic
	}
	return topic + dlq.DLQSuffix
}

// knownDLQTopic reports whether topic (with its suffix) is one of the host's.
func knownDLQTopic(topic string) bool { return slices.Contains(dlqTopics(), topic) }

// dlqTopics are the host's dead-letter topics, for completion of --topic.
func dlqTopics() []string {
	var out []string
	for _, t := range []string{dlq.TopicSpeculate, dlq.TopicDependencyAnalysis, dlq.TopicBuild, dlq.TopicBuildSignal,
		dlq.TopicMerge, dlq.TopicMergeSignal, dlq.TopicConclude, dlq.TopicStart, dlq.TopicValidate, dlq.TopicBatch,
		dlq.TopicCancel, dlq.TopicMergeConflictCheck, dlq.TopicLog} {
		out = append(out, t+dlq.DLQSuffix)
	}
	return out
}

// check validates the selection's flags, before anything connects: a bad
// record ID or a mixed selection is a usage error, never a database error.
func (s *selection) check(f *flags) error {
	if *s.record != "" {
		if f.given("queue") || f.given("reason-contains") || f.given("state") {
			return usagef("give --record, or a selection (--queue, --state, --reason-contains), not both")
		}
		return checkRecordRef(*s.record)
	}
	if !f.given("queue") && !f.given("reason-contains") && !f.given("state") {
		return usagef("name the records: --record ID, or select with --queue Q, --state S and/or --reason-contains TEXT")
	}
	if *s.limit < 1 {
		return usagef("--limit must be at least 1")
	}
	return nil
}

// checkRecordRef refuses what cannot be a record ID or a prefix of one,
// before anything connects.
func checkRecordRef(ref string) error {
	var id mend.RecordID
	if len(ref) < storage.MinRecordPrefix || len(ref) > 2*len(id) {
		return usagef("--record: give a record ID (%d hex characters) or its first %d or more, got %d characters (record_id)", 2*len(id), storage.MinRecordPrefix, len(ref))
	}
	if strings.Trim(strings.ToLower(ref), "0123456789abcdef") != "" {
		return usagef("--record: %q is not hex (record_id)", ref)
	}
	return nil
}

// findRecord finds a record by its ID or a unique prefix of it; an
// ambiguous prefix is a usage error naming two matches.
func findRecord(ctx context.Context, store *storage.DB, ref string) (mend.Record, error) {
	rec, err := store.RecordFindPrefix(ctx, ref)
	if errors.Is(err, mend.ErrInvalid) {
		return rec, usagef("--record: %v", err)
	}
	return rec, err
}

// pick returns the records to act on and whether this is only a dry run.
// Call check first.
func (s *selection) pick(ctx context.Context, store *storage.DB) ([]mend.Record, bool, error) {
	if *s.record != "" {
		rec, err := findRecord(ctx, store, *s.record)
		if err != nil {
			return nil, false, err
		}
		return []mend.Record{rec}, false, nil
	}
	recs, err := store.RecordsSelect(ctx, storage.RecordFilter{State: mend.State(*s.state), Queue: *s.queue,
		ReasonContains: *s.contains, Limit: *s.limit})
	if errors.Is(err, mend.ErrInvalid) {
		return nil, false, usagef("%v", err)
	}
	return recs, !*s.yes, err
}

// listSelection prints a dry run: what would be changed, and how to do it.
func (a *app) listSelection(verb string, recs []mend.Record, skip func(mend.Record) string) {
	n := 0
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECORD\tQUEUE\tSTATE\tLAST ERROR")
	for _, r := range recs {
		note := clipLine(r.LastError, 100)
		if why := skip(r); why != "" {
			note = "SKIPPED: " + why
		} else {
			n++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Source.Queue, r.State, note)
	}
	_ = tw.Flush()
	fmt.Fprintf(a.stdout, "would %s %d of %d selected record(s); add --yes to do it\n", verb, n, len(recs))
}

// noTarget says why a retry cannot help a record: it has nothing to repair.
func noTarget(r mend.Record) string {
	if r.Target.BatchID == "" || r.Target.Desired == mend.OutcomeNone {
		return "its dead letter names no batch to repair (undecodable or not mend's topic); a retry would only fail again"
	}
	return ""
}

// defaultActor is who an operator's command records as the actor when
// --actor is not given: "operator/" and the OS user running it (issue 47:
// every CLI action read "operator", whoever ran it), or "operator" when
// the OS does not say. Audit, not authentication: --actor overrides it.
func defaultActor() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	name = cmp.Or(name, os.Getenv("USER"), os.Getenv("USERNAME"))
	if name == "" || len("operator/"+name) > 255 {
		return "operator"
	}
	return "operator/" + name
}

func newRetryCmd(a *app) *cobra.Command {
	f := a.newCommand("retry", "put parked records back to pending (one by --record, or a selection)", "Put parked records back to pending, due now; the next reconciler pass repairs them.\n"+
		"A record whose dead letter names nothing to repair is refused: record a corrected copy, then mend resolve it.", withDSN|withLog|withJSON)
	f.addTimeout(opTimeout)
	sel := addSelection(f, "retry")
	actor := f.String("actor", defaultActor(), "who retries, kept in the event log; operator/<OS user> unless given")
	reason := f.String("reason", "", "a note kept in the event log, e.g. what was fixed")
	return f.run(func(ctx context.Context, _ []string) error {
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		if err := sel.check(f); err != nil {
			return err
		}
		if *sel.state != string(mend.StateParked) {
			return usagef("--state must be parked: only parked records can be retried")
		}
		skip := func(r mend.Record) string {
			if r.State != mend.StateParked {
				return fmt.Sprintf("it is %s, not parked: only parked records can be retried", r.State)
			}
			return noTarget(r)
		}
		return withStore(ctx, dsn, func(ctx context.Context, store *storage.DB) error {
			recs, dry, err := sel.pick(ctx, store)
			if err != nil {
				return err
			}
			if dry {
				a.listSelection("retry", recs, skip)
				return nil
			}
			return a.each(f.json, "retry", recs, skip, func(r mend.Record) (mend.Record, error) {
				return store.RecordRetry(ctx, storage.RetryParams{ID: r.ID, Actor: *actor, OpID: mend.NewOpID(), Reason: *reason})
			}, func(before, after mend.Record) string {
				return fmt.Sprintf("record %s in queue %q is pending again (it was parked: %s); the next reconciler pass repairs it",
					after.ID, after.Source.Queue, clipLine(before.LastError, 200))
			})
		})
	})
}

func newResolveCmd(a *app) *cobra.Command {
	f := a.newCommand("resolve", "close records by hand, with who and why (one by --record, or a selection)", "Close records by hand once their repair was done another way (or is not needed): each gets a resolved\n"+
		"event saying who and why and becomes done, so it leaves the parked count and is pruned after --retention.", withDSN|withLog|withJSON)
	f.addTimeout(opTimeout)
	sel := addSelection(f, "resolve")
	actor := f.String("actor", defaultActor(), "who resolves, kept in the event log; operator/<OS user> unless given")
	reason := f.String("reason", "", "why the record is closed by hand (required to close; a listing needs none), kept in the event log")
	force := f.Bool("force", false, "with a selection and --yes: resolve open records (pending, waiting, settled) too, although their repair is then never done")
	f.cmdLineOnly("force")
	return f.run(func(ctx context.Context, _ []string) error {
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		if err := sel.check(f); err != nil {
			return err
		}
		// A selection without --yes only lists: it needs no reason.
		if *sel.record != "" || *sel.yes {
			if err := requireFlag("reason", *reason); err != nil {
				return err
			}
		}
		if *sel.state == string(mend.StateDone) {
			return usagef("--state done: done records are closed already")
		}
		skip := func(r mend.Record) string {
			if r.State == mend.StateDone {
				return "it is done already"
			}
			return ""
		}
		return withStore(ctx, dsn, func(ctx context.Context, store *storage.DB) error {
			recs, dry, err := sel.pick(ctx, store)
			if err != nil {
				return err
			}
			risk := ""
			if *sel.record == "" {
				risk = openAtStake(ctx, store, recs)
			}
			if dry {
				a.listSelection("resolve", recs, skip)
				if risk != "" {
					fmt.Fprintf(a.stdout, "at stake: %s; --yes alone refuses them, --yes --force resolves them\n", risk)
				}
				return nil
			}
			if risk != "" && !*force {
				return fmt.Errorf("refusing to resolve a selection with open records: %s; narrow it (--state parked), wait for the repair, or add --force", risk)
			}
			return a.each(f.json, "resolve", recs, skip, func(r mend.Record) (mend.Record, error) {
				return store.RecordResolve(ctx, storage.ResolveParams{ID: r.ID, Actor: *actor, OpID: mend.NewOpID(), Reason: *reason})
			}, func(before, after mend.Record) string {
				return fmt.Sprintf("record %s in queue %q is resolved (it was %s: %s)", after.ID, after.Source.Queue, before.State, clipLine(before.LastError, 200))
			})
		})
	})
}

// openAtStake says what resolving recs would lose: its open records (a
// repair still owed, perhaps running on a replica's live lease), or "" if
// there are none. Resolving them closes them unrepaired.
func openAtStake(ctx context.Context, store *storage.DB, recs []mend.Record) string {
	queues := map[string]int{}
	n := 0
	for _, r := range recs {
		if r.State.Due() {
			queues[r.Source.Queue]++
			n++
		}
	}
	if n == 0 {
		return ""
	}
	s := fmt.Sprintf("%d open record(s) in %d queue(s) would be closed without their repair", n, len(queues))
	if leases, err := store.LeaseList(ctx); err == nil {
		for _, l := range leases {
			if l.Live() && queues[l.Term.Queue] > 0 {
				s += fmt.Sprintf("; queue %q is held by %q (a replica is repairing it now)", l.Term.Queue, l.Term.Holder)
			}
		}
	}
	return s
}

// each applies do to every record that skip lets through and reports each
// result. A single record (--record) that is skipped is an error; in a
// selection, skipped records are listed and counted, and the command fails
// only if a change itself failed.
func (a *app) each(asJSON bool, verb string, recs []mend.Record, skip func(mend.Record) string,
	do func(mend.Record) (mend.Record, error), say func(before, after mend.Record) string) error {
	type result struct {
		Record  recordJSON `json:"record"`
		WasFor  string     `json:"previous_error,omitempty"`
		Skipped string     `json:"skipped,omitempty"`
		Error   string     `json:"error,omitempty"`
	}
	var out []result
	var failed, skipped int
	for _, r := range recs {
		if why := skip(r); why != "" {
			if len(recs) == 1 {
				return fmt.Errorf("record %s: cannot %s: %s", r.ID, verb, why)
			}
			skipped++
			out = append(out, result{Record: toRecordJSON(r), Skipped: why})
			if !asJSON {
				fmt.Fprintf(a.stdout, "skipped %s: %s\n", r.ID, why)
			}
			continue
		}
		after, err := do(r)
		if err != nil {
			if len(recs) == 1 {
				return err
			}
			failed++
			out = append(out, result{Record: toRecordJSON(r), Error: err.Error()})
			if !asJSON {
				fmt.Fprintf(a.stdout, "FAILED %s: %s\n", r.ID, a.scrub.clean(oneLine(err.Error())))
			}
			continue
		}
		out = append(out, result{Record: toRecordJSON(after), WasFor: r.LastError})
		if !asJSON {
			fmt.Fprintln(a.stdout, say(r, after))
		}
	}
	if asJSON {
		if out == nil {
			out = []result{}
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else if len(recs) != 1 {
		fmt.Fprintf(a.stdout, "%s: %d done, %d skipped, %d failed (of %d selected)\n", verb, len(recs)-skipped-failed, skipped, failed, len(recs))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d record(s) could not be changed; see the list above", failed, len(recs))
	}
	return nil
}

// ---- lease ----

func newLeaseCmd(a *app) *cobra.Command {
	f := a.newCommand("lease list|history|release", "show lease terms and their history; end a dead holder's term", "Show the queues' lease terms (list), a queue's past terms (history), or end a dead holder's term now\n"+
		"(release --queue Q --epoch E): only that exact term ends, recorded as ended by the operator; its holder's\n"+
		"writes are refused from then on, and the next replica takes the queue with a higher epoch.", withDSN|withLog|withList)
	f.addTimeout(opTimeout)
	queue := f.String("queue", "", "the queue (history, release; list: only this queue)")
	epoch := f.Int64("epoch", 0, "release: the epoch of the term to end, as lease list shows it")
	limit := f.Int("limit", 50, "history: at most this many terms, newest first")
	f.cmd.Args = cobra.ArbitraryArgs
	f.cmd.ValidArgs = []string{"list", "history", "release"}
	return f.run(func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("name one action: mend lease list|history|release")
		}
		action := pos[0]
		switch action {
		case "list":
		case "history":
			if err := requireFlag("queue", *queue); err != nil {
				return err
			}
			if *limit < 1 {
				return usagef("--limit must be at least 1")
			}
		case "release":
			if err := requireFlag("queue", *queue); err != nil {
				return err
			}
			if *epoch < 1 {
				return usagef("--epoch is required (or MEND_EPOCH): the term to end, as mend lease list shows it")
			}
		default:
			return usagef("unknown action %q; use list, history or release", action)
		}
		dsn, err := f.needDSN()
		if err != nil {
			return err
		}
		return withStore(ctx, dsn, func(ctx context.Context, store *storage.DB) error {
			switch action {
			case "list":
				leases, err := store.LeaseList(ctx)
				if err != nil {
					return err
				}
				if f.given("queue") {
					leases = slices.DeleteFunc(leases, func(l storage.LeaseStatus) bool { return l.Term.Queue != *queue })
				}
				return a.printLeases(f.json, f.listOpts(), leases)
			case "history":
				terms, err := store.LeaseHistory(ctx, *queue, *limit)
				if errors.Is(err, mend.ErrInvalid) {
					return usagef("%v", err)
				}
				if err != nil {
					return err
				}
				return a.printLeaseHistory(f.json, f.listOpts(), *queue, terms)
			}
			term, err := store.LeaseEndByOperator(ctx, *queue, *epoch)
			if errors.Is(err, mend.ErrLeaseLost) {
				return fmt.Errorf("queue %q has no live term at epoch %d (it ended already, or a newer term replaced it; see mend lease list): nothing changed", *queue, *epoch)
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(a.stdout, map[string]any{"queue": term.Queue, "holder": term.Holder, "epoch": term.Epoch, "ended_how": storage.LeaseEndedOperator})
			}
			fmt.Fprintf(a.stdout, "ended the term of %q at epoch %d on queue %q; its writes are refused from now on, and the next replica takes the queue at epoch %d or later\n",
				term.Holder, term.Epoch, term.Queue, term.Epoch+1)
			return nil
		})
	})
}

// printLeases prints lease rows; -o wide adds when each term was acquired,
// renewed and expires, and the row's transitions.
func (a *app) printLeases(asJSON bool, o listOpts, leases []storage.LeaseStatus) error {
	if asJSON {
		out := make([]map[string]any, len(leases))
		for i, l := range leases {
			out[i] = map[string]any{"queue": l.Term.Queue, "status": leaseWord(l), "holder": l.Term.Holder, "epoch": l.Term.Epoch, "held": l.Live(),
				"seconds_left": max(l.Remaining.Seconds(), 0), "expires_at": l.ExpiresAt.Format(time.RFC3339Nano),
				"internal": l.Internal()}
		}
		return writeJSON(a.stdout, out)
	}
	if len(leases) == 0 {
		if !o.noHeaders {
			fmt.Fprintln(a.stdout, "no lease (no queue was ever leased, or none matches)")
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	cols := "QUEUE\tSTATUS\tHOLDER\tEPOCH\tTIME LEFT"
	if o.wide {
		cols += "\tACQUIRED (UTC)\tRENEWED (UTC)\tEXPIRES (UTC)\tTRANSITIONS"
	}
	// KIND is last, so scripts reading the columns before it are unchanged:
	// "internal" marks mend's own slot leases (replicas counting and dividing
	// the work), which are not queues and which status leaves out.
	cols += "\tKIND"
	o.header(tw, cols)
	for _, l := range leases {
		status, left := leaseWord(l), "-"
		if l.Live() {
			left = fmtAge(l.Remaining)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s", l.Term.Queue, status, l.Term.Holder, l.Term.Epoch, left)
		if o.wide {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%d", l.AcquiredAt.UTC().Format("2006-01-02 15:04:05.000"), l.RenewedAt.UTC().Format("2006-01-02 15:04:05.000"),
				leaseExpiresCell(l), l.Transitions)
		}
		kind := "queue"
		if l.Internal() {
			kind = "internal"
		}
		fmt.Fprintf(tw, "\t%s\n", kind)
	}
	return tw.Flush()
}

// printLeaseHistory prints a queue's terms; -o wide adds how long each lasted.
func (a *app) printLeaseHistory(asJSON bool, o listOpts, queue string, terms []storage.LeaseTerm) error {
	if asJSON {
		out := make([]map[string]any, len(terms))
		for i, t := range terms {
			m := map[string]any{"queue": t.Term.Queue, "epoch": t.Term.Epoch, "holder": t.Term.Holder,
				"acquired_at": t.AcquiredAt.Format(time.RFC3339Nano), "ended_at": nil, "ended_how": t.EndedHow}
			if t.EndedAt != nil {
				m["ended_at"] = t.EndedAt.Format(time.RFC3339Nano)
			}
			out[i] = m
		}
		return writeJSON(a.stdout, out)
	}
	if len(terms) == 0 {
		if !o.noHeaders {
			fmt.Fprintf(a.stdout, "queue %q has no lease history\n", queue)
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	cols := "EPOCH\tHOLDER\tACQUIRED (UTC)\tENDED (UTC)\tHOW"
	if o.wide {
		cols += "\tLASTED"
	}
	o.header(tw, cols)
	for _, t := range terms {
		ended, how, lasted := "-", "current", "-"
		if t.EndedAt != nil {
			ended, how, lasted = t.EndedAt.UTC().Format("2006-01-02 15:04:05.000"), t.EndedHow, fmtAge(t.EndedAt.Sub(t.AcquiredAt))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s", t.Term.Epoch, t.Term.Holder, t.AcquiredAt.UTC().Format("2006-01-02 15:04:05.000"), ended, how)
		if o.wide {
			fmt.Fprintf(tw, "\t%s", lasted)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/fence"
)

// Status is a check's outcome. Only Fail refuses a start (Preflight) and
// makes mend doctor exit non-zero.
type Status string

// The outcomes of a check, as mend doctor prints them.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
)

// Check is one check's result: what was checked, how it came out, what was
// found and, when it is not OK, what fixes it.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
	// Target is where the check ran when that is not mend's own database
	// (the queue database's "--queue-dsn addr/db as user"): a refusal
	// names it, so the DSN and user to fix are the ones checked.
	Target string `json:"target,omitempty"`
}

// Params are what the checks look at: the databases and settings a mend
// run (or a worker that links mend in) would use. The advice of a failed
// check names mend run's flags (--dsn, --host-dsn, --queue-dsn,
// --wake-topic, ...); each is the Params field of the same name.
type Params struct {
	// DSN is mend's own database. Required.
	DSN string
	// LeaseTTL is the lease TTL the fences use, to compare the lock wait
	// timeout with; 0 means fence.TTLDefault.
	LeaseTTL time.Duration
	// HostDSN is the submit queue's application database; empty: its
	// tables are not checked.
	HostDSN string
	// QueueDSN is the submit queue's queue database; empty: its tables,
	// the wake topic and the subscription are not checked.
	QueueDSN string
	// WakeTopic is the topic wake-ups are published to, checked for a
	// reader in the queue database (with QueueDSN).
	WakeTopic string
	// WakeIgnore are the consumer groups that do not count as readers of
	// WakeTopic (WakeTopicIgnore: mend's own subscription's).
	WakeIgnore []string
	// WakeTopicUnjoined turns a wake topic nobody reads into a warning.
	WakeTopicUnjoined bool
	// Subscription, when not nil, checks the subscription too (with
	// QueueDSN; its QueueDSN field is taken from here).
	Subscription *SubscriptionParams
	// Logger gets a line per failed check from Preflight; nil: discarded.
	Logger *slog.Logger
	// starting: Preflight runs the checks, before a start that recovers a
	// purged binary-log position itself.
	starting bool
}

// Run runs every check p asks for, in mend doctor's order, and returns them
// with the target they ran on ("addr/database as user"). A check that
// cannot run (no connection) is reported as failed, never skipped.
func Run(ctx context.Context, p Params) (checks []Check, target string) {
	checks, target = Database(ctx, p.DSN, cmp.Or(p.LeaseTTL, fence.TTLDefault))
	if p.HostDSN != "" {
		checks = append(checks, on(targetOf("--host-dsn", p.HostDSN), Host(ctx, p.HostDSN, ""))...)
	}
	if p.QueueDSN != "" {
		queue := targetOf("--queue-dsn", p.QueueDSN)
		checks = append(checks, on(queue, Host(ctx, "", p.QueueDSN))...)
		checks = append(checks, on(queue, []Check{WakeTopic(ctx, WakeTopicParams{QueueDSN: p.QueueDSN, Topic: p.WakeTopic, Ignore: p.WakeIgnore, UnjoinedOK: p.WakeTopicUnjoined})})...)
		if p.Subscription != nil {
			s := *p.Subscription
			s.QueueDSN = p.QueueDSN
			s.DSN = cmp.Or(s.DSN, p.DSN)
			s.starting = p.starting
			for _, c := range Subscription(ctx, s) {
				// The position checks are of mend's own database.
				if c.Target == "" && !strings.HasPrefix(c.Name, "binlog position") {
					c.Target = queue
				} else if c.Target == "--queue-dsn" {
					c.Target = queue
				}
				checks = append(checks, c)
			}
		}
	}
	return checks, target
}

// targetOf is where a check of the database dsn (given as flagName) runs,
// as a refusal names it: "--queue-dsn addr/db as user".
func targetOf(flagName, dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return flagName + " (unparsable DSN)"
	}
	return fmt.Sprintf("%s %s/%s as %s", flagName, cfg.Addr, cfg.DBName, cfg.User)
}

// on sets target on the checks that have none.
func on(target string, checks []Check) []Check {
	for i := range checks {
		if checks[i].Target == "" {
			checks[i].Target = target
		}
	}
	return checks
}

// PreflightTimeout bounds Preflight.
const PreflightTimeout = 30 * time.Second

// ErrRefused is what a failed Preflight wraps: a start refused because a
// check failed.
var ErrRefused = errors.New("refusing to start")

// RefusedError is a start Preflight refused. Its message is one line
// naming the first failed check, its detail and its fix, so the last line
// of a refused start says what to fix.
type RefusedError struct {
	// Target is where the checks ran ("addr/database as user", mend's
	// database); the message names the first failed check's own Target
	// instead when it has one.
	Target string
	// Failed are the checks that failed, at least one, in order.
	Failed []Check
}

func (e *RefusedError) Error() string {
	first := e.Failed[0]
	line := fmt.Sprintf("%s %s: %s", Fail, first.Name, first.Detail)
	if first.Fix != "" {
		line += " (fix: " + first.Fix + ")"
	}
	more := ""
	if len(e.Failed) > 1 {
		more = fmt.Sprintf(" and %d more", len(e.Failed)-1)
	}
	return fmt.Sprintf("%v: doctor check failed on %s: %s%s; mend doctor with the same flags lists them all", ErrRefused, cmp.Or(first.Target, e.Target), line, more)
}

// Unwrap makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Preflight runs the checks (they only read) within PreflightTimeout and
// refuses a start on any failure: it returns a *RefusedError (wrapping
// ErrRefused) naming the first, after logging each failed check to
// p.Logger. Warnings do not refuse.
func Preflight(ctx context.Context, p Params) error {
	ctx, cancel := context.WithTimeout(ctx, PreflightTimeout)
	defer cancel()
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p.starting = true
	checks, target := Run(ctx, p)
	var failed []Check
	for _, ch := range checks {
		if ch.Status == Fail {
			failed = append(failed, ch)
			log.Error("doctor check failed", "check", ch.Name, "detail", ch.Detail, "fix", ch.Fix)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &RefusedError{Target: target, Failed: failed}
}

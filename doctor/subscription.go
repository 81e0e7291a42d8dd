package doctor

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mendq/mend/subscribe"
)

// queueOffsetsTable is queue_offsets as the subscription uses it: the real
// subscriber's join (INSERT IGNORE) and advance (a guarded UPDATE, whose
// WHERE reads the row). Leaving (DELETE) is mend subscribe --remove's alone,
// run by whoever decommissions mend, so run and doctor do not ask for it: no
// more than the queue's own consumers hold.
var queueOffsetsTable = hostTable{name: "queue_offsets",
	columns: []string{"consumer_group", "topic", "partition_key", "offset_acked", "updated_at"},
	key:     []string{"consumer_group", "topic", "partition_key"},
	privs: []hostPriv{
		{"SELECT", "EXPLAIN SELECT offset_acked FROM queue_offsets WHERE FALSE", "reading the group's watermarks and the partitions other groups joined"},
		{"INSERT", "EXPLAIN INSERT INTO queue_offsets (consumer_group, topic, partition_key, offset_acked, updated_at) VALUES ('', '', '', 0, 0)", "joining a partition"},
		{"UPDATE", "EXPLAIN UPDATE queue_offsets SET offset_acked = 0 WHERE FALSE", "advancing the group's watermark"},
	}}

// queueMessagesRead is queue_messages as the subscription reads it.
var queueMessagesRead = hostTable{name: "queue_messages", columns: queueMessageColumns, key: []string{"topic", "partition_key", "id"},
	privs: []hostPriv{{"SELECT", "EXPLAIN SELECT topic FROM queue_messages WHERE FALSE", "the subscription reads dead letters"}}}

// SubscriptionParams are the subscription check's inputs.
type SubscriptionParams struct {
	// QueueDSN is the host's queue database (mend run's --queue-dsn).
	QueueDSN string
	// Group is the subscription's consumer group.
	Group string
	// WarnAge is the age of the oldest unreleased dead letter above which
	// the lag is a warning; 0 means LagWarnDefault.
	WarnAge time.Duration
	// Settle is the settle window the subscription is given; 0 means the
	// default, which follows the server.
	Settle time.Duration
	// Mode is the subscribe mode (ModeAuto, ModeBinlog, ModeOffsets);
	// empty means ModeAuto. Binlog mode's checks (Binlog) replace the
	// offset mode's where binlog mode runs.
	Mode string
	// DSN is mend's database, for binlog mode's position table.
	DSN string
	// ServerID and Source are binlog mode's (BinlogParams).
	ServerID uint32
	Source   string
	// Once: the checks are for mend run --once, where auto mode reads the
	// binary log only beside a saved position and otherwise drains the
	// offset mode's group (client.Subscription.Once).
	Once bool
	// starting: Preflight runs the checks (BinlogParams.Starting).
	starting bool
}

// LagWarnDefault is when the subscription check warns that the oldest
// unreleased dead letter is old.
const LagWarnDefault = 10 * time.Minute

// Subscription checks what the subscription needs on the host's queue
// database, and reports the group's lag (a warning when its oldest row is
// older than p.WarnAge: a stopped or failing mend holding GC back).
func Subscription(ctx context.Context, p SubscriptionParams) []Check {
	mode := Check{Name: "subscribe mode", Status: OK}
	switch p.Mode {
	case ModeOffsets:
		mode.Detail = "offsets (--subscribe-mode offsets): mend joins the *_dlq topics as consumer group " + strconv.Quote(cmp.Or(p.Group, subscribe.GroupDefault))
		return append([]Check{mode}, offsetChecks(ctx, p)...)
	case ModeBinlog:
		mode.Detail = "binlog (--subscribe-mode binlog): mend reads the queue database server's binary log; no consumer group"
		r := Binlog(ctx, p.binlogParams())
		left := leftGroupCheck(ctx, p, &mode)
		return append(append([]Check{mode}, r.Checks...), left...)
	}
	r := Binlog(ctx, p.binlogParams())
	if p.Once && r.Ready && r.Saved == nil {
		mode.Detail = "offsets (auto with --once): no binary-log position is saved for the source, so the run drains consumer group " + strconv.Quote(cmp.Or(p.Group, subscribe.GroupDefault))
		return append([]Check{mode}, offsetChecks(ctx, p)...)
	}
	if r.Ready {
		mode.Detail = "binlog (auto): every prerequisite of binlog mode holds; mend reads the queue database server's binary log, no consumer group"
		left := leftGroupCheck(ctx, p, &mode)
		return append(append([]Check{mode}, r.Checks...), left...)
	}
	if r.Saved != nil {
		// Auto is sticky: beside a saved position it never falls back.
		mode.Status, mode.Target = Fail, r.WhyTarget
		mode.Detail = "binlog (auto), and it cannot run: " + StickyDetail(r.Source, *r.Saved, r.Why)
		mode.Fix = StickyFix
		left := leftGroupCheck(ctx, p, &mode)
		return append(append([]Check{mode}, r.Checks...), left...)
	}
	mode.Detail = "offsets (auto): binlog mode cannot run here (" + r.Why + "), and no binary-log position is saved, so mend joins the *_dlq topics as consumer group " +
		strconv.Quote(cmp.Or(p.Group, subscribe.GroupDefault))
	return append([]Check{mode}, offsetChecks(ctx, p)...)
}

// leftGroupCheck is, in binlog mode, the offset subscription's group as it
// stands in the host's queue_offsets: binlog mode joins no group, but rows
// an earlier offsets mode (or a run --once) left hold the host's GC of
// their partitions back until removed. No check when the group has no
// row; otherwise a warning listing its partitions with their watermarks, and
// mode's "no consumer group" is corrected.
func leftGroupCheck(ctx context.Context, p SubscriptionParams, mode *Check) []Check {
	group := cmp.Or(p.Group, subscribe.GroupDefault)
	c := Check{Name: "subscription group rows", Status: OK, Target: "--queue-dsn"}
	db, err := subscribe.Open(ctx, p.QueueDSN)
	if err != nil {
		return nil // the binlog checks report the queue database
	}
	defer db.Close()
	parts, err := subscribe.GroupPartitions(ctx, db, group, 0)
	if err != nil {
		c.Status, c.Detail = Warn, "cannot tell whether consumer group "+strconv.Quote(group)+" still has rows in queue_offsets: "+oneLine(err.Error())
		c.Fix = "GRANT SELECT ON queue_offsets to the queue database user (the documented grants include it)"
		return []Check{c}
	}
	if len(parts) == 0 {
		return nil // holds nothing back: binlog mode's "no consumer group" stands
	}
	mode.Detail = strings.Replace(mode.Detail, "no consumer group", fmt.Sprintf("mend's consumer group %q still has %d row(s) in queue_offsets (see below)", group, len(parts)), 1)
	var behind int64
	var list []string
	for i, pt := range parts {
		behind += pt.Behind
		if i < 20 {
			list = append(list, fmt.Sprintf("%s/%s at offset_acked %d (%d row(s) above)", pt.Topic, pt.Partition, pt.Watermark, pt.Behind))
		}
	}
	if len(parts) > len(list) {
		list = append(list, fmt.Sprintf("and %d more", len(parts)-len(list)))
	}
	c.Status = Warn
	c.Detail = fmt.Sprintf("binlog mode joins no consumer group, but group %q still has %d row(s) in queue_offsets (left by offsets mode or a run --once), "+
		"holding the host's GC of %d dead-letter row(s) above their watermarks back: %s", group, len(parts), behind, strings.Join(list, "; "))
	c.Fix = fmt.Sprintf("once no mend run of the group runs in offsets mode: mend subscribe --queue-dsn ... --group %s --remove --yes, as a user with DELETE on queue_offsets "+
		"(docs/operations.md grants it to a separate user, 'mend_leave')", group)
	return []Check{c}
}

func (p SubscriptionParams) binlogParams() BinlogParams {
	return BinlogParams{DSN: p.DSN, QueueDSN: p.QueueDSN, ServerID: p.ServerID, Source: p.Source, Starting: p.starting}
}

// offsetChecks are the offset mode's checks.
func offsetChecks(ctx context.Context, p SubscriptionParams) []Check {
	queueDSN, group, warnAge, settle := p.QueueDSN, p.Group, cmp.Or(p.WarnAge, LagWarnDefault), p.Settle
	label := "subscription"
	db, err := subscribe.Open(ctx, queueDSN)
	if err != nil {
		return []Check{{Name: label, Status: Fail, Detail: err.Error(), Fix: "check --queue-dsn"}}
	}
	defer db.Close()
	var user string
	if err := db.QueryRowContext(ctx, currentUserQuery).Scan(&user); err != nil {
		return []Check{{Name: label, Status: Fail, Detail: "cannot read the current user: " + err.Error()}}
	}
	var schema string
	if err := db.QueryRowContext(ctx, databaseQuery).Scan(&schema); err != nil {
		return []Check{{Name: label, Status: Fail, Detail: "cannot read the database name: " + err.Error()}}
	}
	grantee := quoteAccount(user)
	out := []Check{
		checkHostTable(ctx, db, label, schema, grantee, queueMessagesRead),
		checkHostTable(ctx, db, label, schema, grantee, queueOffsetsTable),
	}
	if out[0].Status == Fail || out[1].Status == Fail {
		return out
	}
	out = append(out, checkSettle(ctx, db, label, settle), checkOpenVisible(ctx, db, label, grantee))
	lag, err := subscribe.Lag(ctx, db, group)
	if err != nil {
		return append(out, Check{Name: label + " lag", Status: Fail, Detail: err.Error()})
	}
	now := time.Now()
	var rows int64
	var oldest time.Duration
	for _, l := range lag {
		rows += l.Rows
		oldest = max(oldest, l.Age(now))
	}
	c := Check{Name: label + " lag", Status: OK,
		Detail: fmt.Sprintf("group %q: %d topic(s), %d row(s) above its watermarks, oldest %s", group, len(lag), rows, fmtAge(oldest))}
	switch {
	case len(lag) == 0:
		c.Detail = fmt.Sprintf("group %q has joined no partition yet (mend run joins them on its first pass)", group)
	case oldest > warnAge:
		c.Status = Warn
		c.Detail += fmt.Sprintf(": older than %s, so the group holds the host's GC back", warnAge)
		c.Fix = "check that mend run is running with --queue-dsn (mend subscribe shows the lag per topic); to leave for good: mend subscribe --remove"
	}
	return append(out, c)
}

// checkSettle compares the settle window (0: the default, which follows
// the server) with the queue database's waits, by the bound mend run
// applies (subscribe.Waits.Covers).
func checkSettle(ctx context.Context, db *sql.DB, label string, settle time.Duration) Check {
	c := Check{Name: label + " settle window", Status: OK}
	waits, err := subscribe.ReadWaits(ctx, db)
	if err != nil {
		c.Status, c.Detail = Warn, err.Error()
		return c
	}
	return settleCheck(c, waits, settle)
}

// settleCheck is checkSettle once the waits are read.
func settleCheck(c Check, waits subscribe.Waits, settle time.Duration) Check {
	if settle == 0 {
		c.Detail = fmt.Sprintf("%s by default: covers %s plus %s", subscribe.SettleFor(waits), waits, subscribe.SettleMargin)
		return c
	}
	c.Detail = fmt.Sprintf("--subscribe-settle %s, waits %s", settle, waits)
	if !waits.Covers(settle) {
		c.Status, c.Detail = Warn, SettleRisk(settle, waits)
		c.Fix = fmt.Sprintf("leave --subscribe-settle out (it then follows the server) or set it to at least %s", waits.Bound()+subscribe.SettleMargin)
	}
	return c
}

// checkOpenVisible says whether the subscription sees the queue
// database's open transactions, by reading them as a pass does, and what
// is at risk when it cannot.
func checkOpenVisible(ctx context.Context, db *sql.DB, label, grantee string) Check {
	c := Check{Name: label + " open transactions", Status: OK,
		Detail: "mend's user may read the server's open transactions (PROCESS): a watermark waits for a MoveToDLQ that began before its sample, however long it stays open"}
	err := subscribe.OpenVisible(ctx, db)
	switch {
	case errors.Is(err, subscribe.ErrOpenHidden):
		c.Status = Warn
		c.Detail = "mend's user may not read the server's open transactions (" + oneLine(err.Error()) + "): the settle window alone protects a late commit, " +
			"so a MoveToDLQ held open longer than the window (a client frozen mid-transaction) commits below mend's watermark, and the host's GC deletes it unrecorded"
		c.Fix = subscribe.OpenGrant(grantee) + " (docs/operations.md, \"The settle window\")"
	case err != nil:
		c.Status, c.Detail = Warn, "cannot tell whether the subscription sees open transactions: "+oneLine(err.Error())
	}
	return c
}

// SettleRisk says what a settle window that does not cover the waits
// puts at risk.
func SettleRisk(settle time.Duration, waits subscribe.Waits) string {
	return fmt.Sprintf("--subscribe-settle %s does not cover the queue database's waits after a MoveToDLQ allocates its offset (%s, plus %s margin = %s): a MoveToDLQ that waits that long "+
		"commits below mend's watermark, and the host's GC deletes it unrecorded", settle, waits, subscribe.SettleMargin, waits.Bound()+subscribe.SettleMargin)
}

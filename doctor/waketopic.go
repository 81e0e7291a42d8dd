package doctor

// The wake topic check of mend doctor and mend run: a --wake-topic that no
// consumer group of the host reads is a typo or a host that is down, and a
// wake-up published there is read by nobody while its record is marked
// done (issue 30: "speculat"). The rule is host.CheckWakeTopic's: a live
// subscriber heartbeat on the topic, or a group's queue_offsets row on it
// (a quiet host has only the first: issue 42).

import (
	"context"
	"fmt"
	"strings"

	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/subscribe"
)

// WakeTopicUnjoinedFlag is mend run's override for a host whose planner
// joins its topic after mend starts; the wake topic check's advice names it.
const WakeTopicUnjoinedFlag = "wake-topic-unjoined"

// WakeTopicIgnore are the groups that do not count as readers of the wake
// topic: mend's own subscription's.
func WakeTopicIgnore(group string) []string {
	if group == "" || group == subscribe.GroupDefault {
		return []string{subscribe.GroupDefault}
	}
	return []string{group, subscribe.GroupDefault}
}

// WakeTopicParams are the wake topic check's inputs.
type WakeTopicParams struct {
	// QueueDSN is the host's queue database (mend run's --queue-dsn).
	QueueDSN string
	// Topic is the topic mend publishes wake-ups to.
	Topic string
	// Ignore are the consumer groups that do not count as readers
	// (WakeTopicIgnore: mend's own subscription's).
	Ignore []string
	// UnjoinedOK turns the failure into a warning (mend run's
	// --wake-topic-unjoined): wake-ups are held until a group reads it.
	UnjoinedOK bool
}

// WakeTopic checks that a consumer group of the host (other than
// p.Ignore) reads p.Topic by host.CheckWakeTopic's rule, in the queue
// database.
func WakeTopic(ctx context.Context, p WakeTopicParams) Check {
	queueDSN, topic, ignore, unjoinedOK := p.QueueDSN, p.Topic, p.Ignore, p.UnjoinedOK
	const label = "host queue wake topic"
	c, err := HostConfig("--queue-dsn", queueDSN)
	if err != nil {
		return Check{Name: label, Status: Fail, Detail: err.Error(), Fix: "remove the parameter from --queue-dsn: mend sets its sessions itself"}
	}
	db, err := mysqlx.OpenConfig(ctx, c)
	if err != nil {
		return Check{Name: label, Status: Fail, Detail: connectDetail(err, c), Fix: "check --queue-dsn"}
	}
	defer db.Close()
	grant := func(table string) string {
		var schema, user string
		_ = db.QueryRowContext(ctx, accountQuery).Scan(&schema, &user)
		return fmt.Sprintf("GRANT SELECT ON %s.%s TO %s", quoteIdent(schema), table, quoteAccount(user))
	}
	e, err := host.ReadEvidence(ctx, db, ignore...)
	switch {
	case err == nil:
	case deniedError(err):
		return Check{Name: label, Status: Fail,
			Detail: "mend's user cannot read queue_offsets, so it cannot tell whether the host reads --wake-topic " + fmt.Sprintf("%q", topic),
			Fix:    grant("queue_offsets")}
	case mysqlErrNumber(err) == 1146:
		return Check{Name: label, Status: Fail, Detail: "the queue database has no queue_offsets table, so nothing consumes its topics",
			Fix: "point --queue-dsn at the submit queue's queue database"}
	default:
		return Check{Name: label, Status: Fail, Detail: "cannot read queue_offsets: " + err.Error()}
	}
	hbFix := ""
	if e.Heartbeats != nil {
		hbFix = "point --queue-dsn at the submit queue's queue database"
		if deniedError(e.Heartbeats) {
			hbFix = grant("queue_subscriber_heartbeats")
		}
	}
	if e.Reads(topic) {
		var how []string
		if gs := e.Live[topic]; len(gs) > 0 {
			how = append(how, fmt.Sprintf("live subscriber heartbeats of %s", strings.Join(gs, ", ")))
		}
		if gs := e.Joined[topic]; len(gs) > 0 {
			how = append(how, fmt.Sprintf("queue_offsets rows of %s", strings.Join(gs, ", ")))
		}
		detail := fmt.Sprintf("%q is read by consumer group(s) %s (%s)", topic, strings.Join(e.Readers(topic), ", "), strings.Join(how, "; "))
		if e.Heartbeats != nil {
			// Busy now; after a quiet minute the host's groups leave
			// queue_offsets and only the heartbeats would say it.
			return Check{Name: label, Status: Warn,
				Detail: detail + "; but queue_subscriber_heartbeats cannot be read (" + e.Heartbeats.Error() + "), so once the host is quiet for a minute this check fails and wake-ups are held",
				Fix:    hbFix}
		}
		return Check{Name: label, Status: OK, Detail: detail}
	}
	var detail, fix string
	near := host.NearestTopic(topic, e.Topics())
	switch {
	case near != "":
		detail = fmt.Sprintf("no consumer group of the host reads %q (no live subscriber heartbeat, no queue_offsets row): wake-ups there would be read by nobody", topic)
		fix = fmt.Sprintf("--wake-topic %s (the read topic nearest %q); if the host starts reading %q later, --%s", near, topic, topic, WakeTopicUnjoinedFlag)
	case e.Heartbeats != nil:
		detail = fmt.Sprintf("no consumer group of the host has a queue_offsets row on %q, and queue_subscriber_heartbeats cannot be read (%v): a quiet host's readers are seen only there", topic, e.Heartbeats)
		fix = hbFix
	case !e.HostUp():
		detail = fmt.Sprintf("no subscriber of the host has heartbeated within %s (queue_subscriber_heartbeats, by the database clock) and no group has a queue_offsets row on %q: "+
			"the host looks down, so whether it reads the topic cannot be told", host.HeartbeatFresh, topic)
		fix = fmt.Sprintf("start the submit queue's orchestrator (a wake-up is read only while it runs), then run mend; to start mend now, --%s: wake-ups are held until a subscriber of %q heartbeats, "+
			"then go out on the next attempt", WakeTopicUnjoinedFlag, topic)
	default:
		detail = fmt.Sprintf("no consumer group of the host reads %q (no live subscriber heartbeat, no queue_offsets row): wake-ups there would be read by nobody", topic)
		fix = "give --wake-topic the topic the host's planner consumes"
		if ts := e.Topics(); len(ts) > 0 {
			fix += fmt.Sprintf(" (read: %s)", strings.Join(ts[:min(len(ts), 12)], ", "))
		}
		fix += fmt.Sprintf("; if the host starts reading it later, --%s", WakeTopicUnjoinedFlag)
	}
	if unjoinedOK {
		return Check{Name: label, Status: Warn, Detail: detail + fmt.Sprintf(" (--%s: wake-ups are held until a group reads it)", WakeTopicUnjoinedFlag), Fix: fix}
	}
	return Check{Name: label, Status: Fail, Detail: detail, Fix: fix}
}

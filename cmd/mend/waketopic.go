package main

// The wake topic check of mend doctor and mend run: a --wake-topic that no
// consumer group of the host has joined in queue_offsets is a typo or a
// host that has not started, and a wake-up published there is read by
// nobody while its record is marked done (issue 30: "speculat").

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mendq/mend/host"
	"github.com/mendq/mend/subscribe"
)

// wakeTopicUnjoinedFlag is the override for a host whose planner joins its
// topic after mend starts.
const wakeTopicUnjoinedFlag = "wake-topic-unjoined"

// addWakeTopicUnjoinedFlag defines the override on run and doctor.
func addWakeTopicUnjoinedFlag(f *flags, v *bool) {
	f.BoolVar(v, wakeTopicUnjoinedFlag, false, "start even if no consumer group of the host has joined --wake-topic in queue_offsets yet (a host that joins\n"+
		"after mend starts): wake-ups are held (retried with backoff, then parked) until a group has joined, never counted as sent")
}

// wakeTopicIgnore are the groups that do not count as readers of the wake
// topic: mend's own subscription's.
func wakeTopicIgnore(group string) []string {
	if group == "" || group == subscribe.GroupDefault {
		return []string{subscribe.GroupDefault}
	}
	return []string{group, subscribe.GroupDefault}
}

// diagnoseWakeTopic checks that a consumer group of the host (other than
// mend's own, ignore) has joined topic in the queue database's
// queue_offsets. unjoinedOK turns the failure into a warning.
func diagnoseWakeTopic(ctx context.Context, queueDSN, topic string, ignore []string, unjoinedOK bool) check {
	const label = "host queue wake topic"
	c, err := hostDoctorConfig("--queue-dsn", queueDSN)
	if err != nil {
		return check{Name: label, Status: checkFail, Detail: err.Error(), Fix: "remove the parameter from --queue-dsn: mend sets its sessions itself"}
	}
	db, err := openConfig(ctx, c)
	if err != nil {
		return check{Name: label, Status: checkFail, Detail: connectDetail(err, c), Fix: "check --queue-dsn"}
	}
	defer db.Close()
	err = host.CheckWakeTopic(ctx, db, topic, ignore...)
	var ue *host.UnjoinedTopicError
	switch {
	case err == nil:
		groups, _ := host.TopicConsumers(ctx, db, topic, ignore...)
		return check{Name: label, Status: checkOK, Detail: fmt.Sprintf("%q is read by consumer group(s) %s", topic, strings.Join(groups, ", "))}
	case deniedError(err):
		var schema, user string
		_ = db.QueryRowContext(ctx, "SELECT DATABASE(), CURRENT_USER()").Scan(&schema, &user)
		return check{Name: label, Status: checkFail,
			Detail: "mend's user cannot read queue_offsets, so it cannot tell whether the host reads --wake-topic " + fmt.Sprintf("%q", topic),
			Fix:    fmt.Sprintf("GRANT SELECT ON %s.queue_offsets TO %s", quoteIdent(schema), quoteAccount(user))}
	case mysqlErrNumber(err) == 1146:
		return check{Name: label, Status: checkFail, Detail: "the queue database has no queue_offsets table, so nothing consumes its topics",
			Fix: "point --queue-dsn at the submit queue's queue database"}
	case !errors.As(err, &ue):
		return check{Name: label, Status: checkFail, Detail: "cannot read queue_offsets: " + err.Error()}
	}
	detail := fmt.Sprintf("no consumer group of the host has joined %q in queue_offsets: wake-ups there would be read by nobody", topic)
	fix := "give --wake-topic the topic the host's planner consumes"
	if near := host.NearestTopic(topic, ue.Joined); near != "" {
		fix = fmt.Sprintf("--wake-topic %s (the joined topic nearest %q)", near, topic)
	} else if len(ue.Joined) > 0 {
		fix += fmt.Sprintf(" (joined: %s)", strings.Join(ue.Joined[:min(len(ue.Joined), 12)], ", "))
	}
	fix += fmt.Sprintf("; if the host joins it later, --%s", wakeTopicUnjoinedFlag)
	if unjoinedOK {
		return check{Name: label, Status: checkWarn, Detail: detail + fmt.Sprintf(" (--%s: wake-ups are held until a group joins)", wakeTopicUnjoinedFlag), Fix: fix}
	}
	return check{Name: label, Status: checkFail, Detail: detail, Fix: fix}
}

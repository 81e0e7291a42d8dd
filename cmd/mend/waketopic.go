package main

// The wake topic override of mend doctor and mend run (the check is
// doctor.WakeTopic): a --wake-topic that no
// consumer group of the host reads is a typo or a host that is down, and a
// wake-up published there is read by nobody while its record is marked
// done (issue 30: "speculat"). The rule is host.CheckWakeTopic's: a live
// subscriber heartbeat on the topic, or a group's queue_offsets row on it
// (a quiet host has only the first: issue 42).

import "github.com/mendq/mend/doctor"

// wakeTopicUnjoinedFlag is the override for a host whose planner joins its
// topic after mend starts.
const wakeTopicUnjoinedFlag = doctor.WakeTopicUnjoinedFlag

// addWakeTopicUnjoinedFlag defines the override on run and doctor.
func addWakeTopicUnjoinedFlag(f *flags, v *bool) {
	f.BoolVar(v, wakeTopicUnjoinedFlag, false, "start even if no consumer group of the host reads --wake-topic yet (no live subscriber heartbeat on it, no\n"+
		"queue_offsets row: a host that is down, or starts after mend): wake-ups are held (retried with backoff, then parked) until one does,\n"+
		"never counted as sent")
}

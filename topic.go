package mend

import (
	"slices"
	"strings"
)

// TopicKind says whose business a dead letter is, by the topic it was
// dead-lettered from (docs/integration.md, "Every DLQ topic"). It is
// derived from the recorded topic whenever a record is read, never stored,
// so changing this table needs no migration and applies to records already
// recorded.
type TopicKind string

// The kinds of topic. A topic not in the table is TopicUnknown.
const (
	// TopicRepaired: mend repairs the queue's lost wake-up. A record of it
	// that is parked needs a person.
	TopicRepaired TopicKind = "repaired"
	// TopicAudit: recorded for the audit (a request topic or the request
	// log); mend settles batches, not requests, so it records the dead
	// letter parked by design and nobody is asked to act.
	TopicAudit TopicKind = "audit"
	// TopicHost: the host service that wrote the dead letter repairs it
	// with its own DLQ controller (runway's two topics on the orchestrator's
	// queue database). Recorded for the audit, like TopicAudit.
	TopicHost TopicKind = "host"
	// TopicUnknown: a topic mend has never seen. Its dead letters are parked
	// with the reason and count as parked, for a person to look at.
	TopicUnknown TopicKind = "unknown"
)

// topicKinds is every DLQ topic of the orchestrator's queue database, by its
// original topic (the name without "_dlq"), from uber/submitqueue at
// cfeea0d9 (submitqueue/orchestrator/pipeline.go, the gateway's and runway's
// main.go). Stovepipe's topics are not here: it has its own queue database,
// and two of its names collide with the orchestrator's.
var topicKinds = map[string]TopicKind{
	"speculate":                   TopicRepaired,
	"dependency-analysis":         TopicRepaired,
	"build":                       TopicRepaired,
	"buildsignal":                 TopicRepaired,
	"submitqueue-merge":           TopicRepaired,
	"merge-signal":                TopicRepaired,
	"conclude":                    TopicRepaired,
	"start":                       TopicAudit,
	"validate":                    TopicAudit,
	"batch":                       TopicAudit,
	"cancel":                      TopicAudit,
	"merge-conflict-check-signal": TopicAudit,
	"log":                         TopicAudit,
	"merge-conflict-check":        TopicHost,
	"runway-merge":                TopicHost,
}

// dlqSuffix is what the host's message store appends to a topic it moves a
// message from (dlq.DLQSuffix).
const dlqSuffix = "_dlq"

// KindOfTopic returns the kind of a record's topic: originalTopic (the DLQ
// row's original_topic) when set, else topic (the DLQ topic) without its
// "_dlq" suffix, the way the intake decodes it.
func KindOfTopic(topic, originalTopic string) TopicKind {
	t := originalTopic
	if t == "" {
		t = strings.TrimSuffix(topic, dlqSuffix)
	}
	if k, ok := topicKinds[t]; ok {
		return k
	}
	return TopicUnknown
}

// Recorded reports whether a parked record of this kind is recorded for the
// audit rather than parked for a person: shown apart, never counted toward
// the parked records (mend status, the console, mend_records{state="parked"}
// and MendRecordsParked).
func (k TopicKind) Recorded() bool { return k == TopicAudit || k == TopicHost }

// TopicsOfKind returns the original topics of kind k, sorted.
func TopicsOfKind(k TopicKind) []string {
	var out []string
	for t, kk := range topicKinds {
		if kk == k {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

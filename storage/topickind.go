package storage

import (
	"github.com/mendq/mend"
)

// topicOfKind is the SQL condition that a record's topic is of kind k
// (mend.KindOfTopic, decided the same way: original_topic when set, else
// topic with or without its "_dlq" suffix), with its arguments. The kind
// is derived at read time, never stored, so no migration carries it and
// records recorded before the table changed read by the table of now.
func topicOfKind(k mend.TopicKind) (cond string, args []any) {
	topics := mend.TopicsOfKind(k)
	for _, t := range topics {
		args = append(args, t)
	}
	for _, t := range topics {
		args = append(args, t, t+"_dlq")
	}
	cond = "(original_topic IN (" + placeholders(len(topics)) + ") OR (original_topic = '' AND topic IN (" + placeholders(2*len(topics)) + ")))"
	return cond, args
}

// notRecorded is the condition that a parked record counts as parked: its
// topic is neither recorded for the audit nor handled by its host
// (mend.TopicKind.Recorded). recorded is its negation. Both take
// recordedArgs.
var (
	notRecorded, recorded, recordedArgs = func() (string, string, []any) {
		a, aa := topicOfKind(mend.TopicAudit)
		h, ha := topicOfKind(mend.TopicHost)
		return "NOT (" + a + " OR " + h + ")", "(" + a + " OR " + h + ")", append(aa, ha...)
	}()
)

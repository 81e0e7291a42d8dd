package mend_test

import (
	"testing"

	"github.com/mendq/mend"
)

func TestKindOfTopic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		topic, original string
		want            mend.TopicKind
	}{
		{"speculate_dlq", "speculate", mend.TopicRepaired},
		{"speculate_dlq", "", mend.TopicRepaired}, // a record from before migration 0008
		{"buildsignal_dlq", "buildsignal", mend.TopicRepaired},
		{"start_dlq", "start", mend.TopicAudit},
		{"log_dlq", "", mend.TopicAudit},
		{"merge-conflict-check-signal_dlq", "merge-conflict-check-signal", mend.TopicAudit},
		{"runway-merge_dlq", "runway-merge", mend.TopicHost},
		{"merge-conflict-check_dlq", "", mend.TopicHost},
		{"merge-conflict-check", "", mend.TopicHost},
		{"mystery_dlq", "mystery", mend.TopicUnknown},
		{"process_dlq", "process", mend.TopicUnknown}, // stovepipe's: out of scope, parked
		// original_topic decides when set, as the intake decodes it.
		{"runway-merge_dlq", "speculate", mend.TopicRepaired},
		{"Runway-Merge_dlq", "", mend.TopicUnknown}, // byte-exact
	} {
		if got := mend.KindOfTopic(tc.topic, tc.original); got != tc.want {
			t.Errorf("KindOfTopic(%q, %q) = %q; want %q", tc.topic, tc.original, got, tc.want)
		}
	}
	for _, k := range []mend.TopicKind{mend.TopicAudit, mend.TopicHost} {
		if !k.Recorded() {
			t.Errorf("%s.Recorded() = false", k)
		}
	}
	for _, k := range []mend.TopicKind{mend.TopicRepaired, mend.TopicUnknown} {
		if k.Recorded() {
			t.Errorf("%s.Recorded() = true: a parked record of it needs a person", k)
		}
	}
}

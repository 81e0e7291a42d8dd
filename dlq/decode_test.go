package dlq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
)

func TestDecode(t *testing.T) {
	t.Parallel()
	F, S := mend.OutcomeFailed, mend.OutcomeSucceeded
	tests := []struct {
		topic   string
		payload string
		want    mend.Target
		wantErr bool
	}{
		{"speculate", `{"batch_id":"17"}`, mend.Target{BatchID: "17", Desired: F}, false},
		{"speculate_dlq", `{"batch_id":"17","extra":1}`, mend.Target{BatchID: "17", Desired: F}, false},
		{"build_dlq", `{"batch_id":"b"}`, mend.Target{BatchID: "b", Desired: F}, false},
		{"dependency-analysis_dlq", `{"batch_id":"b"}`, mend.Target{BatchID: "b", Desired: F}, false},
		{"submitqueue-merge_dlq", `{"batch_id":"b"}`, mend.Target{BatchID: "b", Desired: F}, false},
		{"conclude_dlq", `{"batch_id":"b"}`, mend.Target{BatchID: "b", Desired: F}, false},
		{"buildsignal_dlq", `{"build":{"id":"x","batch_id":"b"}}`, mend.Target{BatchID: "b", Desired: F}, false},
		{"merge-signal_dlq", `{"batch_id":"b","outcome":"SUCCEEDED"}`, mend.Target{BatchID: "b", Desired: S}, false},
		{"merge-signal", `{"batch_id":"b","outcome":"FAILED"}`, mend.Target{BatchID: "b", Desired: F}, false},
		{"merge-signal_dlq", `{"batch_id":"b","outcome":"succeeded"}`, mend.Target{}, true},
		{"merge-signal_dlq", `{"batch_id":"b"}`, mend.Target{}, true},
		{"buildsignal_dlq", `{"batch_id":"b"}`, mend.Target{}, true},
		{"speculate_dlq", `{}`, mend.Target{}, true},
		{"speculate_dlq", `{"batch_id":""}`, mend.Target{}, true},
		{"speculate_dlq", `{"batch_id":"` + strings.Repeat("x", 256) + `"}`, mend.Target{}, true},
		{"speculate_dlq", `{"batch_id":"b"} trailing`, mend.Target{}, true},
		{"speculate_dlq", `not json`, mend.Target{}, true},
		{"speculate_dlq", ``, mend.Target{}, true},
		{"unknown_dlq", `{"batch_id":"b"}`, mend.Target{}, true},
		{"Speculate_dlq", `{"batch_id":"b"}`, mend.Target{}, true}, // topics are exact
	}
	for _, tt := range tests {
		got, err := dlq.Decode(tt.topic, []byte(tt.payload))
		if tt.wantErr {
			var de *dlq.DecodeError
			if !errors.As(err, &de) || !errors.Is(err, dlq.ErrUndecodable) {
				t.Errorf("Decode(%q, %q) = %v, %v; want a DecodeError", tt.topic, tt.payload, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Decode(%q, %q) = %+v, %v; want %+v", tt.topic, tt.payload, got, err, tt.want)
		}
	}
}

// FuzzDecode: any topic and payload either decodes to a valid target or
// fails with a DecodeError; never a panic, never an invalid batch ID.
func FuzzDecode(f *testing.F) {
	f.Add("speculate_dlq", []byte(`{"batch_id":"17"}`))
	f.Add("merge-signal_dlq", []byte(`{"batch_id":"b","outcome":"SUCCEEDED"}`))
	f.Add("buildsignal", []byte(`{"build":{"batch_id":"\u00e9"}}`))
	f.Add("x", []byte(`[`))
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		got, err := dlq.Decode(topic, payload)
		if err != nil {
			if !errors.Is(err, dlq.ErrUndecodable) {
				t.Fatalf("error %v is not a DecodeError", err)
			}
			return
		}
		if vErr := mend.ValidateIdentity("batch_id", got.BatchID, true); vErr != nil {
			t.Fatalf("decoded an invalid batch id: %v", vErr)
		}
		if got.Desired != mend.OutcomeFailed && got.Desired != mend.OutcomeSucceeded {
			t.Fatalf("decoded desired outcome %q", got.Desired)
		}
	})
}

package dlq_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
)

func TestDecode(t *testing.T) {
	t.Parallel()
	F, S := mend.OutcomeFailed, mend.OutcomeSucceeded
	batch := func(topic, queue, id string, desired mend.Outcome) dlq.Payload {
		return dlq.Payload{Topic: topic, Kind: dlq.KindBatch, Queue: queue, BatchID: id, Desired: desired}
	}
	tests := []struct {
		name      string
		topic     string
		partition string
		payload   string
		want      dlq.Payload
	}{
		{"speculate", "speculate", "q", `{"id":"q/batch/1","queue":"q"}`, batch("speculate", "q", "q/batch/1", F)},
		{"dlq suffix accepted", "speculate_dlq", "q", `{"id":"q/batch/1","queue":"q"}`, batch("speculate", "q", "q/batch/1", F)},
		{"dependency-analysis", "dependency-analysis", "q", `{"id":"b","queue":"q"}`, batch("dependency-analysis", "q", "b", F)},
		{"submitqueue-merge", "submitqueue-merge", "q", `{"id":"b","queue":"q"}`, batch("submitqueue-merge", "q", "b", F)},
		{"conclude", "conclude", "q", `{"id":"b","queue":"q"}`, batch("conclude", "q", "b", F)},
		{"build is partitioned by batch, queue from payload", "build", "q/batch/1", `{"id":"q/batch/1","queue":"q"}`, batch("build", "q", "q/batch/1", F)},
		{"payload queue wins over the partition", "speculate", "other", `{"id":"b","queue":"q"}`, batch("speculate", "q", "b", F)},
		{"unknown fields ignored", "speculate", "q", `{"id":"b","queue":"q","extra":{"x":[1,2]}}`, batch("speculate", "q", "b", F)},
		{"white space around", "speculate", "q", " \n{\"id\":\"b\",\"queue\":\"q\"}\t\n", batch("speculate", "q", "b", F)},
		{"escaped surrogate pair", "speculate", "q", `{"id":"b-\ud83d\ude00","queue":"q"}`, batch("speculate", "q", "b-😀", F)},
		{"legacy empty queue: partition key", "speculate", "q", `{"id":"b","queue":""}`,
			dlq.Payload{Topic: "speculate", Kind: dlq.KindBatch, Queue: "q", QueueFromPartition: true, BatchID: "b", Desired: F}},
		{"legacy missing queue: partition key", "conclude_dlq", "q", `{"id":"b"}`,
			dlq.Payload{Topic: "conclude", Kind: dlq.KindBatch, Queue: "q", QueueFromPartition: true, BatchID: "b", Desired: F}},
		{"merge-signal succeeded", "merge-signal", "q", `{"id":"b","outcome":"SUCCEEDED","reason":"","steps":[{"name":"land"}],"queue_name":"q"}`, batch("merge-signal", "q", "b", S)},
		{"merge-signal failed", "merge-signal_dlq", "q", `{"id":"b","outcome":"FAILED","reason":"conflict","queue_name":"q"}`, batch("merge-signal", "q", "b", F)},
		{"merge-signal without queue_name (protojson omits empty)", "merge-signal", "q", `{"id":"b","outcome":"FAILED"}`,
			dlq.Payload{Topic: "merge-signal", Kind: dlq.KindBatch, Queue: "q", QueueFromPartition: true, BatchID: "b", Desired: F}},
		{"buildsignal", "buildsignal", "build-9", `{"id":"build-9","queue":"q"}`,
			dlq.Payload{Topic: "buildsignal", Kind: dlq.KindBuild, Queue: "q", BuildID: "build-9", Desired: F}},
		{"start", "start", "q", `{"id":"q/7","queue":"q","change":"x"}`, dlq.Payload{Topic: "start", Kind: dlq.KindRequest, Queue: "q", RequestID: "q/7"}},
		{"validate", "validate", "q", `{"id":"q/7","queue":""}`, dlq.Payload{Topic: "validate", Kind: dlq.KindRequest, Queue: "q", QueueFromPartition: true, RequestID: "q/7"}},
		{"batch", "batch_dlq", "q", `{"id":"q/7","queue":"q"}`, dlq.Payload{Topic: "batch", Kind: dlq.KindRequest, Queue: "q", RequestID: "q/7"}},
		{"cancel", "cancel", "q/7", `{"id":"q/7","queue":"q"}`, dlq.Payload{Topic: "cancel", Kind: dlq.KindRequest, Queue: "q", RequestID: "q/7"}},
		{"merge-conflict-check-signal", "merge-conflict-check-signal", "q", `{"id":"q/7","outcome":"FAILED","queue_name":"q"}`,
			dlq.Payload{Topic: "merge-conflict-check-signal", Kind: dlq.KindRequest, Queue: "q", RequestID: "q/7"}},
		{"log", "log", "q/7", `{"request_id":"q/7","queue":"q","timestamp_ms":1,"type":"status","status":"error","event":"","request_version":2,"last_error":"x","metadata":{}}`,
			dlq.Payload{Topic: "log", Kind: dlq.KindRequest, Queue: "q", RequestID: "q/7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := dlq.Decode(tt.topic, tt.partition, []byte(tt.payload))
			if err != nil || got != tt.want {
				t.Fatalf("Decode(%q, %q, %s) =\n %+v, %v\nwant\n %+v", tt.topic, tt.partition, tt.payload, got, err, tt.want)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	tests := []struct {
		name      string
		topic     string
		partition string
		payload   string
		reason    string // a fragment the reason must contain
		queue     string // the queue still resolved, if any
	}{
		{"the first round's format", "speculate", "q", `{"batch_id":"b"}`, `missing "id"`, "q"},
		{"case-variant key", "speculate", "q", `{"ID":"b","queue":"q"}`, `"ID" is not "id"`, ""},
		{"case-variant queue key", "speculate", "q", `{"id":"b","Queue":"q"}`, `"Queue" is not "queue"`, ""},
		{"case variant beside the exact key", "speculate", "q", `{"id":"a","Id":"b","queue":"q"}`, `"Id" is not "id"`, ""},
		{"camelCase merge queue", "merge-signal", "q", `{"id":"b","outcome":"FAILED","queueName":"q"}`, `"queueName" is not "queue_name"`, ""},
		{"duplicate key", "speculate", "q", `{"id":"a","id":"b","queue":"q"}`, `duplicate key "id"`, ""},
		{"duplicate key nested", "merge-signal", "q", `{"id":"b","outcome":"FAILED","steps":[{"n":1,"n":2}]}`, `duplicate key "n"`, ""},
		{"invalid utf-8", "speculate", "q", "{\"id\":\"b\xff\",\"queue\":\"q\"}", "not valid UTF-8", ""},
		{"unpaired surrogate escape", "speculate", "q", `{"id":"b\ud800","queue":"q"}`, "surrogate", "q"},
		{"lone low surrogate escape", "speculate", "q", `{"id":"b\udc00x","queue":"q"}`, "surrogate", "q"},
		{"trailing data", "speculate", "q", `{"id":"b","queue":"q"} x`, "", ""},
		{"a second object", "speculate", "q", `{"id":"b","queue":"q"}{}`, "trailing data", ""},
		{"not an object", "speculate", "q", `["b"]`, "not a JSON object", ""},
		{"null", "speculate", "q", `null`, "not a JSON object", ""},
		{"empty", "speculate", "q", ``, "not a JSON object", ""},
		{"truncated", "speculate", "q", `{"id":"b"`, "", ""},
		{"id a number", "speculate", "q", `{"id":17,"queue":"q"}`, `"id" is a number`, "q"},
		{"id null", "speculate", "q", `{"id":null,"queue":"q"}`, `"id" is null`, "q"},
		{"queue an object", "speculate", "q", `{"id":"b","queue":{}}`, `"queue" is an object`, ""},
		{"empty id", "speculate", "q", `{"id":"","queue":"q"}`, "must not be empty", "q"},
		{"id over 255 characters", "speculate", "q", `{"id":"` + long + `","queue":"q"}`, "256 characters", "q"},
		{"queue over 255 characters", "speculate", "q", `{"id":"b","queue":"` + long + `"}`, "256 characters", ""},
		{"build with no queue: partition is the batch", "build", "q/batch/1", `{"id":"q/batch/1","queue":""}`, "partition key of \"build\" is the batch ID", ""},
		{"buildsignal with no queue: partition is the build", "buildsignal", "build-9", `{"id":"build-9"}`, "is the build ID", ""},
		{"cancel with no queue", "cancel", "q/7", `{"id":"q/7"}`, "is the request ID", ""},
		{"legacy empty queue and empty partition", "speculate", "", `{"id":"b","queue":""}`, "partition key cannot stand in", ""},
		{"merge outcome missing", "merge-signal", "q", `{"id":"b","queue_name":"q"}`, `"outcome" is ""`, "q"},
		{"merge outcome lowercase", "merge-signal", "q", `{"id":"b","outcome":"succeeded","queue_name":"q"}`, `"outcome" is "succeeded"`, "q"},
		{"merge outcome a number", "merge-signal", "q", `{"id":"b","outcome":1,"queue_name":"q"}`, `"outcome" is a number`, "q"},
		{"merge id missing (protojson omits empty)", "merge-signal", "q", `{"outcome":"FAILED","queue_name":"q"}`, `missing "id"`, "q"},
		{"unknown topic", "mystery_dlq", "q", `{"id":"b","queue":"q"}`, "unknown topic", ""},
		{"topics are exact", "Speculate_dlq", "q", `{"id":"b","queue":"q"}`, "unknown topic", ""},
		{"over the host's BLOB", "speculate", "q", `{"id":"b","queue":"q","pad":"` + strings.Repeat("x", dlq.MaxHostPayload) + `"}`, "BLOB", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := dlq.Decode(tt.topic, tt.partition, []byte(tt.payload))
			var de *dlq.DecodeError
			if !errors.As(err, &de) || !errors.Is(err, dlq.ErrUndecodable) {
				t.Fatalf("Decode(%q, %q, %.80s) = %+v, %v; want a DecodeError", tt.topic, tt.partition, tt.payload, got, err)
			}
			if !strings.Contains(de.Reason, tt.reason) {
				t.Errorf("reason %q; want it to contain %q", de.Reason, tt.reason)
			}
			if got.Queue != tt.queue {
				t.Errorf("queue %q; want %q", got.Queue, tt.queue)
			}
		})
	}
}

func TestPartitionIsQueue(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]bool{
		"speculate": true, "speculate_dlq": true, "dependency-analysis": true, "submitqueue-merge": true,
		"conclude": true, "merge-signal": true, "start": true, "validate": true, "batch": true,
		"merge-conflict-check-signal": true,
		"build":                       false, "buildsignal_dlq": false, "cancel": false, "log": false, "mystery": false,
	} {
		if got := dlq.PartitionIsQueue(topic); got != want {
			t.Errorf("PartitionIsQueue(%q) = %v; want %v", topic, got, want)
		}
	}
}

// FuzzDecode: whatever the topic, partition and payload, Decode never
// panics, fails only with a DecodeError, and on success names a queue and
// a target mend can store.
func FuzzDecode(f *testing.F) {
	f.Add("speculate_dlq", "q", []byte(`{"id":"q/batch/1","queue":"q"}`))
	f.Add("speculate", "q", []byte(`{"id":"b","queue":""}`))
	f.Add("merge-signal_dlq", "q", []byte(`{"id":"b","outcome":"SUCCEEDED","steps":[{"a":1}],"queue_name":"q"}`))
	f.Add("buildsignal", "b9", []byte(`{"id":"b9","queue":"q"}`))
	f.Add("log", "q/1", []byte(`{"request_id":"q/1","queue":"q","metadata":{"k":"v"}}`))
	f.Add("build", "q/batch/1", []byte(`{"id":"\ud83d\ude00","queue":"q"}`))
	f.Add("conclude", "q", []byte(`{"id":"a","id":"b"}`))
	f.Add("x", "", []byte(`[`))
	f.Fuzz(func(t *testing.T, topic, partition string, payload []byte) {
		got, err := dlq.Decode(topic, partition, payload)
		if err != nil {
			var de *dlq.DecodeError
			if !errors.As(err, &de) || !errors.Is(err, dlq.ErrUndecodable) {
				t.Fatalf("error %v is not a DecodeError", err)
			}
			if got.Queue != "" {
				if vErr := mend.ValidateIdentity("queue", got.Queue, true); vErr != nil {
					t.Fatalf("a refused payload resolved an invalid queue: %v", vErr)
				}
			}
			return
		}
		if !utf8.Valid(payload) {
			t.Fatalf("decoded a payload that is not valid UTF-8")
		}
		if vErr := mend.ValidateIdentity("queue", got.Queue, true); vErr != nil {
			t.Fatalf("decoded an invalid queue: %v", vErr)
		}
		var id string
		switch got.Kind {
		case dlq.KindBatch:
			id = got.BatchID
			if got.Desired != mend.OutcomeFailed && got.Desired != mend.OutcomeSucceeded {
				t.Fatalf("decoded desired outcome %q", got.Desired)
			}
		case dlq.KindBuild:
			id = got.BuildID
		case dlq.KindRequest:
			id = got.RequestID
		default:
			t.Fatalf("decoded kind %v", got.Kind)
		}
		if vErr := mend.ValidateIdentity("id", id, true); vErr != nil {
			t.Fatalf("decoded an invalid id: %v", vErr)
		}
		if got.QueueFromPartition && got.Queue != partition {
			t.Fatalf("queue %q said to come from partition %q", got.Queue, partition)
		}
	})
}

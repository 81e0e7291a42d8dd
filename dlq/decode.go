package dlq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mendq/mend"
)

// DLQSuffix is the companion-topic suffix of the host's dead-letter queues.
const DLQSuffix = "_dlq"

// The host topics mend knows how to decode.
const (
	TopicSpeculate          = "speculate"
	TopicBuild              = "build"
	TopicBuildSignal        = "buildsignal"
	TopicDependencyAnalysis = "dependency-analysis"
	TopicMerge              = "submitqueue-merge"
	TopicMergeSignal        = "merge-signal"
	TopicConclude           = "conclude"
)

// ErrUndecodable matches every DecodeError.
var ErrUndecodable = errors.New("dlq: undecodable delivery")

// DecodeError says why a delivery's target could not be decoded. The
// intake still records such a delivery, parked with this reason.
type DecodeError struct {
	Topic  string
	Reason string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("dlq: cannot decode %q payload: %s", e.Topic, e.Reason)
}

// Unwrap lets errors.Is(err, ErrUndecodable) match.
func (e *DecodeError) Unwrap() error { return ErrUndecodable }

// BaseTopic strips the DLQ suffix: "build_dlq" and "build" both give "build".
func BaseTopic(topic string) string { return strings.TrimSuffix(topic, DLQSuffix) }

// Decoder turns a payload of one topic into the record's target.
type Decoder func(payload []byte) (mend.Target, error)

// decoders maps a base topic to its decoder. The payload formats are the
// host's; see docs/integration.md.
var decoders = map[string]Decoder{
	TopicSpeculate:          batchPayload,
	TopicBuild:              batchPayload,
	TopicDependencyAnalysis: batchPayload,
	TopicMerge:              batchPayload,
	TopicConclude:           batchPayload,
	TopicBuildSignal:        buildSignalPayload,
	TopicMergeSignal:        mergeSignalPayload,
}

// Decode decodes the target of a delivery on topic (with or without the DLQ
// suffix). Returns a *DecodeError for an unknown topic or a payload that does
// not name a valid batch.
func Decode(topic string, payload []byte) (mend.Target, error) {
	base := BaseTopic(topic)
	dec, ok := decoders[base]
	if !ok {
		return mend.Target{}, &DecodeError{Topic: topic, Reason: "unknown topic; mend decodes " + knownTopics()}
	}
	t, err := dec(payload)
	if err != nil {
		return mend.Target{}, &DecodeError{Topic: topic, Reason: err.Error()}
	}
	if err := mend.ValidateIdentity("batch_id", t.BatchID, true); err != nil {
		return mend.Target{}, &DecodeError{Topic: topic, Reason: err.Error()}
	}
	return t, nil
}

func knownTopics() string {
	return strings.Join([]string{TopicSpeculate, TopicBuild, TopicBuildSignal, TopicDependencyAnalysis,
		TopicMerge, TopicMergeSignal, TopicConclude}, ", ")
}

// strict decodes a JSON object into v, refusing trailing data. Unknown
// fields are allowed: hosts add fields over time.
func strict(payload []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// batchPayload: {"batch_id": "..."}. A dead letter on a batch stage means
// the stage could not run: the batch is to be failed.
func batchPayload(payload []byte) (mend.Target, error) {
	var p struct {
		BatchID *string `json:"batch_id"`
	}
	if err := strict(payload, &p); err != nil {
		return mend.Target{}, err
	}
	if p.BatchID == nil {
		return mend.Target{}, errors.New(`missing "batch_id"`)
	}
	return mend.Target{BatchID: *p.BatchID, Desired: mend.OutcomeFailed}, nil
}

// buildSignalPayload: {"build": {"id": "...", "batch_id": "..."}}: a build
// result that names its batch.
func buildSignalPayload(payload []byte) (mend.Target, error) {
	var p struct {
		Build *struct {
			ID      string  `json:"id"`
			BatchID *string `json:"batch_id"`
		} `json:"build"`
	}
	if err := strict(payload, &p); err != nil {
		return mend.Target{}, err
	}
	if p.Build == nil || p.Build.BatchID == nil {
		return mend.Target{}, errors.New(`missing "build"."batch_id"`)
	}
	return mend.Target{BatchID: *p.Build.BatchID, Desired: mend.OutcomeFailed}, nil
}

// mergeSignalPayload: {"batch_id": "...", "outcome": "SUCCEEDED"|"FAILED"}.
// A success must be honoured: the code may already be on trunk.
func mergeSignalPayload(payload []byte) (mend.Target, error) {
	var p struct {
		BatchID *string `json:"batch_id"`
		Outcome string  `json:"outcome"`
	}
	if err := strict(payload, &p); err != nil {
		return mend.Target{}, err
	}
	if p.BatchID == nil {
		return mend.Target{}, errors.New(`missing "batch_id"`)
	}
	switch p.Outcome {
	case "SUCCEEDED":
		return mend.Target{BatchID: *p.BatchID, Desired: mend.OutcomeSucceeded}, nil
	case "FAILED":
		return mend.Target{BatchID: *p.BatchID, Desired: mend.OutcomeFailed}, nil
	default:
		return mend.Target{}, fmt.Errorf(`"outcome" is %q; want "SUCCEEDED" or "FAILED"`, p.Outcome)
	}
}

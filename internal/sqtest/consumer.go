package sqtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// ErrWedged means a message's metadata is not a flat JSON object of strings.
// The real message store scans metadata into map[string]string
// (message_store.go:185), so such a row makes every fetch of its partition
// fail: the partition is wedged until someone deletes the row.
var ErrWedged = errors.New("sqtest: metadata is not a string map: the real store cannot fetch this partition")

// Metadata decodes a message's metadata column as the real store does: NULL
// is an empty map, anything but a JSON object of string values is ErrWedged.
func Metadata(raw []byte) (map[string]string, error) {
	if raw == nil {
		return map[string]string{}, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%w: %s (%v)", ErrWedged, raw, err)
	}
	return m, nil
}

// Object decodes a JSON object strictly: valid UTF-8, no duplicate keys,
// nothing after it. Keys are compared case-sensitively by the caller.
func Object(b []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object (%v)", err)
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k := kt.(string)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the object")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the object")
	}
	return out, nil
}

// stringFields reads exactly the named keys of a strict object as strings;
// any other key, a missing one or a non-string value is an error.
func stringFields(b []byte, keys ...string) (map[string]string, error) {
	obj, err := Object(b)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range obj {
		if !slices.Contains(keys, k) {
			return nil, fmt.Errorf("unexpected key %q (keys are case-sensitive; want %q)", k, keys)
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("key %q is not a string: %s", k, v)
		}
		out[k] = s
	}
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("missing key %q", k)
		}
	}
	return out, nil
}

// BatchID is the payload of speculate, build, submitqueue-merge, conclude
// and dependency-analysis messages.
type BatchID struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
}

// DecodeBatchID decodes a BatchID payload strictly: exactly the keys "id"
// and "queue", both strings. (The real consumer's encoding/json would read
// {"batch_id": ...} as an empty ID and fail later; this refuses it at once.)
func DecodeBatchID(payload []byte) (BatchID, error) {
	f, err := stringFields(payload, "id", "queue")
	if err != nil {
		return BatchID{}, fmt.Errorf("sqtest: BatchID payload %s: %w", payload, err)
	}
	return BatchID{ID: f["id"], Queue: f["queue"]}, nil
}

// Wake is a speculate message as the real consumer reads it.
type Wake struct {
	Message
	Meta  map[string]string
	Batch BatchID
}

// ConsumeSpeculate reads a queue's speculate partition in offset order and
// checks every message as the real speculate consumer would
// (controller/speculate/speculate.go:94), stricter where that one would only
// fail later: metadata a string map (else ErrWedged for the whole
// partition), the payload a BatchID with a non-empty queue equal to the
// partition, naming a batch of that queue whose stored ID is byte-equal to
// the one named. With live set, the batch must also be live.
func (w World) ConsumeSpeculate(ctx context.Context, queue string, live bool) ([]Wake, error) {
	msgs, err := w.Messages(ctx, "speculate", queue)
	if err != nil {
		return nil, err
	}
	out := make([]Wake, 0, len(msgs))
	for _, m := range msgs {
		meta, err := Metadata(m.Metadata)
		if err != nil {
			return nil, fmt.Errorf("message %q at offset %d: %w", m.ID, m.Offset, err)
		}
		b, err := DecodeBatchID(m.Payload)
		if err != nil {
			return nil, fmt.Errorf("message %q: %w", m.ID, err)
		}
		switch {
		case b.Queue == "":
			return nil, fmt.Errorf("message %q: empty queue in payload", m.ID)
		case b.Queue != queue:
			return nil, fmt.Errorf("message %q: payload queue %q is not the partition %q", m.ID, b.Queue, queue)
		}
		batch, err := w.Batch(ctx, queue, b.ID)
		if err != nil {
			return nil, fmt.Errorf("message %q names a batch the consumer cannot get: %w", m.ID, err)
		}
		if batch.ID != b.ID || batch.Queue != queue {
			return nil, fmt.Errorf("message %q names batch %q but the row found is %q in %q", m.ID, b.ID, batch.ID, batch.Queue)
		}
		if live && !slices.Contains([]string{"created", "speculating", "merging", "cancelling"}, batch.State) {
			return nil, fmt.Errorf("message %q names batch %q, which is %s, not live", m.ID, b.ID, batch.State)
		}
		out = append(out, Wake{Message: m, Meta: meta, Batch: b})
	}
	return out, nil
}

// RequestLog is the payload of a message on topic log.
type RequestLog struct {
	RequestID      string            `json:"request_id"`
	Queue          string            `json:"queue"`
	TimestampMS    int64             `json:"timestamp_ms"`
	Type           string            `json:"type"`
	Status         string            `json:"status"`
	Event          string            `json:"event"`
	RequestVersion int32             `json:"request_version"`
	LastError      string            `json:"last_error"`
	Metadata       map[string]string `json:"metadata"`
}

// DecodeRequestLog decodes a log payload strictly: the nine keys the
// gateway's materializer reads, with their types, and a string-map metadata.
func DecodeRequestLog(payload []byte) (RequestLog, error) {
	obj, err := Object(payload)
	if err != nil {
		return RequestLog{}, fmt.Errorf("sqtest: RequestLog %s: %w", payload, err)
	}
	want := []string{"request_id", "queue", "timestamp_ms", "type", "status", "event", "request_version", "last_error", "metadata"}
	for k := range obj {
		if !slices.Contains(want, k) {
			return RequestLog{}, fmt.Errorf("sqtest: RequestLog: unexpected key %q", k)
		}
	}
	for _, k := range want {
		if _, ok := obj[k]; !ok {
			return RequestLog{}, fmt.Errorf("sqtest: RequestLog: missing key %q", k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	var l RequestLog
	if err := dec.Decode(&l); err != nil {
		return RequestLog{}, fmt.Errorf("sqtest: RequestLog: %w", err)
	}
	if l.Type != "status" {
		return RequestLog{}, fmt.Errorf("sqtest: RequestLog: type %q, want status", l.Type)
	}
	if l.Metadata == nil {
		return RequestLog{}, errors.New("sqtest: RequestLog: metadata is null; want an object")
	}
	return l, nil
}

// ConsumeLog returns the log messages published for a request, decoded
// strictly, in offset order. Log messages have no message metadata.
func (w World) ConsumeLog(ctx context.Context, requestID string) ([]RequestLog, error) {
	msgs, err := w.Messages(ctx, "log", requestID)
	if err != nil {
		return nil, err
	}
	var out []RequestLog
	for _, m := range msgs {
		if m.Metadata != nil {
			return nil, fmt.Errorf("log message %q has metadata %s; the real fan-out sends none", m.ID, m.Metadata)
		}
		l, err := DecodeRequestLog(m.Payload)
		if err != nil {
			return nil, fmt.Errorf("log message %q: %w", m.ID, err)
		}
		if l.RequestID != requestID {
			return nil, fmt.Errorf("log message %q: request_id %q on partition %q", m.ID, l.RequestID, requestID)
		}
		out = append(out, l)
	}
	return out, nil
}

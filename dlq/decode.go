package dlq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// DLQSuffix is the suffix the host's message store appends to a topic when
// it moves a message to the dead-letter queue: speculate → speculate_dlq.
const DLQSuffix = "_dlq"

// The host's topics, by their default names (uber/submitqueue wires no
// overrides). A dead letter's original topic is one of these.
const (
	TopicSpeculate          = "speculate"
	TopicDependencyAnalysis = "dependency-analysis"
	TopicBuild              = "build"
	TopicBuildSignal        = "buildsignal"
	TopicMerge              = "submitqueue-merge"
	TopicMergeSignal        = "merge-signal"
	TopicConclude           = "conclude"
	// Request topics and the request log: mend records their dead letters
	// parked, because it repairs batches, not requests.
	TopicStart              = "start"
	TopicValidate           = "validate"
	TopicBatch              = "batch"
	TopicCancel             = "cancel"
	TopicMergeConflictCheck = "merge-conflict-check-signal"
	TopicLog                = "log"
	// Runway's topics on the same queue database: runway's own DLQ
	// controller repairs their dead letters (mend.TopicHost). mend does not
	// decode them; the intake records them for the audit.
	TopicRunwayMergeConflictCheck = "merge-conflict-check"
	TopicRunwayMerge              = "runway-merge"
)

// ErrUndecodable matches every DecodeError.
var ErrUndecodable = errors.New("dlq: undecodable delivery")

// DecodeError says why a dead letter's payload could not be decoded. The
// intake still records such a delivery, parked with this reason.
type DecodeError struct {
	Topic  string // the original topic the payload was decoded as
	Reason string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("dlq: cannot decode %q payload: %s", e.Topic, e.Reason)
}

// Unwrap lets errors.Is(err, ErrUndecodable) match.
func (e *DecodeError) Unwrap() error { return ErrUndecodable }

// BaseTopic strips the DLQ suffix: "build_dlq" and "build" both give "build".
func BaseTopic(topic string) string { return strings.TrimSuffix(topic, DLQSuffix) }

// Kind says what a decoded payload names.
type Kind int

// The kinds of payload.
const (
	// KindBatch names a batch to settle (Payload.BatchID, Payload.Desired).
	KindBatch Kind = iota + 1
	// KindBuild names a build (Payload.BuildID); its batch is found through
	// the host's build table (see Builds).
	KindBuild
	// KindRequest names a request (Payload.RequestID). mend does not repair
	// requests; the intake records such dead letters parked.
	KindRequest
)

func (k Kind) String() string {
	switch k {
	case KindBatch:
		return "batch"
	case KindBuild:
		return "build"
	case KindRequest:
		return "request"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Payload is what Decode read out of a dead letter.
type Payload struct {
	Topic string // the original topic, without the DLQ suffix
	Kind  Kind
	// Queue is the queue the payload belongs to: the payload's own queue
	// field, or the partition key when the payload's is empty and the
	// topic is partitioned by queue. Never empty when Decode succeeds.
	Queue string
	// QueueFromPartition reports that Queue came from the partition key
	// (a legacy payload with an empty queue).
	QueueFromPartition bool
	BatchID            string       // KindBatch
	BuildID            string       // KindBuild
	RequestID          string       // KindRequest
	Desired            mend.Outcome // KindBatch and KindBuild: what the dead letter asks for
}

// topicSpec is how one original topic's payload reads.
type topicSpec struct {
	kind     Kind
	idKey    string // the key naming the batch, build or request
	queueKey string // the key naming the queue
	// partition says what the partition key holds; "queue" means it may
	// stand in for an empty queue field.
	partition string
	outcome   bool // merge-signal: the outcome decides the desired outcome
}

// topics maps each original topic to its payload format (fact sheet §4):
// BatchID {"id","queue"}, BuildID {"id","queue"}, protojson MergeResult
// {"id","outcome","reason","steps","queue_name"}, request payloads
// {"id","queue",...} and the request log {"request_id","queue",...}.
var topics = map[string]topicSpec{
	TopicSpeculate:          {kind: KindBatch, idKey: "id", queueKey: "queue", partition: "queue"},
	TopicDependencyAnalysis: {kind: KindBatch, idKey: "id", queueKey: "queue", partition: "queue"},
	TopicBuild:              {kind: KindBatch, idKey: "id", queueKey: "queue", partition: "batch ID"},
	TopicMerge:              {kind: KindBatch, idKey: "id", queueKey: "queue", partition: "queue"},
	TopicConclude:           {kind: KindBatch, idKey: "id", queueKey: "queue", partition: "queue"},
	TopicMergeSignal:        {kind: KindBatch, idKey: "id", queueKey: "queue_name", partition: "queue", outcome: true},
	TopicBuildSignal:        {kind: KindBuild, idKey: "id", queueKey: "queue", partition: "build ID"},
	TopicStart:              {kind: KindRequest, idKey: "id", queueKey: "queue", partition: "queue"},
	TopicValidate:           {kind: KindRequest, idKey: "id", queueKey: "queue", partition: "queue"},
	TopicBatch:              {kind: KindRequest, idKey: "id", queueKey: "queue", partition: "queue"},
	TopicCancel:             {kind: KindRequest, idKey: "id", queueKey: "queue", partition: "request ID"},
	TopicMergeConflictCheck: {kind: KindRequest, idKey: "id", queueKey: "queue_name", partition: "queue"},
	TopicLog:                {kind: KindRequest, idKey: "request_id", queueKey: "queue", partition: "request ID"},
}

// PartitionIsQueue reports whether the host partitions topic (with or
// without the DLQ suffix) by queue, so that its partition key names the
// queue. It is false for build (batch ID), buildsignal (build ID), cancel
// and log (request ID) and for unknown topics.
func PartitionIsQueue(topic string) bool {
	spec, ok := topics[BaseTopic(topic)]
	return ok && spec.partition == "queue"
}

// knownTopics lists the decodable topics, sorted, for error messages.
func knownTopics() string {
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Decode reads a dead letter's payload as its original topic's format
// (topic may carry the DLQ suffix). partition is the message's partition
// key; it stands in for the queue when the payload's queue is empty and the
// topic is partitioned by queue. Decode does no I/O: a buildsignal payload
// yields a build ID, which the intake resolves through Builds.
//
// Decoding is strict and byte-exact: the payload must be valid UTF-8 and one
// JSON object with nothing after it; no object anywhere in it may repeat a
// key; keys are case-sensitive, and a key that differs from one mend reads
// only in case or separators ("ID", "Queue", "queueName") is refused rather
// than guessed at; the fields mend reads must be strings (not null), with
// no unpaired UTF-16 surrogate escapes, and every identity must fit the
// host's VARCHAR(255). Other fields are ignored (protojson adds "reason"
// and "steps", and omits zero values).
//
// Returns a *DecodeError (ErrUndecodable) for an unknown topic or a payload
// that breaks these rules. Even then the returned Payload's Topic, Kind and
// Queue are set as far as they could be read safely, so the intake can file
// the parked record under the right queue.
func Decode(topic, partition string, payload []byte) (Payload, error) {
	p := Payload{Topic: BaseTopic(topic)}
	fail := func(format string, args ...any) (Payload, error) {
		return p, &DecodeError{Topic: p.Topic, Reason: fmt.Sprintf(format, args...)}
	}
	spec, ok := topics[p.Topic]
	if !ok {
		return fail("unknown topic; mend decodes %s", knownTopics())
	}
	p.Kind = spec.kind
	if len(payload) > MaxHostPayload {
		return fail("payload is %d bytes; the host's BLOB column holds at most %d", len(payload), MaxHostPayload)
	}
	obj, err := parseObject(payload)
	if err != nil {
		return fail("%v", err)
	}
	keys := []string{spec.idKey, spec.queueKey}
	if spec.outcome {
		keys = append(keys, "outcome")
	}
	if err := obj.refuseVariants(keys); err != nil {
		return fail("%v", err)
	}

	queue, _, err := obj.str(spec.queueKey)
	if err != nil {
		return fail("%v", err)
	}
	if queue != "" {
		if err := mend.ValidateIdentity(spec.queueKey, queue, true); err != nil {
			return fail("%v", err)
		}
	} else if spec.partition == "queue" {
		if err := mend.ValidateIdentity("partition key", partition, true); err != nil {
			return fail("the payload's %q is empty and the partition key cannot stand in for it: %v", spec.queueKey, err)
		}
		queue, p.QueueFromPartition = partition, true
	} else {
		return fail("the payload's %q is empty, and the partition key of %q is the %s, not the queue (the host never parses IDs, so neither does mend)",
			spec.queueKey, p.Topic, spec.partition)
	}
	p.Queue = queue

	id, present, err := obj.str(spec.idKey)
	if err != nil {
		return fail("%v", err)
	}
	if !present {
		return fail("missing %q", spec.idKey)
	}
	if err := mend.ValidateIdentity(spec.idKey, id, true); err != nil {
		return fail("%v", err)
	}
	switch spec.kind {
	case KindBatch:
		p.BatchID, p.Desired = id, mend.OutcomeFailed
	case KindBuild:
		p.BuildID, p.Desired = id, mend.OutcomeFailed
	case KindRequest:
		p.RequestID = id
	}
	if spec.outcome {
		outcome, _, err := obj.str("outcome")
		if err != nil {
			return fail("%v", err)
		}
		switch outcome {
		case "SUCCEEDED":
			// The merge landed: the code may already be on trunk, so the
			// batch must end succeeded, never failed.
			p.Desired = mend.OutcomeSucceeded
		case "FAILED":
			p.Desired = mend.OutcomeFailed
		default:
			return fail(`"outcome" is %q; want "SUCCEEDED" or "FAILED"`, outcome)
		}
	}
	return p, nil
}

// object is a strictly parsed JSON object: its members by exact key.
type object map[string]json.RawMessage

// parseObject parses payload as exactly one JSON object: valid UTF-8, no
// repeated key in any object at any depth, nothing but white space after it.
// A payload that is valid JSON is read by scanObject, a quarter of the
// cost; scanObject declines anything it would refuse or that needs
// unescaping to judge, and parseObjectSlow then decides (and words the
// refusal).
func parseObject(payload []byte) (object, error) {
	if !utf8.Valid(payload) {
		return nil, errors.New("payload is not valid UTF-8")
	}
	if json.Valid(payload) {
		if obj, ok := scanObject(payload); ok {
			return obj, nil
		}
	}
	return parseObjectSlow(payload)
}

// parseObjectSlow is parseObject through encoding/json's tokens: it
// checks the structure, then decodes the object's members.
func parseObjectSlow(payload []byte) (object, error) {
	if err := checkStructure(payload); err != nil {
		return nil, err
	}
	var obj object
	if err := json.Unmarshal(payload, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return obj, nil
}

// scanObject reads b, which json.Valid accepted (one JSON value, valid
// UTF-8), and returns its members when it is an object in which no object,
// at any depth, repeats a key. Keys are compared byte for byte, so ok is
// false as soon as any key holds an escape ("a" and "\u0061" are one key),
// when b is not an object, and when a key repeats: parseObjectSlow then
// decides. The members' values are slices of b.
func scanObject(b []byte) (obj object, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	obj = object{}
	if _, ok = scanValue(b, i, obj); !ok {
		return nil, false
	}
	return obj, true
}

// scanValue skips the valid JSON value at b[i:] and returns the index just
// after it. An object's keys are checked as scanObject says; when members
// is not nil, the object's members are put in it.
func scanValue(b []byte, i int, members object) (int, bool) {
	switch b[i] {
	case '{':
		var keys [][]byte // compared one by one while few
		var many map[string]struct{}
		i = skipSpace(b, i+1)
		if b[i] == '}' {
			return i + 1, true
		}
		for {
			end := scanString(b, i)
			key := b[i+1 : end-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				return 0, false
			}
			if many != nil {
				if _, dup := many[string(key)]; dup {
					return 0, false
				}
				many[string(key)] = struct{}{}
			} else {
				for _, k := range keys {
					if bytes.Equal(k, key) {
						return 0, false
					}
				}
				if keys = append(keys, key); len(keys) > 16 {
					many = make(map[string]struct{}, 2*len(keys))
					for _, k := range keys {
						many[string(k)] = struct{}{}
					}
				}
			}
			i = skipSpace(b, end)
			i = skipSpace(b, i+1) // the colon
			start := i
			var ok bool
			if i, ok = scanValue(b, i, nil); !ok {
				return 0, false
			}
			if members != nil {
				members[string(key)] = b[start:i]
			}
			i = skipSpace(b, i)
			if b[i] == '}' {
				return i + 1, true
			}
			i = skipSpace(b, i+1) // the comma
		}
	case '[':
		i = skipSpace(b, i+1)
		if b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = scanValue(b, i, nil); !ok {
				return 0, false
			}
			i = skipSpace(b, i)
			if b[i] == ']' {
				return i + 1, true
			}
			i = skipSpace(b, i+1)
		}
	case '"':
		return scanString(b, i), true
	default: // a number, true, false or null: up to the next delimiter
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i, true
			}
			i++
		}
		return i, true
	}
}

// scanString returns the index just after the valid JSON string at b[i:].
func scanString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// frame is one open array or object while checkStructure walks a payload.
type frame struct {
	object    bool
	keys      map[string]struct{}
	expectKey bool // object only: the next token is a key or the closing brace
}

// checkStructure walks payload's tokens once: it must be one object, with
// no key repeated within any object. encoding/json alone would keep the
// last of two equal keys silently.
func checkStructure(payload []byte) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var stack []*frame
	// valueDone notes that the innermost object's member value is
	// complete, so a key or the closing brace comes next.
	valueDone := func() {
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].expectKey = true
		}
	}
	first := true
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if first || len(stack) > 0 {
				return errors.New("not a JSON object: unexpected end of payload")
			}
			return nil
		}
		if err != nil {
			if !first && len(stack) == 0 {
				return fmt.Errorf("trailing data after the JSON object: %w", err)
			}
			return fmt.Errorf("not a JSON object: %w", err)
		}
		if first {
			first = false
			if tok != json.Delim('{') {
				return errors.New("not a JSON object")
			}
			stack = append(stack, &frame{object: true, keys: map[string]struct{}{}, expectKey: true})
			continue
		}
		if len(stack) == 0 {
			return errors.New("trailing data after the JSON object")
		}
		top := stack[len(stack)-1]
		if top.object && top.expectKey {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				valueDone()
				continue
			}
			k, _ := tok.(string) // the decoder allows only a string here
			if _, dup := top.keys[k]; dup {
				return fmt.Errorf("duplicate key %q", k)
			}
			top.keys[k] = struct{}{}
			top.expectKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]struct{}{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// foldKey is how a key looks to a lenient reader: encoding/json matches
// keys case-insensitively, and protojson also accepts lowerCamelCase.
func foldKey(k string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' {
			return -1
		}
		return r
	}, strings.ToLower(k))
}

// refuseVariants refuses a key that a lenient reader would take for one of
// want but that is not spelled exactly so: the host's own consumer might
// read it, mend would not, and guessing which one it meant is not safe.
func (o object) refuseVariants(want []string) error {
	var bad []string
	for k := range o {
		if slices.Contains(want, k) {
			continue
		}
		for _, w := range want {
			if foldKey(k) == foldKey(w) {
				bad = append(bad, fmt.Sprintf("%q is not %q", k, w))
			}
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("keys are case-sensitive: %s", strings.Join(bad, ", "))
	}
	return nil
}

// str reads member key as a string. A missing key reads as "" (protojson
// and old payloads omit empty fields); present reports whether it was
// there. Any other JSON type, null included, is an error.
func (o object) str(key string) (s string, present bool, err error) {
	raw, ok := o[key]
	if !ok {
		return "", false, nil
	}
	if len(raw) == 0 || raw[0] != '"' {
		return "", true, fmt.Errorf("%q is %s; want a JSON string", key, jsonType(raw))
	}
	if len(raw) >= 2 && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		// No escape: the bytes between the quotes are the string (the
		// payload is valid UTF-8 and JSON allows no control byte in it).
		return string(raw[1 : len(raw)-1]), true, nil
	}
	if err := checkEscapes(raw); err != nil {
		return "", true, fmt.Errorf("%q: %w", key, err)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", true, fmt.Errorf("%q: %w", key, err)
	}
	return s, true, nil
}

func jsonType(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "empty"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// checkEscapes refuses an unpaired UTF-16 surrogate escape in a JSON string
// token: encoding/json would turn it into U+FFFD silently, so the ID mend
// stored would not be the bytes the payload meant.
func checkEscapes(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue // a one-character escape; the decoder checks the rest
		}
		r, ok := hex4(raw, i+1)
		if !ok {
			continue
		}
		i += 4
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			// A high surrogate must be followed by a low one.
			if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo, ok := hex4(raw, i+3); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 6
					continue
				}
			}
			return fmt.Errorf("unpaired UTF-16 surrogate escape \\u%04X", r)
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("unpaired UTF-16 surrogate escape \\u%04X", r)
		}
	}
	return nil
}

// hex4 reads four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

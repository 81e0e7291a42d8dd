package dlq

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// seedsScan are payloads for the scanner's tests: the host's shapes, and
// what the strict rules refuse or must unescape to judge.
var seedsScan = []string{
	`{"id":"q/batch/1","queue":"q"}`,
	` { "id" : "b" , "queue" : "" } `,
	`{"id":"b","outcome":"SUCCEEDED","steps":[{"a":1},{"a":2}],"reason":null,"queue_name":"q"}`,
	`{"request_id":"q/1","queue":"q","metadata":{"k":"v","n":[1,-2.5e3,true,false,null,"x\"y"]}}`,
	`{"id":"\ud83d\ude00","queue":"q\\"}`,
	`{"id":"a","id":"b"}`,
	`{"a":{"x":1,"x":2}}`,
	`{"a":[{"x":1},{"x":1}]}`,
	`{"\u0069d":"a","id":"b"}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"a":19}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19}`,
	`{}`, `[]`, `"s"`, `1`, `{"id":"é\t"}`, `{"id":"x"} `, "{\"id\":\"x\"}\n",
}

// FuzzScanObject: on every payload the fast scanner accepts, the slow path
// (encoding/json's tokens, then its decoder) accepts it too with the same
// members, and every string member reads the same through str's shortcut
// as through encoding/json.
func FuzzScanObject(f *testing.F) {
	for _, s := range seedsScan {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !utf8.Valid(payload) || !json.Valid(payload) {
			return
		}
		fast, ok := scanObject(payload)
		if !ok {
			return
		}
		slow, err := parseObjectSlow(payload)
		if err != nil {
			t.Fatalf("scanObject accepted %q; the slow path refuses it: %v", payload, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: scanObject read %q; the slow path %q", payload, fast, slow)
		}
		for k, raw := range fast {
			if len(raw) == 0 || raw[0] != '"' {
				continue
			}
			got, _, err := fast.str(k)
			var want string
			wantErr := checkEscapes(raw)
			if wantErr == nil {
				wantErr = json.Unmarshal(raw, &want)
			}
			if (err != nil) != (wantErr != nil) || got != want {
				t.Fatalf("%q: member %q reads %q (%v); encoding/json %q (%v)", payload, k, got, err, want, wantErr)
			}
		}
	})
}

// TestScanObjectTakesTheHostsShapes: the scanner reads the host's payloads
// itself (else the speed-up is lost without any test failing), and
// declines what the strict rules refuse.
func TestScanObjectTakesTheHostsShapes(t *testing.T) {
	t.Parallel()
	for _, s := range seedsScan {
		_, ok := scanObject([]byte(s))
		slow, err := parseObjectSlow([]byte(s))
		wantOK := err == nil && !strings.Contains(s, `\u0069`) && slow != nil
		if ok != wantOK {
			t.Errorf("scanObject(%s) ok %v; want %v (slow path: %v)", s, ok, wantOK, err)
		}
	}
}

// The decoders and mend's topic-kind table agree: a topic mend decodes to
// a batch or a build is one it repairs, a request topic is recorded for the
// audit, and a host-handled topic is one mend does not decode.
func TestTopicsMatchKinds(t *testing.T) {
	t.Parallel()
	for topic, spec := range topics {
		want := mend.TopicRepaired
		if spec.kind == KindRequest {
			want = mend.TopicAudit
		}
		if got := mend.KindOfTopic(topic+DLQSuffix, topic); got != want {
			t.Errorf("%s: kind %q; want %q (decoded as %s)", topic, got, want, spec.kind)
		}
	}
	for _, topic := range mend.TopicsOfKind(mend.TopicHost) {
		if _, ok := topics[topic]; ok {
			t.Errorf("%s is host-handled but mend decodes it", topic)
		}
	}
	for _, k := range []mend.TopicKind{mend.TopicRepaired, mend.TopicAudit} {
		for _, topic := range mend.TopicsOfKind(k) {
			if _, ok := topics[topic]; !ok {
				t.Errorf("%s is of kind %s but mend has no decoder for it", topic, k)
			}
		}
	}
}

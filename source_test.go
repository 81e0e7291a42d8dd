package mend_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/mendq/mend"
)

func TestSourceIDValidate(t *testing.T) {
	t.Parallel()
	ok := mend.SourceID{Queue: "monorepo/main", Topic: "speculate_dlq", Partition: "monorepo/main", MessageID: "b1/speculate/1"}
	max := strings.Repeat("😀", 255) // 255 characters, 1020 bytes
	tests := []struct {
		name      string
		mutate    func(*mend.SourceID)
		wantField string // "" means valid
	}{
		{"valid", func(*mend.SourceID) {}, ""},
		{"empty partition is allowed", func(s *mend.SourceID) { s.Partition = "" }, ""},
		{"longest allowed in every field", func(s *mend.SourceID) { *s = mend.SourceID{Queue: max, Topic: max, Partition: max, MessageID: max} }, ""},
		{"empty queue", func(s *mend.SourceID) { s.Queue = "" }, "queue"},
		{"empty topic", func(s *mend.SourceID) { s.Topic = "" }, "topic"},
		{"empty message id", func(s *mend.SourceID) { s.MessageID = "" }, "message_id"},
		{"invalid utf-8 queue", func(s *mend.SourceID) { s.Queue = "q\xff" }, "queue"},
		{"invalid utf-8 partition", func(s *mend.SourceID) { s.Partition = "\xc3\x28" }, "partition"},
		{"256 characters", func(s *mend.SourceID) { s.Topic = strings.Repeat("t", 256) }, "topic"},
		{"1021 bytes", func(s *mend.SourceID) { s.MessageID = strings.Repeat("😀", 255) + "x" }, "message_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := ok
			tt.mutate(&s)
			err := s.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, mend.ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid", err)
			}
			var ve *mend.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.wantField {
				t.Fatalf("Validate() = %v, want a ValidationError for field %q", err, tt.wantField)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("message %q does not name the field", err)
			}
		})
	}
}

func TestSourceIDEncodeDistinguishesFieldBoundaries(t *testing.T) {
	t.Parallel()
	pairs := [][2]mend.SourceID{
		{{Queue: "ab", Topic: "c", MessageID: "m"}, {Queue: "a", Topic: "bc", MessageID: "m"}},
		{{Queue: "q", Topic: "t", Partition: "", MessageID: "pm"}, {Queue: "q", Topic: "t", Partition: "p", MessageID: "m"}},
		{{Queue: "q", Topic: "t", Partition: " ", MessageID: "m"}, {Queue: "q", Topic: "t", Partition: "", MessageID: "m"}},
		{{Queue: "q", Topic: "t\x00", MessageID: "m"}, {Queue: "q", Topic: "t", Partition: "\x00", MessageID: "m"}},
	}
	for _, p := range pairs {
		if bytes.Equal(p[0].Encode(), p[1].Encode()) || p[0].Key() == p[1].Key() {
			t.Errorf("%v and %v encode alike", p[0], p[1])
		}
	}
}

// FuzzSourceIDEncodeInjective checks that two different SourceIDs never share
// an encoding, by decoding the encoding back: a decodable, length-prefixed
// encoding is injective.
func FuzzSourceIDEncodeInjective(f *testing.F) {
	f.Add("q", "t", "", "m", "q", "t", " ", "m")
	f.Add("ab", "c", "", "m", "a", "bc", "", "m")
	f.Add("a", "A", "a ", "é", "a", "a", "a", "e\u0301")
	f.Add("\x00\x00\x00\x01", "x", "", "y", "", "\x01x", "", "y")
	f.Fuzz(func(t *testing.T, q1, t1, p1, m1, q2, t2, p2, m2 string) {
		a := mend.SourceID{Queue: q1, Topic: t1, Partition: p1, MessageID: m1}
		b := mend.SourceID{Queue: q2, Topic: t2, Partition: p2, MessageID: m2}
		if got := decodeSource(t, a.Encode()); got != a {
			t.Fatalf("decode(encode(%v)) = %v", a, got)
		}
		if a != b && bytes.Equal(a.Encode(), b.Encode()) {
			t.Fatalf("%v and %v encode alike", a, b)
		}
	})
}

// decodeSource inverts SourceID.Encode; it exists only to prove injectivity.
func decodeSource(t *testing.T, b []byte) mend.SourceID {
	t.Helper()
	const tag = "mend.source.v1"
	if !bytes.HasPrefix(b, []byte(tag)) {
		t.Fatalf("encoding lacks the version tag")
	}
	b = b[len(tag):]
	var fields [4]string
	for i := range fields {
		if len(b) < 4 {
			t.Fatalf("field %d: truncated length", i)
		}
		n := int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])
		b = b[4:]
		if len(b) < n {
			t.Fatalf("field %d: truncated value", i)
		}
		fields[i], b = string(b[:n]), b[n:]
	}
	if len(b) != 0 {
		t.Fatalf("%d trailing bytes", len(b))
	}
	return mend.SourceID{Queue: fields[0], Topic: fields[1], Partition: fields[2], MessageID: fields[3]}
}

func TestRecordIDText(t *testing.T) {
	t.Parallel()
	id := mend.NewRecordID()
	if id.IsZero() || id == mend.NewRecordID() {
		t.Fatalf("NewRecordID gave zero or repeated ids")
	}
	got, err := mend.ParseRecordID(id.String())
	if err != nil || got != id {
		t.Fatalf("ParseRecordID(%q) = %v, %v; want %v", id.String(), got, err, id)
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("g", 32), id.String() + "0"} {
		if _, err := mend.ParseRecordID(bad); !errors.Is(err, mend.ErrInvalid) {
			t.Errorf("ParseRecordID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestValidateOpID(t *testing.T) {
	t.Parallel()
	if err := mend.ValidateOpID(mend.NewOpID()); err != nil {
		t.Fatalf("NewOpID is invalid: %v", err)
	}
	for _, bad := range []string{"", "has space", strings.Repeat("a", 65), "é"} {
		if err := mend.ValidateOpID(bad); !errors.Is(err, mend.ErrInvalid) {
			t.Errorf("ValidateOpID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want mend.Class
	}{
		{nil, mend.ClassNone},
		{mend.ErrConflict, mend.ClassRetryable},
		{mend.ErrBusy, mend.ClassRetryable},
		{mend.ErrUnavailable, mend.ClassRetryable},
		{&mend.AmbiguousError{OpID: "x", Err: errors.New("eof")}, mend.ClassAmbiguous},
		{mend.ErrFenced, mend.ClassFenced},
		// Fencing wins even when something else is wrapped alongside.
		{errors.Join(mend.ErrConflict, mend.ErrFenced), mend.ClassFenced},
		{mend.ErrLeaseLost, mend.ClassFenced},
		{mend.ErrNotFound, mend.ClassPermanent},
		{&mend.ValidationError{Field: "f", Reason: "r"}, mend.ClassPermanent},
		{errors.New("unknown"), mend.ClassPermanent},
	}
	for _, tt := range tests {
		if got := mend.Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if mend.IsRetryable(mend.ErrFenced) {
		t.Errorf("a fenced error must never be retryable")
	}
}

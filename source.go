package mend

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Limits on identity fields. They mirror the host message table, whose identity
// columns are VARCHAR(255) utf8mb4: at most 255 characters and, since a
// character takes up to four bytes there, at most 1020 bytes.
const (
	MaxIdentityChars = 255
	MaxIdentityBytes = 1020
)

// SourceID names a dead-lettered message exactly: the queue it belongs to and
// the message queue's own identity of the message (topic, partition key and
// message ID). Two SourceIDs are the same only when every field is the same
// byte sequence; no case folding, trimming or Unicode normalisation is applied
// anywhere.
type SourceID struct {
	Queue     string
	Topic     string
	Partition string
	MessageID string
}

// Validate reports the first field that cannot be stored exactly. It returns a
// *ValidationError (which matches ErrInvalid) naming the field.
//
// Queue, Topic and MessageID must be non-empty; Partition may be empty. Every
// field must be valid UTF-8 of at most MaxIdentityChars characters and
// MaxIdentityBytes bytes.
func (s SourceID) Validate() error {
	for _, f := range []struct {
		name     string
		value    string
		required bool
	}{
		{"queue", s.Queue, true},
		{"topic", s.Topic, true},
		{"partition", s.Partition, false},
		{"message_id", s.MessageID, true},
	} {
		if err := ValidateIdentity(f.name, f.value, f.required); err != nil {
			return err
		}
	}
	return nil
}

// ValidateIdentity checks one identity value (a queue, topic, partition key,
// message ID or batch ID) against the rules of SourceID.Validate. field names
// the value in the returned *ValidationError.
func ValidateIdentity(field, value string, required bool) error {
	switch {
	case value == "" && required:
		return &ValidationError{Field: field, Reason: "must not be empty"}
	case len(value) > MaxIdentityBytes:
		return &ValidationError{Field: field, Reason: fmt.Sprintf("is %d bytes; at most %d are allowed", len(value), MaxIdentityBytes)}
	case !utf8.ValidString(value):
		return &ValidationError{Field: field, Reason: "is not valid UTF-8"}
	}
	if n := utf8.RuneCountInString(value); n > MaxIdentityChars {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("is %d characters; at most %d are allowed", n, MaxIdentityChars)}
	}
	return nil
}

// sourceEncodingTag versions the canonical encoding. Changing the encoding
// would change every source key, so it is part of the hashed bytes.
const sourceEncodingTag = "mend.source.v1"

// Encode returns the canonical encoding of s: a version tag followed by each
// field, in a fixed order, as a 4-byte big-endian length and the field's bytes.
// The length prefixes make the encoding injective: no two different SourceIDs
// encode alike, whatever bytes the fields contain.
func (s SourceID) Encode() []byte {
	fields := [...]string{s.Queue, s.Topic, s.Partition, s.MessageID}
	n := len(sourceEncodingTag)
	for _, f := range fields {
		n += 4 + len(f)
	}
	buf := make([]byte, 0, n)
	buf = append(buf, sourceEncodingTag...)
	for _, f := range fields {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

// SourceKey is the SHA-256 of a SourceID's canonical encoding. Together with
// the queue it is the unique key of a record: a fixed 32 bytes keeps the index
// small and portable, while the verbatim columns stored beside it are compared
// byte for byte on every read.
type SourceKey [32]byte

// Key returns the source key of s.
func (s SourceID) Key() SourceKey {
	return sha256.Sum256(s.Encode())
}

// String renders s for logs and error messages, quoting each field so that
// empty values and surrounding spaces stay visible.
func (s SourceID) String() string {
	return fmt.Sprintf("queue=%q topic=%q partition=%q message_id=%q", s.Queue, s.Topic, s.Partition, s.MessageID)
}

package storage

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/mendq/mend"
)

// MinRecordPrefix is the shortest record-ID prefix RecordFindPrefix takes,
// as git's shortest abbreviation.
const MinRecordPrefix = 4

// The primary key's range scan: at most two rows, to tell one from many.
const sqlRecordPrefix = `-- name: RecordPrefix
SELECT record_id FROM mend_records WHERE record_id BETWEEN ? AND ? ORDER BY record_id LIMIT 2`

// RecordFindPrefix returns the record whose ID starts with prefix (hex, at
// least MinRecordPrefix characters; a full ID works too), as git finds a
// commit by an abbreviated hash.
//
// Returns ErrNotFound if no record matches, ErrInvalid if more than one
// does (the error names two: give more characters), or for a prefix
// that is not hex or too short or long.
func (d *DB) RecordFindPrefix(ctx context.Context, prefix string) (mend.Record, error) {
	var id mend.RecordID
	prefix = strings.ToLower(prefix)
	if len(prefix) < MinRecordPrefix || len(prefix) > 2*len(id) {
		return mend.Record{}, &mend.ValidationError{Field: "record_id",
			Reason: fmt.Sprintf("give %d to %d hex characters of a record ID, got %d", MinRecordPrefix, 2*len(id), len(prefix))}
	}
	lo, err1 := hex.DecodeString(padHex(prefix, '0', 2*len(id)))
	hi, err2 := hex.DecodeString(padHex(prefix, 'f', 2*len(id)))
	if err1 != nil || err2 != nil {
		return mend.Record{}, &mend.ValidationError{Field: "record_id", Reason: fmt.Sprintf("%q is not hex", prefix)}
	}
	var ids [][]byte
	if err := d.db.SelectContext(ctx, &ids, sqlRecordPrefix, lo, hi); err != nil {
		return mend.Record{}, fmt.Errorf("storage: find record by prefix: %w", translate(err))
	}
	switch len(ids) {
	case 0:
		return mend.Record{}, fmt.Errorf("storage: find record: %w: no record ID starts with %s (it may have been pruned)", mend.ErrNotFound, prefix)
	case 1:
		copy(id[:], ids[0])
		return d.RecordFind(ctx, id)
	}
	return mend.Record{}, &mend.ValidationError{Field: "record_id",
		Reason: fmt.Sprintf("prefix %s is ambiguous: %x, %x, ...; give more characters", prefix, ids[0], ids[1])}
}

func padHex(prefix string, fill byte, n int) string {
	return prefix + strings.Repeat(string(fill), n-len(prefix))
}

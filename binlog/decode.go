package binlog

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/mendq/mend/dlq"
)

// ErrColumns means a row of queue_messages could not be matched to its
// columns: it has a different number of columns than the table has now and
// the log carries no column names. Setting binlog_row_metadata=FULL on the
// server puts the names in the log; the reader then decodes rows written
// before and after a change of the table alike.
var ErrColumns = errors.New("binlog: the row's columns are not the table's")

// columnNames are the names of the columns of tm's rows, in order: from the
// log itself where the server writes them (binlog_row_metadata=FULL), else
// from the table as it is now, which is right only when it has as many
// columns as the row (a column added since the row was written, with the
// reader behind, is refused with ErrColumns rather than guessed).
func (t *term) columnNames(ctx context.Context, tm *replication.TableMapEvent) ([]string, error) {
	if names := tm.ColumnNameString(); len(names) == int(tm.ColumnCount) {
		return names, nil
	}
	if cols, ok := t.columns[tm.TableID]; ok {
		return cols, nil
	}
	rows, err := t.db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`,
		string(tm.Schema), string(tm.Table))
	if err != nil {
		return nil, fmt.Errorf("binlog: read the columns of %s.%s: %w", tm.Schema, tm.Table, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cols) != int(tm.ColumnCount) {
		return nil, fmt.Errorf("%w: the log has rows of %d columns for %s.%s, the table has %d now (changed since they were written), and the server logs no column names: "+
			"the reader stops here rather than guess (the position is kept, nothing is skipped). SET PERSIST binlog_row_metadata=FULL (MariaDB: SET GLOBAL, and the config file) so later rows carry their names; "+
			"rows already logged without them can only be read again from the tables: delete the reader's row from mend_binlog_positions and it starts over (imports what queue_messages holds, then reads from the current file)",
			ErrColumns, tm.ColumnCount, tm.Schema, tm.Table, len(cols))
	}
	t.columns[tm.TableID] = cols
	return cols, nil
}

// decodeRow makes a dlq.Row of one inserted row's values. Columns it does
// not know (added by the host) are ignored; a column it needs that is
// missing, or of a type it cannot read, is an error.
func decodeRow(cols []string, vals []any) (dlq.Row, error) {
	var r dlq.Row
	var have int
	for i, name := range cols {
		if i >= len(vals) {
			break
		}
		v := vals[i]
		var err error
		switch name {
		case "offset":
			r.Offset, err = toUint(v)
		case "topic":
			r.Topic, err = toString(v)
		case "partition_key":
			r.PartitionKey, err = toString(v)
		case "id":
			r.ID, err = toString(v)
		case "payload":
			r.Payload, err = toBytes(v)
		case "metadata":
			r.Metadata, err = toBytes(v)
		case "failed_at":
			r.FailedAtMS, err = toUint(v)
		case "failure_count":
			var n uint64
			n, err = toUint(v)
			r.FailureCount = uint32(min(n, math.MaxUint32))
		case "last_error":
			r.LastError, err = toString(v)
		case "original_topic":
			r.OriginalTopic, err = toString(v)
		case "failure_detail":
			r.FailureDetail, err = toBytes(v)
		default:
			continue
		}
		if err != nil {
			return r, fmt.Errorf("column %s: %w", name, err)
		}
		have++
	}
	if have < 11 {
		return r, fmt.Errorf("%w: %d of queue_messages' 11 columns mend reads were found among %v", ErrColumns, have, cols)
	}
	return r, nil
}

func toString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("a %T where text was expected", v)
}

func toBytes(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return append([]byte(nil), x...), nil
	case string:
		return []byte(x), nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("a %T where bytes were expected", v)
}

// toUint reads an unsigned integer column. The log carries no signedness
// without full metadata, so a BIGINT UNSIGNED past 2^63 arrives negative:
// its bits are the value's.
func toUint(v any) (uint64, error) {
	switch x := v.(type) {
	case int8:
		return uint64(uint8(x)), nil
	case int16:
		return uint64(uint16(x)), nil
	case int32:
		return uint64(uint32(x)), nil
	case int64:
		return uint64(x), nil
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int:
		return uint64(x), nil
	case nil:
		return 0, nil
	}
	return 0, fmt.Errorf("a %T where an integer was expected", v)
}

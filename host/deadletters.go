package host

// This file reads what mend import needs from a live submit queue: the
// dead-letter rows already sitting in the queue database. (The build lookup
// a buildsignal dead letter needs is DB.BuildBatch.)

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqlx"
)

// DeadLetterPageLimit bounds one page of DeadLetters.Page.
const DeadLetterPageLimit = 10000

// DeadLetters reads final dead letters (rows whose topic ends in _dlq) from
// the host's queue_messages table, in offset order, a page at a time. It
// only reads; acknowledging and garbage-collecting DLQ rows stays the host's
// business.
type DeadLetters struct{ db *sql.DB }

// OpenDeadLetters connects to the host's queue database (a go-sql-driver
// DSN naming it) and checks that it answers. Its sessions are mend's, as
// Open's are (the same refusals); it only reads, so its lock waits are the
// server's.
func OpenDeadLetters(ctx context.Context, queueDSN string) (*DeadLetters, error) {
	db, err := openPool(ctx, mysqlx.Pool{Field: "queue_dsn"}, queueDSN)
	if err != nil {
		return nil, err
	}
	return &DeadLetters{db: db}, nil
}

// Close closes the connection pool.
func (d *DeadLetters) Close() error { return d.db.Close() }

// DB is the pool, with mend's session settings, for other reads of the
// queue database (the binary-log reader's reads of the server's state).
func (d *DeadLetters) DB() *sql.DB { return d.db }

// DeadLetterFilter narrows DeadLetters.Page. The zero value reads every
// dead letter.
type DeadLetterFilter struct {
	// Topic is one DLQ topic, with its _dlq suffix (e.g. "speculate_dlq").
	// Empty means every topic ending in _dlq.
	Topic string
	// FailedSinceMS keeps rows whose failed_at (epoch milliseconds, the
	// host's clock) is at or after it. Zero keeps every row.
	FailedSinceMS uint64
}

// DeadLetterPage is one page of dead letters.
type DeadLetterPage struct {
	Rows []dlq.Row
	// Next is the offset to read after for the next page.
	Next uint64
	// Done reports that no row past Next matched when the page was read.
	Done bool
}

// The topic filter is RIGHT(topic, 4) rather than LIKE '%\_dlq', whose
// escape character depends on the server's sql_mode. Both statements scan
// the primary key from the cursor on; the per-topic one can also use
// (topic, partition_key, offset). `offset` is quoted: it is a reserved word
// on MariaDB.
const sqlDeadLettersPage = "-- name: DeadLettersPage\n" +
	"SELECT `offset`, topic, partition_key, id, payload, metadata, failed_at, failure_count, last_error, original_topic, failure_detail\n" +
	"FROM queue_messages\n" +
	"WHERE `offset` > ? AND RIGHT(topic, 4) = '_dlq' AND failed_at >= ?\n" +
	"ORDER BY `offset` LIMIT ?"

const sqlDeadLettersPageTopic = "-- name: DeadLettersPageTopic\n" +
	"SELECT `offset`, topic, partition_key, id, payload, metadata, failed_at, failure_count, last_error, original_topic, failure_detail\n" +
	"FROM queue_messages\n" +
	"WHERE topic = ? AND `offset` > ? AND failed_at >= ?\n" +
	"ORDER BY `offset` LIMIT ?"

// Page returns up to limit dead letters with an offset above after, in
// offset order. Pass the returned Next as after to continue; stop when Done.
// The table's collation pads spaces, so rows are checked byte for byte in Go
// as well: a page may hold fewer rows than limit while not Done.
//
// Returns a *mend.ValidationError for a limit outside 1..DeadLetterPageLimit
// or a topic that is not a DLQ topic, before any SQL.
func (d *DeadLetters) Page(ctx context.Context, f DeadLetterFilter, after uint64, limit int) (DeadLetterPage, error) {
	if limit < 1 || limit > DeadLetterPageLimit {
		return DeadLetterPage{}, &mend.ValidationError{Field: "page size", Reason: fmt.Sprintf("must be 1 to %d, got %d", DeadLetterPageLimit, limit)}
	}
	if f.Topic != "" {
		if err := mend.ValidateIdentity("topic", f.Topic, true); err != nil {
			return DeadLetterPage{}, err
		}
		if !strings.HasSuffix(f.Topic, dlq.DLQSuffix) {
			return DeadLetterPage{}, &mend.ValidationError{Field: "topic", Reason: fmt.Sprintf("%q is not a dead-letter topic (it must end in %s)", f.Topic, dlq.DLQSuffix)}
		}
	}
	var rows *sql.Rows
	var err error
	if f.Topic == "" {
		rows, err = d.db.QueryContext(ctx, sqlDeadLettersPage, after, f.FailedSinceMS, limit)
	} else {
		rows, err = d.db.QueryContext(ctx, sqlDeadLettersPageTopic, f.Topic, after, f.FailedSinceMS, limit)
	}
	if err != nil {
		return DeadLetterPage{}, fmt.Errorf("host: read dead letters: %w", mysqlx.Translate(err))
	}
	defer rows.Close()
	page := DeadLetterPage{Next: after}
	n := 0
	for rows.Next() {
		var r dlq.Row
		if err := rows.Scan(&r.Offset, &r.Topic, &r.PartitionKey, &r.ID, &r.Payload, &r.Metadata, &r.FailedAtMS,
			&r.FailureCount, &r.LastError, &r.OriginalTopic, &r.FailureDetail); err != nil {
			return DeadLetterPage{}, fmt.Errorf("host: read dead letters: %w", err)
		}
		n++
		page.Next = r.Offset
		if !strings.HasSuffix(r.Topic, dlq.DLQSuffix) || (f.Topic != "" && r.Topic != f.Topic) {
			continue // matched only through PAD SPACE
		}
		page.Rows = append(page.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return DeadLetterPage{}, fmt.Errorf("host: read dead letters: %w", mysqlx.Translate(err))
	}
	page.Done = n < limit
	return page, nil
}

package storage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
)

// Bounds of one statement of RecordCreateMany: a chunk of rows is one
// packet, kept well under max_allowed_packet (16 MiB by default on MariaDB,
// 64 MiB on MySQL 8).
const (
	createManyRows  = 500
	createManyBytes = 4 << 20
)

// A chunk's rows take their times from @mend_now, set to NOW(6) once per
// chunk: every row and its created event then carry the same time, which
// the client reads back once instead of reading the rows.
const (
	createManyNow = "SET @mend_now = NOW(6);\n"
	createManyRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 0, IF(?, @mend_now, NULL), ?, 0, @mend_now, @mend_now, @mend_now)`
)

// createManyCount answers how many rows the chunk's insert created
// (ROW_COUNT() counts 1 per inserted row and 0 per duplicate, which the
// no-op ODKU leaves unchanged), the time they carry, and their state age.
const createManyCount = `SELECT ROW_COUNT() AS created, CAST(@mend_now AS DATETIME(6)) AS now, TIMESTAMPDIFF(MICROSECOND, @mend_now, NOW(6)) AS age_us`

// createManyEventsAll inserts a created event for every row of the chunk,
// as if the insert created them all (the common case: a backlog of new dead
// letters), after a savepoint: when the count says some row was a
// duplicate, the client rolls back to the savepoint and inserts the events
// with createManyEvents instead. Each event carries what the joined insert
// would copy from its new row (eventProjectionFrom): the row's time, state,
// zero attempts, last error (the reason) and next attempt.
const (
	createManySavepoint  = "SAVEPOINT mend_created;\n"
	createManyEventsAll  = `INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, ` + eventProjection + `) VALUES `
	createManyEventsRow  = `(?, 1, ?, 'created', 0, ?, ?, ?, @mend_now, ?, 0, ?, IF(?, @mend_now, NULL))`
	createManyEventsUndo = "ROLLBACK TO SAVEPOINT mend_created;\n"
)

// createManyEvents inserts the created event of every row of the chunk
// that carries a record ID this call minted: those, and only those, are
// the rows it inserted (a duplicate kept the first writer's row and ID).
// The caller appends the derived table's rows and the closing join.
const createManyEvents = `INSERT INTO mend_events (record_id, seq, queue, kind, epoch, actor, op_id, data, ` + eventProjection + `)
SELECT r.record_id, 1, r.queue, 'created', 0, v.actor, v.op_id, v.data, ` + eventProjectionFrom + `
FROM (`

const createManyEventsFirst = `SELECT ? AS record_id, ? AS actor, ? AS op_id, ? AS data`

const createManyEventsNext = `
	UNION ALL SELECT ?, ?, ?, ?`

const createManyEventsJoin = `) v JOIN mend_records r ON r.record_id = v.record_id`

const createManyRead = `SELECT ` + recordColumns + ` FROM mend_records WHERE `

// RecordCreateMany is RecordCreate for many records in one transaction: per
// chunk of up to createManyRows rows and createManyBytes bytes, one packet
// (a multi-row INSERT ... ON DUPLICATE KEY UPDATE, the count of rows it
// inserted, their created events), a second one only when some row
// existed (see createChunk), and one COMMIT for the lot. It returns one
// result per item of ps, in order.
//
// Through vtgate (Vitess), where a transaction must stay on one shard, each
// shard's items are one transaction instead (vtgate names each queue's
// shard under mend's vindex, in one round trip that no tablet serves; when
// it cannot, each queue's items are one): an error can then leave some
// shards' records created and others not, which a retry of the whole batch
// repairs (creation is idempotent per source identity).
//
// Every item gets RecordCreate's guarantees: the first writer's record is
// kept and returned, a record gets exactly one created event, and the
// stored identity is compared with the asked one byte for byte. Items that
// name the same source identity are recorded once; the first of them
// reports Created, the others return the same record with Created false.
// An item that fails validation, or whose op ID an earlier item of the
// batch already uses, gets its *mend.ValidationError in its result before
// anything is sent; an identity mismatch is likewise the item's own
// error. Neither affects the other items.
//
// An op ID some earlier operation wrote fails the batch's event insert as a
// whole; the batch is then rolled back and its items created one by one
// (RecordCreate each), so the refusal lands on the item that owns it.
//
// The error result is for the batch as a whole: mend.ErrBusy,
// mend.ErrUnavailable (nothing was written) or a *mend.AmbiguousError
// (naming the first item's op ID; creating the batch again is safe and
// returns the records either way). Item results are then meaningless.
func (d *DB) RecordCreateMany(ctx context.Context, ps []CreateParams) ([]mend.CreateResult, error) {
	results := make([]mend.CreateResult, len(ps))
	type item = manyItem
	var items []*item
	bySource := map[string]*item{}
	opIDs := map[string]bool{}
	for i, p := range ps {
		if err := validateCreate(&p, d.maxPayload); err != nil {
			results[i].Err = err
			continue
		}
		key := p.Source.Key()
		src := p.Source.Queue + "\x00" + string(key[:])
		if it := bySource[src]; it != nil {
			it.dups = append(it.dups, i)
			continue
		}
		if opIDs[p.Source.Queue+"\x00"+p.OpID] {
			results[i].Err = opIDUsed(p.OpID, p.Source.Queue)
			continue
		}
		c, err := prepareCreate(p)
		if err != nil {
			results[i].Err = err
			continue
		}
		it := &item{c: c, idx: i}
		items = append(items, it)
		bySource[src] = it
		opIDs[p.Source.Queue+"\x00"+p.OpID] = true
	}
	if len(items) == 0 {
		return results, nil
	}
	// One lock order for every batch: concurrent batches over the same
	// sources then queue behind each other instead of deadlocking.
	slices.SortFunc(items, func(a, b *item) int {
		return cmp.Or(strings.Compare(a.c.p.Source.Queue, b.c.p.Source.Queue), bytes.Compare(a.c.key[:], b.c.key[:]))
	})
	out := make([]mend.CreateResult, len(items))
	pos := make(map[*item]int, len(items))
	for i, it := range items {
		pos[it] = i
	}
	// Through vtgate every transaction must stay on one shard, so each
	// shard's items are a transaction of their own (each queue's items on
	// one shard, the queues in order); elsewhere the whole batch is one.
	groups := [][]*item{items}
	if d.vtgate {
		groups = d.groupByShard(ctx, items)
	}
	for _, group := range groups {
		var chunks [][]*item
		for start := 0; start < len(group); {
			end, size := start, 0
			for end < len(group) && end-start < createManyRows && (end == start || size+group[end].c.size() <= createManyBytes) {
				size += group[end].c.size()
				end++
			}
			chunks = append(chunks, group[start:end])
			start = end
		}
		err := d.withBatchTx(ctx, "RecordCreateMany", group[0].c.p.OpID, func(ctx context.Context, tx *batchTx) error {
			for n, chunk := range chunks {
				create := d.createChunk
				if d.vtgate {
					create = d.createChunkJoined
				}
				res, err := create(ctx, tx, n == 0, chunk)
				if err != nil {
					return err
				}
				for i, it := range chunk {
					out[pos[it]] = res[i]
				}
			}
			return nil
		})
		if errors.Is(err, errOpIDTaken) {
			for _, it := range group {
				rec, created, err := d.RecordCreate(ctx, it.c.p)
				if err != nil && !errors.Is(err, mend.ErrInvalid) && !errors.Is(err, mend.ErrIdentityMismatch) {
					return nil, err
				}
				out[pos[it]] = mend.CreateResult{Record: rec, Created: created, Err: err}
			}
			err = nil
		}
		if err != nil {
			return nil, fmt.Errorf("storage: create %d records: %w", len(group), err)
		}
	}
	for i, it := range items {
		results[it.idx] = out[i]
		for _, j := range it.dups {
			results[j] = mend.CreateResult{Record: out[i].Record, Err: out[i].Err}
		}
	}
	return results, nil
}

// manyItem is one distinct source of a RecordCreateMany batch.
type manyItem struct {
	c    createArgs
	idx  int   // first index in ps
	dups []int // later indexes naming the same source
}

// errOpIDTaken: an op ID of the batch was written by an earlier operation.
var errOpIDTaken = errors.New("an op id of the batch is already used")

// createChunk creates a chunk's records in one packet, opening the
// transaction when first: the insert, the count of rows it created, and
// the created events of every row after a savepoint. When the insert
// created every row, the results are built from what was sent, the
// records' IDs (minted here) and the time read back: the rows hold exactly
// those values (byte-exact columns; see createArgs.record), so neither the
// rows nor their identities need reading. Otherwise a second packet rolls
// back to the savepoint, inserts the events of the rows whose minted IDs
// exist (createManyEvents), and reads every row of the chunk back, as
// createChunkJoined does.
func (d *DB) createChunk(ctx context.Context, tx *batchTx, first bool, chunk []*manyItem) ([]mend.CreateResult, error) {
	ids := make([]mend.RecordID, len(chunk))
	for i := range ids {
		ids[i] = mend.NewRecordID()
	}
	var q strings.Builder
	q.Grow(len(chunk)*(len(createManyRow)+len(createManyEventsRow)+4) + 1024)
	args := make([]any, 0, len(chunk)*(17+8))
	q.WriteString("-- name: RecordCreateMany\n")
	if first {
		q.WriteString("START TRANSACTION;\n")
	}
	q.WriteString(createManyNow + recordInsert)
	for i, it := range chunk {
		if i > 0 {
			q.WriteString(",\n")
		}
		q.WriteString(createManyRow)
		args = append(args, it.c.rowArgs(ids[i])...)
	}
	q.WriteString(recordInsertODKU + ";\n" + createManyCount + ";\n" + createManySavepoint + createManyEventsAll)
	for i, it := range chunk {
		if i > 0 {
			q.WriteString(",\n")
		}
		q.WriteString(createManyEventsRow)
		p := &it.c.p
		args = append(args, ids[i][:], p.Source.Queue, p.Actor, p.OpID, it.c.data, string(p.State), p.Reason, p.State.Due())
	}
	var count struct {
		Created int64     `db:"created"`
		Now     time.Time `db:"now"`
		AgeUS   int64     `db:"age_us"`
	}
	err := tx.query(ctx, q.String(), args, scanOne(&count))
	if mysqlErrNumber(err) == errDupEntry {
		// The record IDs are new, so the duplicate is an op ID some
		// earlier operation wrote.
		return nil, errOpIDTaken
	}
	if err != nil {
		return nil, fmt.Errorf("create records: %w", err)
	}
	if count.Created != int64(len(chunk)) {
		return d.createChunkRead(ctx, tx, createManyEventsUndo, chunk, ids)
	}
	out := make([]mend.CreateResult, len(chunk))
	age := time.Duration(count.AgeUS) * time.Microsecond
	for i, it := range chunk {
		rec, err := it.c.record(ids[i], count.Now, age)
		if err != nil {
			return nil, err
		}
		out[i] = mend.CreateResult{Record: rec, Created: true}
	}
	return out, nil
}

// createChunkJoined creates a chunk's records in one packet, opening the
// transaction when first: the insert, the created events of the rows it
// inserted (createManyEvents), and the read back of every row. It is the
// statement set through vtgate, where a transaction stays on one shard:
// every statement that reads mend_records names the chunk's queues, so
// vtgate routes it by the sharding key.
func (d *DB) createChunkJoined(ctx context.Context, tx *batchTx, first bool, chunk []*manyItem) ([]mend.CreateResult, error) {
	ids := make([]mend.RecordID, len(chunk))
	var q strings.Builder
	var args []any
	if first {
		q.WriteString("START TRANSACTION;\n")
	}
	q.WriteString(recordInsert)
	for i, it := range chunk {
		ids[i] = mend.NewRecordID()
		if i > 0 {
			q.WriteString(",\n")
		}
		q.WriteString(recordInsertRow)
		args = append(args, it.c.rowArgs(ids[i])...)
	}
	q.WriteString(recordInsertODKU + ";\n")
	return d.createChunkRead(ctx, tx, q.String(), chunk, ids, args...)
}

// createChunkRead sends head (with its args) followed by the created
// events of the chunk's rows that carry their minted ID and the read back
// of every row, and answers each item from the row read: Created when the
// row carries the item's minted ID, the identity compared byte for byte.
func (d *DB) createChunkRead(ctx context.Context, tx *batchTx, head string, chunk []*manyItem, ids []mend.RecordID, args ...any) ([]mend.CreateResult, error) {
	var q strings.Builder
	q.WriteString("-- name: RecordCreateMany\n" + head + createManyEvents)
	for i, it := range chunk {
		if i == 0 {
			q.WriteString(createManyEventsFirst)
		} else {
			q.WriteString(createManyEventsNext)
		}
		args = append(args, ids[i][:], it.c.p.Actor, it.c.p.OpID, it.c.data)
	}
	// Both statements that read mend_records name the chunk's queues, so
	// vtgate routes them by the sharding key.
	var queues []any // the chunk's distinct queues (it is sorted by queue)
	for i, it := range chunk {
		if i == 0 || it.c.p.Source.Queue != chunk[i-1].c.p.Source.Queue {
			queues = append(queues, it.c.p.Source.Queue)
		}
	}
	q.WriteString(createManyEventsJoin + " WHERE r.queue IN (" + placeholders(len(queues)) + ");\n" + createManyRead)
	args = append(args, queues...)
	q.WriteString("queue IN (" + placeholders(len(queues)) + ") AND (")
	args = append(args, queues...)
	for i, it := range chunk {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(queue = ? AND source_key = ?)")
		args = append(args, it.c.p.Source.Queue, it.c.key[:])
	}
	q.WriteString(")")
	read := map[string]recordRow{}
	err := tx.query(ctx, q.String(), args, func(rows *sqlx.Rows) error {
		for rows.Next() {
			var row recordRow
			if err := rows.StructScan(&row); err != nil {
				return err
			}
			read[string(row.Queue)+"\x00"+string(row.SourceKey)] = row
		}
		return nil
	})
	if mysqlErrNumber(err) == errDupEntry {
		return nil, errOpIDTaken // as in createChunk
	}
	if err != nil {
		return nil, fmt.Errorf("create records: %w", err)
	}
	out := make([]mend.CreateResult, len(chunk))
	for i, it := range chunk {
		row, ok := read[it.c.p.Source.Queue+"\x00"+string(it.c.key[:])]
		if !ok {
			return nil, fmt.Errorf("read back: %w: no record for %s after the insert", mend.ErrNotFound, it.c.p.Source)
		}
		if err := row.checkIdentity(it.c.p.Source); err != nil {
			out[i].Err = fmt.Errorf("storage: create record: %w", err)
			continue
		}
		rec, err := row.record()
		if err != nil {
			return nil, fmt.Errorf("read back: %w", err)
		}
		out[i].Record, out[i].Created = rec, rec.ID == ids[i]
	}
	return out, nil
}

package storage

import (
	"context"
	"fmt"
)

// freshRead is a Vitess query directive placed after the SELECT keyword of
// every read whose answer mend relies on outside a transaction (a record,
// its history, a lease, the due listing). vttablet's query consolidator,
// on by default, hands a read the result of an identical read already in
// flight, which can predate a write that committed before the second read
// began: a stale read, and the record store would not be linearizable.
// The directive turns the consolidator off for that statement alone, so
// mend does not depend on the tablets' --enable-consolidator flag, which a
// user of hosted Vitess may not be able to set. MySQL and MariaDB read it
// as a plain comment.
const freshRead = "/*vt+ CONSOLIDATOR=disabled */ "

// queueVindex is the vindex migrations/vschema.json shards mend's tables by.
const queueVindex = "queue_xxhash"

// sqlQueueShards asks vtgate which shard each queue lands on: vtgate
// answers a query of a functional vindex as a table, computing the answer
// itself (no tablet is asked). The IN list is a tuple of the queues.
const sqlQueueShards = `-- name: QueueShards
SELECT id, shard FROM ` + queueVindex + ` WHERE id IN (%s)`

// queueShards returns the shard of each of queues under mend's vindex, as
// vtgate computes it now, so a batch of writes can be split into one
// transaction per shard. The answer is asked per call rather than kept: a
// reshard changes it, and vtgate answers from memory in one round trip.
// An error (a vschema without mend's vindex, an older vtgate) is returned
// for the caller to fall back to one transaction per queue.
func (d *DB) queueShards(ctx context.Context, queues []string) (map[string]string, error) {
	args := make([]any, len(queues))
	for i, q := range queues {
		args[i] = q
	}
	rows, err := d.db.QueryContext(ctx, fmt.Sprintf(sqlQueueShards, placeholders(len(queues))), args...)
	if err != nil {
		return nil, fmt.Errorf("storage: shards of %d queues: %w", len(queues), err)
	}
	defer rows.Close()
	shards := make(map[string]string, len(queues))
	for rows.Next() {
		var id []byte
		var shard string
		if err := rows.Scan(&id, &shard); err != nil {
			return nil, fmt.Errorf("storage: shards of %d queues: %w", len(queues), err)
		}
		shards[string(id)] = shard
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: shards of %d queues: %w", len(queues), err)
	}
	for _, q := range queues {
		if shards[q] == "" {
			return nil, fmt.Errorf("storage: shards of %d queues: vtgate named no shard for queue %q", len(queues), q)
		}
	}
	return shards, nil
}

// groupByShard splits items, sorted by queue, into one group per shard
// (each group keeps the queue order, so concurrent batches still take
// their locks in one order), or per queue when the shards cannot be had.
func (d *DB) groupByShard(ctx context.Context, items []*manyItem) [][]*manyItem {
	var queues []string
	for i, it := range items {
		if i == 0 || it.c.p.Source.Queue != items[i-1].c.p.Source.Queue {
			queues = append(queues, it.c.p.Source.Queue)
		}
	}
	var shards map[string]string
	if len(queues) > 1 {
		var err error
		if shards, err = d.queueShards(ctx, queues); err != nil {
			shards = nil // one transaction per queue: always on one shard
		}
	}
	key := func(it *manyItem) string {
		if shards == nil {
			return "queue\x00" + it.c.p.Source.Queue
		}
		return shards[it.c.p.Source.Queue]
	}
	var order []string
	byKey := map[string][]*manyItem{}
	for _, it := range items {
		k := key(it)
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], it)
	}
	groups := make([][]*manyItem, 0, len(order))
	for _, k := range order {
		groups = append(groups, byKey[k])
	}
	return groups
}

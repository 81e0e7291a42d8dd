package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mendq/mend"
)

// The topics whose messages lead, through the real orchestrator's
// controllers (snapshot cfeea0d9), to a run of a queue's speculate
// consumer, and so count as "in flight" for the stuck-queue scan while a
// consumer group has not acknowledged them:
//
//	speculate                 the planner itself
//	dependency-analysis       publishes speculate <batch> once a batch is created
//	batch, start, validate,   the request pipeline: ends in a new batch and
//	merge-conflict-check(-signal)  dependency-analysis (runway's dry run in between)
//	submitqueue-merge,        a merge in flight: the merge stage, runway's merge,
//	runway-merge, merge-signal  then mergesignal publishes speculate <batch>/merged
//	build, buildsignal        a build in flight: the build stage publishes
//	                          buildsignal, whose poll loop holds its delivery
//	                          while the build runs and publishes speculate on
//	                          every status change
//	cancel                    publishes speculate for the cancelled batch
//	<any of these>_dlq        a dead letter not yet handled: the real DLQ
//	                          controller (speculate_dlq retriggers) or mend's
//	                          own intake will act on it
//
// conclude and log are left out: their consumers never publish to
// speculate. The first group's partition key is the queue; build, buildsignal
// and cancel are partitioned by batch, build and request ID, so their queue is
// read from the payload's "queue".
var (
	StuckQueueTopics = []string{"speculate", "dependency-analysis", "batch", "start", "validate",
		"merge-conflict-check", "merge-conflict-check-signal", "submitqueue-merge", "runway-merge", "merge-signal"}
	StuckPayloadTopics = []string{"build", "buildsignal", "cancel"}
)

// sqlStuckNow is the clock the scan's bound is measured by.
const sqlStuckNow = `-- name: StuckNow
SELECT NOW(6)`

// sqlStuckLive lists every queue's live batches in one statement: per
// live state, the queues from the membership index's first column (a
// loose index scan), then each queue's membership rows of that state (a
// ref on the primary key's (queue, state) prefix) joined with their
// batches by primary key, as LiveBatches does for one queue. One branch per
// state, each naming its state as a constant: with state IN (...) both
// engines use only the queue part of the key and read every terminal row
// the index accumulates (TestStuckScanReadsOnlyLiveRows).
const sqlStuckLive = `-- name: StuckLive
SELECT m.queue, m.batch_id, b.queue AS batch_queue, b.id, b.state, b.version
FROM (SELECT DISTINCT queue FROM queue_batch_state) q
JOIN queue_batch_state m ON m.queue = q.queue AND m.state = ?
JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id
UNION ALL
SELECT m.queue, m.batch_id, b.queue, b.id, b.state, b.version
FROM (SELECT DISTINCT queue FROM queue_batch_state) q
JOIN queue_batch_state m ON m.queue = q.queue AND m.state = ?
JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id
UNION ALL
SELECT m.queue, m.batch_id, b.queue, b.id, b.state, b.version
FROM (SELECT DISTINCT queue FROM queue_batch_state) q
JOIN queue_batch_state m ON m.queue = q.queue AND m.state = ?
JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id
UNION ALL
SELECT m.queue, m.batch_id, b.queue, b.id, b.state, b.version
FROM (SELECT DISTINCT queue FROM queue_batch_state) q
JOIN queue_batch_state m ON m.queue = q.queue AND m.state = ?
JOIN batch b ON b.queue = m.queue AND b.id = m.batch_id`

// sqlStuckOffsets reads the consumer groups' watermarks on the scanned
// topics. queue_offsets has a row per group and partition it holds.
const sqlStuckOffsets = `-- name: StuckOffsets
SELECT consumer_group, topic, partition_key, offset_acked FROM queue_offsets WHERE topic IN (%s)`

// sqlStuckMessages lists the stored rows of the scanned topics from the
// (topic, partition_key, offset) index: consumed rows stay until the
// host's GC deletes them, so this is bounded by recent traffic.
const sqlStuckMessages = "-- name: StuckMessages\n" +
	"SELECT topic, partition_key, `offset` FROM queue_messages WHERE topic IN (%s)"

// sqlStuckAcked reads one group's acknowledgements above its watermark on
// one partition: the real subscriber acks out of order in
// queue_delivery_state and advances offset_acked only over a contiguous run.
const sqlStuckAcked = `-- name: StuckAcked
SELECT message_offset FROM queue_delivery_state
WHERE consumer_group = ? AND topic = ? AND partition_key = ? AND message_offset > ? AND acked <> 0`

// sqlStuckPayloads reads the payloads of pending rows of topics not
// partitioned by queue.
const sqlStuckPayloads = "-- name: StuckPayloads\n" +
	"SELECT `offset`, payload FROM queue_messages WHERE `offset` IN (%s)"

// stuckPayloadChunk bounds the offsets one sqlStuckPayloads names.
const stuckPayloadChunk = 256

type partKey struct{ topic, partition string }

// StuckScan reads, in one pass, every queue that has live batches and what
// is in flight for it (see StuckQueueTopics): the input of the stuck-queue
// scan (package stuck). A message is in flight while a consumer group that
// holds a row for its partition has not acknowledged it (its watermark is
// below it and no acked delivery-state row covers it), or while no group
// holds a row for its partition at all (the real subscriber releases an
// idle partition's row and rejoins from 0 when discovery finds a message
// there). It reads and writes nothing else: no host group is joined.
//
// Cost per scan: four loose index scans of queue_batch_state's queues, the
// live-state ranges of each queue and their batches by primary key (never
// the terminal rows); a read of queue_offsets (its key leads with the
// group, so the whole table: one row per group and partition held, mend's
// subscription rows included); the index entries of the scanned topics'
// stored messages (consumed ones until the host's GC); one acknowledgement
// read per (group, partition) with rows above its watermark; and the
// payloads of pending build, buildsignal and cancel rows.
//
// Identities are byte-exact: a membership row whose batch the collation
// matched under another spelling is not a live batch of that queue.
func (d *DB) StuckScan(ctx context.Context) (mend.HostScan, error) {
	var scan mend.HostScan
	if err := d.app.QueryRowContext(ctx, sqlStuckNow).Scan(&scan.At); err != nil {
		return scan, fmt.Errorf("host: stuck scan: clock: %w", translate(err))
	}
	scan.At = scan.At.UTC()
	live, err := d.stuckLive(ctx)
	if err != nil {
		return scan, err
	}
	queueTopics := slices.Clone(StuckQueueTopics)
	if d.wakeTopic != WakeTopicDefault {
		queueTopics = append(queueTopics, d.wakeTopic)
	}
	byQueue := map[string]bool{}
	var topics []string
	for _, t := range queueTopics {
		byQueue[t], byQueue[t+"_dlq"] = true, true
		topics = append(topics, t, t+"_dlq")
	}
	for _, t := range StuckPayloadTopics {
		topics = append(topics, t, t+"_dlq")
	}
	pending, markers, err := d.stuckPending(ctx, topics, byQueue)
	if err != nil {
		return scan, err
	}
	inFlight := map[string][]string{}
	var keyed []pendingRow
	for _, p := range pending {
		if byQueue[p.topic] {
			inFlight[p.partition] = append(inFlight[p.partition], p.String())
		} else {
			keyed = append(keyed, p)
		}
	}
	queues, err := d.stuckPayloadQueues(ctx, keyed)
	if err != nil {
		return scan, err
	}
	for i, p := range keyed {
		switch q := queues[i]; {
		case q != "":
			inFlight[q] = append(inFlight[q], p.String())
		case !strings.HasSuffix(p.topic, "_dlq"):
			// The real consumer cannot resolve a queue from it either and
			// dead-letters it at once; until then, the safe side.
			scan.Unattributed = append(scan.Unattributed, p.String())
		}
		// A dead letter naming no queue leads nowhere: the real DLQ
		// controller cannot resolve its storage and never wakes a queue
		// for it (mend's intake parks it), so it would block every queue
		// for up to its 1,000 deliveries for nothing.
	}
	qs := make([]string, 0, len(live))
	for q := range live {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	for _, q := range qs {
		bs := live[q]
		slices.SortFunc(bs, func(a, b mend.Batch) int { return strings.Compare(a.ID, b.ID) })
		scan.Queues = append(scan.Queues, mend.QueueScan{Queue: q, Live: bs, InFlight: inFlight[q], Marker: markers[q]})
	}
	return scan, nil
}

// stuckLive returns every queue's live batches, byte-exact and
// deduplicated.
func (d *DB) stuckLive(ctx context.Context) (map[string][]mend.Batch, error) {
	args := make([]any, 0, len(mend.LiveBatchStates))
	for _, s := range mend.LiveBatchStates {
		args = append(args, string(s))
	}
	rows, err := d.app.QueryContext(ctx, sqlStuckLive, args...)
	if err != nil {
		return nil, fmt.Errorf("host: stuck scan: live batches: %w", translate(err))
	}
	defer rows.Close()
	live := map[string][]mend.Batch{}
	seen := map[[2]string]bool{}
	for rows.Next() {
		var mq, mid, bq, bid, state string
		var version int64
		if err := rows.Scan(&mq, &mid, &bq, &bid, &state, &version); err != nil {
			return nil, fmt.Errorf("host: stuck scan: live batches: %w", translate(err))
		}
		if mq != bq || mid != bid || !mend.BatchState(state).Live() || seen[[2]string{bq, bid}] {
			continue // another spelling, a stale row, or the batch's second row
		}
		seen[[2]string{bq, bid}] = true
		live[bq] = append(live[bq], mend.Batch{Queue: bq, ID: bid, State: mend.BatchState(state), Version: version})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: stuck scan: live batches: %w", translate(err))
	}
	return live, nil
}

// pendingRow is a stored message some consumer has yet to acknowledge.
type pendingRow struct {
	topic, partition string
	offset           uint64
}

func (p pendingRow) String() string {
	return p.topic + "/" + p.partition + "@" + strconv.FormatUint(p.offset, 10)
}

func inList(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// stuckPending returns the stored rows of topics not yet acknowledged by
// every group holding their partition (or held by none), and, per queue
// (the partition key of the byQueue topics), the highest offset stored or
// acknowledged on its partitions.
func (d *DB) stuckPending(ctx context.Context, topics []string, byQueue map[string]bool) ([]pendingRow, map[string]uint64, error) {
	args := make([]any, len(topics))
	for i, t := range topics {
		args[i] = t
	}
	type group struct {
		name  string
		acked uint64
	}
	groups := map[partKey][]group{}
	markers := map[string]uint64{}
	rows, err := d.queue.QueryContext(ctx, fmt.Sprintf(sqlStuckOffsets, inList(len(topics))), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("host: stuck scan: offsets: %w", translate(err))
	}
	for rows.Next() {
		var g group
		var k partKey
		if err := rows.Scan(&g.name, &k.topic, &k.partition, &g.acked); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("host: stuck scan: offsets: %w", translate(err))
		}
		groups[k] = append(groups[k], g)
		if byQueue[k.topic] {
			markers[k.partition] = max(markers[k.partition], g.acked)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("host: stuck scan: offsets: %w", translate(err))
	}

	type stored struct {
		k      partKey
		offset uint64
	}
	var msgs []stored
	rows, err = d.queue.QueryContext(ctx, fmt.Sprintf(sqlStuckMessages, inList(len(topics))), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("host: stuck scan: messages: %w", translate(err))
	}
	for rows.Next() {
		var m stored
		if err := rows.Scan(&m.k.topic, &m.k.partition, &m.offset); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("host: stuck scan: messages: %w", translate(err))
		}
		msgs = append(msgs, m)
		if byQueue[m.k.topic] {
			markers[m.k.partition] = max(markers[m.k.partition], m.offset)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("host: stuck scan: messages: %w", translate(err))
	}

	// Acknowledgements above each group's watermark, read once per
	// (group, partition) that has stored rows above it.
	type gk struct {
		group string
		k     partKey
	}
	above := map[gk]uint64{} // the watermark, for the groups to read
	for _, m := range msgs {
		for _, g := range groups[m.k] {
			if m.offset > g.acked {
				above[gk{g.name, m.k}] = g.acked
			}
		}
	}
	acked := map[gk]map[uint64]bool{}
	for key, mark := range above {
		set := map[uint64]bool{}
		rows, err := d.queue.QueryContext(ctx, sqlStuckAcked, key.group, key.k.topic, key.k.partition, mark)
		if err != nil {
			return nil, nil, fmt.Errorf("host: stuck scan: acknowledgements: %w", translate(err))
		}
		for rows.Next() {
			var off uint64
			if err := rows.Scan(&off); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("host: stuck scan: acknowledgements: %w", translate(err))
			}
			set[off] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("host: stuck scan: acknowledgements: %w", translate(err))
		}
		acked[key] = set
	}

	var pending []pendingRow
	for _, m := range msgs {
		gs := groups[m.k]
		open := len(gs) == 0 // no group holds the partition: discovery will find the row
		for _, g := range gs {
			if m.offset > g.acked && !acked[gk{g.name, m.k}][m.offset] {
				open = true
			}
		}
		if open {
			pending = append(pending, pendingRow{topic: m.k.topic, partition: m.k.partition, offset: m.offset})
		}
	}
	return pending, markers, nil
}

// stuckPayloadQueues returns the queue each row's payload names ("queue"),
// or "" when it names none.
func (d *DB) stuckPayloadQueues(ctx context.Context, ps []pendingRow) ([]string, error) {
	out := make([]string, len(ps))
	at := map[uint64]int{}
	for i, p := range ps {
		at[p.offset] = i
	}
	for start := 0; start < len(ps); start += stuckPayloadChunk {
		chunk := ps[start:min(start+stuckPayloadChunk, len(ps))]
		args := make([]any, len(chunk))
		for i, p := range chunk {
			args[i] = p.offset
		}
		rows, err := d.queue.QueryContext(ctx, fmt.Sprintf(sqlStuckPayloads, inList(len(chunk))), args...)
		if err != nil {
			return nil, fmt.Errorf("host: stuck scan: payloads: %w", translate(err))
		}
		for rows.Next() {
			var off uint64
			var payload []byte
			if err := rows.Scan(&off, &payload); err != nil {
				rows.Close()
				return nil, fmt.Errorf("host: stuck scan: payloads: %w", translate(err))
			}
			var p struct {
				Queue string `json:"queue"`
			}
			if json.Unmarshal(payload, &p) == nil {
				out[at[off]] = p.Queue
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("host: stuck scan: payloads: %w", translate(err))
		}
	}
	// A row collected between the two reads keeps "": it counts as in
	// flight for every queue for this one scan, the safe side.
	return out, nil
}

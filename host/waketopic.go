package host

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/mendq/mend/internal/mysqlx"
)

// A wake-up is only a wake-up if the host's planner reads its topic: a
// --wake-topic typo ("speculat") once published every wake-up there and
// marked the records done, leaving the queue stuck for good. What proves,
// from the queue database alone, that a consumer group of the host reads
// topic T is the rule below (ReadEvidence, Evidence.Reads), used by doctor,
// run's preflight, Wake's hold and the subscription's register-ahead.
//
// The real subscriber (platform/extension/messagequeue/mysql) leaves two
// kinds of rows for a topic it consumes:
//
//   - queue_offsets: a group's row per partition, inserted before its first
//     read. Not permanent: a partition drained (absent from discovery) for
//     2 x LeaseDurationMs (60 s) is released, its group's offsets row
//     deleted first, then its lease. On a quiet queue, exactly what a lost
//     wake-up leaves, no host group has any row.
//   - queue_subscriber_heartbeats: one row per (group, topic, subscriber),
//     written at subscribe and renewed every LeaseRenewalIntervalMs (10 s)
//     whether or not the topic holds messages; the subscriber itself counts
//     a row live while heartbeat_at is within LeaseDurationMs (30 s) and
//     deregistered_at = 0. A clean shutdown deletes the row; a crashed
//     subscriber's row goes stale (live peers purge it after 10 x
//     LeaseDurationMs).
//
// So a group reads T if it has a live heartbeat on T, or a queue_offsets
// row on T (a busy partition, or a host that stopped while busy: the row
// stays and its subscriber reads on from it when it is back). A topic
// nobody subscribes to has neither, at any time: the typo is still
// refused. A stale heartbeat alone does not count: it only says that
// something read T once, and a host whose every heartbeat is stale (or
// gone) is down (Evidence.HostUp false), which the error says apart.
//
// Live is judged by the queue database's clock, not mend's: heartbeat_at is
// the subscriber's wall clock, so the window (HeartbeatFresh, two lease
// durations) is twice the host's own, leaving a lease duration for a skew
// between the host's clocks and the database's.

// HeartbeatFresh is how recent a subscriber's heartbeat must be, by the
// queue database's clock, for it to count as live: 2 x the real
// subscriber's default LeaseDurationMs (30 s), which renews it every 10 s.
const HeartbeatFresh = time.Minute

// UnjoinedTopicError says that no consumer group of the host reads a
// topic by the rule above: a message published there is read by nobody
// (or, with HostDown, by nobody until the host is back).
type UnjoinedTopicError struct {
	Topic string
	// Joined are the topics the host's groups read (a live heartbeat or a
	// queue_offsets row), for a hint.
	Joined []string
	// HostDown says that no subscriber of the host (other than the
	// ignored groups) has a live heartbeat on any topic: the host looks
	// down, so whether it reads Topic cannot be told from the database.
	HostDown bool
	// Heartbeats is why queue_subscriber_heartbeats could not be read, if
	// it could not (then only queue_offsets was asked).
	Heartbeats error
}

func (e *UnjoinedTopicError) Error() string {
	var msg string
	near := NearestTopic(e.Topic, e.Joined)
	switch {
	case near != "":
		// A topic one edit from one the host reads is a typo, whatever
		// else is true.
		msg = fmt.Sprintf("host: no consumer group of the host reads topic %q, so a wake-up there would be read by nobody (did you mean %q?)", e.Topic, near)
		return msg
	case e.Heartbeats != nil:
		msg = fmt.Sprintf("host: no consumer group of the host has a queue_offsets row on topic %q, and queue_subscriber_heartbeats could not be read (%v), so whether a quiet host reads it cannot be told", e.Topic, e.Heartbeats)
	case e.HostDown:
		msg = fmt.Sprintf("host: no subscriber of the host has heartbeated within %s in queue_subscriber_heartbeats (by the database clock) and no consumer group has a queue_offsets row on topic %q: the host looks down, so whether it reads the topic cannot be told until a subscriber of it heartbeats", HeartbeatFresh, e.Topic)
	default:
		msg = fmt.Sprintf("host: no consumer group of the host reads topic %q (no live subscriber heartbeat in queue_subscriber_heartbeats, no queue_offsets row), so a wake-up there would be read by nobody", e.Topic)
	}
	return msg
}

// Evidence is what the queue database shows of who reads which topic,
// leaving out the ignored groups (mend's own subscription). Topics and
// groups are as stored, compared byte for byte (the tables are
// utf8mb4_bin, PAD SPACE).
type Evidence struct {
	// Live maps each topic some subscriber heartbeats on, live by the
	// database clock, to its groups, sorted.
	Live map[string][]string
	// Joined maps each topic some group has a queue_offsets row on to
	// those groups, sorted.
	Joined map[string][]string
	// Heartbeats is why queue_subscriber_heartbeats could not be read
	// (a missing grant, error 1142, or table, 1146); nil when it was. Then
	// Live is empty and only Joined counts.
	Heartbeats error
}

// Reads is the rule: some group has a live heartbeat or a queue_offsets
// row on topic.
func (e Evidence) Reads(topic string) bool {
	return len(e.Live[topic]) > 0 || len(e.Joined[topic]) > 0
}

// Readers returns the groups that read topic by the rule, sorted.
func (e Evidence) Readers(topic string) []string {
	out := slices.Clone(e.Live[topic])
	for _, g := range e.Joined[topic] {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out
}

// HostUp reports whether some subscriber of the host heartbeats live, on
// any topic. False with Heartbeats nil: the host is down (or was never
// started against this database).
func (e Evidence) HostUp() bool { return len(e.Live) > 0 }

// Topics returns every topic some group reads by the rule, sorted.
func (e Evidence) Topics() []string {
	var out []string
	for _, m := range []map[string][]string{e.Live, e.Joined} {
		for t := range m {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return out
}

// The live heartbeats, by the database clock. UNIX_TIMESTAMP() without an
// argument does not depend on the session's time zone. The table holds a
// row per group, topic and subscriber process (a few dozen per host
// replica, and crashed ones until purged), so this reads it whole.
const sqlLiveHeartbeats = `-- name: WakeTopicHeartbeats
SELECT DISTINCT consumer_group, topic FROM queue_subscriber_heartbeats
WHERE deregistered_at = 0 AND heartbeat_at >= CAST(UNIX_TIMESTAMP() AS SIGNED) * 1000 - ? LIMIT 10000`

// The groups that joined a topic. queue_offsets compares with
// utf8mb4_bin PAD SPACE ('x' = 'x '), so the caller compares the returned
// topic byte for byte. The real table has an index on topic
// (idx_topic); it holds one row per group, topic and partition.
const sqlTopicGroups = `-- name: WakeTopicGroups
SELECT DISTINCT consumer_group, topic FROM queue_offsets WHERE topic = ?`

// The (group, topic) pairs of queue_offsets: a loose scan of the primary
// key's (consumer_group, topic) prefix.
const sqlJoinedTopics = `-- name: JoinedTopics
SELECT DISTINCT consumer_group, topic FROM queue_offsets LIMIT 10000`

// ReadEvidence reads the rule's evidence for every topic from the queue
// database db: the live heartbeats (queue_subscriber_heartbeats, SELECT)
// and the groups' queue_offsets rows (SELECT), leaving out the groups in
// ignore. A heartbeat table mend may not read (or that does not exist) is
// reported in Evidence.Heartbeats, not as the error: the busy case still
// passes on queue_offsets. The error is queue_offsets' (a denial is the
// driver's error number 1142).
func ReadEvidence(ctx context.Context, db *sql.DB, ignore ...string) (Evidence, error) {
	var e Evidence
	var err error
	if e.Live, err = readPairs(ctx, db, "queue_subscriber_heartbeats", sqlLiveHeartbeats, ignore, HeartbeatFresh.Milliseconds()); err != nil {
		if ctx.Err() != nil {
			return Evidence{}, err
		}
		e.Live, e.Heartbeats = nil, err
	}
	if e.Joined, err = readPairs(ctx, db, "queue_offsets", sqlJoinedTopics, ignore); err != nil {
		return Evidence{}, err
	}
	return e, nil
}

// LiveHeartbeats returns the live half of the evidence alone (for a caller
// that reads queue_offsets itself, as the subscription does): each topic
// some group other than ignore heartbeats on, live by the database clock,
// with its groups.
func LiveHeartbeats(ctx context.Context, db *sql.DB, ignore ...string) (map[string][]string, error) {
	return readPairs(ctx, db, "queue_subscriber_heartbeats", sqlLiveHeartbeats, ignore, HeartbeatFresh.Milliseconds())
}

// readPairs reads (consumer_group, topic) pairs into topic -> groups.
func readPairs(ctx context.Context, db *sql.DB, table, query string, ignore []string, args ...any) (map[string][]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("host: read %s: %w", table, mysqlx.Translate(err))
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var group, t string
		if err := rows.Scan(&group, &t); err != nil {
			return nil, fmt.Errorf("host: read %s: %w", table, err)
		}
		if !slices.Contains(ignore, group) && !slices.Contains(out[t], group) {
			out[t] = append(out[t], group)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: read %s: %w", table, mysqlx.Translate(err))
	}
	for _, gs := range out {
		sort.Strings(gs)
	}
	return out, nil
}

// TopicConsumers returns the consumer groups that have a queue_offsets row
// on topic (on any partition) in the queue database db, spelled exactly,
// leaving out the groups in ignore. It is half of the rule (a quiet host
// has no such row: see ReadEvidence). It needs SELECT on queue_offsets; a
// denial comes back as the driver's error (number 1142).
func TopicConsumers(ctx context.Context, db *sql.DB, topic string, ignore ...string) ([]string, error) {
	m, err := readPairs(ctx, db, "queue_offsets", sqlTopicGroups, ignore, topic)
	if err != nil {
		return nil, err
	}
	return m[topic], nil
}

// JoinedTopics returns the topics that groups other than ignore have a
// queue_offsets row on, sorted.
func JoinedTopics(ctx context.Context, db *sql.DB, ignore ...string) ([]string, error) {
	m, err := readPairs(ctx, db, "queue_offsets", sqlJoinedTopics, ignore)
	if err != nil {
		return nil, err
	}
	return Evidence{Joined: m}.Topics(), nil
}

// CheckWakeTopic is the rule for one topic: nil if some consumer group
// other than ignore reads topic (a live heartbeat on it, by the database
// clock, or a queue_offsets row on it), an *UnjoinedTopicError if none
// does (HostDown set when no subscriber of the host heartbeats at all), or
// the error that kept it from reading queue_offsets.
func CheckWakeTopic(ctx context.Context, db *sql.DB, topic string, ignore ...string) error {
	e, err := ReadEvidence(ctx, db, ignore...)
	if err != nil {
		return err
	}
	return e.Check(topic)
}

// Check is CheckWakeTopic on evidence already read.
func (e Evidence) Check(topic string) error {
	if e.Reads(topic) {
		return nil
	}
	return &UnjoinedTopicError{Topic: topic, Joined: e.Topics(), HostDown: e.Heartbeats == nil && !e.HostUp(), Heartbeats: e.Heartbeats}
}

// NearestTopic returns the topic of joined closest to topic by edit
// distance, if it is close (at most a third of topic's length, at least
// 1), else "".
func NearestTopic(topic string, joined []string) string {
	best, bestD := "", max(len(topic)/3, 1)+1
	for _, j := range joined {
		if d := editDistance(topic, j); d > 0 && d < bestD {
			best, bestD = j, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// wakeTopicJoined is Wake's guard with Options.RequireWakeConsumer: nil
// once a group other than Options.WakeConsumerIgnore reads the wake topic
// by CheckWakeTopic's rule (remembered only after a check succeeded: a
// topic a consumer was seen reading is no typo, and a wake-up published
// while that host is down is read when it is back), else the
// *UnjoinedTopicError, so the planner records a failed wake-up and tries
// again later rather than marking the record woken.
func (d *DB) wakeTopicJoined(ctx context.Context) error {
	if !d.requireConsumer || d.consumerSeen.Load() {
		return nil
	}
	if d.seenBeforeCheck {
		d.consumerSeen.Store(true)
	}
	if err := CheckWakeTopic(ctx, d.queue, d.wakeTopic, d.consumerIgnore...); err != nil {
		return err
	}
	d.consumerSeen.Store(true)
	return nil
}

// The queues the host serves, for registering ahead: every queue that ever
// had a request (the request table's primary key leads with queue, so this
// is a loose scan of its (queue) prefix: its cost grows with the queues,
// not the requests). request rather than batch: a queue's first request
// exists before its first batch and can dead-letter on start, validate or
// batch before any batch does; every batch's members are requests of its
// queue.
const sqlQueues = `-- name: HostQueues
SELECT DISTINCT queue FROM request`

// Queues returns the queues of the host's application database: every
// queue that has a request row, as stored (the app tables compare
// case-insensitively, so each queue comes back in one spelling). The
// subscription registers ahead the *_dlq partitions of these queues for
// each topic the host reads (see ReadEvidence); it is subscribe.Config's
// Queues. It needs SELECT on request.
func (d *DB) Queues(ctx context.Context) ([]string, error) {
	rows, err := d.app.QueryContext(ctx, sqlQueues)
	if err != nil {
		return nil, fmt.Errorf("host: list queues: %w", mysqlx.Translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return nil, fmt.Errorf("host: list queues: %w", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: list queues: %w", mysqlx.Translate(err))
	}
	sort.Strings(out)
	return out, nil
}

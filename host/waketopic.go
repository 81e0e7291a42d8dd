package host

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"

	"github.com/mendq/mend/internal/mysqlx"
)

// A wake-up is only a wake-up if the host's planner reads its topic. The
// real subscriber joins a topic's partitions by inserting its group's rows
// into queue_offsets before its first read (fact sheet §1), so a topic no
// group has a row for is a topic nobody consumes: a --wake-topic typo
// ("speculat") once published every wake-up there and marked the records
// done, leaving the queue stuck for good.

// UnjoinedTopicError says that no consumer group of the host has joined a
// topic in queue_offsets: a message published there is read by nobody.
type UnjoinedTopicError struct {
	Topic string
	// Joined are the topics the host's groups have joined, for a hint.
	Joined []string
}

func (e *UnjoinedTopicError) Error() string {
	msg := fmt.Sprintf("host: no consumer group of the host has joined topic %q in queue_offsets, so a wake-up there would be read by nobody", e.Topic)
	if near := NearestTopic(e.Topic, e.Joined); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return msg
}

// The consumer groups that joined a topic. queue_offsets compares with
// utf8mb4_bin PAD SPACE ('x' = 'x '), so the caller compares the returned
// topic byte for byte. The key leads with consumer_group, so this reads
// the table; it holds one row per group, topic and partition, and runs at
// start-up (and, while nobody has joined, once per wake-up).
const sqlTopicGroups = `-- name: WakeTopicGroups
SELECT DISTINCT consumer_group, topic FROM queue_offsets WHERE topic = ?`

// The topics any group joined, for the hint of an UnjoinedTopicError.
const sqlJoinedTopics = `-- name: JoinedTopics
SELECT DISTINCT consumer_group, topic FROM queue_offsets LIMIT 1000`

// TopicConsumers returns the consumer groups that have joined topic (on
// any partition) in queue_offsets of the queue database db, spelled
// exactly, leaving out the groups in ignore (mend's own subscription). It
// needs SELECT on queue_offsets; a denial comes back as the driver's error
// (number 1142).
func TopicConsumers(ctx context.Context, db *sql.DB, topic string, ignore ...string) ([]string, error) {
	rows, err := db.QueryContext(ctx, sqlTopicGroups, topic)
	if err != nil {
		return nil, fmt.Errorf("host: read queue_offsets: %w", mysqlx.Translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var group, t string
		if err := rows.Scan(&group, &t); err != nil {
			return nil, fmt.Errorf("host: read queue_offsets: %w", err)
		}
		if t == topic && !slices.Contains(ignore, group) && !slices.Contains(out, group) {
			out = append(out, group)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: read queue_offsets: %w", mysqlx.Translate(err))
	}
	sort.Strings(out)
	return out, nil
}

// JoinedTopics returns the topics that groups other than ignore have
// joined in queue_offsets, sorted (at most those of 1,000 group rows).
func JoinedTopics(ctx context.Context, db *sql.DB, ignore ...string) ([]string, error) {
	rows, err := db.QueryContext(ctx, sqlJoinedTopics)
	if err != nil {
		return nil, fmt.Errorf("host: read queue_offsets: %w", mysqlx.Translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var group, t string
		if err := rows.Scan(&group, &t); err != nil {
			return nil, fmt.Errorf("host: read queue_offsets: %w", err)
		}
		if !slices.Contains(ignore, group) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host: read queue_offsets: %w", mysqlx.Translate(err))
	}
	sort.Strings(out)
	return out, nil
}

// CheckWakeTopic returns nil if some consumer group other than ignore has
// joined topic in queue_offsets, an *UnjoinedTopicError if none has, or
// the error that kept it from reading.
func CheckWakeTopic(ctx context.Context, db *sql.DB, topic string, ignore ...string) error {
	groups, err := TopicConsumers(ctx, db, topic, ignore...)
	if err != nil {
		return err
	}
	if len(groups) > 0 {
		return nil
	}
	joined, err := JoinedTopics(ctx, db, ignore...)
	if err != nil {
		joined = nil // the hint is optional
	}
	return &UnjoinedTopicError{Topic: topic, Joined: joined}
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
// once a group other than Options.WakeConsumerIgnore has joined the wake
// topic (remembered: a consumer that joined stays joined), else the
// *UnjoinedTopicError, so the planner records a failed wake-up and tries
// again later rather than marking the record woken.
func (d *DB) wakeTopicJoined(ctx context.Context) error {
	if !d.requireConsumer || d.consumerSeen.Load() {
		return nil
	}
	if err := CheckWakeTopic(ctx, d.queue, d.wakeTopic, d.consumerIgnore...); err != nil {
		return err
	}
	d.consumerSeen.Store(true)
	return nil
}

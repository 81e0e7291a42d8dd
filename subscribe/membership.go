package subscribe

// Membership: which partitions the group has joined, registering ahead,
// discovering the partitions that hold rows and joining those on first
// sight. Run does this on its own ticker, so no recording (a slow pass
// during a backlog, a failing store, a backoff) ever holds a join back:
// a partition the group has not joined is one the host's GC may empty.

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/host"
)

// membership is the group's partitions as this process knows them. One
// membership step runs at a time (step holds mu throughout); the
// recording pass takes mu only to swap in the watermarks it read and to
// copy the partitions holding rows.
type membership struct {
	mu        sync.Mutex
	joined    map[partKey]uint64 // partitions the group has a row for, with their watermarks, as last read or written
	active    []partKey          // partitions holding rows, sorted, as last discovered
	spelling  map[partKey]string // each active partition's key as discovery returned it
	lastAhead time.Time
	found     chan struct{} // signalled when a step finds a partition the last one did not

	heartbeatsWarned bool // the unreadable heartbeat table was logged
}

func newMembership() *membership {
	return &membership{joined: map[partKey]uint64{}, spelling: map[partKey]string{}, found: make(chan struct{}, 1)}
}

// activePart is a partition holding rows, as membership last knew it.
type activePart struct {
	key       partKey
	partition string // as discovery spelled it
	acked     uint64
}

// snapshot returns the partitions holding rows and their watermarks as
// membership last knew them.
func (m *membership) snapshot() []activePart {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]activePart, len(m.active))
	for i, k := range m.active {
		out[i] = activePart{key: k, partition: m.spelling[k], acked: m.joined[k]}
	}
	return out
}

// setJoined replaces the joined partitions with the group's rows as read.
func (m *membership) setJoined(joined map[partKey]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.joined = joined
}

// membershipStep registers ahead (every AheadInterval), discovers the
// partitions holding rows and joins those the group has no row for. It
// returns how many partitions it joined.
func (s *Subscriber) membershipStep(ctx context.Context) (int, error) {
	m := s.members
	m.mu.Lock()
	defer m.mu.Unlock()
	now := s.cfg.NowFunc()
	joined := 0
	if m.lastAhead.IsZero() || now.Sub(m.lastAhead) >= s.cfg.AheadInterval {
		n, err := s.registerAhead(ctx)
		joined += n
		if err != nil {
			return joined, err
		}
		m.lastAhead = now
	}
	active, spelling, n, err := s.discover(ctx)
	joined += n
	if err != nil {
		return joined, err
	}
	if len(active) > len(m.active) || slices.ContainsFunc(active, func(k partKey) bool { return !slices.Contains(m.active, k) }) {
		select {
		case m.found <- struct{}{}:
		default:
		}
	}
	m.active, m.spelling = active, spelling
	return joined, nil
}

// membershipEvery bounds how often Run's membership steps run: discovery
// reads every index entry of the DLQ topics still holding rows, which
// during a backlog of 100,000 at a 100 ms PollInterval cost the backlog
// benchmark a sixth of its rate. A second is a tenth of the host's GC idle
// period.
const membershipEvery = time.Second

// runMembership runs a membership step every PollInterval (at most one a
// membershipEvery) until ctx ends. A failed step (the queue database) is
// retried with a backoff of its own, doubling up to AheadInterval,
// whatever recording does.
func (s *Subscriber) runMembership(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		n, err := s.membershipStep(ctx)
		wait := max(s.cfg.PollInterval, membershipEvery)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			wait = min(max(s.cfg.PollInterval, membershipEvery)<<min(failures-1, 16), max(s.cfg.AheadInterval, s.cfg.PollInterval, membershipEvery))
			s.log.WarnContext(ctx, "membership step failed; retrying", "err", err, "failures", failures, "retry_in", wait.String())
		default:
			failures = 0
		}
		if n > 0 {
			s.log.InfoContext(ctx, "joined partitions", "joined", n)
		}
		timer.Reset(wait)
	}
}

// registerAhead joins, at offset 0, every partition a dead letter could
// later appear on: T_dlq for each partition of an AheadTopics topic T that
// one of the host's groups has joined (the host's subscriber joins a
// partition before it reads it, so before it can dead-letter anything from
// it), each *_dlq partition another group has joined, and, for each
// queue-partitioned AheadTopics topic the host reads by host.ReadEvidence's
// rule (a live subscriber heartbeat on it, or a group's queue_offsets row),
// its *_dlq partition of each queue Config.Queues names. The last is what
// a quiet host still has: its groups release a partition drained for a
// minute, deleting their queue_offsets rows, but their subscribers keep
// heartbeating on the topic. The caller holds members.mu.
//
// Only a failure of the queue database's queue_offsets fails the step: a
// heartbeat table mend may not read, or a Queues that fails (the app
// database), is logged and leaves the queue-based part out this time, so
// that discovery, and first-sight joins, go on.
func (s *Subscriber) registerAhead(ctx context.Context) (int, error) {
	joined := s.members.joined
	others, err := s.others(ctx)
	if err != nil {
		return 0, err
	}
	var want []partKey
	var spell []string
	add := func(topic, partition string) {
		if mend.ValidateIdentity("topic", topic, true) != nil {
			return
		}
		k := keyOf(topic, partition)
		if _, ok := joined[k]; !ok {
			joined[k] = 0 // as the join leaves it; the recording pass reads it back
			want = append(want, k)
			spell = append(spell, partition)
		}
	}
	for _, o := range others {
		if t, ok := dlqTopic(o.topic); ok {
			add(t, o.partition)
		} else if slices.Contains(s.cfg.AheadTopics, o.topic) {
			add(o.topic+dlq.DLQSuffix, o.partition)
		}
	}
	if s.cfg.Queues != nil {
		if read := s.readAheadTopics(ctx); len(read) > 0 {
			queues, err := s.cfg.Queues(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return 0, ctx.Err()
				}
				s.log.WarnContext(ctx, "cannot list the host's queues; their *_dlq partitions are joined on first sight until it can", "err", err)
				queues = nil
			}
			for _, q := range queues {
				if mend.ValidateIdentity("queue", q, true) != nil {
					continue
				}
				for _, t := range read {
					add(t+dlq.DLQSuffix, q)
				}
			}
		}
	}
	if err := s.joinMany(ctx, want, spell); err != nil {
		for _, k := range want {
			if !planted.keepFailedJoins {
				delete(joined, k) // joined again next time; INSERT IGNORE keeps a row that made it
			}
		}
		return 0, err
	}
	return len(want), nil
}

// readAheadTopics returns the queue-partitioned AheadTopics the host reads
// by host.ReadEvidence's rule, the subscription's own group left out. A
// heartbeat table it cannot read is logged once (until it can again): the
// rule then stands on queue_offsets alone, which a quiet host empties.
func (s *Subscriber) readAheadTopics(ctx context.Context) []string {
	e, err := host.ReadEvidence(ctx, s.cfg.DB, s.cfg.Group)
	if err != nil {
		s.log.WarnContext(ctx, "cannot read which topics the host reads; registering ahead by queue waits", "err", err)
		return nil
	}
	m := s.members
	switch {
	case e.Heartbeats != nil && !m.heartbeatsWarned:
		m.heartbeatsWarned = true
		s.log.WarnContext(ctx, "cannot read queue_subscriber_heartbeats: a quiet host's topics are not registered ahead (grant SELECT on it)", "err", e.Heartbeats)
	case e.Heartbeats == nil:
		m.heartbeatsWarned = false
	}
	var out []string
	for _, t := range s.cfg.AheadTopics {
		if dlq.PartitionIsQueue(t) && e.Reads(t) {
			out = append(out, t)
		}
	}
	return out
}

// discover lists the DLQ partitions that hold rows and joins those the
// group has no row for yet: first sight. Such a partition is joined within
// one membership step of its first dead letter becoming visible. The
// caller holds members.mu.
func (s *Subscriber) discover(ctx context.Context) ([]partKey, map[partKey]string, int, error) {
	joined := s.members.joined
	names, err := queryStrings(ctx, s.cfg.DB, "list topics", sqlTopics)
	if err != nil {
		return nil, nil, 0, err
	}
	var topics []string
	for _, n := range names {
		if t, ok := dlqTopic(n); ok && !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	var active, fresh []partKey
	var spell []string
	spelling := map[partKey]string{}
	for _, t := range topics {
		parts, err := queryStrings(ctx, s.cfg.DB, "list partitions of "+t, sqlPartitions, t)
		if err != nil {
			return nil, nil, 0, err
		}
		for _, p := range parts {
			k := keyOf(t, p)
			if _, ok := spelling[k]; ok {
				continue
			}
			spelling[k] = p
			if _, ok := joined[k]; !ok {
				fresh, spell = append(fresh, k), append(spell, p)
			}
			active = append(active, k)
		}
	}
	if planted.joinedEarly {
		for _, k := range fresh {
			joined[k] = 0
		}
	}
	if err := s.joinMany(ctx, fresh, spell); err != nil {
		return nil, nil, 0, err
	}
	for _, k := range fresh {
		joined[k] = 0
	}
	slices.SortFunc(active, func(a, b partKey) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	return active, spelling, len(fresh), nil
}

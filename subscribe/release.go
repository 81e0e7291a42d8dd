package subscribe

// The release: the statements that carry out the settle ledger's
// decisions (ledger.go) for every partition of this replica's share.

import (
	"context"
	"time"
)

// heldSayEvery bounds how often a release held by an open transaction
// says so.
const heldSayEvery = time.Minute

// release advances the watermark of each partition to its newest settled
// checkpoint, after checking that the range holds exactly the rows this
// process read from it (ledger.settle): a difference means a row
// committed after a later one was read (or rows were removed); then the
// partition is read again from its watermark, and released on a later
// pass. Partitions are checked and advanced manyChunk at a time, one
// statement each: an advance is a commit. Each advance is a
// compare-and-set on the watermark its range was counted from; one that
// finds the watermark moved (another replica) leaves it, and the next
// pass's loadOwn restarts that partition from the watermark it reads.
//
// When the replicas divide the work (divide, with slot leases), only this
// replica's share is released; what it read of another's partitions (while
// it had not yet seen that replica's slot) is forgotten. Releasing it would
// move the watermark under the owner, which then reads again from there
// everything it had read beyond it: 40% of the reads when two replicas
// started together on a few deep partitions.
func (s *Subscriber) release(ctx context.Context, divide bool, st *PassStats) error {
	now := s.cfg.NowFunc()
	st.Held = s.horizons.heldBy(now)
	if st.Held > 0 && now.Sub(s.heldSaid) >= heldSayEvery {
		// Each pass adds a sample while the transaction stays open: say
		// so, since it holds the host's GC of every partition meanwhile.
		s.heldSaid = now
		s.log.WarnContext(ctx, "a transaction open on the queue database since before the settle window holds every watermark until it ends",
			"oldest_began", s.horizons.view.oldest, "held_samples", st.Held, "settle", s.settle.String())
	}
	settled, ok := s.horizons.settled(now)
	if !ok {
		return nil
	}
	type due struct {
		l *ledger
		i int // the newest checkpoint at or below settled
	}
	var todo []due
	for k, l := range s.parts {
		if divide && len(l.cps) > 0 && !s.share.mine(k) {
			l.reset(l.acked) // read again from the watermark if it becomes ours
			continue
		}
		if i, ok := l.due(settled); ok {
			todo = append(todo, due{l, i})
		}
	}
	for from := 0; from < len(todo); from += manyChunk {
		chunk := todo[from:min(from+manyChunk, len(todo))]
		spans := make([]span, len(chunk))
		for j, d := range chunk {
			spans[j] = span{topic: d.l.topic, partition: d.l.partition, after: d.l.acked, upTo: d.l.cps[d.i].offset}
		}
		sets, err := s.countMany(ctx, spans)
		if err != nil {
			return err
		}
		var moving []due
		var advs []advance
		for j, d := range chunk {
			l, c := d.l, d.l.cps[d.i]
			adv, ok := l.settle(d.i, sets[j])
			if !ok {
				s.log.InfoContext(ctx, "rows appeared (or went) below what was read; reading the partition again from its watermark",
					"topic", l.topic, "partition", l.partition, "watermark", l.acked, "up_to", c.offset, "read", c.read.rows, "now", sets[j].rows)
				st.Late++
				continue
			}
			moving, advs = append(moving, d), append(advs, adv)
		}
		if len(advs) == 0 {
			continue
		}
		moved, err := s.advanceMany(ctx, advs)
		if err != nil {
			return err
		}
		if moved < int64(len(advs)) {
			s.log.InfoContext(ctx, "some watermarks had moved since they were read (another replica); those partitions are read again from them",
				"advanced", moved, "of", len(advs))
		}
		for _, d := range moving {
			d.l.released(d.i) // one whose compare-and-set missed is reset by the next loadOwn
		}
		st.Advanced += int(moved)
	}
	return nil
}

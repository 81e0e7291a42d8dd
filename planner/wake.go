package planner

// This file is the wake protocol: how the records a run owes a wake-up
// share one publish (see doc.go, "Settle together, wake once"). Its
// invariant, in one place: a wake-up's message ID is re-sent only when
// every record it must wake was settled, at the version it is owed at,
// before the publish that may already have landed under that ID (the
// intent's covers); otherwise a new ID is used, so the message queue's
// dedupe never swallows the only wake-up that follows a settlement.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/mendq/mend"
)

// WakeMessageID is the wake-up message ID for a record at a version:
// "mend/wake/<record id>/v<version>". It is deterministic, so a send
// repeated at the same version (a crash or lost term before the outcome was
// recorded) coalesces in the message queue's dedupe; and since every wake
// attempt, failed or not, and every operator retry appends an event, the
// version never repeats over the record's life, so a deliberate re-send is
// never swallowed by the dedupe of an earlier one, even after an ambiguous
// publish. It does not contain the batch ID and is at most 63 characters,
// well under the host's 255.
func WakeMessageID(id mend.RecordID, version int64) string {
	return "mend/wake/" + id.String() + "/v" + strconv.FormatInt(version, 10)
}

// wake publishes the queue's wake-up and finishes the record.
func (p *Planner) wake(ctx context.Context, lease Lease, rec mend.Record, st *Stats) error {
	queue := rec.Source.Queue
	live, err := p.cfg.Batches.LiveBatches(ctx, queue, 1)
	if err != nil {
		_, _, err = p.attemptFailed(ctx, lease, rec, "list live batches", err, st)
		return err
	}
	if len(live) == 0 {
		_, err := p.write(ctx, lease, rec, mend.EventDone, mend.StateDone, rec.Attempts, "", 0, eventData{Reason: "no live batch: nothing to wake"})
		if err == nil {
			st.Done++
			p.repaired(rec, st)
		}
		return err
	}
	term := lease.Term()
	attempt := rec.Attempts + 1
	w := mend.WakeUp{Queue: queue, MessageID: WakeMessageID(rec.ID, rec.Version), BatchID: live[0], Epoch: term.Epoch, RecordID: rec.ID}
	data := eventData{BatchID: w.BatchID, MessageID: w.MessageID, Attempt: attempt}
	pubErr := p.cfg.Waker.Wake(ctx, w)
	if p.cfg.Hooks.OnWake != nil {
		p.cfg.Hooks.OnWake(queue, pubErr)
	}
	if pubErr != nil {
		if errors.Is(pubErr, context.Canceled) || errors.Is(pubErr, context.DeadlineExceeded) {
			return pubErr
		}
		st.WakeFailed++
		st.lastFailure = pubErr
		if p.cfg.Hooks.OnAttemptFailed != nil {
			p.cfg.Hooks.OnAttemptFailed(queue, rec.ID, "publish wake-up", pubErr)
		}
		data.Error = pubErr.Error()
		p.log.WarnContext(ctx, "wake-up publish failed; will re-send", "queue", queue, "record_id", rec.ID.String(), "message_id", w.MessageID, "err", pubErr)
		if attempt >= p.cfg.MaxAttempts {
			rec.Attempts = attempt // the parked record's attempts are the ones its reason counts
			return p.park(ctx, lease, rec, fmt.Sprintf("wake-up failed %d times; last: %v", attempt, pubErr), data, st)
		}
		_, err := p.write(ctx, lease, rec, mend.EventWakeFailed, mend.StateSettled, attempt, pubErr.Error(),
			p.cfg.BackoffFunc(attempt-1), data)
		return err
	}
	if _, err := p.write(ctx, lease, rec, mend.EventWoken, mend.StateDone, attempt, "", 0, data); err != nil {
		return err
	}
	st.Woken++
	p.repaired(rec, st)
	p.log.InfoContext(ctx, "queue woken", "queue", queue, "record_id", rec.ID.String(), "batch_id", w.BatchID, "message_id", w.MessageID, "epoch", term.Epoch)
	return nil
}

// historyStore is the optional Store method wakeAll uses to find a wake
// intent left by a run that was cut off; *storage.DB implements it.
type historyStore interface {
	// RecordHistory returns a record's events, oldest first.
	RecordHistory(ctx context.Context, queue string, id mend.RecordID) ([]mend.Event, error)
}

// wakeAll wakes the queue once for every owed record (see doc.go, "Settle
// together, wake once"). One record is woken exactly as alone (wake). For
// several: one live-batch read; with none, each record is done; else an
// anchor record carries the wake intent, an event whose version names the
// wake-up (WakeMessageID of the anchor at that version, so it is never
// reused), written before the one publish; then each record is marked
// woken, the anchor last. A run cut off after the intent finds the anchor
// still settled at the intent's version and re-sends the same message ID,
// which the message queue's dedupe coalesces if the first landed.
func (p *Planner) wakeAll(ctx context.Context, lease Lease, owed []owedRecord, st *Stats) error {
	for _, o := range owed {
		if p.cfg.Hooks.BeforeWake != nil {
			p.cfg.Hooks.BeforeWake(ctx, o.rec)
		}
	}
	if err := alive(ctx, lease); err != nil {
		return err
	}
	if len(owed) == 1 {
		return p.wake(ctx, lease, owed[0].rec, st)
	}
	queue := owed[0].rec.Source.Queue
	var errs []error
	each := func(fn func(rec mend.Record) error) error {
		for _, o := range owed {
			if err := alive(ctx, lease); err != nil {
				return err
			}
			err := fn(o.rec)
			if errors.Is(err, mend.ErrFenced) || errors.Is(err, mend.ErrLeaseLost) || ctx.Err() != nil {
				return err
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		return firstStop(errs)
	}
	live, err := p.cfg.Batches.LiveBatches(ctx, queue, 1)
	if err != nil {
		return each(func(rec mend.Record) error {
			_, _, err := p.attemptFailed(ctx, lease, rec, "list live batches", err, st)
			return err
		})
	}
	if len(live) == 0 {
		return each(func(rec mend.Record) error {
			_, err := p.write(ctx, lease, rec, mend.EventDone, mend.StateDone, rec.Attempts, "", 0, eventData{Reason: "no live batch: nothing to wake"})
			if err == nil {
				st.Done++
				p.repaired(rec, st)
			}
			return err
		})
	}
	term := lease.Term()
	// The anchor: a record holding an intent, left by a run that was cut
	// off, that covers every owed record; else the first owed record, which
	// gets a new intent now.
	anchor, err := p.resumable(ctx, owed)
	if err != nil {
		return err
	}
	if anchor < 0 {
		anchor = 0
		rec := owed[0].rec
		covers := make([]string, len(owed))
		for i, o := range owed {
			covers[i] = coverKey(o.rec.ID, o.rec.Version)
		}
		data := eventData{BatchID: live[0], MessageID: WakeMessageID(rec.ID, rec.Version+1), Records: len(owed), Covers: covers}
		next, err := p.write(ctx, lease, rec, mend.EventWakeIntent, mend.StateSettled, rec.Attempts, rec.LastError, 0, data)
		if err != nil {
			return err
		}
		owed[0].rec = next
	}
	// The anchor is marked last, so its intent outlives every other
	// record's wake-up.
	owed = append(append(owed[:anchor:anchor], owed[anchor+1:]...), owed[anchor])
	a := owed[len(owed)-1].rec
	w := mend.WakeUp{Queue: queue, MessageID: WakeMessageID(a.ID, a.Version), BatchID: live[0], Epoch: term.Epoch, RecordID: a.ID}
	if err := alive(ctx, lease); err != nil {
		return err
	}
	pubErr := p.cfg.Waker.Wake(ctx, w)
	if p.cfg.Hooks.OnWake != nil {
		p.cfg.Hooks.OnWake(queue, pubErr)
	}
	if pubErr != nil {
		if errors.Is(pubErr, context.Canceled) || errors.Is(pubErr, context.DeadlineExceeded) {
			return pubErr
		}
		p.log.WarnContext(ctx, "wake-up publish failed; will re-send", "queue", queue, "records", len(owed), "message_id", w.MessageID, "err", pubErr)
		return each(func(rec mend.Record) error {
			st.WakeFailed++
			st.lastFailure = pubErr
			if p.cfg.Hooks.OnAttemptFailed != nil {
				p.cfg.Hooks.OnAttemptFailed(queue, rec.ID, "publish wake-up", pubErr)
			}
			attempt := rec.Attempts + 1
			data := eventData{BatchID: w.BatchID, MessageID: w.MessageID, Attempt: attempt, Error: pubErr.Error(), Records: len(owed)}
			if attempt >= p.cfg.MaxAttempts {
				rec.Attempts = attempt // the parked record's attempts are the ones its reason counts
				return p.park(ctx, lease, rec, fmt.Sprintf("wake-up failed %d times; last: %v", attempt, pubErr), data, st)
			}
			_, err := p.write(ctx, lease, rec, mend.EventWakeFailed, mend.StateSettled, attempt, pubErr.Error(), p.cfg.BackoffFunc(attempt-1), data)
			return err
		})
	}
	if am, ok := p.cfg.Store.(appendManyStore); ok && len(owed) <= appendManyMax {
		err = p.wokenMany(ctx, am, lease, owed, w, st)
	} else {
		err = each(func(rec mend.Record) error {
			data := eventData{BatchID: w.BatchID, MessageID: w.MessageID, Attempt: rec.Attempts + 1, Records: len(owed)}
			if _, err := p.write(ctx, lease, rec, mend.EventWoken, mend.StateDone, rec.Attempts+1, "", 0, data); err != nil {
				return err
			}
			st.Woken++
			p.repaired(rec, st)
			return nil
		})
	}
	p.log.InfoContext(ctx, "queue woken", "queue", queue, "records", len(owed), "batch_id", w.BatchID, "message_id", w.MessageID, "epoch", term.Epoch)
	return err
}

// resumable returns the index of an owed record whose last event is a wake
// intent covering every owed record, or -1. Its message ID may be sent again:
// if the cut-off run's publish landed, it came after every one of these
// records was settled, so the queue's dedupe swallowing the re-send loses no
// wake-up. An intent that does not cover some owed record (one settled by
// this run or by another one after the cut) is not reused: its publish may
// have landed before that record's batch was settled, so the re-send must
// carry a new ID or the queue's dedupe would drop the only wake-up that
// follows it. Covers names records at versions (coverKey), so a covered
// record settled again since is not covered. An intent without a list
// (written before Covers existed), or listing bare IDs, covers nothing.
func (p *Planner) resumable(ctx context.Context, owed []owedRecord) (int, error) {
	hs, ok := p.cfg.Store.(historyStore)
	if !ok {
		return -1, nil
	}
	for i, o := range owed {
		if !o.cameSettled {
			continue
		}
		evs, err := hs.RecordHistory(ctx, o.rec.Source.Queue, o.rec.ID)
		if err != nil {
			return -1, fmt.Errorf("planner: record %s: read history: %w", o.rec.ID, err)
		}
		last := evs[len(evs)-1]
		if last.Seq != o.rec.Version || last.Kind != mend.EventWakeIntent {
			continue
		}
		var d eventData
		if json.Unmarshal(last.Data, &d) != nil {
			continue
		}
		if coversAll(d.Covers, owed, i) {
			return i, nil
		}
	}
	return -1, nil
}

// coverKey names a record at the version it was owed a wake-up at, as a
// wake intent's covers list it: "<record id>/v<version>".
func coverKey(id mend.RecordID, version int64) string {
	return id.String() + "/v" + strconv.FormatInt(version, 10)
}

// coversAll reports whether every owed record, at the version it is owed
// at now, is in covers; owed[anchor] carries the intent, one version past
// the one it was covered at. A record that moved since the intent was
// written (parked, retried and settled again, say) is at another version
// and is not covered, though its ID is: the intent's publish may have
// landed before its new settlement. An intent that lists bare record IDs
// (written before covers named versions) covers nothing.
func coversAll(covers []string, owed []owedRecord, anchor int) bool {
	set := make(map[string]bool, len(covers))
	for _, c := range covers {
		set[c] = true
	}
	for i, o := range owed {
		v := o.rec.Version
		if i == anchor {
			v--
		}
		if !set[coverKey(o.rec.ID, v)] {
			return false
		}
	}
	return true
}

// firstStop returns the first error of errs that is not a conflict (a
// record moved under the run: the next read decides again), else the first.
func firstStop(errs []error) error {
	for _, err := range errs {
		if !errors.Is(err, mend.ErrConflict) && !errors.Is(err, mend.ErrNotFound) && !errors.Is(err, mend.ErrStaleRecord) {
			return err
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// appendManyMax is the most records wokenMany marks in one call.
const appendManyMax = 100

// appendManyStore is the optional Store method that appends one event to
// each of several records of a queue in one fenced transaction (one packet
// and COMMIT); *storage.DB implements it.
type appendManyStore interface {
	// RecordAppendMany appends ps[i] to record i, each a compare-and-set on
	// its own version, and returns one error per item (nil: written). An
	// error result means nothing was written: mend.ErrFenced if the term is
	// not current, a validation error, a store error, or mend.ErrAmbiguous
	// if the commit's outcome is unknown.
	RecordAppendMany(ctx context.Context, ps []mend.AppendParams) ([]error, error)
}

// wokenMany marks every owed record woken by w in one fenced transaction,
// the anchor (last in owed) included: they commit together, so the
// anchor's intent is never left behind a record it woke. A record that
// moved under the run is counted as a conflict and re-read next run.
func (p *Planner) wokenMany(ctx context.Context, am appendManyStore, lease Lease, owed []owedRecord, w mend.WakeUp, st *Stats) error {
	term := lease.Term()
	ps := make([]mend.AppendParams, len(owed))
	for i, o := range owed {
		raw, err := json.Marshal(eventData{BatchID: w.BatchID, MessageID: w.MessageID, Attempt: o.rec.Attempts + 1, Records: len(owed)})
		if err != nil {
			return fmt.Errorf("planner: encode event: %w", err)
		}
		ps[i] = mend.AppendParams{Source: o.rec.Source, RecordID: o.rec.ID, Version: o.rec.Version, Fence: &term,
			Kind: mend.EventWoken, Actor: p.cfg.Actor, OpID: mend.NewOpID(), Epoch: term.Epoch, Data: raw,
			State: mend.StateDone, Attempts: o.rec.Attempts + 1}
	}
	res, err := am.RecordAppendMany(ctx, ps)
	if err != nil {
		return fmt.Errorf("planner: mark %d records woken: %w", len(ps), err)
	}
	var errs []error
	for i, err := range res {
		if err != nil {
			errs = append(errs, fmt.Errorf("planner: record %s: append woken: %w", owed[i].rec.ID, err))
			continue
		}
		st.Woken++
		p.repaired(owed[i].rec, st)
	}
	return firstStop(errs)
}

package subscribe

// Open transactions: what each horizon sample learns of the server's
// transactions still open, when mend's user may read them, so that the
// ledger (ledger.go) holds a sample for as long as a transaction that
// began before it stays open, past the settle window (see the package
// doc, "Open transactions").

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"
)

// openReprobe is how often a subscription that may not read the open
// transactions tries again: a grant given while mend runs takes effect
// within it.
const openReprobe = time.Minute

// openReader reads the open transactions for the passes. Whether it may is
// found by trying the read, not from SHOW GRANTS.
type openReader struct {
	mu      sync.Mutex
	visible bool      // the last read succeeded
	hidden  time.Time // when the server last refused it; zero: never
	blind   bool      // tests only: never read them, as without the grant
	// last is how the last read went, for PassStats.OpenRead.
	last string
	// read replaces readOpen in tests (SetOpenRead): the server's
	// answers, a stale view among them, on cue.
	read func(context.Context, *sql.DB) (time.Time, error)
}

// SeesOpen reports whether the subscription's last pass was allowed to
// read the queue database's open transactions (mend's user holds PROCESS):
// then a watermark waits for a transaction that began before its sample
// however long it stays open; otherwise the settle window alone protects a
// late commit. A read that came back stale (innodb_trx's cache predating
// it) was allowed, so it counts: on a busy server other readers keep the
// cache stale for many passes in a row.
func (s *Subscriber) SeesOpen() bool {
	s.open.mu.Lock()
	defer s.open.mu.Unlock()
	return s.open.visible
}

// How a pass's read of the open transactions went (PassStats.OpenRead).
const (
	OpenUsable = "usable" // read, and the view is as new as the read
	OpenStale  = "stale"  // read, but innodb_trx's cache predates the read: other readers kept it from refreshing
	OpenHidden = "hidden" // refused: mend's user lacks PROCESS
	OpenFailed = "failed" // another error
)

// readOpen reads the open transactions for a sample just taken. A refusal
// makes the view openNone (the window alone decides), and the read is
// tried again openReprobe later; any other failure (a stale view among
// them) is openUnknown, and the samples since the last usable read wait
// for the next (see horizons).
func (s *Subscriber) readOpen(ctx context.Context) openView {
	r := &s.open
	r.mu.Lock()
	defer r.mu.Unlock()
	now := s.cfg.NowFunc()
	r.last = ""
	if r.blind || !r.hidden.IsZero() && now.Sub(r.hidden) < openReprobe {
		return openView{state: openNone}
	}
	read := readOpen
	if r.read != nil {
		read = r.read
	}
	oldest, err := read(ctx, s.cfg.DB)
	allowed := func() {
		if !r.visible {
			s.log.InfoContext(ctx, "the subscription sees the queue database's open transactions: a watermark waits for one that began before its sample, however long it stays open")
		}
		r.visible, r.hidden = true, time.Time{}
	}
	switch {
	case err == nil:
		allowed()
		r.last = OpenUsable
		return openView{state: openRead, oldest: oldest}
	case errors.Is(err, ErrOpenHidden):
		if r.visible || r.hidden.IsZero() {
			s.log.WarnContext(ctx, "the subscription cannot see the queue database's open transactions; a MoveToDLQ held open longer than the settle window can be lost",
				"settle", s.cfg.Settle.String(), "grant", OpenGrant(""), "err", err)
		}
		r.visible, r.hidden, r.last = false, now, OpenHidden
		return openView{state: openNone}
	case errors.Is(err, errOpenStale):
		// Another reader kept innodb_trx's cache from refreshing: common
		// with several replicas, and harmless while it passes.
		allowed()
		r.last = OpenStale
		s.log.DebugContext(ctx, "the queue database's view of its open transactions predates this read; samples since the last usable one wait", "err", err)
		return openView{state: openUnknown}
	default:
		r.last = OpenFailed
		s.log.WarnContext(ctx, "could not read the queue database's open transactions; samples since the last usable read wait", "err", err)
		return openView{state: openUnknown}
	}
}

// lastRead is how the last read went (PassStats.OpenRead).
func (r *openReader) lastRead() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

package fence

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// Defaults for Config.
const (
	// TTLDefault is a term's time to live by the database clock.
	TTLDefault = 15 * time.Second
	// RenewDivisorDefault: a zero RenewEvery means TTL/RenewDivisorDefault.
	RenewDivisorDefault = 3
	// MarginDivisorDefault: a zero SafetyMargin means TTL/MarginDivisorDefault.
	MarginDivisorDefault = 5
	// RetryEveryDefault is how often a blocking Acquire tries a held lease.
	RetryEveryDefault = time.Second
)

// ErrReleased is what Lease.Err reports after Release on a lease that was
// not lost before.
var ErrReleased = errors.New("fence: lease released")

// Store is the lease table as the fence needs it. *storage.DB implements it.
type Store interface {
	// LeaseAcquire takes queue's lease for holder for ttl if it is free or
	// expired by the database clock, with an epoch higher than any before.
	// Returns *mend.HeldError (ErrLeaseHeld) if a term is current.
	LeaseAcquire(ctx context.Context, queue, holder string, ttl time.Duration) (mend.Term, error)
	// LeaseRenew extends the exact term to NOW(6)+ttl. Returns
	// ErrLeaseLost, changing nothing, if the term expired or was replaced.
	LeaseRenew(ctx context.Context, term mend.Term, ttl time.Duration) error
	// LeaseRelease ends the exact term now. Returns ErrLeaseLost, changing
	// nothing, if it is not the current, unexpired term.
	LeaseRelease(ctx context.Context, term mend.Term) error
}

// Hooks observe leases, e.g. for metrics; every field is optional. They run
// on the lease's own goroutines and must not block.
type Hooks struct {
	// OnAcquired runs when a term is granted.
	OnAcquired func(term mend.Term)
	// OnRenew runs after each renew attempt with its latency and error
	// (nil: renewed).
	OnRenew func(term mend.Term, latency time.Duration, err error)
	// OnLost runs once when a lease is lost or stops being trusted, with
	// the reason (matching mend.ErrLeaseLost), also when Release finds the
	// term already over in the database. Not run for a clean Release.
	OnLost func(term mend.Term, reason error)
	// OnReleased runs after a lease was released.
	OnReleased func(term mend.Term)
}

// Config configures a Fence. The zero value is ready to use.
type Config struct {
	// Holder names this contender in the lease row and its history. Zero
	// means "<hostname>-<pid>-<random>", unique per Fence. Two Fences must
	// never share a holder name.
	Holder string
	// TTL is how long a term lasts by the database clock after each
	// acquire or renew. Zero means TTLDefault (15 s).
	TTL time.Duration
	// RenewEvery is the keepalive interval. Zero means TTL/3. It must be
	// shorter than TTL - SafetyMargin.
	RenewEvery time.Duration
	// SafetyMargin is how long before the database could let anyone else
	// in the holder stops trusting its lease. Zero means TTL/5.
	SafetyMargin time.Duration
	// RetryEvery is how often a blocking Acquire tries again while the
	// lease is held (with ±20% jitter, sooner when the term ends sooner).
	// Zero means RetryEveryDefault (1 s).
	RetryEvery time.Duration
	// Logger receives the fence's logs with component=fence. Nil discards.
	Logger *slog.Logger
	// Hooks observe leases.
	Hooks Hooks
	// NowFunc reads the monotonic clock the trust window is measured on.
	// Nil means time.Now (whose monotonic reading ignores wall-clock steps).
	// Only differences between its readings are used; they are never
	// compared with the database clock. SafetyMargin absorbs a clock that
	// runs slow by up to SafetyMargin/TTL; a slower clock or one stepped
	// back keeps trusting a term the database has ended, and then only the
	// fenced writes refuse it.
	NowFunc func() time.Time

	// beforeRenew (tests only) runs on the keepalive goroutine before each
	// renew; blocking it stands for a paused process.
	beforeRenew func(mend.Term)
}

func (c Config) withDefaults() Config {
	c.TTL = cmp.Or(c.TTL, TTLDefault)
	c.RenewEvery = cmp.Or(c.RenewEvery, c.TTL/RenewDivisorDefault)
	c.SafetyMargin = cmp.Or(c.SafetyMargin, c.TTL/MarginDivisorDefault)
	c.RetryEvery = cmp.Or(c.RetryEvery, RetryEveryDefault)
	if c.Holder == "" {
		c.Holder = defaultHolder()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.TTL < time.Millisecond:
		return &mend.ValidationError{Field: "ttl", Reason: fmt.Sprintf("must be at least 1ms, got %s", c.TTL)}
	case c.SafetyMargin < 0 || c.SafetyMargin >= c.TTL:
		return &mend.ValidationError{Field: "safety_margin", Reason: fmt.Sprintf("must be between 0 and the TTL (%s), got %s", c.TTL, c.SafetyMargin)}
	case c.RenewEvery <= 0 || c.RenewEvery >= c.TTL-c.SafetyMargin:
		return &mend.ValidationError{Field: "renew_every", Reason: fmt.Sprintf("must be positive and shorter than TTL - safety margin (%s), or the lease lapses between renews; got %s", c.TTL-c.SafetyMargin, c.RenewEvery)}
	case c.RetryEvery <= 0:
		return &mend.ValidationError{Field: "retry_every", Reason: fmt.Sprintf("must be positive, got %s", c.RetryEvery)}
	}
	return ValidateHolder(c.Holder)
}

// ValidateHolder checks a holder name before anything is connected: it is
// stored in the lease row, so it must be 1 to 255 bytes of valid UTF-8 (the
// store refuses anything else on every acquire, which would leave a daemon
// running that never repairs). Returns a *mend.ValidationError.
func ValidateHolder(holder string) error {
	if holder == "" || len(holder) > 255 || !utf8.ValidString(holder) {
		return &mend.ValidationError{Field: "holder", Reason: "must be 1 to 255 bytes of valid UTF-8"}
	}
	return nil
}

// DefaultHolder returns a holder name unique per call:
// "<hostname>-<pid>-<8 hex digits of randomness>". Hostname and pid alone
// collide across containers (pid 1, same hostname); the random suffix does
// not. cmd/mend uses it for its default --holder.
func DefaultHolder() string { return defaultHolder() }

func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "mend"
	}
	if len(host) > 200 {
		host = host[:200]
	}
	var b [4]byte
	_, _ = crand.Read(b[:]) // never fails
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Fence hands out per-queue leases to one holder. It is safe for concurrent
// use; each Lease it returns is independent.
type Fence struct {
	store Store
	cfg   Config
	log   *slog.Logger
}

// New returns a Fence over store. Returns an error matching mend.ErrInvalid
// if cfg is inconsistent.
func New(store Store, cfg Config) (*Fence, error) {
	if store == nil {
		return nil, &mend.ValidationError{Field: "store", Reason: "must be set"}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("fence: config: %w", err)
	}
	return &Fence{store: store, cfg: cfg, log: cfg.Logger.With("component", "fence", "holder", cfg.Holder)}, nil
}

// Holder returns the name this Fence contends under.
func (f *Fence) Holder() string { return f.cfg.Holder }

// TryAcquire makes one attempt to take queue's lease and returns it with
// its keepalive running. The lease lives until Release or loss; ctx bounds
// only the attempt.
//
// Returns *mend.HeldError (matching ErrLeaseHeld) if another term is
// current, also one of this holder's own; ErrInvalid for a bad queue; and
// the store's retryable errors (ErrBusy, ErrUnavailable, ErrAmbiguous) as
// they come.
func (f *Fence) TryAcquire(ctx context.Context, queue string) (*Lease, error) {
	start := f.cfg.NowFunc()
	term, err := f.store.LeaseAcquire(ctx, queue, f.cfg.Holder, f.cfg.TTL)
	if err != nil {
		var held *mend.HeldError
		if errors.As(err, &held) {
			return nil, held
		}
		return nil, fmt.Errorf("fence: acquire %q: %w", queue, err)
	}
	le := &Lease{
		term:   term,
		f:      f,
		log:    f.log.With("queue", term.Queue, "epoch", term.Epoch),
		done:   make(chan struct{}),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	le.log.InfoContext(ctx, "lease acquired", "ttl", f.cfg.TTL)
	if h := f.cfg.Hooks.OnAcquired; h != nil {
		h(term)
	}
	go le.keepalive(context.WithoutCancel(ctx), start)
	return le, nil
}

// Acquire takes queue's lease, waiting while another term is current and
// retrying transient failures, until ctx ends. The lease lives until
// Release or loss; ctx bounds only the wait.
//
// Returns ErrInvalid for a bad queue, and ctx's error (joined with the last
// refusal) when ctx ends first.
func (f *Fence) Acquire(ctx context.Context, queue string) (*Lease, error) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var last error // the latest refusal, reported if ctx ends first
	gaveUp := func() error {
		return errors.Join(fmt.Errorf("fence: acquire %q: %w", queue, context.Cause(ctx)), last)
	}
	for {
		le, err := f.TryAcquire(ctx, queue)
		if err == nil {
			return le, nil
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return nil, gaveUp()
		}
		last = err
		wait := jitter(f.cfg.RetryEvery)
		var held *mend.HeldError
		switch c := mend.Classify(err); {
		case errors.As(err, &held):
			// The database's own count of time left is only a hint for
			// when to look again; nothing compares clocks.
			if held.Remaining > 0 && held.Remaining < wait {
				wait = held.Remaining + time.Millisecond
			}
		case c == mend.ClassRetryable || c == mend.ClassAmbiguous:
			f.log.WarnContext(ctx, "acquire failed; trying again", "queue", queue, "err", err, "in", wait)
		default:
			return nil, err
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil, gaveUp()
		case <-timer.C:
		}
	}
}

// jitter spreads d by ±20% so contenders do not retry in lockstep.
func jitter(d time.Duration) time.Duration {
	spread := int64(d) / 5
	if spread <= 0 {
		return d
	}
	return d - time.Duration(spread) + time.Duration(rand.Int64N(2*spread+1))
}

// Lease is one granted term on a queue, kept alive in the background until
// Release or loss. Its methods are safe for concurrent use.
type Lease struct {
	term mend.Term
	f    *Fence
	log  *slog.Logger

	done   chan struct{} // closed on loss or release
	stop   chan struct{} // closed by Release
	exited chan struct{} // closed when the keepalive has returned

	mu      sync.Mutex
	err     error // why done is closed
	refused bool  // the store said the term is over: nothing to release

	releaseOnce sync.Once
	releaseErr  error
}

// Term returns the queue, holder and epoch every write under this lease is
// fenced with.
func (le *Lease) Term() mend.Term { return le.term }

// Done closes as soon as the lease is lost, a renew is refused, the trust
// window runs out without a successful renew, or Release is called.
func (le *Lease) Done() <-chan struct{} { return le.done }

// Err returns nil while the lease is held and trusted; after Done closes,
// an error matching mend.ErrLeaseLost saying why, or ErrReleased.
func (le *Lease) Err() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.err
}

// lose marks the lease lost once; refused says the store has ended the
// term, so Release has nothing left to do.
func (le *Lease) lose(ctx context.Context, reason error, refused bool) {
	le.mu.Lock()
	if le.err != nil {
		le.mu.Unlock()
		return
	}
	le.err, le.refused = reason, refused
	close(le.done)
	le.mu.Unlock()
	le.log.WarnContext(ctx, "lease lost", "reason", reason)
	if h := le.f.cfg.Hooks.OnLost; h != nil {
		h(le.term, reason)
	}
}

// Release stops the keepalive and ends the term in the database, so the
// next holder need not wait for it to expire. Stop writing before calling
// it. It is idempotent and safe after loss; later calls return the first
// call's result.
//
// Returns nil if the term had already ended (if the holder had not noticed,
// that is a loss: OnLost runs and Err reports it); the store's error
// otherwise (the term then simply expires by its TTL).
func (le *Lease) Release(ctx context.Context) error {
	le.releaseOnce.Do(func() { le.releaseErr = le.release(ctx) })
	return le.releaseErr
}

func (le *Lease) release(ctx context.Context) error {
	close(le.stop)
	<-le.exited
	le.mu.Lock()
	refused, wasLost := le.refused, le.err != nil
	if le.err == nil {
		le.err = ErrReleased
		close(le.done)
	}
	le.mu.Unlock()
	if refused {
		return nil
	}
	// A lease that merely stopped being trusted may still be current in
	// the database: ending it lets the next holder in sooner.
	err := le.f.store.LeaseRelease(ctx, le.term)
	if errors.Is(err, mend.ErrLeaseLost) {
		if !wasLost {
			// The term ran out (or was replaced) while this holder still
			// trusted it: a loss nobody saw, which the metrics must count.
			reason := fmt.Errorf("fence: release found the term over: %w", err)
			le.mu.Lock()
			le.err = reason
			le.mu.Unlock()
			le.log.WarnContext(ctx, "lease lost", "reason", reason)
			if h := le.f.cfg.Hooks.OnLost; h != nil {
				h(le.term, reason)
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("fence: release %s: %w", le.term, err)
	}
	le.log.InfoContext(ctx, "lease released")
	if h := le.f.cfg.Hooks.OnReleased; h != nil {
		h(le.term)
	}
	return nil
}

type renewResult struct {
	start time.Time
	err   error
}

// keepalive renews the term every RenewEvery and watches the trust window:
// start + TTL - SafetyMargin, where start is read before the acquire or
// the last successful renew was sent. The renew runs on its own goroutine
// so a hung database cannot hold the trust timer back.
func (le *Lease) keepalive(ctx context.Context, start time.Time) {
	defer close(le.exited)
	cfg := le.f.cfg
	now := cfg.NowFunc
	trustUntil := start.Add(cfg.TTL - cfg.SafetyMargin)
	renewAt := start.Add(cfg.RenewEvery)
	retry := max(cfg.RenewEvery/4, time.Millisecond)

	ctx, cancel := context.WithCancel(ctx)
	var results chan renewResult // non-nil while a renew is in flight
	defer func() {
		cancel()
		if results != nil {
			<-results
		}
	}()
	trustTimer := time.NewTimer(time.Hour)
	defer trustTimer.Stop()
	renewTimer := time.NewTimer(time.Hour)
	defer renewTimer.Stop()

	for {
		t := now()
		if !t.Before(trustUntil) {
			le.lose(ctx, fmt.Errorf("%w: trust window ran out %s after the last successful renew was sent",
				mend.ErrLeaseLost, cfg.TTL-cfg.SafetyMargin), false)
			return
		}
		trustTimer.Reset(trustUntil.Sub(t))
		renewC := renewTimer.C
		if results == nil {
			renewTimer.Reset(max(renewAt.Sub(t), 0))
		} else {
			renewC = nil
		}
		select {
		case <-le.stop:
			return
		case <-trustTimer.C:
		case <-renewC:
			if cfg.beforeRenew != nil {
				cfg.beforeRenew(le.term)
			}
			if !now().Before(trustUntil) {
				continue // lost while paused: the loop top says so
			}
			results = make(chan renewResult, 1)
			go func(start time.Time) {
				results <- renewResult{start: start, err: le.f.store.LeaseRenew(ctx, le.term, cfg.TTL)}
			}(now())
		case r := <-results:
			results = nil
			latency := now().Sub(r.start)
			if h := cfg.Hooks.OnRenew; h != nil {
				h(le.term, latency, r.err)
			}
			switch {
			case r.err == nil:
				trustUntil = later(trustUntil, r.start.Add(cfg.TTL-cfg.SafetyMargin))
				renewAt = r.start.Add(cfg.RenewEvery)
			case mend.Classify(r.err) == mend.ClassFenced:
				le.lose(ctx, fmt.Errorf("fence: renew refused: %w", r.err), true)
				return
			default:
				// Transient: try again soon; the trust window bounds it.
				le.log.WarnContext(ctx, "renew failed", "err", r.err, "latency", latency)
				renewAt = now().Add(retry)
			}
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

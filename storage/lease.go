package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/mendq/mend"
)

// How a lease term ended, as mend_lease_history.ended_how stores it: short
// codes of the schema, unexported since issue 30 so that the one vocabulary
// people read (the LeaseEnded* words below) has no exported twin.
const (
	// leaseCodeReleased: the holder released the term.
	leaseCodeReleased = "released"
	// leaseCodeExpired: the term ran out by the database clock and a later
	// acquire closed it; ended_at is the term's last expires_at.
	leaseCodeExpired = "expired"
)

// How a lease term ended, in the words every surface shows: mend lease
// list, mend status, mend lease history and the views mend_lease_status and
// mend_lease_terms. ended_how stores the short codes above (and
// leaseCodeOperator); these are what people read.
const (
	// LeaseEndedHolder: the holder released its term (a clean stop).
	LeaseEndedHolder = "holder released"
	// LeaseEndedOperator: an operator ended the term (mend lease release).
	LeaseEndedOperator = "operator released"
	// LeaseEndedExpired: the term ran out by the database clock without a
	// release (its holder died, hung or lost the database) and no later
	// term has taken the queue yet.
	LeaseEndedExpired = "expired"
	// LeaseEndedTakenOver: the term ran out without a release and a later
	// acquire took the queue (ended_how 'expired' in mend_lease_history).
	LeaseEndedTakenOver = "taken over"
)

// leaseEndedHow names a closed term's ending from ended_how as stored.
func leaseEndedHow(stored string) string {
	switch stored {
	case leaseCodeReleased:
		return LeaseEndedHolder
	case leaseCodeOperator:
		return LeaseEndedOperator
	case leaseCodeExpired:
		return LeaseEndedTakenOver
	}
	return stored
}

// maxLeaseTTL bounds a lease's time to live; a longer one is surely a unit
// mistake, and it keeps NOW(6) + INTERVAL far from DATETIME's range.
const maxLeaseTTL = 24 * time.Hour

// LeaseStatus is a queue's lease row as the database sees it.
type LeaseStatus struct {
	// Term is the latest term granted; Epoch 0 means never held.
	Term        mend.Term
	AcquiredAt  time.Time // database clock, UTC
	RenewedAt   time.Time
	ExpiresAt   time.Time
	Transitions int64 // acquires plus releases so far
	// Remaining is ExpiresAt - NOW(6) computed by the database; zero or
	// negative when the term has ended.
	Remaining time.Duration
	// Ended says how the latest term ended, once it has: LeaseEndedHolder,
	// LeaseEndedOperator (mend lease release), or LeaseEndedExpired for a
	// term that ran out by the database clock without a release (its holder
	// died, hung or lost the database). Empty while the term is live or the
	// queue was never held.
	Ended string
}

// Live reports whether the term was current when the status was read.
func (s LeaseStatus) Live() bool { return s.Term.Epoch > 0 && s.Remaining > 0 }

func validateHolder(holder string) error {
	if holder == "" || len(holder) > 255 || !utf8.ValidString(holder) {
		return &mend.ValidationError{Field: "holder", Reason: "must be 1 to 255 bytes of valid UTF-8 naming the contender"}
	}
	return nil
}

func validateTTL(ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > maxLeaseTTL {
		return &mend.ValidationError{Field: "ttl", Reason: fmt.Sprintf("must be between 1ms and %s, got %s", maxLeaseTTL, ttl)}
	}
	return nil
}

func validateTerm(term mend.Term) error {
	if err := mend.ValidateIdentity("queue", term.Queue, true); err != nil {
		return err
	}
	if err := validateHolder(term.Holder); err != nil {
		return err
	}
	if term.Epoch < 1 {
		return &mend.ValidationError{Field: "epoch", Reason: fmt.Sprintf("a granted term has epoch >= 1, got %d", term.Epoch)}
	}
	return nil
}

// The lease row is created free (expired at birth, epoch 0) the first time a
// queue is contended. It is never deleted: the epoch lives in it. NOW(6) is
// the statement's start, so after a lock wait it is early: a term judged
// expired is surely expired, one judged live may have just run out. The
// upsert's no-op assignment names holder, not queue: Vitess refuses a
// statement that assigns the sharding column (VT12001), even to itself.
const sqlLeaseLock = `-- name: LeaseLock
START TRANSACTION;
INSERT INTO mend_leases (queue, holder, epoch, acquired_at, renewed_at, expires_at, transitions)
VALUES (?, '', 0, NOW(6), NOW(6), NOW(6), 0)
ON DUPLICATE KEY UPDATE holder = holder;
SELECT holder, epoch, expires_at, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at) AS remaining_us
FROM mend_leases WHERE queue = ? FOR UPDATE`

// The second packet of an acquire, with the row locked by the first: close
// the term being replaced at the moment it ran out by the database clock
// (so history terms never overlap), take the row with the next epoch,
// report whether the take matched, and open the new term in history. The
// history row is reached through subqueries on the lease row by queue, not
// an UPDATE ... JOIN: Vitess (v0.24) splits an UPDATE with a JOIN into a
// locking read and a second UPDATE it sends to every shard, where these
// single-table statements with same-queue subqueries go whole to one shard.
const sqlLeaseTake = `-- name: LeaseTake
UPDATE mend_lease_history
SET ended_at = (SELECT expires_at FROM mend_leases WHERE queue = ?), ended_how = 'expired'
WHERE queue = ? AND epoch = (SELECT epoch FROM mend_leases WHERE queue = ?) AND ended_at IS NULL;
UPDATE mend_leases SET
	holder = ?,
	epoch = epoch + 1,
	acquired_at = NOW(6),
	renewed_at = NOW(6),
	expires_at = NOW(6) + INTERVAL ? MICROSECOND,
	transitions = transitions + 1
WHERE queue = ? AND epoch = ?;
SELECT ROW_COUNT() AS taken;
INSERT INTO mend_lease_history (queue, epoch, holder, acquired_at)
SELECT queue, epoch, holder, acquired_at FROM mend_leases WHERE queue = ?`

// LeaseAcquire takes queue's lease for holder for ttl if it is free or
// expired by the database clock, and returns the new term. The epoch is one
// more than the queue's previous one, so it strictly increases and is never
// reused, also after a release. The term is recorded in mend_lease_history
// and the term it replaces is closed there as expired. The lock taken on the
// lease row waits for in-flight fenced transactions of the old term.
//
// Returns *mend.HeldError (matching ErrLeaseHeld) if a term is current, also
// when holder itself holds it: a holder never re-enters a term it may have
// lost track of. Returns ErrInvalid for a bad queue, holder or ttl.
func (d *DB) LeaseAcquire(ctx context.Context, queue, holder string, ttl time.Duration) (mend.Term, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return mend.Term{}, err
	}
	if err := validateHolder(holder); err != nil {
		return mend.Term{}, err
	}
	if err := validateTTL(ttl); err != nil {
		return mend.Term{}, err
	}
	term := mend.Term{Queue: queue, Holder: holder}
	// Three round trips: create-and-lock, take, COMMIT.
	err := d.withBatchTx(ctx, "LeaseAcquire", "", func(ctx context.Context, tx *batchTx) error {
		var cur struct {
			Holder      []byte    `db:"holder"`
			Epoch       int64     `db:"epoch"`
			ExpiresAt   time.Time `db:"expires_at"`
			RemainingUS int64     `db:"remaining_us"`
		}
		if err := tx.query(ctx, sqlLeaseLock, []any{queue, queue}, scanOne(&cur)); err != nil {
			return fmt.Errorf("lock lease row: %w", err)
		}
		if cur.Epoch > 0 && cur.RemainingUS > 0 {
			return &mend.HeldError{Queue: queue, Holder: string(cur.Holder), Epoch: cur.Epoch,
				ExpiresAt: cur.ExpiresAt, Remaining: time.Duration(cur.RemainingUS) * time.Microsecond}
		}
		var taken struct {
			N int64 `db:"taken"`
		}
		// A duplicate (queue, epoch) in history would mean an epoch
		// reused: the lease row was deleted by hand. The error refuses
		// rather than fork history.
		if err := tx.query(ctx, sqlLeaseTake, []any{queue, queue, queue, holder, ttl.Microseconds(), queue, cur.Epoch, queue}, scanOne(&taken)); err != nil {
			return fmt.Errorf("take lease: %w", err)
		}
		if taken.N != 1 {
			// The row is locked by us: anything else is a broken invariant.
			return fmt.Errorf("take lease: %d rows changed, want 1", taken.N)
		}
		term.Epoch = cur.Epoch + 1
		return nil
	})
	if err != nil {
		var held *mend.HeldError
		if errors.As(err, &held) {
			return mend.Term{}, held
		}
		return mend.Term{}, fmt.Errorf("storage: acquire lease on %q: %w", queue, err)
	}
	return term, nil
}

// A renewal first locks the lease row, then judges the term in a statement
// of its own: NOW(6) is a statement's start, so the UPDATE's is taken with
// the lock already held. One statement doing both (as before issue 35) took
// NOW(6) before its lock wait: a renewal that waited past its term's end
// (behind any fenced write holding the row shared) still found the term
// live at that early instant and extended it, reviving a term that a reader
// or a refused write had already seen expire, and undoing a release that
// committed while it waited. In a transaction, a renewal whose client gave
// up (a cut connection) can no longer commit later either: the server rolls
// it back, unless COMMIT itself was sent (then it is ambiguous).
const sqlLeaseRenew = `-- name: LeaseRenew
START TRANSACTION;
SELECT holder AS renew_holder FROM mend_leases WHERE queue = ? FOR UPDATE;
UPDATE mend_leases SET renewed_at = NOW(6), expires_at = NOW(6) + INTERVAL ? MICROSECOND
WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6);
SELECT ROW_COUNT() AS changed`

// LeaseRenew extends term to NOW(6)+ttl if it is still the queue's current,
// unexpired term when the renewal holds the lease row: a term that ran out
// while the renewal waited for the row stays expired.
//
// Returns ErrLeaseLost if the term has expired by the database clock or a
// later term replaced it (nothing is changed then), ErrInvalid for a bad
// term or ttl, and an error matching ErrAmbiguous if the COMMIT's outcome is
// unknown.
func (d *DB) LeaseRenew(ctx context.Context, term mend.Term, ttl time.Duration) error {
	if err := validateTerm(term); err != nil {
		return err
	}
	if err := validateTTL(ttl); err != nil {
		return err
	}
	// Two round trips: lock-and-renew, COMMIT.
	err := d.withBatchTx(ctx, "LeaseRenew", "", func(ctx context.Context, tx *batchTx) error {
		var row struct {
			Holder []byte `db:"renew_holder"`
		}
		var found bool
		var changed struct {
			N int64 `db:"changed"`
		}
		args := []any{term.Queue, ttl.Microseconds(), term.Queue, term.Holder, term.Epoch}
		if err := tx.query(ctx, sqlLeaseRenew, args, scanOptional(&row, &found), scanOne(&changed)); err != nil {
			return err
		}
		if changed.N == 0 {
			return fmt.Errorf("%w: term is no longer current", mend.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: renew lease (%s): %w", term, err)
	}
	return nil
}

// One packet ends the term in the lease row and then in history, both at
// the same NOW(6) (history copies the lease row's new expires_at), in one
// transaction, and reports whether it did. Single-table UPDATEs, with the
// lease row reached by a same-queue subquery: see sqlLeaseTake for why not
// one UPDATE ... JOIN of both tables.
const sqlLeaseRelease = `-- name: LeaseRelease
START TRANSACTION;
UPDATE mend_leases SET expires_at = NOW(6), transitions = transitions + 1
WHERE queue = ? AND holder = ? AND epoch = ? AND expires_at > NOW(6);
SET @mend_changed = ROW_COUNT();
UPDATE mend_lease_history
SET ended_at = (SELECT expires_at FROM mend_leases WHERE queue = ?), ended_how = 'released'
WHERE queue = ? AND epoch = ? AND @mend_changed = 1;
SELECT @mend_changed AS changed`

// LeaseRelease ends term now, so the next acquire need not wait for it to
// expire. The epoch is kept: the next term gets a higher one.
//
// Returns ErrLeaseLost if term is not the current, unexpired term; nothing
// is changed then (a newer term is never touched). A caller that is
// stepping back may ignore that error. Returns ErrInvalid for a bad term,
// and an error matching ErrAmbiguous if the COMMIT's outcome is unknown.
func (d *DB) LeaseRelease(ctx context.Context, term mend.Term) error {
	if err := validateTerm(term); err != nil {
		return err
	}
	err := d.withBatchTx(ctx, "LeaseRelease", "", func(ctx context.Context, tx *batchTx) error {
		var changed struct {
			N int64 `db:"changed"`
		}
		args := []any{term.Queue, term.Holder, term.Epoch, term.Queue, term.Queue, term.Epoch}
		if err := tx.query(ctx, sqlLeaseRelease, args, scanOne(&changed)); err != nil {
			return err
		}
		if changed.N == 0 {
			return fmt.Errorf("%w: term is no longer current", mend.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: release lease (%s): %w", term, err)
	}
	return nil
}

// leaseRow is a mend_leases row with the time left by the database clock.
type leaseRow struct {
	Queue       []byte    `db:"queue"`
	Holder      []byte    `db:"holder"`
	Epoch       int64     `db:"epoch"`
	AcquiredAt  time.Time `db:"acquired_at"`
	RenewedAt   time.Time `db:"renewed_at"`
	ExpiresAt   time.Time `db:"expires_at"`
	Transitions int64     `db:"transitions"`
	RemainingUS int64     `db:"remaining_us"`
	EndedHow    string    `db:"ended_how"`
}

func (r leaseRow) status() LeaseStatus {
	st := LeaseStatus{
		Term:       mend.Term{Queue: string(r.Queue), Holder: string(r.Holder), Epoch: r.Epoch},
		AcquiredAt: r.AcquiredAt, RenewedAt: r.RenewedAt, ExpiresAt: r.ExpiresAt,
		Transitions: r.Transitions, Remaining: time.Duration(r.RemainingUS) * time.Microsecond,
	}
	switch {
	case st.Term.Epoch == 0 || st.Live():
	case r.EndedHow == leaseCodeReleased || r.EndedHow == leaseCodeOperator:
		st.Ended = leaseEndedHow(r.EndedHow)
	default:
		// Not released and past expires_at: history closes it only at the
		// next acquire, but it ended when it ran out.
		st.Ended = LeaseEndedExpired
	}
	return st
}

// leaseSelect is the select list of a lease row with the time left and how
// its latest term ended, from mend_leases l joined with mend_lease_history h.
const leaseSelect = `SELECT ` + freshRead + `l.queue, l.holder, l.epoch, l.acquired_at, l.renewed_at, l.expires_at, l.transitions,
	TIMESTAMPDIFF(MICROSECOND, NOW(6), l.expires_at) AS remaining_us, COALESCE(h.ended_how, '') AS ended_how
FROM mend_leases l LEFT JOIN mend_lease_history h ON h.queue = l.queue AND h.epoch = l.epoch`

const sqlLeaseGet = `-- name: LeaseGet
` + leaseSelect + ` WHERE l.queue = ?`

// LeaseGet returns queue's lease as the database sees it now.
//
// Returns ErrNotFound if the queue's lease was never contended, ErrInvalid
// for a bad queue.
func (d *DB) LeaseGet(ctx context.Context, queue string) (LeaseStatus, error) {
	if err := mend.ValidateIdentity("queue", queue, true); err != nil {
		return LeaseStatus{}, err
	}
	var row leaseRow
	if err := d.db.GetContext(ctx, &row, sqlLeaseGet, queue); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return LeaseStatus{}, fmt.Errorf("storage: get lease: %w: queue %q was never leased", mend.ErrNotFound, queue)
		}
		return LeaseStatus{}, fmt.Errorf("storage: get lease: %w", translate(err))
	}
	return row.status(), nil
}

const sqlLeaseGetMany = `-- name: LeaseGetMany
` + leaseSelect + ` WHERE l.queue IN (%s)`

// LeaseGetMany is LeaseGet for several leases in one statement: the
// leases of queues, as the database sees them now, in no particular order;
// a queue whose lease was never contended has none.
//
// Returns ErrInvalid for a bad queue.
func (d *DB) LeaseGetMany(ctx context.Context, queues []string) ([]LeaseStatus, error) {
	if len(queues) == 0 {
		return nil, nil
	}
	args := make([]any, len(queues))
	for i, q := range queues {
		if err := mend.ValidateIdentity("queue", q, true); err != nil {
			return nil, err
		}
		args[i] = q
	}
	var rows []leaseRow
	if err := d.db.SelectContext(ctx, &rows, fmt.Sprintf(sqlLeaseGetMany, placeholders(len(queues))), args...); err != nil {
		return nil, fmt.Errorf("storage: get %d leases: %w", len(queues), translate(err))
	}
	out := make([]LeaseStatus, len(rows))
	for i, r := range rows {
		out[i] = r.status()
	}
	return out, nil
}

// NOW(6) is the statement's start; after waiting for a takeover's lock the
// read sees the new term and refuses. While this shared lock is held no
// takeover can commit, so the transaction's writes precede any later term's.
// LeasesLive returns the names among names whose lease has a current term
// by the database clock, in no particular order: LeaseGetMany's
// statement. The reconcilers find the working replicas by their slots with
// it (reconcile.LeaseCounter).
//
// Returns ErrInvalid for a bad name.
func (d *DB) LeasesLive(ctx context.Context, names []string) ([]string, error) {
	sts, err := d.LeaseGetMany(ctx, names)
	if err != nil {
		return nil, err
	}
	var live []string
	for _, st := range sts {
		if st.Live() {
			live = append(live, st.Term.Queue)
		}
	}
	return live, nil
}

const sqlLeaseCheckStmt = `SELECT holder, epoch, expires_at > NOW(6) AS live
FROM mend_leases WHERE queue = ? LOCK IN SHARE MODE`

// leaseCheckRow is the lease row as a fenced write reads it.
type leaseCheckRow struct {
	Holder []byte `db:"holder"`
	Epoch  int64  `db:"epoch"`
	Live   bool   `db:"live"`
}

// check says whether term may write, given the lease row read (found
// false: the queue has no lease row). A mismatch matches ErrFenced.
func (cur leaseCheckRow) check(term mend.Term, found bool) error {
	switch {
	case !found:
		return fmt.Errorf("%w: queue %q has no lease (writer claims epoch %d)", mend.ErrFenced, term.Queue, term.Epoch)
	case string(cur.Holder) != term.Holder || cur.Epoch != term.Epoch:
		return fmt.Errorf("%w: writer %q at epoch %d, but the lease on queue %q is at epoch %d held by %q",
			mend.ErrFenced, term.Holder, term.Epoch, term.Queue, cur.Epoch, cur.Holder)
	case !cur.Live:
		return fmt.Errorf("%w: term of %q at epoch %d on queue %q has expired by the database clock",
			mend.ErrFenced, term.Holder, term.Epoch, term.Queue)
	}
	return nil
}

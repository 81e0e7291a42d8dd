package subscribe

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// SetSettle overrides the settle window, including to zero, which Config
// cannot express: the negative control of the out-of-order test.
func SetSettle(s *Subscriber, d time.Duration) {
	s.cfg.Settle, s.settle, s.horizons.settle, s.settleRead = d, d, d, true
}

// SQLLag is the lag query, for the plan test.
const SQLLag = sqlLag

// PlantMembershipBehind re-plants the bug of issue 27 where membership ran
// only inside a recording pass; the returned func undoes it. Only a test
// that is not parallel may call it (no other test runs meanwhile).
func PlantMembershipBehind() (undo func()) {
	planted.membershipBehind = true
	return func() { planted.membershipBehind = false }
}

// BlindToOpen makes s read no open transactions, as without the grant: the
// controls of the settle window use it on a server where the test's user
// may read them.
func BlindToOpen(s *Subscriber) { s.open.blind = true }

// SetOpenRead makes s answer its reads of the open transactions from read
// instead of the server.
func SetOpenRead(s *Subscriber, read func(context.Context, *sql.DB) (time.Time, error)) {
	s.open.mu.Lock()
	defer s.open.mu.Unlock()
	s.open.read = read
}

// ReadOpen is the server read SetOpenRead replaces.
var ReadOpen = readOpen

// ErrOpenStale is the error of a read whose view predates it.
var ErrOpenStale = errOpenStale

// OpenTrxRead runs the innodb_trx read of the open transactions alone,
// as readOpen does first: whether the view showed the reader's own
// transaction (was fresh), and the read's error.
func OpenTrxRead(ctx context.Context, db *sql.DB) (fresh bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	var one int
	var current sql.NullString
	if err := tx.QueryRowContext(ctx, sqlOpenTouch).Scan(&one, &current); err != nil {
		return false, err
	}
	_, fresh, err = openFromTrx(ctx, tx, newNonce())
	return fresh, err
}

// OpenTrxView is OpenTrxRead with the other sessions the view shows.
func OpenTrxView(ctx context.Context, db *sql.DB) (fresh bool, sessions []int64, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, nil, err
	}
	defer func() { _ = tx.Rollback() }()
	var one int
	var current sql.NullString
	if err := tx.QueryRowContext(ctx, sqlOpenTouch).Scan(&one, &current); err != nil {
		return false, nil, err
	}
	others, fresh, err := openFromTrx(ctx, tx, newNonce())
	for _, o := range others {
		sessions = append(sessions, o.session)
	}
	return fresh, sessions, err
}

// ErrStatusInFlux marks a monitor read that caught a transaction between
// states: the subscription tries again at its next pass, a test at once.
var ErrStatusInFlux = errStatusInFlux

// OpenStatusRead runs the InnoDB monitor's read of the open transactions
// alone, as readOpen does when innodb_trx fails: each other session's
// earliest start by the server's clock.
func OpenStatusRead(ctx context.Context, db *sql.DB) (map[int64]time.Time, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	open, err := openFromStatus(ctx, tx)
	if err != nil {
		return nil, err
	}
	out := map[int64]time.Time{}
	for _, o := range open {
		out[o.session] = o.started.Time
	}
	return out, nil
}

// Plant sets the planted variant named (see planted) for the caller's
// test; the returned func undoes it. Only a test that is not parallel may
// call it.
func Plant(name string) (undo func()) {
	flags := map[string]*bool{"outageCountsRow": &planted.outageCountsRow, "parkSwallows": &planted.parkSwallows,
		"joinedEarly": &planted.joinedEarly, "keepFailedJoins": &planted.keepFailedJoins, "drainUnbounded": &planted.drainUnbounded, "trustSessionAge": &planted.trustSessionAge}
	f := flags[name]
	*f = true
	return func() { *f = false }
}

// MembershipStep runs one membership step alone, as Run's membership loop
// does while a recording pass runs long (no recording pass reloads the
// joined partitions meanwhile).
func MembershipStep(ctx context.Context, s *Subscriber) (int, error) { return s.membershipStep(ctx) }

// SessionAges is what a reader's process lists tell of its sessions'
// connections (sessionAges); the zero value is ready to use.
type SessionAges = sessionAges

// StatusOldest reads the open transactions as readOpen does when
// innodb_trx's view is stale (from the InnoDB monitor, live), with ages
// kept as a Subscriber keeps them: the oldest other session's transaction
// in db's current database, and when it began (zero: none open).
//
// A read that caught another session's transaction between states (the
// subscription's next pass reads again) is read again here, up to 50
// times: the tests that call it run beside other tests' transactions.
func StatusOldest(ctx context.Context, db *sql.DB, ages *SessionAges) (session int64, began time.Time, err error) {
	for range 50 {
		session, began, err = statusOldestOnce(ctx, db, ages)
		if !errors.Is(err, errStatusInFlux) {
			return session, began, err
		}
		// An outside server's state, polled: a commit in memory lasts
		// microseconds.
		select {
		case <-ctx.Done():
			return 0, time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return session, began, err
}

func statusOldestOnce(ctx context.Context, db *sql.DB, ages *SessionAges) (session int64, began time.Time, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, time.Time{}, err
	}
	defer func() { _ = tx.Rollback() }()
	var one int
	var current sql.NullString
	if err := tx.QueryRowContext(ctx, sqlOpenTouch).Scan(&one, &current); err != nil {
		return 0, time.Time{}, err
	}
	others, err := openFromStatus(ctx, tx)
	if err != nil {
		return 0, time.Time{}, err
	}
	o, err := oldestListed(ctx, tx, others, current, ages)
	return o.session, o.started.Time, err
}

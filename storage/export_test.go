package storage

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// SetBeforeCommit installs a hook that runs just before COMMIT is sent.
func SetBeforeCommit(d *DB, f func(op string)) { d.beforeCommit = f }

// SetAfterAppendTogether installs a hook that runs after RecordAppendMany's
// all-at-once try; missed reports that a record missed and the records were
// appended one by one.
func SetAfterAppendTogether(d *DB, f func(missed bool)) { d.afterAppendTogether = f }

// DropAppendTogetherGuard removes the condition that keeps
// RecordAppendMany's all-at-once try from inserting events when a record
// missed: a planted bug, for a negative control.
func DropAppendTogetherGuard(d *DB) { d.appendTogetherUnguarded = true }

// SetAfterPruneSelect installs a hook that runs between PruneDone's listing
// of candidates and their deletion.
func SetAfterPruneSelect(d *DB, f func()) { d.afterPruneSelect = f }

// The statements whose plans TestDueQueriesUseTheirIndexes checks.
const (
	SQLRecordsDue = sqlRecordsDue
	SQLQueuesDue  = sqlQueuesDue
)

// CheckTopologyVars runs the topology checks on given server variables.
func CheckTopologyVars(vars map[string]string) error {
	if err := checkMultiPrimary(vars); err != nil {
		return err
	}
	return checkBinlog(vars)
}

// InTx runs fn in one of the store's own transactions, begun the way every
// store transaction is.
func InTx(d *DB, ctx context.Context, fn func(ctx context.Context, tx *sqlx.Tx) error) error {
	return d.withTx(ctx, "test", "", fn)
}

// The codes mend_lease_history.ended_how stores, for tests that read the
// table raw (every surface shows the LeaseEnded* words instead).
const (
	LeaseCodeReleased = leaseCodeReleased
	LeaseCodeExpired  = leaseCodeExpired
	LeaseCodeOperator = leaseCodeOperator
)

package subscribe

// The settle window's bound from the server: every wait a MoveToDLQ can
// spend between allocating its offset and committing. The real MoveToDLQ
// is SELECT, INSERT into the DLQ topic (the offset is allocated here, and
// the insert can then wait on a lock of its unique key), DELETE of the
// original (which can wait on the original row's lock), COMMIT (which,
// with semi-synchronous replication, waits for a replica's
// acknowledgement up to its timeout). Two lock waits, then the commit's.

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mendq/mend/internal/mysqlx"
)

// The server's default lock wait for the sessions of the host's queue
// (MoveToDLQ's among them): how long each statement that may wait on a
// lock after the offset is allocated waits before it fails.
const sqlLockWait = "-- name: SubscribeLockWait\n" +
	"SELECT @@GLOBAL.innodb_lock_wait_timeout"

// The semi-synchronous replication settings, under either name (MySQL's
// rpl_semi_sync_source_* since 8.0.26, rpl_semi_sync_master_* before and
// on MariaDB); none when the plugin is not loaded.
const sqlSemiSync = "-- name: SubscribeSemiSync\n" +
	"SHOW GLOBAL VARIABLES WHERE Variable_name IN ('rpl_semi_sync_master_enabled', 'rpl_semi_sync_master_timeout', 'rpl_semi_sync_source_enabled', 'rpl_semi_sync_source_timeout')"

// Waits is every wait a MoveToDLQ can spend after allocating its offset,
// as the queue database's settings bound them.
type Waits struct {
	// LockWait is innodb_lock_wait_timeout: the INSERT and the DELETE
	// after it may each wait this long on a lock.
	LockWait time.Duration
	// SemiSync is the semi-synchronous commit's wait for a replica
	// (rpl_semi_sync_*_timeout) where the server has it enabled, else 0.
	SemiSync time.Duration
}

// Bound is the longest a MoveToDLQ's transaction can stay open after its
// offset is allocated without any wait timing out: two lock waits plus
// the semi-synchronous commit's.
func (w Waits) Bound() time.Duration {
	if planted.oneLockWait {
		return w.LockWait + w.SemiSync
	}
	return 2*w.LockWait + w.SemiSync
}

// Covers reports whether a settle window covers every wait, with
// SettleMargin to spare: the bound SettleFor applies and doctor checks.
func (w Waits) Covers(settle time.Duration) bool { return settle >= w.Bound()+SettleMargin }

// String names the waits, for logs and doctor.
func (w Waits) String() string {
	s := fmt.Sprintf("2 x innodb_lock_wait_timeout %s", w.LockWait)
	if w.SemiSync > 0 {
		s += fmt.Sprintf(" + semi-sync commit timeout %s", w.SemiSync)
	}
	return s
}

// SettleFor is the settle window for a queue database whose waits are w:
// SettleDefault, or w's bound plus SettleMargin when that is longer.
func SettleFor(w Waits) time.Duration { return settleFor(w, SettleDefault, SettleMargin) }

// settleFor is SettleFor with its floor and margin given: the simulation
// runs the same arithmetic at its own time scale.
func settleFor(w Waits, floor, margin time.Duration) time.Duration {
	switch {
	case planted.settleNotRaised:
		return floor
	case planted.noMargin:
		return max(floor, w.Bound())
	}
	return max(floor, w.Bound()+margin)
}

// LockWaitTimeout reads the queue database's innodb_lock_wait_timeout.
func LockWaitTimeout(ctx context.Context, db *sql.DB) (time.Duration, error) {
	var secs uint64
	if err := db.QueryRowContext(ctx, sqlLockWait).Scan(&secs); err != nil {
		return 0, fmt.Errorf("subscribe: read innodb_lock_wait_timeout: %w", mysqlx.Translate(err))
	}
	return time.Duration(min(secs, 1<<30)) * time.Second, nil
}

// ReadWaits reads the queue database's waits (see Waits): the settle
// window must cover them (SettleFor, Covers), or a MoveToDLQ that waited
// after allocating its offset can commit below the watermark.
func ReadWaits(ctx context.Context, db *sql.DB) (Waits, error) {
	lw, err := LockWaitTimeout(ctx, db)
	if err != nil {
		return Waits{}, err
	}
	w := Waits{LockWait: lw}
	rows, err := db.QueryContext(ctx, sqlSemiSync)
	if err != nil {
		return Waits{}, fmt.Errorf("subscribe: read the semi-sync settings: %w", mysqlx.Translate(err))
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return Waits{}, fmt.Errorf("subscribe: read the semi-sync settings: %w", err)
		}
		vars[strings.ToLower(name)] = value
	}
	if err := rows.Err(); err != nil {
		return Waits{}, fmt.Errorf("subscribe: read the semi-sync settings: %w", mysqlx.Translate(err))
	}
	w.SemiSync = semiSyncWait(vars)
	return w, nil
}

// semiSyncWait is the semi-synchronous commit's wait from the server's
// variables (lower-case names): the timeout (milliseconds) of whichever
// of the source or master spelling is enabled, 0 when neither is.
func semiSyncWait(vars map[string]string) time.Duration {
	var out time.Duration
	for _, side := range []string{"source", "master"} {
		if !strings.EqualFold(vars["rpl_semi_sync_"+side+"_enabled"], "ON") && vars["rpl_semi_sync_"+side+"_enabled"] != "1" {
			continue
		}
		ms, err := strconv.ParseUint(vars["rpl_semi_sync_"+side+"_timeout"], 10, 64)
		if err != nil {
			ms = 10_000 // the servers' default
		}
		out = max(out, time.Duration(min(ms, 1<<40))*time.Millisecond)
	}
	return out
}

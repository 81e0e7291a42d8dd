package subscribe

// The settle window's bound from the server: every wait a MoveToDLQ can
// spend between allocating its offset and committing.

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/mendq/mend/internal/mysqlx"
)

// The server's default lock wait for the sessions of the host's queue
// (MoveToDLQ's among them): how long an INSERT that allocated an offset
// may wait on a lock before it commits or fails.
const sqlLockWait = "-- name: SubscribeLockWait\n" +
	"SELECT @@GLOBAL.innodb_lock_wait_timeout"

// LockWaitTimeout reads the queue database's innodb_lock_wait_timeout:
// the settle window must exceed it (SettleFor), or a MoveToDLQ that waited
// on a lock after allocating its offset can commit below the watermark.
func LockWaitTimeout(ctx context.Context, db *sql.DB) (time.Duration, error) {
	var secs uint64
	if err := db.QueryRowContext(ctx, sqlLockWait).Scan(&secs); err != nil {
		return 0, fmt.Errorf("subscribe: read innodb_lock_wait_timeout: %w", mysqlx.Translate(err))
	}
	return time.Duration(min(secs, 1<<30)) * time.Second, nil
}

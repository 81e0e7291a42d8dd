package binlog

import (
	"context"
	"errors"
	"net"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
)

// Roles a Reader reports in Status.Role.
const (
	// RoleReader holds the reader's lease and streams.
	RoleReader = "reader"
	// RoleStandby waits for the lease another replica holds.
	RoleStandby = "standby"
	// RoleRetrying lost its last term to a failure (Status.LastErr,
	// Status.Failures) and tries again after a pause: nothing is read
	// meanwhile, and nobody else reads unless another replica takes the
	// lease.
	RoleRetrying = "retrying"
	// RoleStopped is not running: Run has not started, or has returned
	// because its context ended.
	RoleStopped = "stopped"
)

// Failure reasons, the label FailureReason gives a failed term (mend run's
// mend_binlog_failures_total{reason}).
const (
	// FailAuth: the queue database refused the user or password (a
	// rotated secret not yet in the DSN file, a revoked account).
	FailAuth = "auth"
	// FailGrant: the user lacks a privilege the reader needs (REPLICATION
	// SLAVE or CLIENT, SELECT on queue_messages).
	FailGrant = "grant"
	// FailSetting: the server's binary-log settings do not allow reading
	// (log_bin off, binlog_format, binlog_row_image, a filter leaving the
	// queue schema out).
	FailSetting = "setting"
	// FailConnect: the queue database could not be reached or the
	// connection broke.
	FailConnect = "connect"
	// FailGTID: the server refused the GTID state the reader resumed from.
	FailGTID = "gtid"
	// FailColumns: a row of queue_messages could not be matched to its
	// columns (ErrColumns).
	FailColumns = "columns"
	// FailStore: mend's own database failed (recording, saving).
	FailStore = "store"
	// FailLease: the reader's lease ended under it.
	FailLease = "lease"
	// FailConfig: the reader's configuration cannot work (ErrConfig).
	FailConfig = "config"
	// FailMoved: the log read is no longer the server's (a binary log
	// reset, or the DSN now reaching another server, a failover behind a
	// name or proxy); the next term reads the server the DSN reaches.
	FailMoved = "moved"
	// FailOther is anything else.
	FailOther = "other"
)

// FailureReasons lists every reason FailureReason returns.
var FailureReasons = []string{FailAuth, FailGrant, FailSetting, FailConnect, FailGTID, FailColumns, FailStore, FailLease, FailConfig, FailMoved, FailOther}

// FailureReason classifies a failed term's error (a Hooks.OnFailed
// argument) into one of FailureReasons.
func FailureReason(err error) string {
	var me *gomysql.MyError
	if errors.As(err, &me) {
		switch me.Code {
		case 1045:
			return FailAuth
		case 1227, 1142, 1044, 1143:
			return FailGrant
		case gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, 1943:
			return FailGTID
		}
	}
	switch n := mysqlx.ErrNumber(err); n {
	case 1045:
		return FailAuth
	case 1227, 1142, 1044, 1143:
		return FailGrant
	}
	var ne net.Error
	switch {
	case errors.Is(err, ErrConfig):
		return FailConfig
	case errors.Is(err, errNoBinlog):
		return FailSetting
	case errors.Is(err, errLogGone):
		return FailMoved
	case errors.Is(err, ErrColumns):
		return FailColumns
	case errors.Is(err, ErrNoReplicationClient):
		return FailGrant
	case errors.Is(err, mend.ErrFenced), errors.Is(err, mend.ErrLeaseLost), errors.Is(err, errLeaseEnded):
		return FailLease
	case errors.Is(err, errStore):
		return FailStore
	case errors.As(err, &ne), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errConnect):
		return FailConnect
	}
	return FailOther
}

var (
	// errStore marks a failure of mend's own database.
	errStore = errors.New("binlog: mend's database")
	// errConnect marks a failure to reach or read the queue database.
	errConnect = errors.New("binlog: the queue database")
	// errLeaseEnded marks a term whose lease ended.
	errLeaseEnded = errors.New("binlog: the reader's lease ended")
)

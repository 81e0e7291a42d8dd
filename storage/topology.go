package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/mendq/mend"
)

// ErrTopology is returned for a server topology the fence cannot hold on.
// It matches mend.ErrInvalid.
var ErrTopology = fmt.Errorf("%w: unsupported server topology", mend.ErrInvalid)

// The fence relies on one InnoDB lock manager: a fenced write reads the
// lease row under a shared lock and a takeover needs it exclusively. On a
// multi-primary cluster (Galera, Group Replication in multi-primary mode) a
// row only read is not part of the write set that certification checks, so
// a fenced write on one node and a takeover on another both commit.
// SHOW VARIABLES with a WHERE list is portable and answers nothing for a
// variable the server does not have (MySQL has no wsrep_on).
const sqlTopology = `-- name: Topology
SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'group_replication_single_primary_mode',
	'group_replication_group_name', 'log_bin', 'binlog_format')`

// CheckTopology reads the server's settings and reports what would break
// mend: a multi-primary cluster (where the fence does not hold) or
// statement-based binary logging (which refuses READ COMMITTED writes).
// Supported: a single primary, with asynchronous or semi-synchronous
// replicas used for reads only.
//
// Returns an error matching ErrTopology (and mend.ErrInvalid) naming the
// setting to change.
func (d *DB) CheckTopology(ctx context.Context) error { return CheckTopology(ctx, d.db.DB) }

// CheckTopology is (*DB).CheckTopology on any connection pool to the server,
// for mend doctor, which inspects a server before mend's schema is there.
func CheckTopology(ctx context.Context, db *sql.DB) error {
	vars, err := serverVars(ctx, db)
	if err != nil {
		return err
	}
	if err := checkMultiPrimary(vars); err != nil {
		return err
	}
	return checkBinlog(vars)
}

func serverVars(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, sqlTopology)
	if err != nil {
		return nil, fmt.Errorf("storage: read server settings: %w", translate(err))
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("storage: read server settings: %w", translate(err))
		}
		vars[strings.ToLower(k)] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: read server settings: %w", translate(err))
	}
	return vars, nil
}

func on(v string) bool { return strings.EqualFold(v, "ON") || v == "1" }

// checkMultiPrimary refuses a server that accepts writes on several nodes.
func checkMultiPrimary(vars map[string]string) error {
	if on(vars["wsrep_on"]) {
		return fmt.Errorf("%w: Galera replication is on (wsrep_on=ON); a fenced write and a takeover on two nodes can both commit. Point mend at a single primary", ErrTopology)
	}
	if vars["group_replication_group_name"] != "" && vars["group_replication_single_primary_mode"] != "" &&
		!on(vars["group_replication_single_primary_mode"]) {
		return fmt.Errorf("%w: Group Replication in multi-primary mode (group_replication_single_primary_mode=OFF); the fence needs a single primary", ErrTopology)
	}
	return nil
}

// checkBinlog refuses statement-based binary logging: READ COMMITTED
// transactions cannot write under it (error 1665).
func checkBinlog(vars map[string]string) error {
	if on(vars["log_bin"]) && strings.EqualFold(vars["binlog_format"], "STATEMENT") {
		return fmt.Errorf("%w: binlog_format=STATEMENT refuses mend's READ COMMITTED writes; set binlog_format=ROW (or MIXED)", ErrTopology)
	}
	return nil
}

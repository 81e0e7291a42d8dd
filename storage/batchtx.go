package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
)

// batchTx is a transaction on one pinned connection whose statements travel
// in multi-statement packets: the first packet opens it with START
// TRANSACTION and carries its first statements, so a write transaction
// costs one round trip for its work plus one for COMMIT, instead of one per
// statement plus BEGIN and COMMIT.
//
// Why this is safe with multiStatements on (docs/architecture.md, "Round
// trips"): every value reaches the server through the driver's
// interpolation, never spliced into the text, so stacking adds no injection
// surface; the server stops a packet at its first failing statement and
// COMMIT never shares a packet with data statements, so a failed packet
// leaves an open transaction that Rollback ends, never a committed prefix;
// and every outcome the client decides on is read from a result set (a
// SELECT of ROW_COUNT() kept in a session variable), never from the OK
// packets of statements in the middle, which database/sql does not expose.
//
// A body whose last packet holds everything it decides on may send COMMIT
// in that packet instead (queryCommit): one round trip for the whole
// transaction. The server still stops at the first failing statement, so
// COMMIT runs only after every statement before it succeeded; a packet that
// fails with the server's answer has committed nothing and is rolled back
// as any other; one that fails without an answer may have committed, and
// is ambiguous, as a lost COMMIT is.
type batchTx struct {
	conn      *sqlx.Conn
	ctx       context.Context
	op, opID  string
	before    func(op string) // the store's before-commit hook (tests), or nil
	committed bool            // a queryCommit packet committed the transaction
}

// withBatchTx is withTx for a body that sends multi-statement packets. The
// body's first packet must begin with START TRANSACTION. Deadlocks rerun
// it, any error before COMMIT rolls it back, and a COMMIT that fails
// without an answer is a *mend.AmbiguousError naming opID, as in withTx.
func (d *DB) withBatchTx(ctx context.Context, op, opID string, fn func(context.Context, *batchTx) error) error {
	// The before-commit hook runs in batchTx, just before COMMIT leaves,
	// alone or in a queryCommit packet.
	r := mysqlx.Runner{DeadlockRetries: d.retries, Translate: translate}
	begin := func(ctx context.Context) (*batchTx, error) {
		conn, err := d.db.Connx(ctx)
		if err != nil {
			return nil, err
		}
		return &batchTx{conn: conn, ctx: ctx, op: op, opID: opID, before: d.beforeCommit}, nil
	}
	return mysqlx.Run(ctx, r, begin, op, opID, fn)
}

// Commit sends COMMIT. Like sql.Tx, it refuses once the transaction's
// context has ended, rolling back instead. COMMIT itself is not cut off by
// the context (the driver's I/O timeout bounds it): a COMMIT abandoned half
// way is the ambiguous case, and there is no reason to create it.
func (t *batchTx) Commit() error {
	if t.committed {
		return t.conn.Close()
	}
	if err := t.ctx.Err(); err != nil {
		return errors.Join(err, t.Rollback())
	}
	if t.before != nil {
		t.before(t.op)
	}
	_, err := t.conn.ExecContext(context.WithoutCancel(t.ctx), "COMMIT")
	if err != nil {
		if mysqlx.ErrNumber(err) != 0 {
			// The server answered with an error: make sure nothing stays
			// open on the connection before it goes back to the pool.
			return errors.Join(err, t.Rollback())
		}
		t.discard()
		return err
	}
	return t.conn.Close()
}

// Rollback ends the transaction. If ROLLBACK cannot be sent (the connection
// failed or was cut off by the context), the connection is discarded
// instead, which ends the session and with it the transaction; either way
// no open transaction goes back to the pool.
func (t *batchTx) Rollback() error {
	if _, err := t.conn.ExecContext(context.WithoutCancel(t.ctx), "ROLLBACK"); err != nil {
		t.discard()
		return nil
	}
	return t.conn.Close()
}

// discard closes the physical connection rather than return it to the pool.
func (t *batchTx) discard() {
	_ = t.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = t.conn.Close()
}

// query sends one multi-statement packet and calls each of sets on the
// result sets that have columns, in order (statements without a result
// set are skipped by the driver). It then reads the packet to its end, so
// an error of a statement after the last result set is returned too.
func (t *batchTx) query(ctx context.Context, query string, args []any, sets ...func(*sqlx.Rows) error) error {
	rows, err := t.conn.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for i, set := range sets {
		if i > 0 && !rows.NextResultSet() {
			if err := rows.Err(); err != nil {
				return err
			}
			return fmt.Errorf("storage: statement batch returned %d result sets, want %d", i, len(sets))
		}
		// A fresh sqlx.Rows per result set: sqlx caches the column
		// mapping of the first set it scans.
		if err := set(&sqlx.Rows{Rows: rows, Mapper: t.conn.Mapper}); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for rows.NextResultSet() {
		for rows.Next() {
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// queryCommit is query for the body's last packet, with COMMIT appended to
// it (see batchTx): on success the transaction has committed and the body
// must send nothing more. A failure the server answered committed nothing
// (the statements after the failing one, COMMIT among them, never ran); any
// other failure (the connection lost, the context ended while the packet
// was out) is a *mend.AmbiguousError naming the transaction's op ID.
func (t *batchTx) queryCommit(ctx context.Context, query string, args []any, sets ...func(*sqlx.Rows) error) error {
	if err := t.ctx.Err(); err != nil {
		return err
	}
	if t.before != nil {
		t.before(t.op)
	}
	err := t.query(ctx, query+";\nCOMMIT", args, sets...)
	switch {
	case err == nil:
		t.committed = true
		return nil
	case mysqlx.ErrNumber(err) != 0:
		return err
	default:
		return &mend.AmbiguousError{OpID: t.opID, Err: fmt.Errorf("%s, sent with its COMMIT: %w", t.op, err)}
	}
}

// scanOne returns a result-set reader that scans its single row into dest
// (a struct, through sqlx), or reports sql.ErrNoRows.
func scanOne(dest any) func(*sqlx.Rows) error {
	return func(rows *sqlx.Rows) error {
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return sql.ErrNoRows
		}
		if err := rows.StructScan(dest); err != nil {
			return err
		}
		for rows.Next() {
		}
		return nil
	}
}

// scanOptional is scanOne for a result set that may be empty; found
// reports whether it had a row.
func scanOptional(dest any, found *bool) func(*sqlx.Rows) error {
	return func(rows *sqlx.Rows) error {
		err := scanOne(dest)(rows)
		*found = err == nil
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	}
}

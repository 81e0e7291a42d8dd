package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/mendq/mend"
)

// BinlogPosition is how far mend's binary-log reader (package binlog) has
// recorded a queue database's dead letters, as mend_binlog_positions
// (migration 0019) keeps it.
type BinlogPosition struct {
	// Name is the reader's lease ("mend-binlog/<source>"), which fences
	// every write of the row.
	Name string
	// Flavor is the server's: "mysql" or "mariadb".
	Flavor string
	// GTIDSet is the position where the server has GTIDs: every
	// transaction in it has been read and its dead letters recorded.
	GTIDSet string
	// File and Pos are the position without GTIDs (and, beside a GTID set,
	// informational), valid only on the server ServerUUID names.
	File string
	Pos  uint64
	// ServerUUID identifies the server File and Pos were read from
	// (@@server_uuid on MySQL, "server_id=N" on MariaDB).
	ServerUUID string
	// EventAt is the commit time of the last transaction read.
	EventAt time.Time
	// Epoch and Holder are the lease term that wrote the row.
	Epoch  int64
	Holder string
	// ResetReason and ResetAt say why and when the reader last started
	// over from the tables' contents (first start, a purged position, a
	// failover without GTIDs).
	ResetReason string
	ResetAt     time.Time
	// Updated is when the row was last written; Age how long ago, by the
	// database clock (read only).
	Updated time.Time
	Age     time.Duration
}

// ErrNoBinlogPositions is the binary-log position methods' answer on a
// schema before migration 0019 (no mend_binlog_positions table).
var ErrNoBinlogPositions = errors.New("storage: no mend_binlog_positions table (schema before migration 0019): run mend migrate up before mend run --subscribe-mode binlog")

const binlogPositionSelect = `SELECT name, flavor, server_uuid, binlog_file, binlog_pos, gtid_set, event_at, epoch, holder,
	reset_reason, reset_at, updated_at, TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(6)) AS age_us
FROM mend_binlog_positions`

const sqlBinlogPositionGet = `-- name: BinlogPositionGet
` + binlogPositionSelect + ` WHERE name = ?`

const sqlBinlogPositionList = `-- name: BinlogPositionList
` + binlogPositionSelect + ` ORDER BY name`

// The save changes the row only while the term is the lease's current one
// (the lease row is read LOCK IN SHARE MODE first, so a takeover waits for
// this transaction) and never back to an older epoch's.
const sqlBinlogPositionUpdate = `-- name: BinlogPositionUpdate
UPDATE mend_binlog_positions SET flavor = ?, server_uuid = ?, binlog_file = ?, binlog_pos = ?, gtid_set = ?, event_at = ?,
	epoch = ?, holder = ?, reset_reason = ?, reset_at = ?, updated_at = NOW(6)
WHERE name = ? AND epoch <= ?`

const sqlBinlogPositionInsert = `-- name: BinlogPositionInsert
INSERT INTO mend_binlog_positions (flavor, server_uuid, binlog_file, binlog_pos, gtid_set, event_at, epoch, holder,
	reset_reason, reset_at, updated_at, name)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6), ?)`

type binlogPositionRow struct {
	Name        []byte        `db:"name"`
	Flavor      string        `db:"flavor"`
	ServerUUID  []byte        `db:"server_uuid"`
	File        []byte        `db:"binlog_file"`
	Pos         uint64        `db:"binlog_pos"`
	GTIDSet     []byte        `db:"gtid_set"`
	EventAt     sql.NullTime  `db:"event_at"`
	Epoch       int64         `db:"epoch"`
	Holder      []byte        `db:"holder"`
	ResetReason []byte        `db:"reset_reason"`
	ResetAt     sql.NullTime  `db:"reset_at"`
	Updated     time.Time     `db:"updated_at"`
	AgeUS       sql.NullInt64 `db:"age_us"`
}

func (r binlogPositionRow) position() BinlogPosition {
	return BinlogPosition{
		Name: string(r.Name), Flavor: r.Flavor, ServerUUID: string(r.ServerUUID), File: string(r.File), Pos: r.Pos,
		GTIDSet: string(r.GTIDSet), EventAt: r.EventAt.Time, Epoch: r.Epoch, Holder: string(r.Holder),
		ResetReason: string(r.ResetReason), ResetAt: r.ResetAt.Time, Updated: r.Updated,
		Age: time.Duration(r.AgeUS.Int64) * time.Microsecond,
	}
}

// BinlogPositionGet returns the reader's saved position. Returns
// ErrNotFound if none was ever saved (the reader's first start), and
// ErrNoBinlogPositions on a schema before migration 0019.
func (d *DB) BinlogPositionGet(ctx context.Context, name string) (BinlogPosition, error) {
	if err := mend.ValidateIdentity("queue", name, true); err != nil {
		return BinlogPosition{}, err
	}
	var row binlogPositionRow
	err := d.db.GetContext(ctx, &row, sqlBinlogPositionGet, name)
	switch {
	case noSuchTable(err):
		return BinlogPosition{}, ErrNoBinlogPositions
	case errors.Is(err, sql.ErrNoRows):
		return BinlogPosition{}, fmt.Errorf("storage: binlog position: %w: %q has saved none", mend.ErrNotFound, name)
	case err != nil:
		return BinlogPosition{}, fmt.Errorf("storage: binlog position: %w", translate(err))
	}
	return row.position(), nil
}

// BinlogPositions returns every saved position, by name (mend status, the
// console, the metrics). Returns ErrNoBinlogPositions on a schema before
// migration 0019.
func (d *DB) BinlogPositions(ctx context.Context) ([]BinlogPosition, error) {
	var rows []binlogPositionRow
	err := d.db.SelectContext(ctx, &rows, sqlBinlogPositionList)
	if noSuchTable(err) {
		return nil, ErrNoBinlogPositions
	}
	if err != nil {
		return nil, fmt.Errorf("storage: binlog positions: %w", translate(err))
	}
	out := make([]BinlogPosition, len(rows))
	for i, r := range rows {
		out[i] = r.position()
	}
	return out, nil
}

// BinlogPositionSave stores p as the reader's position, fenced by term:
// term.Queue must be p.Name, and the write is refused with an error
// matching mend.ErrFenced, changing nothing, unless term is the lease's
// current, unexpired term and no later epoch has written the row. Epoch
// and Holder are taken from term. Returns ErrNoBinlogPositions on a schema
// before migration 0019.
func (d *DB) BinlogPositionSave(ctx context.Context, term mend.Term, p BinlogPosition) error {
	if term.Queue != p.Name {
		return &mend.ValidationError{Field: "name", Reason: fmt.Sprintf("the position %q is saved under its own lease, not %q", p.Name, term.Queue)}
	}
	if err := validateTerm(term); err != nil {
		return err
	}
	if p.Flavor != "mysql" && p.Flavor != "mariadb" {
		return &mend.ValidationError{Field: "flavor", Reason: fmt.Sprintf("%q is not mysql or mariadb", p.Flavor)}
	}
	args := []any{p.Flavor, cut(p.ServerUUID, 255), cut(p.File, 512), p.Pos, p.GTIDSet, timeOrNull(p.EventAt),
		term.Epoch, term.Holder, cut(p.ResetReason, 2000), timeOrNull(p.ResetAt)}
	err := d.withTx(ctx, "BinlogPositionSave", "", func(ctx context.Context, tx *sqlx.Tx) error {
		var lease leaseCheckRow
		err := tx.GetContext(ctx, &lease, sqlLeaseCheckStmt, term.Queue)
		found := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := lease.check(term, found); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, sqlBinlogPositionUpdate, append(args, p.Name, term.Epoch)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlBinlogPositionInsert, append(args, p.Name)...)
		if mysqlErrNumber(err) == errDupEntry {
			return fmt.Errorf("%w: the binlog position %q was written by an epoch after %d", mend.ErrFenced, p.Name, term.Epoch)
		}
		return err
	})
	if noSuchTable(err) {
		return ErrNoBinlogPositions
	}
	if err != nil && !errors.Is(err, mend.ErrFenced) {
		return fmt.Errorf("storage: save binlog position: %w", err)
	}
	return err
}

func timeOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

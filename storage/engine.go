package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Engine is what the server says it is, and the settings whose meaning
// differs between MySQL and MariaDB: mend doctor reports them per engine.
type Engine struct {
	// Product is "MySQL" or "MariaDB" (a Vitess gateway reports MySQL).
	Product string
	// Version is VERSION() as the server reports it, e.g. "9.7.4" or
	// "10.11.14-MariaDB-0+deb12u1".
	Version string
	// LogBin is whether binary logging is on; BinlogFormat and
	// BinlogRowImage are its settings (empty when the server has none).
	LogBin                       bool
	BinlogFormat, BinlogRowImage string
}

// MariaDB reports whether the server is MariaDB.
func (e Engine) MariaDB() bool { return e.Product == "MariaDB" }

const sqlEngine = `-- name: Engine
SELECT VERSION(), @@version_comment`

const sqlEngineBinlog = `-- name: EngineBinlog
SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image')`

// ReadEngine asks the server what it is. It reads only: doctor calls it
// before mend's schema exists.
func ReadEngine(ctx context.Context, db *sql.DB) (Engine, error) {
	var e Engine
	var comment string
	if err := db.QueryRowContext(ctx, sqlEngine).Scan(&e.Version, &comment); err != nil {
		return e, fmt.Errorf("storage: read the server version: %w", translate(err))
	}
	e.Product = "MySQL"
	if strings.Contains(strings.ToLower(e.Version+" "+comment), "mariadb") {
		e.Product = "MariaDB"
	}
	rows, err := db.QueryContext(ctx, sqlEngineBinlog)
	if err != nil {
		return e, fmt.Errorf("storage: read binary log settings: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return e, fmt.Errorf("storage: read binary log settings: %w", translate(err))
		}
		switch strings.ToLower(k) {
		case "log_bin":
			e.LogBin = on(v)
		case "binlog_format":
			e.BinlogFormat = strings.ToUpper(v)
		case "binlog_row_image":
			e.BinlogRowImage = strings.ToUpper(v)
		}
	}
	if err := rows.Err(); err != nil {
		return e, fmt.Errorf("storage: read binary log settings: %w", translate(err))
	}
	return e, nil
}

// A view's DEFINER is the account that created it (CREATE VIEW without a
// DEFINER clause). MySQL 8.0.16 and later let only an account holding
// SYSTEM_USER drop or replace an object whose definer holds it, so views
// that root created block a DDL user without it: `mend migrate down` then
// fails with error 1227 on DROP VIEW. MariaDB has no such rule.
const sqlViewDefiners = `-- name: ViewDefiners
SELECT TABLE_NAME, DEFINER FROM information_schema.VIEWS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'mend\_%' AND DEFINER <> CURRENT_USER()
ORDER BY TABLE_NAME`

// The current account's own dynamic privileges are listed in
// information_schema.USER_PRIVILEGES (an account sees its own rows).
const sqlHasSystemUser = `-- name: HasSystemUser
SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES
WHERE PRIVILEGE_TYPE = 'SYSTEM_USER'
  AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')`

// The current account's CREATE VIEW and DROP privileges on the current
// database, granted globally or on the database (a grant's database name
// is a LIKE pattern, as the server reads it). Privileges held through a
// role are not listed here.
const sqlViewDDLPrivileges = `-- name: ViewDDLPrivileges
SELECT COUNT(DISTINCT PRIVILEGE_TYPE) FROM (
	SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES
	WHERE PRIVILEGE_TYPE IN ('CREATE VIEW', 'DROP')
	  AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')
	UNION ALL
	SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES
	WHERE PRIVILEGE_TYPE IN ('CREATE VIEW', 'DROP') AND DATABASE() LIKE TABLE_SCHEMA
	  AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')
) p`

// ViewDDLAllowed reports whether the current account may create and drop
// views in the current database: the DDL user that runs mend migrate may;
// mend run's user and a read-only console user may not, so whose views
// they are is no concern of theirs (issue 57: doctor warned them for
// ever, and told them they could drop views they cannot).
func ViewDDLAllowed(ctx context.Context, db *sql.DB) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, sqlViewDDLPrivileges).Scan(&n); err != nil {
		return false, fmt.Errorf("storage: read the account's view privileges: %w", translate(err))
	}
	return n == 2, nil
}

// ForeignViewDefiners lists mend's views in the current database whose
// definer is another account, on MySQL when the current account lacks
// SYSTEM_USER: the views this account cannot drop or replace, so
// migrations that touch them would fail with error 1227. Each entry is
// "view (definer)". On MariaDB, and for an account holding SYSTEM_USER, it
// returns nil.
func ForeignViewDefiners(ctx context.Context, db *sql.DB, e Engine) ([]string, error) {
	if e.MariaDB() {
		return nil, nil
	}
	var n int
	if err := db.QueryRowContext(ctx, sqlHasSystemUser).Scan(&n); err != nil {
		return nil, fmt.Errorf("storage: read the account's privileges: %w", translate(err))
	}
	if n > 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, sqlViewDefiners)
	if err != nil {
		return nil, fmt.Errorf("storage: read view definers: %w", translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var view, definer string
		if err := rows.Scan(&view, &definer); err != nil {
			return nil, fmt.Errorf("storage: read view definers: %w", translate(err))
		}
		out = append(out, view+" ("+definer+")")
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: read view definers: %w", translate(err))
	}
	return out, nil
}

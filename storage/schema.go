package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// SchemaOldest is the oldest schema version this package's statements run
// on: migration 0013 added the projection columns (state, attempts,
// last_error, next_attempt_at) every event insert names, so on schema 12
// every pass fails with "Unknown column 'state'". Raise it only in the
// release whose statements start using what a newer migration adds, and
// say so in CHANGELOG.md: it is the first half of the binary's schema
// range (the second is the latest migration it embeds).
const SchemaOldest = 13

// SchemaColumn is one column of one of mend's tables as the server reports
// it. Required: NOT NULL with no default and not generated, so an INSERT
// that does not name the column fails.
type SchemaColumn struct {
	Table, Name string
	Required    bool
}

const sqlSchemaTables = `-- name: SchemaTables
SELECT table_name FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' AND table_name LIKE 'mend\_%'
	AND table_name <> 'mend_schema_migrations'`

// sqlSchemaColumns reads the columns of the named tables (%s: one
// placeholder per table; naming them keeps the server from opening every
// view and table of the schema). information_schema reports COLUMN_DEFAULT
// NULL for "no default" on both engines (MariaDB writes the string 'NULL'
// for a nullable column's NULL default, which is not required anyway).
const sqlSchemaColumns = `-- name: SchemaColumns
SELECT table_name, column_name,
	is_nullable = 'NO' AND column_default IS NULL AND extra NOT LIKE '%%auto_increment%%'
		AND extra NOT LIKE '%%GENERATED%%' AND extra NOT LIKE '%%VIRTUAL%%' AND extra NOT LIKE '%%STORED%%' AS required
FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name IN (%s)
ORDER BY table_name, column_name`

// ReadSchemaColumns lists the columns of the named tables of mend's
// database (none named: every mend_ base table but golang-migrate's), so a
// binary on a schema newer than it knows can tell an expand-only schema
// (everything it uses still there, every new column defaulted) from a
// contracted one. A named table that does not exist has no columns.
func ReadSchemaColumns(ctx context.Context, db *sql.DB, tables ...string) (cols []SchemaColumn, err error) {
	if len(tables) == 0 {
		if err := sqlx.SelectContext(ctx, sqlx.NewDb(db, "mysql"), &tables, sqlSchemaTables); err != nil {
			return nil, fmt.Errorf("storage: schema tables: %w", translate(err))
		}
		if len(tables) == 0 {
			return nil, nil
		}
	}
	args := make([]any, len(tables))
	for i, t := range tables {
		args[i] = t
	}
	q := fmt.Sprintf(sqlSchemaColumns, strings.TrimSuffix(strings.Repeat("?, ", len(tables)), ", "))
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("storage: schema columns: %w", translate(err))
	}
	defer func() { err = errors.Join(err, rows.Close()) }()
	for rows.Next() {
		var c SchemaColumn
		if err := rows.Scan(&c.Table, &c.Name, &c.Required); err != nil {
			return nil, fmt.Errorf("storage: schema columns: %w", err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storage: schema columns: %w", translate(err))
	}
	return cols, nil
}

package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// A database's name cannot be a parameter: each statement below is the
// const, the name quoted as an identifier (QuoteIdent), then the const's
// tail.

const sqlDatabaseCreate = `-- name: DatabaseCreate
CREATE DATABASE IF NOT EXISTS `

const sqlDatabaseCreateTail = ` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`

// DatabaseCreate creates the database name on db's server if it does not
// exist, with the binary collation mend's tables use anyway (mend migrate
// up --create-database).
func DatabaseCreate(ctx context.Context, db *sql.DB, name string) error {
	if _, err := db.ExecContext(ctx, sqlDatabaseCreate+QuoteIdent(name)+sqlDatabaseCreateTail); err != nil {
		return fmt.Errorf("create database %s: %w", QuoteIdent(name), err)
	}
	return nil
}

const sqlDatabaseCreateFresh = `-- name: DatabaseCreateFresh
CREATE DATABASE `

const sqlDatabaseCreateFreshTail = ` CHARACTER SET utf8mb4`

// DatabaseCreateFresh creates the database name, which must not exist,
// with the server's default utf8mb4 collation, as a host's own tables get
// it (mend demo's throwaway database, which holds the host's tables too).
func DatabaseCreateFresh(ctx context.Context, db *sql.DB, name string) error {
	if _, err := db.ExecContext(ctx, sqlDatabaseCreateFresh+QuoteIdent(name)+sqlDatabaseCreateFreshTail); err != nil {
		return fmt.Errorf("create database %s: %w", QuoteIdent(name), err)
	}
	return nil
}

const sqlDatabaseDrop = `-- name: DatabaseDrop
DROP DATABASE IF EXISTS `

// DatabaseDrop drops the database name if it exists, with everything in
// it: for throwaway databases only (mend demo's).
func DatabaseDrop(ctx context.Context, db *sql.DB, name string) error {
	if _, err := db.ExecContext(ctx, sqlDatabaseDrop+QuoteIdent(name)); err != nil {
		return fmt.Errorf("drop database %s: %w", QuoteIdent(name), err)
	}
	return nil
}

// QuoteIdent quotes name as a MySQL identifier (backticks, doubled inside).
func QuoteIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

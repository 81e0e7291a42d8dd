package doctor

import (
	"context"
	"database/sql"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// Engine reports the engine and checks what matters on it. Both: the
// collation a host's tables declared without COLLATE get (the real submit
// queue's application tables are). MariaDB: innodb_snapshot_isolation (on
// by default from 11.8), which mend's READ COMMITTED sessions are not
// subject to. MySQL: the binary log's row image when logging is on
// (binlog_format itself is checkTopology's), and view definers this account
// could not drop (SYSTEM_USER, MySQL 8.0.16+). MariaDB has neither rule.
func Engine(ctx context.Context, db *sql.DB) []Check {
	e, err := storage.ReadEngine(ctx, db)
	if err != nil {
		return []Check{{Name: "engine", Status: Fail, Detail: err.Error()}}
	}
	checks := []Check{{Name: "engine", Status: OK, Detail: e.Product + " " + e.Version}}
	var version string
	if err := db.QueryRowContext(ctx, versionQuery).Scan(&version); err == nil && mysqlx.IsVTGate(version) {
		// Through vtgate the session check passes over the variables vtgate
		// keeps as its own; say what bounds the same thing there.
		names := slices.Sorted(maps.Keys(mysqlx.VTGateOwn))
		var notes []string
		for _, n := range names {
			notes = append(notes, n+": "+mysqlx.VTGateOwn[n])
		}
		checks = append(checks, Check{Name: "vtgate", Status: Warn,
			Detail: "connected through vtgate (" + version + "), which keeps " + strings.Join(names, " and ") +
				" as its own instead of setting them on the tablets' sessions: " + strings.Join(notes, "; "),
			Fix: "run vttablet with --queryserver-config-transaction-timeout below mend's --lease-ttl; the tablets' query consolidator may stay on " +
				"(mend's reads outside a transaction turn it off per statement with a /*vt+ CONSOLIDATOR=disabled */ directive; docs/operations.md)"})
		return checks
	}
	checks = append(checks, checkDefaultCollation(ctx, db))
	if e.MariaDB() {
		if c, ok := checkSnapshotIsolation(ctx, db); ok {
			checks = append(checks, c)
		}
		return checks
	}
	switch {
	case !e.LogBin:
		checks = append(checks, Check{Name: "binlog", Status: OK, Detail: "binary logging is off"})
	case e.BinlogRowImage != "" && e.BinlogRowImage != "FULL":
		checks = append(checks, Check{Name: "binlog", Status: Warn,
			Detail: "binlog_format=" + e.BinlogFormat + ", binlog_row_image=" + e.BinlogRowImage +
				": mend is correct with it, but replicas and change-data tools that rebuild whole rows (Vitess, Debezium) need FULL",
			Fix: "SET PERSIST binlog_row_image = 'FULL' if anything consumes the binary log"})
	default:
		checks = append(checks, Check{Name: "binlog", Status: OK,
			Detail: "binlog_format=" + e.BinlogFormat + ", binlog_row_image=" + e.BinlogRowImage})
	}
	checks = append(checks, checkViewDefiners(ctx, db, e))
	return checks
}

// checkViewDefiners warns the DDL user about mend's views it could not
// drop or replace. An account that may not create or drop views at all
// (mend run's user, a read-only console user) has nothing to check: the
// views are the DDL user's business, and doctor run as that user checks
// them.
func checkViewDefiners(ctx context.Context, db *sql.DB, e storage.Engine) Check {
	ddl, err := storage.ViewDDLAllowed(ctx, db)
	if err != nil {
		return Check{Name: "view definers", Status: Warn, Detail: err.Error()}
	}
	if !ddl {
		return Check{Name: "view definers", Status: OK,
			Detail: "not checked for this account: it may not create or drop views (mend run's or a read-only console user), so it never replaces mend's views; " +
				"mend doctor with the DDL user's DSN (the user that runs mend migrate) checks them"}
	}
	var checks []Check
	views, err := storage.ForeignViewDefiners(ctx, db, e)
	switch {
	case err != nil:
		checks = append(checks, Check{Name: "view definers", Status: Warn, Detail: err.Error()})
	case len(views) > 0:
		checks = append(checks, Check{Name: "view definers", Status: Warn,
			Detail: "views created by another account: " + strings.Join(views, ", ") +
				"; on MySQL 8.0.16+ this account cannot drop or replace them if that account holds SYSTEM_USER, so migrate down/goto would fail with error 1227",
			Fix: "run every mend migrate as the same DDL user (docs/operations.md), or have the account that created the views run migrate down"})
	default:
		checks = append(checks, Check{Name: "view definers", Status: OK, Detail: "this account may drop and replace mend's views (it holds CREATE VIEW and DROP, and no view has a definer that blocks it)"})
	}
	return checks[0]
}

// checkDefaultCollation reports the collation a utf8mb4 table declared without COLLATE gets
// on this server (the real submit queue's application tables are declared so) and whether it
// pads trailing spaces: utf8mb4_0900_ai_ci (NO PAD) on MySQL 8+, utf8mb4_general_ci on MariaDB
// 10.x, utf8mb4_uca1400_ai_ci on MariaDB 11.8 (its character_set_collations: besides case and
// accents it also equates NFC with NFD spellings and ß with ss, and ignores NUL bytes; PAD
// SPACE). Whatever it is, mend compares host identities byte for byte, so it is only reported.
func checkDefaultCollation(ctx context.Context, db *sql.DB) Check {
	const name = "default collation"
	var coll string
	if err := db.QueryRowContext(ctx, defaultCollationQuery).Scan(&coll); err != nil {
		return Check{Name: name, Status: Warn, Detail: "cannot read it: " + err.Error()}
	}
	if !collationName.MatchString(coll) {
		return Check{Name: name, Status: Warn, Detail: "the server names " + strconv.Quote(coll) + ", not a collation"}
	}
	var pads bool
	// A collation name cannot be a parameter; it was checked above.
	if err := db.QueryRowContext(ctx, padsQueryHead+coll+padsQueryTail).Scan(&pads); err != nil {
		return Check{Name: name, Status: Warn, Detail: "cannot compare under " + coll + ": " + err.Error()}
	}
	pad := "NO PAD: 'q/1 ' and 'q/1' differ"
	if pads {
		pad = "PAD SPACE: 'q/1 ' and 'q/1' are one"
	}
	return Check{Name: name, Status: OK, Detail: "utf8mb4 tables declared without COLLATE (the submit queue's application tables) get " + coll +
		" (" + pad + "); mend compares the host's identities byte for byte and parks a record the collation matched under another spelling"}
}

var collationName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// checkSnapshotIsolation reports MariaDB's innodb_snapshot_isolation (10.6.18+ and 10.11.8+,
// off by default; on by default from 11.8): with it on, a REPEATABLE READ transaction that
// writes a row another session changed since its snapshot fails with error 1020. mend's
// sessions all run READ COMMITTED (every statement takes a fresh view), where it does not
// apply, so it is neither forced nor refused; a host's own REPEATABLE READ code is subject to
// it. ok is false where the server has no such variable.
func checkSnapshotIsolation(ctx context.Context, db *sql.DB) (c Check, ok bool) {
	const name = "snapshot isolation"
	var v sql.NullString
	err := db.QueryRowContext(ctx, snapshotIsolationQuery).Scan(&v)
	switch {
	case mysqlx.ErrNumber(err) == mysqlx.ErrUnknownSystemVariable:
		return Check{}, false
	case err != nil:
		return Check{Name: name, Status: Warn, Detail: "cannot read innodb_snapshot_isolation: " + err.Error()}, true
	}
	state := "OFF"
	if v.String == "1" || strings.EqualFold(v.String, "ON") {
		state = "ON"
	}
	return Check{Name: name, Status: OK, Detail: "innodb_snapshot_isolation=" + state +
		" (MariaDB 11.8's default is ON: a REPEATABLE READ transaction writing a row changed since its snapshot fails with error 1020); " +
		"mend's sessions run READ COMMITTED, where it does not apply"}, true
}

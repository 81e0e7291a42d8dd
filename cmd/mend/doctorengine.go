package main

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"strings"

	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// checkEngine reports the engine and checks what matters on it. MySQL:
// the binary log's row image when logging is on (binlog_format itself is
// checkTopology's), and view definers this account could not drop
// (SYSTEM_USER, MySQL 8.0.16+). MariaDB has neither rule.
func checkEngine(ctx context.Context, db *sql.DB) []check {
	e, err := storage.ReadEngine(ctx, db)
	if err != nil {
		return []check{{Name: "engine", Status: checkFail, Detail: err.Error()}}
	}
	checks := []check{{Name: "engine", Status: checkOK, Detail: e.Product + " " + e.Version}}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err == nil && mysqlx.IsVTGate(version) {
		// Through vtgate the session check passes over the variables vtgate
		// keeps as its own; say what bounds the same thing there.
		names := slices.Sorted(maps.Keys(mysqlx.VTGateOwn))
		var notes []string
		for _, n := range names {
			notes = append(notes, n+": "+mysqlx.VTGateOwn[n])
		}
		checks = append(checks, check{Name: "vtgate", Status: checkWarn,
			Detail: "connected through vtgate (" + version + "), which keeps " + strings.Join(names, " and ") +
				" as its own instead of setting them on the tablets' sessions: " + strings.Join(notes, "; "),
			Fix: "run vttablet with --queryserver-config-transaction-timeout below mend's --lease-ttl; the tablets' query consolidator may stay on " +
				"(mend's reads outside a transaction turn it off per statement with a /*vt+ CONSOLIDATOR=disabled */ directive; docs/operations.md)"})
		return checks
	}
	if e.MariaDB() {
		return checks
	}
	switch {
	case !e.LogBin:
		checks = append(checks, check{Name: "binlog", Status: checkOK, Detail: "binary logging is off"})
	case e.BinlogRowImage != "" && e.BinlogRowImage != "FULL":
		checks = append(checks, check{Name: "binlog", Status: checkWarn,
			Detail: "binlog_format=" + e.BinlogFormat + ", binlog_row_image=" + e.BinlogRowImage +
				": mend is correct with it, but replicas and change-data tools that rebuild whole rows (Vitess, Debezium) need FULL",
			Fix: "SET PERSIST binlog_row_image = 'FULL' if anything consumes the binary log"})
	default:
		checks = append(checks, check{Name: "binlog", Status: checkOK,
			Detail: "binlog_format=" + e.BinlogFormat + ", binlog_row_image=" + e.BinlogRowImage})
	}
	views, err := storage.ForeignViewDefiners(ctx, db, e)
	switch {
	case err != nil:
		checks = append(checks, check{Name: "view definers", Status: checkWarn, Detail: err.Error()})
	case len(views) > 0:
		checks = append(checks, check{Name: "view definers", Status: checkWarn,
			Detail: "views created by another account: " + strings.Join(views, ", ") +
				"; on MySQL 8.0.16+ this account cannot drop or replace them if that account holds SYSTEM_USER, so migrate down/goto would fail with error 1227",
			Fix: "run every mend migrate as the same DDL user (docs/operations.md), or have the account that created the views run migrate down"})
	default:
		checks = append(checks, check{Name: "view definers", Status: checkOK, Detail: "this account can drop and replace mend's views"})
	}
	return checks
}

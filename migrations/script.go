package migrations

import (
	"fmt"
	"io"
	"strings"
)

// scriptBookkeeping records the version as golang-migrate does, after a
// script applied by hand (%[1]s: the version table, %[2]d: the version).
const scriptBookkeeping = `
-- Record the version, as mend migrate does.
CREATE TABLE IF NOT EXISTS %[1]s (version BIGINT NOT NULL PRIMARY KEY, dirty BOOLEAN NOT NULL);
DELETE FROM %[1]s;
INSERT INTO %[1]s (version, dirty) VALUES (%[2]d, 0);
`

// WriteScript writes every up migration of list in order, then the
// bookkeeping statements mend migrate would run, so a DBA can apply the
// schema by hand and mend still knows the version (mend migrate up
// --print-sql).
func (s Set) WriteScript(w io.Writer, list []Migration) error {
	if len(list) == 0 {
		return fmt.Errorf("migrations: no migrations to write")
	}
	if _, err := fmt.Fprintln(w, "-- mend's schema, every migration in order; apply as a user with the DDL grants of docs/operations.md."); err != nil {
		return err
	}
	for _, m := range list {
		if _, err := fmt.Fprintf(w, "\n-- %04d_%s.up.sql\n%s;\n", m.Version, m.Name, strings.TrimRight(strings.TrimSpace(m.Up), ";")); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, scriptBookkeeping, s.Table, list[len(list)-1].Version)
	return err
}

// RevertDropsTables reports whether reverting the migrations of list above
// target up to cur drops a table of records, events or leases (or their
// history, or the verify runs). A rollback's down of an expand step drops
// only what the step added; the binary-log reader's positions
// (mend_binlog_positions, 0019) are not among those tables: without them
// the reader starts over from the host's tables, loudly (RevertDropsPositions).
func RevertDropsTables(list []Migration, cur, target uint) bool {
	for _, m := range list {
		down := strings.ToUpper(m.Down)
		if m.Version > target && m.Version <= cur && strings.Contains(down, "DROP TABLE") && !strings.Contains(down, "DROP TABLE MEND_BINLOG_POSITIONS") {
			return true
		}
	}
	return false
}

// RevertDropsPositions reports whether reverting from cur to target drops
// the binary-log reader's saved positions (migration 0019).
func RevertDropsPositions(list []Migration, cur, target uint) bool {
	for _, m := range list {
		if m.Version > target && m.Version <= cur && strings.Contains(strings.ToUpper(m.Down), "DROP TABLE MEND_BINLOG_POSITIONS") {
			return true
		}
	}
	return false
}

package main

import (
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/mendq/mend/internal/mysqlx"
)

// Errors that reach an operator name their fix: a server's raw refusal
// ("CREATE command denied ... in line 0", "Unknown column 'state'") says
// what went wrong, not what to do. Classified by error number.

// driverError is the driver's error under golang-migrate's database.Error,
// which does not unwrap.
func driverError(err error) error {
	var de database.Error
	if errors.As(err, &de) && de.OrigErr != nil {
		return de.OrigErr
	}
	var dp *database.Error
	if errors.As(err, &dp) && dp.OrigErr != nil {
		return dp.OrigErr
	}
	return err
}

// migrateFix names the fix of a migration the server refused for want of
// a privilege: the runtime user ran it.
func migrateFix(err error) error {
	if err == nil || !deniedError(driverError(err)) {
		return err
	}
	return fmt.Errorf("this user may not change mend's schema (%s): run mend migrate as the DDL user (docs/operations.md, 'Least-privilege grants'); "+
		"then mend migrate version shows whether the refused step left the schema dirty", oneLine(driverError(err).Error()))
}

// schemaFix names the fix of a statement that found a column or table of
// mend's missing: the schema is older than the binary.
func schemaFix(err error) error {
	switch mysqlx.ErrNumber(err) {
	case 1054, 1146: // unknown column, no such table
		return fmt.Errorf("mend's schema is older than this binary (%s): run mend migrate up (mend migrate version shows where it is)", oneLine(err.Error()))
	}
	return err
}

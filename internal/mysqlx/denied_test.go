package mysqlx

import (
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

// Issue 47: a refused statement is mend.ErrDenied with the GRANT that
// fixes it, whichever engine's wording (the texts are the servers' own, as
// TestFailingRepairPages sees them from MySQL 9.7 and MariaDB 10.11).
func TestDeniedNamesTheGrant(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		num  uint16
		msg  string
		want string
	}{
		{1142, "UPDATE command denied to user 'mend'@'172.17.0.1' for table 'batch'", "GRANT UPDATE ON `batch` TO 'mend'"},
		{1142, "UPDATE command denied to user 'mend'@'172.17.0.1' for table `sq`.`batch`", "GRANT UPDATE ON `sq`.`batch` TO 'mend'"},
		{1142, "SELECT command denied to user 'mend'@'%' for table 'sq.build'", "GRANT SELECT ON `sq`.`build` TO 'mend'"},
		{1143, "UPDATE command denied to user 'mend'@'h' for column 'state' in table 'request'", "GRANT UPDATE (`state`) ON `request` TO 'mend'"},
		{1044, "Access denied for user 'mend'@'%' to database 'mend'", "GRANT SELECT, INSERT, UPDATE, DELETE ON `mend`.* TO 'mend'"},
	} {
		err := Translate(&mysql.MySQLError{Number: tt.num, Message: tt.msg})
		var d *mend.DeniedError
		if !errors.As(err, &d) || !errors.Is(err, mend.ErrDenied) || d.Grant() != tt.want {
			t.Errorf("Translate(%d %q) = %v; want a DeniedError with %q", tt.num, tt.msg, err, tt.want)
		}
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != tt.num {
			t.Errorf("Translate(%d) lost the driver's error: %v", tt.num, err)
		}
	}
}

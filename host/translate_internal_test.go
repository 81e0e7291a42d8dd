package host

import (
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

func TestTranslate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		number uint16
		want   error // nil: matches no sentinel
	}{
		{1062, mend.ErrConflict},
		{1213, mend.ErrBusy},
		{1205, mend.ErrBusy},
		{1406, mend.ErrInvalid},
		{1366, mend.ErrInvalid},
		{1644, nil},
		{1064, nil},
	} {
		driverErr := &mysql.MySQLError{Number: tt.number, Message: "x"}
		got := translate(driverErr)
		var me *mysql.MySQLError
		if !errors.As(got, &me) || me.Number != tt.number {
			t.Errorf("translate(%d) = %v; want the driver error kept in the chain", tt.number, got)
		}
		for _, s := range []error{mend.ErrConflict, mend.ErrBusy, mend.ErrInvalid, mend.ErrNotFound, mend.ErrUnavailable, mend.ErrAmbiguous} {
			if errors.Is(got, s) != (s == tt.want) {
				t.Errorf("translate(%d) = %v; matches %v: %v, want %v", tt.number, got, s, errors.Is(got, s), s == tt.want)
			}
		}
	}
	if err := translate(mysql.ErrInvalidConn); !errors.Is(err, mend.ErrUnavailable) {
		t.Errorf("translate(ErrInvalidConn) = %v; want ErrUnavailable", err)
	}
	if translate(nil) != nil {
		t.Error("translate(nil) != nil")
	}
}

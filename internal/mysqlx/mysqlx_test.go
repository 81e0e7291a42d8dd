package mysqlx_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
)

func TestTranslate(t *testing.T) {
	t.Parallel()
	wrapped := func(n uint16) error { return fmt.Errorf("exec: %w", &mysql.MySQLError{Number: n, Message: "x"}) }
	tests := []struct {
		err  error
		want error // nil: passed through unchanged
	}{
		{wrapped(mysqlx.ErrDeadlock), mend.ErrBusy},
		{wrapped(mysqlx.ErrLockWaitTimeout), mend.ErrBusy},
		{wrapped(mysqlx.ErrDataTooLong), mend.ErrInvalid},
		{wrapped(mysqlx.ErrBadString), mend.ErrInvalid},
		{driver.ErrBadConn, mend.ErrUnavailable},
		{mysql.ErrInvalidConn, mend.ErrUnavailable},
		{&mend.AmbiguousError{OpID: "o", Err: mysql.ErrInvalidConn}, mend.ErrAmbiguous},
		{context.Canceled, nil},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), nil}, // not "unavailable": the caller's deadline
		{wrapped(1064), nil},
	}
	for _, tt := range tests {
		got := mysqlx.Translate(tt.err)
		if tt.want == nil {
			if got != tt.err {
				t.Errorf("Translate(%v) = %v; want it unchanged", tt.err, got)
			}
			continue
		}
		if !errors.Is(got, tt.want) {
			t.Errorf("Translate(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
	// An ambiguous commit must not also read as "nothing written".
	if got := mysqlx.Translate(&mend.AmbiguousError{Err: driver.ErrBadConn}); errors.Is(got, mend.ErrUnavailable) {
		t.Errorf("an ambiguous error was turned into ErrUnavailable: %v", got)
	}
}

func TestNormalizeDSN(t *testing.T) {
	t.Parallel()
	cfg, err := mysqlx.NormalizeDSN("dsn", "u:p@tcp(127.0.0.1:3306)/db?loc=Local")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.ParseTime || cfg.Loc.String() != "UTC" || !cfg.InterpolateParams || cfg.Params["time_zone"] != "'+00:00'" || !strings.Contains(cfg.Params["sql_mode"], "STRICT_ALL_TABLES") {
		t.Fatalf("normalised config = %+v", cfg)
	}
	// Every spelling of the variables mend forces is dropped, so the one
	// SET the driver sends for each is mend's.
	for _, key := range []string{"sql_mode", "SQL_MODE", "Sql_Mode", "@@sql_mode", "@@SESSION.sql_mode", "@@global.sql_mode",
		"session.sql_mode", "time_zone", "TIME_ZONE", "@@time_zone", "@@session.Time_Zone", "local.time_zone",
		"transaction_isolation", "TX_ISOLATION", "@@SESSION.tx_isolation", "@@transaction_isolation", "session.Transaction_Isolation"} {
		cfg, err := mysqlx.NormalizeDSN("dsn", "u:p@tcp(127.0.0.1:3306)/db?"+key+"=%27x%27")
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if len(cfg.Params) != 2 || cfg.Params["time_zone"] != "'+00:00'" || cfg.Params["sql_mode"] != mysqlx.SessionSQLMode {
			t.Errorf("DSN setting %s: params %v; want only mend's sql_mode and time_zone", key, cfg.Params)
		}
	}
	// SetReadCommitted leaves exactly one isolation setting, whatever name
	// the DSN used.
	for _, name := range mysqlx.IsolationVariables {
		cfg, err := mysqlx.NormalizeDSN("dsn", "u:p@tcp(127.0.0.1:3306)/db?TX_Isolation=%27SERIALIZABLE%27")
		if err != nil {
			t.Fatal(err)
		}
		mysqlx.SetReadCommitted(cfg, name)
		if len(cfg.Params) != 3 || cfg.Params[name] != "'READ-COMMITTED'" {
			t.Errorf("SetReadCommitted(%s): params %v; want sql_mode, time_zone and %s only", name, cfg.Params, name)
		}
	}
	for _, bad := range []string{"u:p@tcp(127.0.0.1:3306)/", "u:p@tcp(h)/db?clientFoundRows=true", "u:secret@tcp(h/db"} {
		_, err := mysqlx.NormalizeDSN("dsn", bad)
		var ve *mend.ValidationError
		if !errors.As(err, &ve) || ve.Field != "dsn" {
			t.Errorf("NormalizeDSN(%q) = %v; want a dsn ValidationError", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error %q leaks the password", err)
		}
	}
}

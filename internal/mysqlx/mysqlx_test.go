package mysqlx_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

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

func TestConfigForces(t *testing.T) {
	t.Parallel()
	for _, p := range []mysqlx.Pool{{Field: "dsn", MultiStatements: true, LockWait: 5 * time.Second, IdleTimeout: 1500 * time.Millisecond}, {Field: "app_dsn"}} {
		cfg, err := mysqlx.Config("u:p@tcp(127.0.0.1:3306)/db?loc=Local&net_read_timeout=30&charset=utf8mb4", p)
		// Issue 30: go-sql-driver's common spelling, utf8mb4 first with a
		// UTF-8 fallback, is accepted.
		if _, err := mysqlx.Config("u:p@tcp(127.0.0.1:3306)/db?charset=utf8mb4,utf8", p); err != nil {
			t.Fatalf("charset=utf8mb4,utf8: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"autocommit": "1", "sql_mode": mysqlx.SessionSQLMode, "time_zone": "'+00:00'",
			"character_set_client": "utf8mb4", "character_set_results": "utf8mb4", "collation_connection": "utf8mb4_general_ci",
			"net_read_timeout": "30"}
		if p.LockWait > 0 {
			want["innodb_lock_wait_timeout"], want["lock_wait_timeout"], want["wait_timeout"] = "5", "5", "2"
		}
		if !maps.Equal(cfg.Params, want) {
			t.Errorf("%s: params %v; want %v", p.Field, cfg.Params, want)
		}
		if !cfg.ParseTime || cfg.Loc.String() != "UTC" || !cfg.InterpolateParams || cfg.MultiStatements != p.MultiStatements || cfg.Collation != "utf8mb4_general_ci" {
			t.Errorf("%s: config %+v", p.Field, cfg)
		}
	}
	cfg, err := mysqlx.Config("u:p@tcp(h)/db?collation=utf8mb4_bin", mysqlx.Pool{})
	if err != nil || cfg.Params["collation_connection"] != "utf8mb4_bin" || cfg.Collation != "utf8mb4_bin" {
		t.Errorf("a utf8mb4 collation in the DSN: %v, %v; want it kept as the session's", cfg, err)
	}
	for _, ttl := range []struct{ ttl, want time.Duration }{{2 * time.Second, time.Second}, {15 * time.Second, 5 * time.Second}, {10 * time.Second, 3 * time.Second}} {
		if got := mysqlx.LockWaitFor(ttl.ttl); got != ttl.want || got >= ttl.ttl {
			t.Errorf("LockWaitFor(%v) = %v; want %v, below the TTL", ttl.ttl, got, ttl.want)
		}
	}
}

// TestConfigRefuses: every DSN parameter that would set what mend forces,
// in any spelling or quoting, every unknown session variable, and every
// value that could carry a second assignment is refused with a ParamError
// naming the parameter, before any connection (the address is unroutable).
func TestConfigRefuses(t *testing.T) {
	t.Parallel()
	const base = "u:secret@tcp(127.0.0.1:1)/db?"
	tests := []struct {
		query string
		param string
		pool  mysqlx.Pool
	}{
		{"autocommit=0", "autocommit", mysqlx.Pool{}},
		{"AUTOCOMMIT=0", "AUTOCOMMIT", mysqlx.Pool{}},
		{"`autocommit`=0", "`autocommit`", mysqlx.Pool{}},
		{"`sql_mode`=%27%27", "`sql_mode`", mysqlx.Pool{}},
		{"`SQL_MODE`=%27%27", "`SQL_MODE`", mysqlx.Pool{}},
		{"%60sql_mode%60=%27%27", "%60sql_mode%60", mysqlx.Pool{}},
		{"@@SESSION.`sql_mode`=%27%27", "@@SESSION.`sql_mode`", mysqlx.Pool{}},
		{"@@session . ` time_zone `=%27%2B05:00%27", "@@session . ` time_zone `", mysqlx.Pool{}},
		{"@@sql_mode=%27%27", "@@sql_mode", mysqlx.Pool{}},
		{"Time_Zone=%27%2B05:00%27", "Time_Zone", mysqlx.Pool{}},
		{"session.time_zone=%27%2B05:00%27", "session.time_zone", mysqlx.Pool{}},
		{"@@global.autocommit=0", "@@global.autocommit", mysqlx.Pool{}},
		{"tx_isolation=%27SERIALIZABLE%27", "tx_isolation", mysqlx.Pool{}},
		{"transaction_isolation=%27SERIALIZABLE%27", "transaction_isolation", mysqlx.Pool{}},
		{"innodb_lock_wait_timeout=50", "innodb_lock_wait_timeout", mysqlx.Pool{}},
		{"wait_timeout=28800", "wait_timeout", mysqlx.Pool{}},
		{"character_set_client=gbk", "character_set_client", mysqlx.Pool{}},
		{"names=gbk", "names", mysqlx.Pool{}},
		// Smuggled second assignments: the value goes into the driver's SET
		// unchanged.
		{"net_read_timeout=30,autocommit%3D0", "net_read_timeout", mysqlx.Pool{}},
		{"net_read_timeout=1,sql_mode%3D%27%27", "net_read_timeout", mysqlx.Pool{}},
		{"net_write_timeout=30,time_zone%3D%27%2B05:00%27", "net_write_timeout", mysqlx.Pool{}},
		{"long_query_time=%271%27", "long_query_time", mysqlx.Pool{}},
		{"net_read_timeout=30%20", "net_read_timeout", mysqlx.Pool{}},
		// Unknown variables, and known harmless ones spelled otherwise.
		{"foreign_key_checks=0", "foreign_key_checks", mysqlx.Pool{}},
		{"sql_select_limit=1", "sql_select_limit", mysqlx.Pool{}},
		{"some_new_variable=1", "some_new_variable", mysqlx.Pool{}},
		{"`net_read_timeout`=30", "`net_read_timeout`", mysqlx.Pool{}},
		{"@@net_read_timeout=30", "@@net_read_timeout", mysqlx.Pool{}},
		// The driver's own parameters.
		{"charset=gbk", "charset", mysqlx.Pool{}},
		{"charset=sjis", "charset", mysqlx.Pool{}},
		{"charset=big5", "charset", mysqlx.Pool{}},
		{"charset=cp932", "charset", mysqlx.Pool{}},
		{"charset=utf8mb4,gbk", "charset", mysqlx.Pool{}},
		{"charset=utf8,utf8mb4", "charset", mysqlx.Pool{}},
		{"collation=gbk_chinese_ci", "collation", mysqlx.Pool{}},
		{"collation=latin1_swedish_ci", "collation", mysqlx.Pool{}},
		{"clientFoundRows=true", "clientFoundRows", mysqlx.Pool{}},
		// The driver's parameters that change what a value means.
		{"columnsWithAlias=true", "columnsWithAlias", mysqlx.Pool{}},
		{"timeTruncate=1h", "timeTruncate", mysqlx.Pool{}},
		{"timeTruncate=1us", "timeTruncate", mysqlx.Pool{MultiStatements: true}},
		{"completion_type=2", "completion_type", mysqlx.Pool{}},
		{"max_sort_length=4", "max_sort_length", mysqlx.Pool{}},
		{"allowAllFiles=true", "allowAllFiles", mysqlx.Pool{MultiStatements: true}},
		{"multiStatements=true", "multiStatements", mysqlx.Pool{Field: "app_dsn"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			_, err := mysqlx.Config(base+tt.query, tt.pool)
			var pe *mysqlx.ParamError
			if !errors.As(err, &pe) || pe.Param != tt.param || !errors.Is(err, mend.ErrInvalid) {
				t.Fatalf("Config(%q) = %v; want a ParamError naming %q", tt.query, err, tt.param)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q leaks the password", err)
			}
		})
	}
	for _, bad := range []string{"u:p@tcp(127.0.0.1:3306)/", "u:secret@tcp(h/db"} {
		_, err := mysqlx.Config(bad, mysqlx.Pool{Field: "queue_dsn"})
		var ve *mend.ValidationError
		if !errors.As(err, &ve) || ve.Field != "queue_dsn" || strings.Contains(err.Error(), "secret") {
			t.Errorf("Config(%q) = %v; want a queue_dsn ValidationError without the password", bad, err)
		}
	}
}

package mysqltest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqlx"
)

// erCannotConvertString is MySQL's error 3854, ER_CANNOT_CONVERT_STRING.
const erCannotConvertString = 3854

// TestCountStatementsBesideABinaryStatement: while another session runs a
// statement holding bytes utf8mb3 cannot hold, CountStatements still
// answers and finds that statement (by a part of its text other than the
// bytes). The negative control reads
// information_schema.processlist, as the harness did, and on MySQL gets
// error 3854 (MariaDB has no such error, so there the control only logs).
func TestCountStatementsBesideABinaryStatement(t *testing.T) {
	SkipVitess(t, "the sessions of a keyspace run on the tablets' pooled connections, not vtgate's")
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // only a hang fails on it
	defer cancel()
	d := NewDB(t)
	db := d.SQL(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	sleeping := make(chan error, 1)
	go func() {
		// interpolateParams writes the bytes into the statement's text.
		_, err := conn.ExecContext(ctx, "DO SLEEP(600), ?", []byte{0xff, 0xfe, 0x00, 0x9f})
		sleeping <- err
	}()
	defer func() {
		if _, err := db.ExecContext(context.WithoutCancel(ctx), "KILL QUERY ?", id); err != nil {
			t.Errorf("kill the sleeping statement: %v", err)
		}
		<-sleeping
	}()
	for {
		n, err := CountStatements(ctx, db, "SLEEP(600)")
		if err != nil {
			t.Fatalf("CountStatements beside a binary statement: %v", err)
		}
		if n == 1 {
			break
		}
		select {
		case err := <-sleeping:
			t.Fatalf("the sleeping statement ended early: %v", err)
		case <-ctx.Done():
			t.Fatalf("the sleeping statement was never seen: %s", DescribeStatements(ctx, db))
		case <-time.After(5 * time.Millisecond): // polling interval
		}
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	var n int
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?", id).Scan(&n)
	switch {
	case strings.Contains(version, "MariaDB"):
		t.Logf("negative control on %s: the processlist read gave %d, %v (MariaDB has no error 3854)", version, n, err)
	case mysqlx.ErrNumber(err) != erCannotConvertString:
		t.Fatalf("negative control on %s: the processlist read gave %d, %v; want error 3854, or this test no longer shows the hazard", version, n, err)
	}
}

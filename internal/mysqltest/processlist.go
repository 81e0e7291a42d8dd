package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Session is one row of the server's process list.
type Session struct {
	ID      int64
	DB      string
	Command string
	State   string
	Info    string // the statement running now, "" if none
}

// Statements returns the statements the server is running now (command
// Query) in db's current database, other than this read itself.
//
// It reads SHOW FULL PROCESSLIST, not information_schema.processlist: MySQL
// builds that table with info as utf8mb3, every row before any WHERE
// applies, so while any session of the shared server runs a statement
// holding bytes utf8mb3 cannot hold (a binary ID interpolated into it) the
// read fails with error 3854, whatever it filters on, and a busy package's
// parallel tests kept some such statement running often enough to outlast
// 100 retries. SHOW sends each statement's text in its own character set
// (utf8mb4, the connection's), so nothing is converted. The test servers
// run without performance_schema, which would offer the same through
// performance_schema.threads. The list is live, unlike
// information_schema.innodb_trx, a cache InnoDB refreshes only after it
// has gone 100 ms unread, which fast polling (by any test on the server)
// keeps frozen.
func Statements(ctx context.Context, db *sql.DB) ([]Session, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if Vitess() {
		return vitessStatements(ctx, conn)
	}
	var self int64
	var name sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID(), DATABASE()").Scan(&self, &name); err != nil {
		return nil, err
	}
	all, err := processlist(ctx, conn)
	if err != nil {
		return nil, err
	}
	var out []Session
	for _, s := range all {
		if s.ID != self && s.Command == "Query" && s.DB == name.String {
			out = append(out, s)
		}
	}
	return out, nil
}

// CountStatements counts the Statements whose text contains any of texts,
// compared without regard to case or white space (see comparable).
func CountStatements(ctx context.Context, db *sql.DB, texts ...string) (int, error) {
	ss, err := Statements(ctx, db)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range ss {
		info := comparable(s.Info)
		for _, text := range texts {
			if strings.Contains(info, comparable(text)) {
				n++
				break
			}
		}
	}
	return n, nil
}

// DescribeStatements lists the Statements as "[id state info]", for a
// failure message.
func DescribeStatements(ctx context.Context, db *sql.DB) string {
	ss, err := Statements(ctx, db)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "[%d %q %.80q] ", s.ID, s.State, s.Info)
	}
	return b.String()
}

// processlist reads SHOW FULL PROCESSLIST by column name: MariaDB adds
// columns MySQL has not.
func processlist(ctx context.Context, conn *sql.Conn) ([]Session, error) {
	rows, err := conn.QueryContext(ctx, "SHOW FULL PROCESSLIST")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []Session
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		var s Session
		for i, c := range cols {
			v := string(vals[i])
			switch strings.ToLower(c) {
			case "id":
				if _, err := fmt.Sscan(v, &s.ID); err != nil {
					return nil, fmt.Errorf("processlist id %q: %w", v, err)
				}
			case "db":
				s.DB = v
			case "command":
				s.Command = v
			case "state":
				s.State = v
			case "info":
				s.Info = v
			}
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// vitessStatements is Statements through vtgate, which has no process list
// of its own: vtgate sends a query of information_schema.processlist to a
// tablet, naming the shard's database in place of the keyspace that
// DATABASE() names, so it sees the statements vttablet runs for this
// keyspace on that mysqld (the harness's one mysqld holds every shard).
// vttablet rewrites each statement's text (lower-case keywords, no space
// before a column list), so callers' texts are compared in that form too
// (see CountStatements).
func vitessStatements(ctx context.Context, conn *sql.Conn) ([]Session, error) {
	rows, err := conn.QueryContext(ctx, `SELECT id, COALESCE(db, ''), command, COALESCE(state, ''), COALESCE(info, '')
		FROM information_schema.processlist WHERE db = DATABASE() AND command = 'Query'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		var s Session
		if err := rows.Scan(&s.ID, &s.DB, &s.Command, &s.State, &s.Info); err != nil {
			return nil, err
		}
		if !strings.Contains(s.Info, "information_schema.processlist") {
			out = append(out, s)
		}
	}
	return out, rows.Err()
}

// comparable is a statement's text as CountStatements compares it:
// lower-case, runs of white space as one space, none before "(" (vttablet
// sends "into t(a, b)" for "INTO t (a, b)").
func comparable(s string) string {
	s = strings.Join(strings.Fields(strings.ToLower(s)), " ")
	return strings.ReplaceAll(s, " (", "(")
}

package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mendq/mend/internal/mysqlx"
)

// Server is what the reader reads of the queue database server before it
// streams: its flavor and identity, how its binary log is set, and where
// the log is now. Doctor reports the same (Probe).
type Server struct {
	Flavor  string // "mysql" or "mariadb"
	Version string
	// Identity names this server for a file-and-offset position:
	// @@server_uuid on MySQL, "server_id=N" on MariaDB.
	Identity string
	ServerID uint32
	LogBin   bool
	Format   string // binlog_format
	RowImage string // binlog_row_image
	// RowMetadata is binlog_row_metadata ("FULL" puts column names in the
	// log, so a column added to queue_messages while the reader is behind
	// does not stop it); "" where the server has none.
	RowMetadata string
	// GTIDs: MySQL's gtid_mode is ON, or MariaDB (which always has them).
	GTIDs bool
	// GTIDMode is MySQL's gtid_mode, "" on MariaDB.
	GTIDMode string
	// Executed is every transaction the log holds or held (MySQL
	// gtid_executed, MariaDB gtid_binlog_pos); Purged those it no longer
	// holds (MySQL gtid_purged; "" on MariaDB).
	Executed, Purged string
	// Files are the binary log files the server still has, oldest first;
	// Current is the one written now.
	Files   []string
	Current string
	// End is the size of Current when probed: where the log ended then.
	End uint64
	// Retention is binlog_expire_logs_seconds (0: never purged by age).
	Retention time.Duration
	// DoDB and IgnoreDB are the server's binary-log filters
	// (binlog-do-db, binlog-ignore-db), as SHOW BINARY LOG STATUS (SHOW
	// MASTER STATUS before MySQL 8.4) lists them; FiltersKnown says they
	// could be read.
	DoDB, IgnoreDB []string
	FiltersKnown   bool
	// LowerCaseNames is lower_case_table_names: above 0, the server
	// compares schema and table names without case, and the log carries
	// them as the server stores them.
	LowerCaseNames int
}

// queryer is a *sql.DB or *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Probe reads the server's binary-log settings and state through db, a
// connection to the queue database. It needs no privilege beyond a login
// for the variables, and REPLICATION CLIENT (MySQL: or BINLOG MONITOR on
// MariaDB) for the list of files; without it Files is nil and the error
// says so.
func Probe(ctx context.Context, db queryer) (Server, error) {
	var s Server
	var comment string
	if err := db.QueryRowContext(ctx, `SELECT @@version, @@version_comment, @@global.server_id, @@global.log_bin, @@global.binlog_format, @@global.binlog_row_image`).
		Scan(&s.Version, &comment, &s.ServerID, &s.LogBin, &s.Format, &s.RowImage); err != nil {
		return s, fmt.Errorf("%w: read the server's binary-log settings: %w", errConnect, err)
	}
	s.Flavor = "mysql"
	if strings.Contains(strings.ToLower(s.Version+" "+comment), "mariadb") {
		s.Flavor = "mariadb"
	}
	var expire sql.NullInt64
	_ = db.QueryRowContext(ctx, `SELECT @@global.binlog_expire_logs_seconds`).Scan(&expire)
	s.Retention = time.Duration(expire.Int64) * time.Second
	var meta sql.NullString
	_ = db.QueryRowContext(ctx, `SELECT @@global.binlog_row_metadata`).Scan(&meta)
	s.RowMetadata = meta.String
	var lower sql.NullInt64
	_ = db.QueryRowContext(ctx, `SELECT @@global.lower_case_table_names`).Scan(&lower)
	s.LowerCaseNames = int(lower.Int64)
	if s.Flavor == "mariadb" {
		s.GTIDs = true
		s.Identity = fmt.Sprintf("server_id=%d", s.ServerID)
		if err := db.QueryRowContext(ctx, `SELECT @@global.gtid_binlog_pos`).Scan(&s.Executed); err != nil {
			return s, fmt.Errorf("binlog: read gtid_binlog_pos: %w", err)
		}
	} else {
		if err := db.QueryRowContext(ctx, `SELECT @@global.server_uuid, @@global.gtid_mode, @@global.gtid_executed, @@global.gtid_purged`).
			Scan(&s.Identity, &s.GTIDMode, &s.Executed, &s.Purged); err != nil {
			return s, fmt.Errorf("binlog: read the server's GTID settings: %w", err)
		}
		s.GTIDs = strings.EqualFold(s.GTIDMode, "ON")
		s.Executed = strings.ReplaceAll(s.Executed, "\n", "")
		s.Purged = strings.ReplaceAll(s.Purged, "\n", "")
	}
	if !s.LogBin {
		return s, nil
	}
	files, sizes, err := logFiles(ctx, db)
	if err != nil {
		return s, err
	}
	s.Files = files
	if len(sizes) > 0 {
		s.End = sizes[len(sizes)-1]
	}
	if len(files) > 0 {
		s.Current = files[len(files)-1]
	}
	s.DoDB, s.IgnoreDB, s.FiltersKnown = logFilters(ctx, db)
	return s, nil
}

// logFilters reads the binary log's filters from the server's status
// (SHOW BINARY LOG STATUS from MySQL 8.2, SHOW MASTER STATUS before it and
// on MariaDB; both need what SHOW BINARY LOGS needs).
func logFilters(ctx context.Context, db queryer) (do, ignore []string, ok bool) {
	for _, q := range []string{`SHOW BINARY LOG STATUS`, `SHOW MASTER STATUS`} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		cols, err := rows.Columns()
		if err != nil {
			rows.Close()
			continue
		}
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if rows.Next() && rows.Scan(ptrs...) == nil {
			for i, c := range cols {
				switch strings.ToLower(c) {
				case "binlog_do_db":
					do = splitList(vals[i].String)
				case "binlog_ignore_db":
					ignore = splitList(vals[i].String)
				}
			}
			ok = true
		}
		rows.Close()
		if ok {
			return do, ignore, true
		}
	}
	return nil, nil, false
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// SameName reports whether the server takes schema or table names a and
// b for the same one: byte for byte, or without case where
// lower_case_table_names is set.
func (s Server) SameName(a, b string) bool {
	if s.LowerCaseNames > 0 {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// FilterProblem says, with the fix, why the binary log leaves out the
// changes of schema (the queue database) by the server's binlog-do-db or
// binlog-ignore-db; "" when it logs them. A log that leaves them out would
// let the reader stream on, caught up, and record nothing.
func (s Server) FilterProblem(schema string) string {
	if planted.ignoreFilters {
		return ""
	}
	for _, db := range s.IgnoreDB {
		if s.SameName(db, schema) {
			return fmt.Sprintf("the binary log leaves out schema %s (binlog-ignore-db=%s): the dead letters inserted there are never logged; remove it from binlog-ignore-db and restart the server, or run --subscribe-mode offsets", schema, strings.Join(s.IgnoreDB, ","))
		}
	}
	if len(s.DoDB) > 0 && !slices.ContainsFunc(s.DoDB, func(db string) bool { return s.SameName(db, schema) }) {
		return fmt.Sprintf("the binary log logs only schemas %s (binlog-do-db), not %s where the dead letters are inserted; add binlog-do-db=%s and restart the server, or run --subscribe-mode offsets", strings.Join(s.DoDB, ","), schema, schema)
	}
	return ""
}

// ErrNoReplicationClient is Probe's error when the user may not list the
// binary log files.
var ErrNoReplicationClient = errors.New("binlog: the queue database user may not list the binary logs")

// logFiles is SHOW BINARY LOGS' first two columns: the files and their
// sizes.
func logFiles(ctx context.Context, db queryer) ([]string, []uint64, error) {
	rows, err := db.QueryContext(ctx, `SHOW BINARY LOGS`)
	if err != nil {
		if n := mysqlx.ErrNumber(err); n == 1227 || n == 1045 || n == 1142 {
			return nil, nil, fmt.Errorf("%w (GRANT REPLICATION CLIENT ON *.* TO the user): %v", ErrNoReplicationClient, err)
		}
		return nil, nil, fmt.Errorf("%w: SHOW BINARY LOGS: %w", errConnect, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	var files []string
	var sizes []uint64
	for rows.Next() {
		vals := make([]any, len(cols))
		var name string
		var size uint64
		vals[0] = &name
		for i := 1; i < len(vals); i++ {
			vals[i] = new(sql.RawBytes)
		}
		if len(vals) > 1 {
			vals[1] = &size
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, nil, err
		}
		files, sizes = append(files, name), append(sizes, size)
	}
	return files, sizes, rows.Err()
}

// Has reports whether the server still has binary log file name.
func (s Server) Has(file string) bool {
	for _, f := range s.Files {
		if f == file {
			return true
		}
	}
	return false
}

// Problems lists what keeps the reader from reading schema's dead letters
// on this server, each with its fix; none means binlog mode can run.
func (s Server) Problems(schema string) []string {
	var p []string
	if !s.LogBin {
		if s.Flavor == "mariadb" {
			p = append(p, "the binary log is off: start the server with log_bin (e.g. log_bin=mysql-bin in its [mariadbd] section) and binlog_format=ROW")
		} else {
			p = append(p, "the binary log is off (skip-log-bin or disable-log-bin): remove that option; MySQL 8+ logs by default")
		}
		return p
	}
	if !strings.EqualFold(s.Format, "ROW") {
		p = append(p, fmt.Sprintf("binlog_format is %s: SET PERSIST binlog_format=ROW (MariaDB: SET GLOBAL and the config file) so inserts are logged as rows", s.Format))
	}
	if !strings.EqualFold(s.RowImage, "FULL") {
		p = append(p, fmt.Sprintf("binlog_row_image is %s: SET PERSIST binlog_row_image=FULL (MariaDB: SET GLOBAL and the config file) so every column of a dead letter is logged", s.RowImage))
	}
	if f := s.FilterProblem(schema); f != "" {
		p = append(p, f)
	}
	return p
}

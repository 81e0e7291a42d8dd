package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	// Retention is binlog_expire_logs_seconds (0: never purged by age).
	Retention time.Duration
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
		return s, fmt.Errorf("binlog: read the server's binary-log settings: %w", err)
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
	files, err := logFiles(ctx, db)
	if err != nil {
		return s, err
	}
	s.Files = files
	if len(files) > 0 {
		s.Current = files[len(files)-1]
	}
	return s, nil
}

// ErrNoReplicationClient is Probe's error when the user may not list the
// binary log files.
var ErrNoReplicationClient = errors.New("binlog: the queue database user may not list the binary logs")

// logFiles is SHOW BINARY LOGS' first column.
func logFiles(ctx context.Context, db queryer) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SHOW BINARY LOGS`)
	if err != nil {
		if n := mysqlx.ErrNumber(err); n == 1227 || n == 1045 || n == 1142 {
			return nil, fmt.Errorf("%w (GRANT REPLICATION CLIENT ON *.* TO the user): %v", ErrNoReplicationClient, err)
		}
		return nil, fmt.Errorf("binlog: SHOW BINARY LOGS: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var files []string
	for rows.Next() {
		vals := make([]any, len(cols))
		var name string
		vals[0] = &name
		for i := 1; i < len(vals); i++ {
			vals[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, rows.Err()
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

// Problems lists what keeps the reader from reading this server, each with
// its fix; none means binlog mode can run. gtidAdvice is added when the
// server has no GTIDs (binlog mode runs, but a failover of the primary
// makes it start over from the tables).
func (s Server) Problems() []string {
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
	return p
}

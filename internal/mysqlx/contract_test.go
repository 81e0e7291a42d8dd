package mysqlx_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/migrations"
)

// contractEnv is what a row of the session contract's test gets: a pool
// opened by mysqlx.Open after the hostile global was set (so its sessions
// would inherit it), and root, a session of the server's administrator
// that does not (it was opened before).
type contractEnv struct {
	pool   *sql.DB
	root   *sql.Conn
	dsn    string
	server *mysqltest.Server
}

// contractRow is one row of docs/operations.md's table "What mend forces
// on its sessions": a variable set to a hostile value as a server global
// (the first of names the server has), and what mend answers.
type contractRow struct {
	names   []string // the variable, by engine: the first the server has is set
	hostile string   // SQL value of the hostile global
	verdict string   // forced, refused, harmless
	// dsn, when set, is the same hostile value as a DSN parameter, which
	// Config must refuse naming dsnParam.
	dsn, dsnParam string
	// pool, when set, is the pool the row opens (default: a read pool).
	pool mysqlx.Pool
	// check asserts mend's answer on env.pool.
	check func(t *testing.T, ctx context.Context, env contractEnv)
}

// sessionValue reads one session variable on a session of pool.
func sessionValue(t *testing.T, ctx context.Context, pool *sql.DB, name string) string {
	t.Helper()
	var v sql.NullString
	if err := pool.QueryRowContext(ctx, "SELECT @@SESSION."+name).Scan(&v); err != nil {
		t.Fatalf("read @@SESSION.%s: %v", name, err)
	}
	return v.String
}

func count(t *testing.T, ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query string, args ...any) int {
	t.Helper()
	var n int
	if err := q.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func rowsOf(t *testing.T, ctx context.Context, pool *sql.DB, query string) []string {
	t.Helper()
	rows, err := pool.QueryContext(ctx, query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// contract is the table of docs/operations.md, one row per variable.
var contract = map[string]contractRow{
	"sql_select_limit": {names: []string{"sql_select_limit"}, hostile: "2", verdict: "forced",
		dsn: "sql_select_limit=2", dsnParam: "sql_select_limit",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			if got := rowsOf(t, ctx, env.pool, "SELECT CAST(id AS CHAR) FROM c_rows ORDER BY id"); len(got) != 4 {
				t.Errorf("an unbounded SELECT returned %d of 4 rows", len(got))
			}
		}},
	"isolation": {names: []string{"transaction_isolation", "tx_isolation"}, hostile: "'READ-UNCOMMITTED'", verdict: "forced",
		dsn: "tx_isolation=%27READ-UNCOMMITTED%27", dsnParam: "tx_isolation",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			tx, err := env.root.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, "INSERT INTO c_rows (id, k, v) VALUES (99, 'uncommitted', 'x')"); err != nil {
				t.Fatal(err)
			}
			if n := count(t, ctx, env.pool, "SELECT COUNT(*) FROM c_rows"); n != 4 {
				t.Errorf("a mend session read %d rows: it saw a row whose insert was not committed", n)
			}
			ptx, err := env.pool.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ptx.Rollback() }()
			if n := count(t, ctx, ptx, "SELECT COUNT(*) FROM c_rows"); n != 4 {
				t.Errorf("a mend transaction read %d rows: it saw an uncommitted insert", n)
			}
		}},
	"autocommit": {names: []string{"autocommit"}, hostile: "0", verdict: "forced",
		dsn: "autocommit=0", dsnParam: "autocommit",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			if _, err := env.pool.ExecContext(ctx, "UPDATE c_rows SET v = 'w' WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			if n := count(t, ctx, env.root, "SELECT COUNT(*) FROM c_rows WHERE id = 1 AND v = 'w'"); n != 1 {
				t.Errorf("an autocommit write of a mend session is not visible to another session")
			}
		}},
	"sql_mode": {names: []string{"sql_mode"}, hostile: "''", verdict: "forced",
		dsn: "sql_mode=%27%27", dsnParam: "sql_mode",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			_, err := env.pool.ExecContext(ctx, "UPDATE c_rows SET v = 'far too long' WHERE id = 1")
			if mysqlx.ErrNumber(err) != mysqlx.ErrDataTooLong {
				t.Errorf("an over-long value: %v; want error 1406, not a silent truncation", err)
			}
		}},
	"time_zone": {names: []string{"time_zone"}, hostile: "'+05:00'", verdict: "forced",
		dsn: "time_zone=%27%2B05:00%27", dsnParam: "time_zone",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			if n := count(t, ctx, env.pool, "SELECT ABS(TIMESTAMPDIFF(SECOND, NOW(), UTC_TIMESTAMP()))"); n > 1 {
				t.Errorf("NOW() is %d s away from UTC", n)
			}
		}},
	"character_set_client": {names: []string{"character_set_client"}, hostile: "'latin1'", verdict: "forced",
		dsn: "character_set_client=gbk", dsnParam: "character_set_client",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			var s string
			if err := env.pool.QueryRowContext(ctx, "SELECT ?", "é🙂").Scan(&s); err != nil || s != "é🙂" {
				t.Errorf("a utf8mb4 string came back as %q (%v)", s, err)
			}
			if cs := sessionValue(t, ctx, env.pool, "character_set_client"); cs != "utf8mb4" {
				t.Errorf("character_set_client %q", cs)
			}
		}},
	"collation_connection": {names: []string{"collation_connection"}, hostile: "'latin1_swedish_ci'", verdict: "forced",
		dsn: "collation=latin1_swedish_ci", dsnParam: "collation",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			if c := sessionValue(t, ctx, env.pool, "collation_connection"); !strings.HasPrefix(c, "utf8mb4_") {
				t.Errorf("collation_connection %q", c)
			}
		}},
	"unique_checks": {names: []string{"unique_checks"}, hostile: "0", verdict: "forced",
		dsn: "unique_checks=0", dsnParam: "unique_checks",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			_, err := env.pool.ExecContext(ctx, "INSERT INTO c_rows (id, k, v) VALUES (50, 'k1', 'x')")
			if mysqlx.ErrNumber(err) != mysqlx.ErrDupEntry {
				t.Errorf("a duplicate in a secondary unique key: %v; want error 1062", err)
			}
			if v := sessionValue(t, ctx, env.pool, "unique_checks"); v != "1" {
				t.Errorf("unique_checks %q", v)
			}
		}},
	"foreign_key_checks": {names: []string{"foreign_key_checks"}, hostile: "0", verdict: "forced",
		dsn: "foreign_key_checks=0", dsnParam: "foreign_key_checks",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			_, err := env.pool.ExecContext(ctx, "INSERT INTO c_child (id, parent) VALUES (1, 77)")
			if mysqlx.ErrNumber(err) != 1452 {
				t.Errorf("a row without its parent: %v; want error 1452", err)
			}
		}},
	"sql_auto_is_null": {names: []string{"sql_auto_is_null"}, hostile: "1", verdict: "forced",
		dsn: "sql_auto_is_null=1", dsnParam: "sql_auto_is_null",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			conn, err := env.pool.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, "INSERT INTO c_auto (v) VALUES ('x')"); err != nil {
				t.Fatal(err)
			}
			if n := count(t, ctx, conn, "SELECT COUNT(*) FROM c_auto WHERE id IS NULL"); n != 0 {
				t.Errorf("WHERE id IS NULL matched %d rows of a NOT NULL column", n)
			}
		}},
	"sql_safe_updates": {names: []string{"sql_safe_updates"}, hostile: "1", verdict: "forced",
		dsn: "sql_safe_updates=1", dsnParam: "sql_safe_updates",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			if _, err := env.pool.ExecContext(ctx, "DELETE FROM c_rows WHERE v = 'nothing matches'"); err != nil {
				t.Errorf("a DELETE by a non-key column: %v", err)
			}
		}},
	"completion_type": {names: []string{"completion_type"}, hostile: "'CHAIN'", verdict: "forced",
		dsn: "completion_type=1", dsnParam: "completion_type",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			conn, err := env.pool.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "UPDATE c_rows SET v = 'after' WHERE id = 2"); err != nil {
				t.Fatal(err)
			}
			if n := count(t, ctx, env.root, "SELECT COUNT(*) FROM c_rows WHERE id = 2 AND v = 'after'"); n != 1 {
				t.Errorf("an autocommit write after a COMMIT is not visible: it ran in a chained transaction")
			}
		}},
	"div_precision_increment": {names: []string{"div_precision_increment"}, hostile: "0", verdict: "forced",
		dsn: "div_precision_increment=0", dsnParam: "div_precision_increment",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			var s string
			if err := env.pool.QueryRowContext(ctx, "SELECT CAST(1/4 AS CHAR)").Scan(&s); err != nil || s != "0.2500" {
				t.Errorf("1/4 = %q (%v); want 0.2500", s, err)
			}
		}},
	"max_sort_length": {names: []string{"max_sort_length"}, hostile: "4", verdict: "forced",
		dsn: "max_sort_length=4", dsnParam: "max_sort_length",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// v2 has no index, so the server sorts it itself.
			got := strings.Join(rowsOf(t, ctx, env.pool, "SELECT CAST(v2 AS CHAR) FROM c_sort ORDER BY v2, id"), ",")
			if got != "prefix-a,prefix-b,prefix-c" {
				t.Errorf("ORDER BY on a string: %s", got)
			}
		}},
	"statement time limit": {names: []string{"max_execution_time", "max_statement_time"}, hostile: "1", verdict: "forced",
		dsn: "max_execution_time=1", dsnParam: "max_execution_time",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// 1 ms (MySQL) or 1 s (MariaDB) would cut this statement off.
			var slept int
			if err := env.pool.QueryRowContext(ctx, "SELECT SLEEP(1.2) FROM c_rows WHERE id = 1").Scan(&slept); err != nil || slept != 0 {
				t.Errorf("a statement was cut off by the server's time limit: %d, %v", slept, err)
			}
		}},
	"lock waits (write pools)": {names: []string{"innodb_lock_wait_timeout"}, hostile: "100", verdict: "forced",
		dsn: "innodb_lock_wait_timeout=100", dsnParam: "innodb_lock_wait_timeout",
		pool: mysqlx.Pool{Field: "app_dsn", LockWait: 2 * time.Second},
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			if v := sessionValue(t, ctx, env.pool, "innodb_lock_wait_timeout"); v != "2" {
				t.Errorf("innodb_lock_wait_timeout %s; want the pool's 2", v)
			}
		}},
	"wait_timeout": {names: []string{"wait_timeout"}, hostile: "5", verdict: "harmless",
		dsn: "wait_timeout=5", dsnParam: "wait_timeout",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// The server ending an idle session (what the timeout does) costs
			// a redial, not an error: the driver checks a pooled
			// connection's liveness before using it.
			env.pool.SetMaxOpenConns(1)
			var id int64
			if err := env.pool.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, err := env.root.ExecContext(ctx, "KILL ?", id); err != nil {
				t.Fatal(err)
			}
			for count(t, ctx, env.root, "SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?", id) != 0 {
				if ctx.Err() != nil {
					t.Fatal(ctx.Err())
				}
			}
			if n := count(t, ctx, env.pool, "SELECT COUNT(*) FROM c_rows"); n != 4 {
				t.Errorf("after the server closed an idle session: %d rows", n)
			}
		}},
	"transaction_read_only": {names: []string{"transaction_read_only", "tx_read_only"}, hostile: "1", verdict: "harmless",
		dsn: "transaction_read_only=1", dsnParam: "transaction_read_only",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// The operator's choice stands, and is loud: a write fails
			// (1792), it never reports success.
			_, err := env.pool.ExecContext(ctx, "UPDATE c_rows SET v = 'ro' WHERE id = 3")
			if mysqlx.ErrNumber(err) != 1792 {
				t.Errorf("a write under a read-only global: %v; want error 1792", err)
			}
		}},
	"optimizer_switch": {names: []string{"optimizer_switch"}, hostile: "'index_merge=off,index_condition_pushdown=off'", verdict: "harmless",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// Plans change, results do not.
			if n := count(t, ctx, env.pool, "SELECT COUNT(*) FROM c_rows WHERE k = 'k1' OR id = 2"); n != 2 {
				t.Errorf("%d rows", n)
			}
		}},
	"lc_time_names": {names: []string{"lc_time_names"}, hostile: "'de_DE'", verdict: "harmless",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// Only DATE_FORMAT, DAYNAME and MONTHNAME use it; mend's SQL uses
			// none (TestNoLocaleFunctions) and reads times as time.Time.
			at := time.Date(2026, 3, 1, 13, 47, 31, 123456000, time.UTC)
			var got time.Time
			if err := env.pool.QueryRowContext(ctx, "SELECT CAST(? AS DATETIME(6))", at).Scan(&got); err != nil || !got.Equal(at) {
				t.Errorf("a DATETIME(6) round trip: %v (%v); want %v", got, err, at)
			}
		}},
	"explicit_defaults_for_timestamp": {names: []string{"explicit_defaults_for_timestamp"}, hostile: "0", verdict: "harmless",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// It changes only TIMESTAMP columns; mend's schema has none
			// (migrated under the hostile global, below).
			assertMigratedSchema(t, ctx, env)
		}},
	"default_storage_engine": {names: []string{"default_storage_engine"}, hostile: "'MyISAM'", verdict: "harmless",
		check: func(t *testing.T, ctx context.Context, env contractEnv) {
			// Every table of mend's schema names ENGINE=InnoDB.
			assertMigratedSchema(t, ctx, env)
		}},
}

// assertMigratedSchema migrates a fresh database under the current globals
// and checks that every table is InnoDB and no column is a TIMESTAMP.
func assertMigratedSchema(t *testing.T, ctx context.Context, env contractEnv) {
	t.Helper()
	d := mysqltest.NewDBOn(t, env.server, migrations.Up)
	db := d.SQL(t)
	if n := count(t, ctx, db, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' AND engine <> 'InnoDB' AND table_name <> 'mend_schema_migrations'"); n != 0 {
		t.Errorf("%d tables of mend's schema are not InnoDB", n)
	}
	if n := count(t, ctx, db, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND data_type = 'timestamp'"); n != 0 {
		t.Errorf("%d columns of mend's schema are TIMESTAMPs", n)
	}
}

// TestSessionContract is docs/operations.md's table of session variables,
// one subtest per row, on a private server (each sets a server global,
// restored when it ends): the hostile value set as a global, then a pool
// opened by mysqlx.Open must give mend's answer; for a forced variable the
// session must also read back mend's value, and CheckSession must refuse a
// session that does not (a pool opened without Resolve inherits the global:
// the negative control); the same value in a DSN is refused.
func TestSessionContract(t *testing.T) {
	mysqltest.SkipVitess(t, "sets server globals on a private server")
	srv := mysqltest.StartPrivate(t)
	d := mysqltest.NewDBOn(t, srv)
	setup := d.SQL(t)
	for _, q := range []string{
		"CREATE TABLE c_rows (id INT PRIMARY KEY, k VARBINARY(32) NOT NULL, v VARCHAR(8) NOT NULL, UNIQUE KEY (k)) ENGINE=InnoDB",
		"INSERT INTO c_rows VALUES (1, 'k1', 'a'), (2, 'k2', 'b'), (3, 'k3', 'c'), (4, 'k4', 'd')",
		"CREATE TABLE c_parent (id INT PRIMARY KEY) ENGINE=InnoDB",
		"CREATE TABLE c_child (id INT PRIMARY KEY, parent INT NOT NULL, FOREIGN KEY (parent) REFERENCES c_parent (id)) ENGINE=InnoDB",
		"CREATE TABLE c_auto (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v VARCHAR(8) NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE c_sort (id INT PRIMARY KEY, v2 VARBINARY(32) NOT NULL) ENGINE=InnoDB",
		"INSERT INTO c_sort VALUES (1, 'prefix-c'), (2, 'prefix-a'), (3, 'prefix-b')",
	} {
		if _, err := setup.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// CheckSession compares what a session reports with what mend sent,
	// for every variable mend forces, on every server but vtgate: a
	// session that holds another value (a proxy resetting it, an
	// init_connect) is refused naming it. The sessions here are set to the
	// other value by their own configuration.
	t.Run("CheckSession compares what the session reports", func(t *testing.T) {
		ctx := t.Context()
		p := mysqlx.Pool{Field: "dsn", LockWait: 3 * time.Second, IdleTimeout: 7 * time.Second}
		cfg, err := mysqlx.Config(d.DSN, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := mysqlx.Resolve(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if err := mysqlx.CheckSession(ctx, openRaw(t, cfg), cfg); err != nil {
			t.Fatalf("CheckSession on mend's own session: %v", err)
		}
		for name, other := range map[string]string{
			"sql_mode":                 "'NO_ENGINE_SUBSTITUTION'",
			"wait_timeout":             "100",
			"lock_wait_timeout":        "100",
			"innodb_lock_wait_timeout": "100",
			"sql_select_limit":         "18446744073709551614",
		} {
			c := cfg.Clone()
			c.Params[name] = other
			err := mysqlx.CheckSession(ctx, openRaw(t, c), cfg)
			var se *mysqlx.SessionError
			if !errors.As(err, &se) || se.Variable != name {
				t.Errorf("a session whose %s is %s: %v; want a SessionError naming it", name, other, err)
			}
		}
	})

	for name, row := range contract {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			// Opened before the global is set: the administrator's session
			// keeps the server's defaults.
			rootDB := d.SQL(t)
			root, err := rootDB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			if _, err := root.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			set := ""
			for _, n := range row.names {
				if srv.SetGlobal(t, n, row.hostile) {
					set = n
					break
				}
			}
			if set == "" {
				t.Fatalf("the server has none of %v", row.names)
			}
			p := row.pool
			if p.Field == "" {
				p.Field = "dsn"
			}
			pool, err := mysqlx.Open(ctx, d.DSN, p, 2)
			if err != nil {
				t.Fatalf("Open under a global %s = %s: %v", set, row.hostile, err)
			}
			defer pool.Close()
			row.check(t, ctx, contractEnv{pool: pool, root: root, dsn: d.DSN, server: srv})

			if row.verdict == "forced" {
				cfg, err := mysqlx.Config(d.DSN, p)
				if err != nil {
					t.Fatal(err)
				}
				if err := mysqlx.Resolve(ctx, cfg); err != nil {
					t.Fatal(err)
				}
				if _, ok := cfg.Params[set]; !ok {
					t.Fatalf("Resolve does not force %s", set)
				}
				// The negative control: sessions that inherit the global
				// (the variable left unset) fail CheckSession naming it.
				inherit := cfg.Clone()
				inherit.Params[set] = row.hostile
				raw := openRaw(t, inherit)
				err = mysqlx.CheckSession(ctx, raw, cfg)
				var se *mysqlx.SessionError
				if !errors.As(err, &se) || se.Variable != set {
					t.Errorf("CheckSession on a session that inherited %s = %s: %v; want a SessionError naming it", set, row.hostile, err)
				}
			}
			if row.dsn != "" {
				_, err := mysqlx.Config(d.DSN+"&"+row.dsn, p)
				var pe *mysqlx.ParamError
				if !errors.As(err, &pe) || pe.Param != row.dsnParam {
					t.Errorf("a DSN with %s: %v; want a ParamError naming %s", row.dsn, err, row.dsnParam)
				}
			}
		})
	}
}

// openRaw opens a pool on cfg as it is, without Resolve or any check.
func openRaw(t *testing.T, cfg *mysql.Config) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestNoSessionDependentFunctions: the harmless rows of the contract
// (lc_time_names, group_concat_max_len, default_week_format) hold because
// no statement of mend's uses the functions they change. This fails the
// day one does, so the row is revisited.
func TestNoSessionDependentFunctions(t *testing.T) {
	t.Parallel()
	banned := []string{"DATE_FORMAT(", "DAYNAME(", "MONTHNAME(", "GROUP_CONCAT(", "WEEK(", "YEARWEEK(", "FOUND_ROWS("}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir() && (strings.HasPrefix(e.Name(), ".") || e.Name() == "docs" || e.Name() == "bench" || e.Name() == "testdata"):
			return filepath.SkipDir
		case e.IsDir(), strings.HasSuffix(path, "_test.go"):
			return nil
		case !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".sql"):
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		up := strings.ToUpper(string(b))
		for _, f := range banned {
			if strings.Contains(up, f) {
				t.Errorf("%s uses %s, whose result depends on a session variable mend does not force: force it (docs/operations.md)", path, strings.TrimSuffix(f, "("))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

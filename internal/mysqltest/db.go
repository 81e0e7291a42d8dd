package mysqltest

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/testserver"
)

// Migrator prepares a fresh database, given its DSN; storage tests pass migrations.Up.
type Migrator func(ctx context.Context, dsn string) error

// DB is a database of its own for one test, on a Server, dropped when the test ends.
type DB struct {
	// Name is the database name, unique per call (mend_t_<random hex>).
	Name string
	// DSN is a go-sql-driver DSN with Name selected and parseTime=true, loc=UTC, interpolateParams=true.
	DSN string
	// Server is the server holding the database.
	Server *Server

	sqlDSN   string // DSN for SQL's raw connections when it differs (Vitess), else ""
	adminDSN string // root DSN of the server holding the database when it is not Server's (a host database on Vitess), else ""
}

// rootDSN returns a DSN for the administrative user of the server holding d, no database selected.
func (d *DB) rootDSN() string { return cmp.Or(d.adminDSN, d.Server.RootDSN()) }

// DSNVia returns DSN with the host:port replaced by addr, to route the connection through a proxy.
func (d *DB) DSNVia(addr string) string {
	dsn, err := replaceAddr(d.DSN, addr)
	if err != nil {
		panic(err) // d.DSN was built by this package and always parses
	}
	return dsn
}

// SQL opens a *sql.DB on DSN, closed in t.Cleanup.
func (d *DB) SQL(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", cmp.Or(d.sqlDSN, d.DSN))
	if err != nil {
		t.Fatalf("mysqltest: open %s: %v", d.Name, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// shared is the package's server, started on first use by NewDB and stopped by Main.
var shared struct {
	mu     sync.Mutex
	done   bool              // discovery and start ran (successfully or not)
	srv    *Server           // nil if none
	choice testserver.Choice // what discovery chose
	err    error             // start failure, reported to every caller
}

// Main runs m and then stops the package's shared server, if one was started, and exits with
// m's code. Use it as: func TestMain(m *testing.M) { mysqltest.Main(m) }. It prints one line
// saying which backend the package's tests used, so a test log shows it for every package.
// Without it the shared server is still stopped when the test binary exits (a local process
// dies with it; a container is reaped by the next run), but its leftovers stay until then.
//
// Each after func runs once the server is stopped, when the tests passed; an
// error fails the run. Packages that start goroutines pass a leak check:
// mysqltest.Main(m, func() error { return goleak.Find() }).
//
// The driver's own log lines are kept from the output and printed only if
// the package failed (see driverLog).
func Main(m *testing.M, after ...func() error) {
	driver := quietDriver()
	code := m.Run()
	shared.mu.Lock()
	if shared.srv != nil {
		report(fmt.Sprintf("%v, started in %v", shared.srv, shared.srv.StartedIn().Round(time.Millisecond)))
		if err := shared.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
		shared.srv = nil
	}
	shared.mu.Unlock()
	for _, check := range after {
		if code != 0 {
			break
		}
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code != 0 {
		driver.flush()
	}
	os.Exit(code)
}

// EnvReport names a file each test binary appends one line to: which backend
// its package's shared server used. `make test` sets it and prints the file,
// because go test shows nothing of a passing package but its "ok" line.
const EnvReport = "MEND_TEST_REPORT"

// report writes line to stdout (seen with -v or on failure) and appends it,
// prefixed with the package's directory, to the EnvReport file if one is set.
func report(line string) {
	fmt.Println("mysqltest: " + line)
	path := os.Getenv(EnvReport)
	if path == "" {
		return
	}
	pkg, _ := os.Getwd() // go test runs each test binary in its package's directory
	if root, err := moduleRoot(pkg); err == nil {
		if rel, err := filepath.Rel(root, pkg); err == nil {
			pkg = "./" + filepath.ToSlash(rel)
		}
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%-24s %s\n", pkg, line)
}

// moduleRoot returns the nearest directory at or above dir holding go.mod.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", os.ErrNotExist
		}
	}
}

// SharedServer returns the package's shared server, starting it on first use from the first of:
// EnvDSN, a Docker engine with an image, a local mariadbd/mysqld (EnvBackend forces one). With
// none available it skips t, or fails it when CI=true. Safe for concurrent use; every caller
// gets the same server.
func SharedServer(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.done {
		shared.done = true
		shared.choice = testserver.Discover(testserver.SystemProbes())
		if shared.choice.Note != "" {
			fmt.Fprintln(os.Stderr, "mysqltest: "+shared.choice.Note)
		}
		if shared.choice.Backend != testserver.BackendNone {
			// Not tied to t's context: the server outlives the test that happened to start it.
			var srv *testserver.Server
			srv, shared.err = testserver.Start(context.Background(), shared.choice)
			if shared.err == nil {
				shared.srv = &Server{Server: srv, shared: true}
				t.Logf("mysqltest: started shared %v in %v", srv, srv.StartedIn().Round(time.Millisecond))
			}
		}
	}
	switch {
	case shared.choice.Backend == testserver.BackendNone:
		unavailable(t, shared.choice)
	case shared.err != nil:
		t.Fatalf("mysqltest: shared %s server: %v", shared.choice.Backend, shared.err)
	}
	return shared.srv
}

// unavailable skips t, or fails it under CI, explaining how to provide a server.
func unavailable(t testing.TB, c testserver.Choice) {
	t.Helper()
	if c.Fatal {
		t.Fatalf("mysqltest: %s (%s=true, so this is a failure rather than a skip)", c.Reason, EnvCI)
	}
	t.Skipf("mysqltest: %s", c.Reason)
}

// StartPrivate starts a dedicated server the test owns, a container when Docker has an image and
// a local mariadbd/mysqld process otherwise (never EnvDSN), for fault tests, and stops and removes
// it in t.Cleanup. With neither it skips t, or fails it when CI=true.
func StartPrivate(t testing.TB) *Server {
	t.Helper()
	return StartPrivateWith(t)
}

// StartPrivateWith is StartPrivate with extra server options after the
// usual ones, for a test of a server configured as some deployment has it
// ("--binlog-do-db=other", "--lower-case-table-names=1").
func StartPrivateWith(t testing.TB, args ...string) *Server {
	t.Helper()
	c := testserver.DiscoverPrivate(testserver.SystemProbes())
	c.Args = args
	if c.Backend == testserver.BackendNone {
		unavailable(t, c)
	}
	if c.Backend == testserver.BackendVitess {
		t.Skipf("mysqltest: %s=vitess: a private server for fault injection (kill, pause, restart) is not supported on the Vitess backend; run this test on mysql or mariadb", EnvEngine)
	}
	if c.Note != "" {
		t.Log("mysqltest: " + c.Note)
	}
	srv, err := testserver.Start(t.Context(), c)
	if err != nil {
		t.Fatalf("mysqltest: private server: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("mysqltest: close private server: %v", err)
		}
	})
	t.Logf("mysqltest: started private %v in %v", srv, srv.StartedIn().Round(time.Millisecond))
	return &Server{Server: srv}
}

// NewDB returns a fresh database on the package's shared server (see SharedServer) with the
// migrators applied in order, dropped in t.Cleanup.
func NewDB(t testing.TB, migrate ...Migrator) *DB {
	t.Helper()
	return NewDBOn(t, SharedServer(t), migrate...)
}

// NewDBOn returns a fresh database on srv with the migrators applied in order, dropped in
// t.Cleanup. The drop is skipped when srv is a private server that a fault test left killed
// (its Close removes everything anyway); a server that crashed fails the test with its log.
func NewDBOn(t testing.TB, srv *Server, migrate ...Migrator) *DB {
	t.Helper()
	if v := srv.Vitess(); v != nil {
		return newVitessDB(t, srv, migrate)
	}
	return createDB(t, srv, srv.Config(), migrate)
}

// NewHostDB returns a fresh database for the host's own tables (the submit queue's, package
// sqtest), with the migrators applied in order, dropped in t.Cleanup. On every backend but
// Vitess it is NewDB. On Vitess it is a plain database created directly on the mysqld under the
// cluster, outside every keyspace, reached without vtgate: in production the submit queue's
// MySQL is a server apart from mend's Vitess cluster, and its tables are not in mend's vschema.
func NewHostDB(t testing.TB, migrate ...Migrator) *DB {
	t.Helper()
	srv := SharedServer(t)
	v := srv.Vitess()
	if v == nil {
		return NewDBOn(t, srv, migrate...)
	}
	cfg := v.MySQLConfig("")
	testserver.ApplyParams(cfg)
	return createDB(t, srv, cfg, migrate)
}

// createDB creates a database of a random name on the server cfg reaches (srv's own, or the
// mysqld under a Vitess srv), applies the migrators and drops it in t.Cleanup.
func createDB(t testing.TB, srv *Server, cfg *mysql.Config, migrate []Migrator) *DB {
	t.Helper()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // never fails
	name := "mend_t_" + hex.EncodeToString(rnd[:])

	rootDSN := testserver.FormatDSN(cfg, "")
	admin, err := sql.Open("mysql", rootDSN)
	if err != nil {
		t.Fatalf("mysqltest: open %s: %v", cfg.Addr, err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// utf8mb4 with the engine's own default collation for it, as the real submit queue's
	// application tables get (declared without COLLATE): utf8mb4_0900_ai_ci (NO PAD) on MySQL
	// 8+, utf8mb4_general_ci (PAD SPACE) on MariaDB. mend's own identity columns are VARBINARY
	// and do not depend on it; tests that do ask the server for the pad attribute.
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("mysqltest: create database %s on %s: %v", name, cfg.Addr, err)
	}
	db := &DB{Name: name, DSN: testserver.FormatDSN(cfg, name), Server: srv}
	if cfg.Addr != srv.Addr() {
		db.adminDSN = rootDSN
	}
	t.Cleanup(func() { dropDB(t, db) })

	for i, m := range migrate {
		if err := m(ctx, db.DSN); err != nil {
			t.Fatalf("mysqltest: migrator %d of %d on %s: %v", i+1, len(migrate), name, err)
		}
	}
	return db
}

// BeforeDrop, when set, runs on every database NewDB and NewDBOn made, just
// before it is dropped, while its server is still up (not on a private
// server a fault test left killed); an error fails the test that owned the
// database. Set it in TestMain before m.Run, never later: itest sets it to
// mend verify when MEND_VERIFY_ON_DROP is set, so every suite's end state
// is checked. ctx carries the drop's timeout.
var BeforeDrop func(ctx context.Context, db *DB) error

// dropDB removes db's database. Failures on a shared server fail the test (they would leak
// databases on an EnvDSN server); on a private one they are only logged, since fault tests
// may leave it killed or paused and Close removes it all.
func dropDB(t testing.TB, db *DB) {
	srv := db.Server
	if srv.Private() && !srv.Running() {
		// Killed by a fault test: Close removes everything. Crashed: say so, with the log.
		if err := srv.Crash(); err != nil {
			t.Errorf("mysqltest: drop database %s: %v", db.Name, err)
		}
		return
	}
	// t.Context() is already cancelled while cleanups run. A private server left paused would
	// make the drop wait for the whole timeout, so keep it short there.
	timeout := 30 * time.Second
	if srv.Private() && !srv.shared {
		timeout = 5 * time.Second
	}
	if BeforeDrop != nil {
		hctx, hcancel := context.WithTimeout(context.Background(), 2*timeout)
		if err := BeforeDrop(hctx, db); err != nil {
			t.Errorf("mysqltest: before dropping database %s: %v", db.Name, err)
		}
		hcancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	admin, err := sql.Open("mysql", db.rootDSN())
	if err == nil {
		defer admin.Close()
		_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+db.Name+"`")
	}
	switch {
	case err == nil:
	case srv.Private() && !srv.shared:
		t.Logf("mysqltest: drop database %s: %v", db.Name, err)
	default:
		t.Errorf("mysqltest: drop database %s: %v", db.Name, err)
	}
}

// Tables lists the base tables of the database, sorted by byte order
// (information_schema sorts by its own collation), for schema tests.
func (d *DB) Tables(t testing.TB) []string {
	t.Helper()
	rows, err := d.SQL(t).Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'")
	if err != nil {
		t.Fatalf("mysqltest: list tables of %s: %v", d.Name, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("mysqltest: list tables of %s: %v", d.Name, err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("mysqltest: list tables of %s: %v", d.Name, err)
	}
	slices.Sort(names)
	return names
}

// newVitessDB hands out one of the Vitess cluster's keyspaces (sharded in two, mend's schema
// and vschema loaded at start, tables emptied) for the test, given back in t.Cleanup, and runs
// the migrators through vtgate (migrations.Up finds the schema at its latest version). A test
// that needs an empty database or creates its own tables cannot run there: it calls SkipVitess.
func newVitessDB(t testing.TB, srv *Server, migrate []Migrator) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	v := srv.Vitess()
	ks, err := v.Acquire(ctx)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(func() { v.Release(ks) })
	db := &DB{Name: ks, DSN: srv.Server.RootDSN(ks), Server: srv}
	// A test's own setup statements (age every record, delete by ID) span both shards; the
	// cluster refuses that in its SINGLE transaction mode, which is meant for mend's statements
	// (DSN), so SQL's connections ask vtgate for MULTI.
	db.sqlDSN = db.DSN + "&transaction_mode=%27MULTI%27"
	for i, m := range migrate {
		if err := m(ctx, db.DSN); err != nil {
			t.Fatalf("mysqltest: migrator %d of %d on keyspace %s: %v", i+1, len(migrate), ks, err)
		}
	}
	return db
}

// Vitess reports whether the package's tests run on the Vitess backend (EnvEngine=vitess).
func Vitess() bool {
	e, _, err := testserver.Engine(os.Getenv)
	return err == nil && e == testserver.EngineVitess
}

// QueueVindex is the vindex migrations/vschema.json shards mend's tables by (on the queue).
const QueueVindex = "queue_xxhash"

// QueueShard returns the shard of d's keyspace that queue's rows land on, on the Vitess backend
// (d from NewDB), and "" on every other backend.
func (d *DB) QueueShard(t testing.TB, queue string) string {
	t.Helper()
	v := d.Server.Vitess()
	if v == nil {
		return ""
	}
	if d.adminDSN != "" {
		t.Fatalf("mysqltest: %s is a host database, not a keyspace: its rows are not sharded", d.Name)
	}
	shard, err := v.ShardOf(t.Context(), d.Name, QueueVindex, queue)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	return shard
}

// SkipVitess skips t on the Vitess backend, saying why (the vtgate limitation it meets).
func SkipVitess(t testing.TB, why string) {
	t.Helper()
	if Vitess() {
		t.Skipf("mysqltest: not on vitess: %s", why)
	}
}

// User creates an account on d's server holding grants (each "PRIVS ON
// target", %s standing for d's quoted database name), dropped when the test
// ends, and returns d's DSN logged in as it: least-privilege tests run mend
// as the documented users with exactly these grants.
func (d *DB) User(t testing.TB, grants ...string) string {
	t.Helper()
	root, err := sql.Open("mysql", d.rootDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails
	name := "mend_u_" + hex.EncodeToString(b[:])
	account := "'" + name + "'@'%'"
	const password = "mend-test-pw"
	if _, err := root.Exec("CREATE USER " + account + " IDENTIFIED BY '" + password + "'"); err != nil {
		t.Fatalf("mysqltest: create user on %s: %v", d.Server.Addr(), err)
	}
	t.Cleanup(func() { _, _ = root.Exec("DROP USER " + account) })
	for _, g := range grants {
		if _, err := root.Exec("GRANT " + strings.ReplaceAll(g, "%s", "`"+d.Name+"`") + " TO " + account); err != nil {
			t.Fatalf("mysqltest: GRANT %s: %v", g, err)
		}
	}
	cfg, err := mysql.ParseDSN(d.DSN)
	if err != nil {
		t.Fatalf("mysqltest: parse dsn: %v", err)
	}
	cfg.User, cfg.Passwd = name, password
	return testserver.FormatDSN(cfg, cfg.DBName)
}

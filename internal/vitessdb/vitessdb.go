package vitessdb

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Version is the pinned Vitess release scripts/vitess.sh builds.
const Version = "v0.24.4"

// Shards is the number of shards of every keyspace the server starts: two, so a queue's
// rows land on one of them and a statement that scatters really reaches both.
const Shards = 2

// Defaults of Config.
const (
	// DefaultKeyspaces is how many identical keyspaces a server holds; each test database is
	// one of them, handed out by Acquire and reset on the way (a keyspace cannot be created
	// sharded through vtgate, so they are made at start).
	DefaultKeyspaces = 4
	readyTimeout     = 4 * time.Minute  // vttestserver: mysqld init + vtcombo + tablets, on a loaded machine
	stopTimeout      = 30 * time.Second // until a killed process is gone
)

// Errors.
var (
	// ErrNoBinaries means the Vitess binaries are not in the cache directory (run scripts/vitess.sh).
	ErrNoBinaries = errors.New("vitessdb: Vitess binaries not built (bash scripts/vitess.sh builds them once into the cache)")
	// ErrUnsupported is returned for what a Vitess cluster here cannot do (the fault methods).
	ErrUnsupported = errors.New("not supported on vitess")
)

// Dir returns where scripts/vitess.sh puts the pinned Vitess: $XDG_CACHE_HOME/mend/vitess-VERSION,
// else ~/.cache/mend/vitess-VERSION.
func Dir() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "mend", "vitess-"+Version)
}

// Find returns Dir if the binaries, the MySQL wrappers and the config are all there, else ErrNoBinaries.
func Find() (string, error) {
	dir := Dir()
	for _, f := range []string{"bin/vttestserver", "bin/vtcombo", "bin/vtcombo.bin", "bin/mysqlctl", "mysql/bin/mysqld", "config/mycnf/test-suite.cnf"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", ErrNoBinaries
		}
	}
	return dir, nil
}

// Config says what to start.
type Config struct {
	// VitessDir is the directory scripts/vitess.sh prints (bin/, mysql/bin/, config/). Required.
	VitessDir string
	// Keyspaces is the number of keyspaces (DefaultKeyspaces when 0), named mend0, mend1, ...
	Keyspaces int
	// Schema is the statements each shard of every keyspace gets at start, in order.
	Schema []string
	// VSchema is the vschema.json of every keyspace.
	VSchema []byte
	// DirPrefix names the temporary directory (default "mend-vitess-").
	DirPrefix string
}

// Server is a running vttestserver: one mysqld holding every shard's database, and vtcombo
// (vtgate plus one tablet set per shard) in one process, in a temporary directory removed by Close.
type Server struct {
	// Dir is the temporary directory (data, logs, schema, my.cnf).
	Dir string
	// VTGate is vtgate's MySQL protocol address, 127.0.0.1:PORT.
	VTGate string
	// MySQL is the address of the mysqld under it (user vt_dba_tcp, no password).
	MySQL string
	// Keyspaces lists the keyspaces, each sharded in Shards (-80 and 80-).
	Keyspaces []string

	pool    chan string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string

	closeOnce sync.Once
	closeErr  error
}

// ShardNames are the shard names of every keyspace.
var ShardNames = []string{"-80", "80-"}

// Start runs vttestserver with cfg's keyspaces, each sharded in two, and waits until vtgate
// answers. As root it runs the cluster as user nobody (mysqlctl and mysqld refuse root) with
// the one capability to read the cache under a private home (CAP_DAC_READ_SEARCH, ambient).
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("vitessdb: %w on %s (Linux only)", ErrUnsupported, runtime.GOOS)
	}
	if cfg.VitessDir == "" {
		return nil, errors.New("vitessdb: Config.VitessDir is required")
	}
	n := cmp.Or(cfg.Keyspaces, DefaultKeyspaces)
	prefix := cmp.Or(cfg.DirPrefix, "mend-vitess-")
	if err := Reap(prefix); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, fmt.Errorf("vitessdb: %w", err)
	}
	s := &Server{Dir: tmp, exited: make(chan struct{}), pool: make(chan string, n), logPath: filepath.Join(tmp, "vttestserver.log")}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if err := os.WriteFile(filepath.Join(tmp, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("vitessdb: %w", err)
	}
	for i := range n {
		s.Keyspaces = append(s.Keyspaces, "mend"+strconv.Itoa(i))
	}
	if err := s.writeFiles(cfg); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := ChownTree(tmp, 65534, 65534); err != nil {
			return nil, fmt.Errorf("vitessdb: hand %s to nobody: %w", tmp, err)
		}
	}
	base, err := freeBase()
	if err != nil {
		return nil, err
	}
	s.VTGate = net.JoinHostPort("127.0.0.1", strconv.Itoa(base+3))
	s.MySQL = net.JoinHostPort("127.0.0.1", strconv.Itoa(base+2))
	shards := strings.TrimSuffix(strings.Repeat(strconv.Itoa(Shards)+",", n), ",")
	args := []string{
		filepath.Join(cfg.VitessDir, "bin", "vttestserver"),
		"--port=" + strconv.Itoa(base),
		"--keyspaces=" + strings.Join(s.Keyspaces, ","),
		"--num-shards=" + shards,
		"--replica-count=1", "--rdonly-count=0",
		"--mysql-bind-host=127.0.0.1",
		"--vtcombo-bind-host=127.0.0.1",
		"--tablet-hostname=127.0.0.1",
		"--data-dir=" + filepath.Join(tmp, "data"),
		"--schema-dir=" + filepath.Join(tmp, "schema"),
		"--extra-my-cnf=" + filepath.Join(tmp, "extra.cnf"),
		"--initialize-with-vt-dba-tcp",
		// A transaction that would touch a second shard fails instead of spreading: the suites
		// then prove mend's transactions are single-shard by passing.
		"--transaction-mode=SINGLE",
		"--log_dir=" + filepath.Join(tmp, "data", "logs"),
	}
	if os.Geteuid() == 0 {
		args = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"}, args...)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "data", "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("vitessdb: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := ChownTree(filepath.Join(tmp, "data"), 65534, 65534); err != nil {
			return nil, fmt.Errorf("vitessdb: %w", err)
		}
	}
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, fmt.Errorf("vitessdb: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(),
		"VTROOT="+cfg.VitessDir,
		"VT_MYSQL_ROOT="+filepath.Join(cfg.VitessDir, "mysql"),
		"VTDATAROOT="+filepath.Join(tmp, "data"),
		"TMPDIR="+filepath.Join(tmp, "data"),
		"HOME="+filepath.Join(tmp, "data"),
	)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("vitessdb: %w", err)
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vitessdb: start vttestserver: %w", err)
	}
	s.cmd = cmd
	ready := make(chan error, 1)
	go func() {
		// The JSON line on stdout is vttestserver's "cluster is up".
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(strings.TrimSpace(sc.Text()), "{") {
				var m map[string]any
				ready <- json.Unmarshal(sc.Bytes(), &m)
				sent = true
			}
		}
		if !sent {
			ready <- errors.New("vttestserver exited before it was ready")
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(s.exited) }()
	wait, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	select {
	case err := <-ready:
		if err != nil {
			return nil, fmt.Errorf("vitessdb: %w\n%s", err, s.logTail())
		}
	case <-wait.Done():
		return nil, fmt.Errorf("vitessdb: vttestserver not ready after %v: %w\n%s", readyTimeout, wait.Err(), s.logTail())
	}
	for _, ks := range s.Keyspaces {
		s.pool <- ks
	}
	return s, nil
}

// writeFiles writes the schema directory (one schema.sql and vschema.json used for every
// keyspace) and the extra my.cnf.
func (s *Server) writeFiles(cfg Config) error {
	var b strings.Builder
	for _, stmt := range cfg.Schema {
		b.WriteString(strings.TrimRight(strings.TrimSpace(stmt), ";"))
		b.WriteString(";\n")
	}
	// vttestserver loads schema only with --schema-dir (its --default-schema-dir is a fallback
	// inside it): one directory per keyspace.
	for _, ks := range s.Keyspaces {
		dir := filepath.Join(s.Dir, "schema", ks)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("vitessdb: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "schema.sql"), []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("vitessdb: %w", err)
		}
		if len(cfg.VSchema) > 0 {
			if err := os.WriteFile(filepath.Join(dir, "vschema.json"), cfg.VSchema, 0o644); err != nil {
				return fmt.Errorf("vitessdb: %w", err)
			}
		}
	}
	// MySQL 9.7 settings: performance_schema off (about 250 MB less resident), no X plugin
	// (it would bind 33060 for every server), small buffer pool.
	cnf := "[mysqld]\nperformance_schema = OFF\nmysqlx = OFF\ninnodb_buffer_pool_size = 128M\ninnodb_flush_log_at_trx_commit = 2\nmax_connections = 1000\n"
	if err := os.WriteFile(filepath.Join(s.Dir, "extra.cnf"), []byte(cnf), 0o644); err != nil {
		return fmt.Errorf("vitessdb: %w", err)
	}
	return nil
}

// DSN returns a go-sql-driver DSN for keyspace through vtgate (parseTime, UTC, client-side
// interpolation, as the harness's other DSNs).
func (s *Server) DSN(keyspace string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.VTGate
	cfg.DBName = keyspace
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	return cfg.FormatDSN()
}

// MySQLConfig returns a driver config for the mysqld under the cluster, database db (a shard's
// database is vt_KEYSPACE_SHARD): for the harness's resets and for tests that look at where
// rows landed, never for mend's own statements.
func (s *Server) MySQLConfig(db string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "vt_dba_tcp"
	cfg.Net = "tcp"
	cfg.Addr = s.MySQL
	cfg.DBName = db
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg
}

// ShardDB names keyspace's database on shard.
func ShardDB(keyspace, shard string) string { return "vt_" + keyspace + "_" + shard }

// ShardOf returns the shard of keyspace where the rows whose sharding column holds key land
// under vindex, as vtgate computes it (it answers a query of the vindex as a table): for tests
// that need keys on every shard.
func (s *Server) ShardOf(ctx context.Context, keyspace, vindex, key string) (string, error) {
	db, err := sql.Open("mysql", s.DSN(keyspace))
	if err != nil {
		return "", fmt.Errorf("vitessdb: %w", err)
	}
	defer db.Close()
	var shard string
	if err := db.QueryRowContext(ctx, "SELECT shard FROM `"+vindex+"` WHERE id = ?", key).Scan(&shard); err != nil {
		return "", fmt.Errorf("vitessdb: shard of %q under %s.%s: %w", key, keyspace, vindex, err)
	}
	return shard, nil
}

// Acquire takes a keyspace no other caller holds, waiting for one, and empties its tables
// (every base table of both shards except mend_schema_migrations) directly on mysqld. Give it
// back with Release.
func (s *Server) Acquire(ctx context.Context) (string, error) {
	var ks string
	select {
	case ks = <-s.pool:
	case <-ctx.Done():
		return "", fmt.Errorf("vitessdb: wait for a free keyspace: %w", ctx.Err())
	}
	if err := s.reset(ctx, ks); err != nil {
		s.pool <- ks
		return "", err
	}
	return ks, nil
}

// Release gives keyspace back to the pool.
func (s *Server) Release(keyspace string) { s.pool <- keyspace }

func (s *Server) reset(ctx context.Context, ks string) error {
	for _, shard := range ShardNames {
		connector, err := mysql.NewConnector(s.MySQLConfig(ShardDB(ks, shard)))
		if err != nil {
			return fmt.Errorf("vitessdb: %w", err)
		}
		if err := resetDB(ctx, sql.OpenDB(connector)); err != nil {
			return fmt.Errorf("vitessdb: reset %s/%s: %w", ks, shard, err)
		}
	}
	return nil
}

func resetDB(ctx context.Context, db *sql.DB) (err error) {
	defer func() { err = errors.Join(err, db.Close()) }()
	rows, err := db.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'")
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, t := range tables {
		if t == "mend_schema_migrations" {
			continue
		}
		if _, err := db.ExecContext(ctx, "DELETE FROM `"+t+"`"); err != nil {
			return err
		}
	}
	return nil
}

// Running reports whether vttestserver is still up.
func (s *Server) Running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return s.cmd != nil
	}
}

// Crash describes an exit nobody asked for, with the log's tail, or returns nil.
func (s *Server) Crash() error {
	if s.cmd == nil || s.Running() {
		return nil
	}
	return fmt.Errorf("vitessdb: vttestserver exited: %v\n%s", s.cmd.ProcessState, s.logTail())
}

// Close stops the cluster and removes the temporary directory. Its data is thrown away, so
// there is nothing to shut down cleanly (vttestserver's own teardown takes about 50 s here):
// SIGKILL to the process group (vttestserver, vtcombo, mysqlctl, mysqld), then to any process
// still running from the directory (a mysqld in a group of its own), waiting until each is
// gone. Idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			pid := s.cmd.Process.Pid
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-s.exited
			if err := WaitGone(func() bool { return syscall.Kill(-pid, 0) == nil }); err != nil {
				s.closeErr = fmt.Errorf("vitessdb: process group %d: %w", pid, err)
			}
			for _, p := range PIDsUsing(s.Dir) {
				_ = syscall.Kill(p, syscall.SIGKILL)
				if err := WaitGone(func() bool { return syscall.Kill(p, 0) == nil }); err != nil {
					s.closeErr = errors.Join(s.closeErr, fmt.Errorf("vitessdb: process %d: %w", p, err))
				}
			}
		}
		if s.Dir != "" {
			s.closeErr = errors.Join(s.closeErr, os.RemoveAll(s.Dir))
		}
	})
	return s.closeErr
}

// ownerFile, in a cluster's directory, holds the pid of the process that started it.
const ownerFile = "owner.pid"

// Reap stops and removes the clusters that test binaries left when they died without Close:
// every directory named prefix* in the temporary directory whose owner (ownerFile) is no
// longer running, with every process whose command line names it. A panicking test skips
// TestMain's cleanup, and the parent-death signal does not save it: vttestserver runs under
// another user (setpriv), which clears that signal, and would reach vttestserver only, not
// its mysqld and vtcombo. Directories without an owner file, or whose owner runs, are left
// alone. Start calls it first.
func Reap(prefix string) error {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	if err != nil {
		return fmt.Errorf("vitessdb: reap: %w", err)
	}
	var errs []error
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner <= 0 || ProcessAlive(owner) {
			continue
		}
		for _, p := range PIDsUsing(dir) {
			_ = syscall.Kill(p, syscall.SIGKILL)
			if err := WaitGone(func() bool { return syscall.Kill(p, 0) == nil }); err != nil {
				errs = append(errs, fmt.Errorf("vitessdb: reap %s: process %d: %w", dir, p, err))
			}
		}
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// ProcessAlive reports whether process pid exists (EPERM: it does, under another user).
func ProcessAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// WaitGone polls alive (the kernel's answer for a pid or group) until it says no, for up to
// stopTimeout.
func WaitGone(alive func() bool) error {
	deadline := time.Now().Add(stopTimeout)
	for alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("still alive after SIGKILL and %v", stopTimeout)
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel, not synchronising with a test
	}
	return nil
}

// PIDsUsing lists the processes whose command line names dir (mysqld is started with
// --defaults-file under it).
func PIDsUsing(dir string) []int {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// freeBase picks a base port in [20000, 32000) with base..base+4 free on every interface
// (mysqld binds them all; the ephemeral range starts at 32768, where a client socket could
// take the port between the check and the bind).
func freeBase() (int, error) {
	for range 50 {
		base := 20000 + 10*rand.IntN(1200)
		ok := true
		for p := base; p < base+5 && ok; p++ {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("vitessdb: no free port range below 32000")
}

// ChownTree gives root and everything under it to uid:gid (the servers run as nobody when the tests run as root).
func ChownTree(root string, uid, gid int) error {
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

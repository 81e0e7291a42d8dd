package localdb

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Timeouts for the server's lifecycle. They are generous because shared CI machines and the
// race detector slow everything down; the polling returns as soon as the server answers.
const (
	readyTimeout = 5 * time.Minute  // initialisation plus first ping, or a restart; minutes beside a CPU hog
	stopTimeout  = 30 * time.Second // SIGTERM grace before SIGKILL
	pauseTimeout = 5 * time.Second  // until the process is seen stopped
)

// serverFlags are the settings every server runs with: utf8mb4 and strict mode like
// production, durability relaxed to flush-at-commit=2, which still keeps every acknowledged
// commit across a SIGKILL of the server process. The collation is left to each engine's
// default for utf8mb4 (see ServerFlags), as production servers leave it. The binary log is on,
// in ROW format with full images (binlogFlags), as MySQL 8+ has it by default and as mend's
// binlog mode (issue 44) reads it: every suite runs beside it, as production does.
var serverFlags = []string{
	"--bind-address=127.0.0.1",
	"--skip-name-resolve",
	"--character-set-server=utf8mb4",
	"--sql-mode=STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
	"--innodb-flush-log-at-trx-commit=2",
	"--innodb-buffer-pool-size=128M",
	"--performance-schema=OFF",
	"--max-connections=500",
}

// ServerFlags returns the server settings Start uses for flavor ("mariadb" or "mysql"), a
// copy, so a server started another way (a container) runs with the same ones. No collation is
// forced: each server keeps its own default for utf8mb4, the collation the real submit queue's
// application tables get: utf8mb4_general_ci on MariaDB 10.11 (PAD SPACE),
// utf8mb4_uca1400_ai_ci on MariaDB 11.8 (its character_set_collations; PAD SPACE),
// utf8mb4_0900_ai_ci on MySQL 8+ (NO PAD).
func ServerFlags(flavor string) []string {
	return append(append([]string(nil), serverFlags...), binlogFlags(flavor)...)
}

// binlogFlags turn the binary log on: a server_id of 1 (mend's reader registers with its own),
// ROW format (MariaDB's default is MIXED; MySQL's is ROW, and naming binlog_format there is
// deprecated), full row images (both engines' default), column names in the log
// (binlog_row_metadata=FULL, which mend doctor advises: without it a reader behind a column
// added to queue_messages stops), sync_binlog=0 (durability as relaxed as flush-at-commit=2),
// and stored functions and triggers creatable without SUPER, as tests create them.
func binlogFlags(flavor string) []string {
	f := []string{"--log-bin=mend-bin", "--server-id=1", "--sync-binlog=0", "--log-bin-trust-function-creators=1", "--binlog-row-metadata=FULL"}
	if flavor == "mariadb" {
		f = append(f, "--binlog-format=ROW")
	}
	return f
}

// binaryDirs are searched after PATH, in order.
var binaryDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/local/mysql/bin", "/usr/bin"}

// ErrNoBinary means no mariadbd or mysqld binary was found.
var ErrNoBinary = errors.New("localdb: no mariadbd or mysqld binary found")

// ErrNotRunning is returned by the fault methods when the server process is not running.
var ErrNotRunning = errors.New("localdb: server is not running")

// FindBinary returns the first mariadbd, else mysqld, from PATH, then the usual sbin
// directories. Returns ErrNoBinary if there is neither.
func FindBinary() (string, error) {
	for _, name := range []string{"mariadbd", "mysqld"} {
		if p, ok := lookTool(name, nil); ok {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

// FindBinaryFor returns a server binary of engine ("mariadb", "mariadb-11.8" or "mysql"): for
// MariaDB a mariadbd, else a mysqld that is MariaDB's; for MySQL a mysqld that is Oracle's
// (Debian's mariadb-server installs mysqld as a link to mariadbd, which does not count), else
// the wrapper scripts/mysql-rootfs.sh writes (RootfsMySQL). An engine with a version
// (mariadb-11.8) takes only a binary whose --version is of that major.minor, the one on PATH
// or, after it, the wrapper `scripts/mysql-rootfs.sh mariadb-11.8` writes (Rootfs). Returns
// ErrNoBinary if there is none.
func FindBinaryFor(engine string) (string, error) {
	product, want, _ := strings.Cut(engine, "-")
	var candidates []string
	names := []string{"mysqld"}
	if product == "mariadb" {
		names = []string{"mariadbd", "mysqld"}
	}
	for _, name := range names {
		if p, ok := lookTool(name, nil); ok {
			candidates = append(candidates, p)
		}
	}
	if p := Rootfs(engine); p != "" {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		flavor, err := detectFlavor(ctx, p)
		if err == nil && flavor == product && want != "" {
			var v string
			if v, err = BinaryVersion(ctx, p); err == nil && v != want && !strings.HasPrefix(v, want+".") {
				err = fmt.Errorf("localdb: %s is version %s, not %s", p, v, want)
			}
		}
		cancel()
		if err == nil && flavor == product {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w for engine %s", ErrNoBinary, engine)
}

// RootfsMySQL returns the path of the mysqld wrapper scripts/mysql-rootfs.sh writes under the
// user's cache directory (Debian unstable's MySQL, run through its root file system's own
// loader), or "" when it is not there.
func RootfsMySQL() string { return Rootfs("mysql") }

// Rootfs returns the path of the server wrapper `scripts/mysql-rootfs.sh engine` writes under
// the user's cache directory for engine "mysql" (rootfs/mysql-bin/mysqld) or "mariadb-11.8"
// (rootfs/mariadb-11.8-bin/sbin/mariadbd, in the directory mariadb-install-db takes as its
// --basedir), or "" when it is not there or engine has none.
func Rootfs(engine string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	var p string
	switch engine {
	case "mysql":
		p = filepath.Join(dir, "mend", "rootfs", "mysql-bin", "mysqld")
	case "mariadb-11.8":
		p = filepath.Join(dir, "mend", "rootfs", engine+"-bin", "sbin", "mariadbd")
	default:
		return ""
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

// versionRE finds the version in a server's --version line: "mariadbd  Ver 11.8.9-MariaDB-4
// from Debian", "mysqld  Ver 9.7.4 for Linux".
var versionRE = regexp.MustCompile(`\bVer ([0-9]+\.[0-9]+\.[0-9]+)`)

// BinaryVersion returns the version number a server binary's --version reports (11.8.9).
func BinaryVersion(ctx context.Context, binary string) (string, error) {
	out, err := exec.CommandContext(ctx, binary, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("localdb: %s --version: %w: %s", binary, err, tail(out, 500))
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("localdb: %s --version names no version: %s", binary, tail(out, 500))
	}
	return string(m[1]), nil
}

// lookTool finds an executable by name in extra, then in PATH, then in binaryDirs. extra
// comes first: a server's own tools (mariadb-install-db beside the mariadbd of a root file
// system) must win over another version's on PATH.
func lookTool(name string, extra []string) (string, bool) {
	if p, ok := lookIn(name, extra); ok {
		return p, true
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	return lookIn(name, binaryDirs)
}

func lookIn(name string, dirs []string) (string, bool) {
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// DirPrefixDefault is Config.DirPrefix when it is empty.
const DirPrefixDefault = "mend-localdb-"

// Config says which server Start runs.
type Config struct {
	// Binary is the mariadbd or mysqld to run (see FindBinary). Required.
	Binary string
	// DirPrefix starts the name of the temporary directory, so leftovers say who made them.
	// Empty means DirPrefixDefault.
	DirPrefix string
	// Args are extra server options, after the usual ones
	// ("--binlog-do-db=other", "--lower-case-table-names=1").
	Args []string
}

func (c Config) validate() error {
	if c.Binary == "" {
		return errors.New("localdb: Config.Binary is empty (see FindBinary)")
	}
	return nil
}

// Server is a server process in a temporary directory, owned by the caller.
type Server struct {
	// Binary is the server binary the process runs.
	Binary string
	// Flavor is "mariadb" or "mysql".
	Flavor string
	// Dir is the temporary directory: data, socket, logs and tmpdir.
	Dir string

	cfg   *mysql.Config // passwordless root over TCP
	args  []string      // start arguments, port included
	extra []string      // Config.Args

	mu     sync.Mutex
	pid    int
	exited chan struct{} // closed when the current process exits; nil before the first start

	// expectExit is set before the process is signalled to end; an exit without it is a
	// crash, recorded in crash (the first one wins).
	expectExit atomic.Bool
	crash      atomic.Pointer[string]
}

// Start initialises a data directory and starts a server on a free loopback port, waiting
// until it answers (at most two minutes, less if ctx ends sooner). ctx bounds only the start:
// the server runs until Close. On failure the directory is removed and the error carries the
// tail of the server's logs.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	flavor, err := detectFlavor(ctx, cfg.Binary)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", cmp.Or(cfg.DirPrefix, DirPrefixDefault))
	if err != nil {
		return nil, fmt.Errorf("localdb: temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	s := &Server{Binary: cfg.Binary, Flavor: flavor, Dir: dir, extra: cfg.Args}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("localdb: temp dir: %w", err)
	}
	if err := s.initialize(ctx); err != nil {
		return nil, err
	}

	// The free port may be taken between our probe and the server's bind: retry a few times.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.args = s.startArgs(port)
		s.cfg = mysql.NewConfig()
		s.cfg.User, s.cfg.Net, s.cfg.Addr = "root", "tcp", "127.0.0.1:"+strconv.Itoa(port)
		s.cfg.ParseTime, s.cfg.Loc, s.cfg.InterpolateParams = true, time.UTC, true
		err = s.startAndWait(ctx)
		if err == nil {
			return s, nil
		}
		s.mu.Lock()
		s.stopLocked()
		s.mu.Unlock()
		if attempt == attempts || !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
	}
}

// Addr returns the server's TCP address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.cfg.Addr }

// RootDSN returns a DSN for the passwordless root user over TCP with dbName selected (may be
// empty), with parseTime=true, loc=UTC and interpolateParams=true.
func (s *Server) RootDSN(dbName string) string {
	c := s.cfg.Clone()
	c.DBName = dbName
	return c.FormatDSN()
}

// detectFlavor tells MariaDB from MySQL by the binary's name or --version output.
func detectFlavor(ctx context.Context, binary string) (string, error) {
	if strings.HasPrefix(filepath.Base(binary), "mariadb") {
		return "mariadb", nil
	}
	out, err := exec.CommandContext(ctx, binary, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("localdb: %s --version: %w: %s", binary, err, tail(out, 500))
	}
	if strings.Contains(strings.ToLower(string(out)), "mariadb") {
		return "mariadb", nil
	}
	return "mysql", nil
}

// isRoot: mariadbd and mysqld refuse to run as root without --user=root.
func isRoot() bool { return os.Geteuid() == 0 }

// initialize creates the data directory: mariadb-install-db for MariaDB, mysqld --initialize-insecure for MySQL.
func (s *Server) initialize(ctx context.Context) error {
	datadir := filepath.Join(s.Dir, "data")
	var cmd *exec.Cmd
	if s.Flavor == "mariadb" {
		binDir := filepath.Dir(s.Binary)
		prefix := filepath.Dir(binDir)
		extra := []string{binDir, filepath.Join(prefix, "bin"), filepath.Join(prefix, "scripts")}
		tool, ok := lookTool("mariadb-install-db", extra)
		if !ok {
			if tool, ok = lookTool("mysql_install_db", extra); !ok {
				return errors.New("localdb: found " + s.Binary + " but no mariadb-install-db or mysql_install_db")
			}
		}
		// --tmpdir is passed on to the bootstrap server: see startArgs.
		args := []string{"--no-defaults", "--datadir=" + datadir, "--tmpdir=" + filepath.Join(s.Dir, "tmp"),
			"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}
		if prefix != "/usr" && prefix != "/" {
			args = append(args, "--basedir="+prefix)
		}
		if isRoot() {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, tool, args...)
	} else {
		args := []string{"--no-defaults", "--initialize-insecure", "--datadir=" + datadir,
			"--tmpdir=" + filepath.Join(s.Dir, "tmp"), "--log-error=" + filepath.Join(s.Dir, "init.err")}
		if isRoot() {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, s.Binary, args...)
		// MySQL's only account after --initialize-insecure is root@localhost, which a TCP client
		// from 127.0.0.1 does not match under --skip-name-resolve; add one that does at every start.
		init := "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\nGRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n"
		if err := os.WriteFile(filepath.Join(s.Dir, "init.sql"), []byte(init), 0o644); err != nil {
			return fmt.Errorf("localdb: write init file: %w", err)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("localdb: initialise data directory with %s: %w\n%s%s",
			cmd.Path, err, tail(out, 2000), s.logTail())
	}
	return nil
}

// startArgs returns the server's command line for port.
func (s *Server) startArgs(port int) []string {
	args := []string{"--no-defaults"} // must come first
	if isRoot() {
		args = append(args, "--user=root")
	}
	args = append(args,
		"--datadir="+filepath.Join(s.Dir, "data"),
		"--socket="+filepath.Join(s.Dir, "sock"),
		"--pid-file="+filepath.Join(s.Dir, "server.pid"),
		"--log-error="+filepath.Join(s.Dir, "error.log"),
		"--tmpdir="+filepath.Join(s.Dir, "tmp"), // private: see "Overview" in doc.go
		"--port="+strconv.Itoa(port),
	)
	args = append(args, ServerFlags(s.Flavor)...)
	if s.Flavor == "mysql" {
		args = append(args, "--mysqlx=OFF", "--secure-file-priv=NULL",
			"--init-file="+filepath.Join(s.Dir, "init.sql"))
	}
	return append(args, s.extra...)
}

// Running reports whether the server process is alive (it may be paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

// runningLocked reports whether the current process is alive. s.mu must be held.
func (s *Server) runningLocked() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// spawnLocked starts the server process in its own process group. s.mu must be held.
func (s *Server) spawnLocked() error {
	out, err := os.OpenFile(filepath.Join(s.Dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localdb: open server output: %w", err)
	}
	cmd := exec.Command(s.Binary, s.args...) // not CommandContext: the server outlives the starting ctx
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("localdb: start %s: %w", s.Binary, err)
	}
	exited := make(chan struct{})
	s.expectExit.Store(false)
	go func() {
		err := cmd.Wait() // the exit status of a killed server is expected, not an error
		out.Close()
		if !s.expectExit.Load() {
			msg := fmt.Sprintf("server process %d exited unexpectedly (%v)\n%s", cmd.Process.Pid, err, s.logTail())
			s.crash.CompareAndSwap(nil, &msg)
		}
		close(exited)
	}()
	s.pid, s.exited = cmd.Process.Pid, exited
	return nil
}

// startAndWait spawns the process and waits until it answers a ping.
func (s *Server) startAndWait(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.spawnLocked(); err != nil {
		return err
	}
	if err := waitReady(ctx, s.cfg, s.exited); err != nil {
		return fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return nil
}

// stopLocked stops the process gracefully, with SIGKILL after stopTimeout. s.mu must be held.
func (s *Server) stopLocked() {
	if !s.runningLocked() {
		return
	}
	s.expectExit.Store(true)
	_ = signalTerm(s.pid)
	_ = signalCont(s.pid) // a paused server would not act on SIGTERM
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		_ = signalKill(s.pid)
		<-s.exited
	}
}

// Kill sends SIGKILL to the server's process group and waits for the process to exit. The
// data directory is kept, so Restart brings the server back with every acknowledged commit.
// Returns ErrNotRunning if the process is not running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return ErrNotRunning
	}
	s.expectExit.Store(true)
	if err := signalKill(s.pid); err != nil {
		return err
	}
	<-s.exited
	return nil
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing is answered. It
// returns once the process is seen stopped. Returns ErrNotRunning if the process is not running.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return ErrNotRunning
	}
	if err := signalStop(s.pid); err != nil {
		return err
	}
	return waitStopped(s.pid, pauseTimeout)
}

// Resume continues a server frozen by Pause (SIGCONT). Returns ErrNotRunning if the process
// is not running.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return ErrNotRunning
	}
	return signalCont(s.pid)
}

// Restart starts the server again on the same data directory and port and waits until it
// answers. A server that is still running is first stopped gracefully. Returns an error if
// the server does not become ready before ctx ends (or two minutes pass).
func (s *Server) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	s.mu.Lock()
	s.stopLocked()
	s.mu.Unlock()
	return s.startAndWait(ctx)
}

// Crash returns an error describing an exit of the server process that the caller did not
// cause (the first one, with the tail of its logs), or nil if there was none.
func (s *Server) Crash() error {
	if p := s.crash.Load(); p != nil {
		return errors.New("localdb: " + *p)
	}
	return nil
}

// Close stops the server (gracefully, SIGKILL after a timeout) and removes its directory. It
// also returns Crash's error, since clients may only have seen "connection refused". It is
// safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	errs := []error{s.Crash()}
	if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, fmt.Errorf("localdb: remove %s: %w", s.Dir, err))
	}
	return errors.Join(errs...)
}

// logTail returns the end of the server's error log and raw output, for error messages.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"error.log", "init.err", "stderr.log"} {
		data, err := readTail(filepath.Join(s.Dir, name), 3000)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s (tail) ---\n%s\n", name, data)
	}
	return b.String()
}

func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if off := fi.Size() - n; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Ping opens one connection with cfg and pings it, bounded by timeout.
func Ping(ctx context.Context, cfg *mysql.Config, timeout time.Duration) error {
	c := cfg.Clone()
	c.Timeout = timeout
	connector, err := mysql.NewConnector(c)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return db.PingContext(ctx)
}

// WaitReady polls the server cfg names until it answers a ping or ctx ends, for a server
// started some other way (a container's entrypoint restarts its server during initialisation).
// Returns an error carrying the last ping failure if ctx ends first.
func WaitReady(ctx context.Context, cfg *mysql.Config) error { return waitReady(ctx, cfg, nil) }

// waitReady polls Ping until it answers, ctx ends, or exited is closed (the process died).
func waitReady(ctx context.Context, cfg *mysql.Config, exited <-chan struct{}) error {
	const interval = 20 * time.Millisecond
	var last error
	for {
		if last = Ping(ctx, cfg, time.Second); last == nil {
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case <-exited:
			t.Stop()
			return fmt.Errorf("localdb: server exited before it was ready (last ping: %v)", last)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("localdb: server not ready: %w (last ping: %v)", context.Cause(ctx), last)
		case <-t.C:
		}
	}
}

// freePort asks the kernel for an unused port on 127.0.0.1. Another process may take it before
// the server binds; Start retries on that.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localdb: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package mysqltest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Timeouts for the private server's lifecycle. They are generous because shared CI machines and
// the race detector slow everything down; the polling returns as soon as the server answers.
const (
	readyTimeout = 2 * time.Minute  // initialisation plus first ping, or a restart
	stopTimeout  = 30 * time.Second // SIGTERM grace before SIGKILL
	pauseTimeout = 5 * time.Second  // until the process is seen stopped
)

// serverFlags are the settings every private server runs with (see docs in mysql-notes.md):
// utf8mb4 and strict mode like production, durability relaxed to flush-at-commit=2, which still
// keeps every acknowledged commit across a SIGKILL of the server process.
var serverFlags = []string{
	"--bind-address=127.0.0.1",
	"--skip-name-resolve",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_general_ci",
	"--sql-mode=STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
	"--innodb-flush-log-at-trx-commit=2",
	"--innodb-buffer-pool-size=128M",
	"--skip-log-bin",
	"--performance-schema=OFF",
	"--max-connections=500",
}

// localServer is a server process the harness owns, in a temporary directory.
type localServer struct {
	binary string
	flavor string
	dir    string
	args   []string // start arguments, port included

	mu     sync.Mutex
	pid    int
	exited chan struct{} // closed when the current process exits; nil before the first start

	// expectExit is set before the harness signals the process to end; an exit without it is
	// a crash, recorded in crash (the first one wins) and reported by Close.
	expectExit atomic.Bool
	crash      atomic.Pointer[string]
}

// startLocal initialises a data directory with binary and starts a server on a free loopback port.
func startLocal(ctx context.Context, binary string) (_ *Server, err error) {
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	flavor, err := detectFlavor(ctx, binary)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mend-mysqltest-")
	if err != nil {
		return nil, fmt.Errorf("mysqltest: temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	l := &localServer{binary: binary, flavor: flavor, dir: dir}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("mysqltest: temp dir: %w", err)
	}
	if err := l.initialize(ctx); err != nil {
		return nil, err
	}

	// The free port may be taken between our probe and the server's bind: retry a few times.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		l.args = l.startArgs(port)
		cfg := rootConfig(net127(port))
		err = l.startAndWait(ctx, cfg)
		if err == nil {
			return &Server{kind: sourceBinary, flavor: flavor, cfg: cfg, local: l, startedIn: time.Since(begin)}, nil
		}
		l.mu.Lock()
		l.stopLocked()
		l.mu.Unlock()
		if attempt == attempts || !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
	}
}

func net127(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// rootConfig is the driver config for the private server's passwordless root over TCP.
func rootConfig(addr string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = addr
	applyParams(cfg)
	return cfg
}

// detectFlavor tells MariaDB from MySQL by the binary's name or --version output.
func detectFlavor(ctx context.Context, binary string) (string, error) {
	if strings.HasPrefix(filepath.Base(binary), "mariadb") {
		return "mariadb", nil
	}
	out, err := exec.CommandContext(ctx, binary, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mysqltest: %s --version: %w: %s", binary, err, tail(out, 500))
	}
	if strings.Contains(strings.ToLower(string(out)), "mariadb") {
		return "mariadb", nil
	}
	return "mysql", nil
}

func isRoot() bool { return os.Geteuid() == 0 }

// initialize creates the data directory: mariadb-install-db for MariaDB, mysqld --initialize-insecure for MySQL.
func (l *localServer) initialize(ctx context.Context) error {
	datadir := filepath.Join(l.dir, "data")
	var cmd *exec.Cmd
	if l.flavor == "mariadb" {
		binDir := filepath.Dir(l.binary)
		prefix := filepath.Dir(binDir)
		extra := []string{binDir, filepath.Join(prefix, "bin"), filepath.Join(prefix, "scripts")}
		tool, ok := lookTool("mariadb-install-db", extra)
		if !ok {
			if tool, ok = lookTool("mysql_install_db", extra); !ok {
				return errors.New("mysqltest: found " + l.binary + " but no mariadb-install-db or mysql_install_db")
			}
		}
		// --tmpdir is passed on to the bootstrap server: see startArgs.
		args := []string{"--no-defaults", "--datadir=" + datadir, "--tmpdir=" + filepath.Join(l.dir, "tmp"),
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
			"--tmpdir=" + filepath.Join(l.dir, "tmp"), "--log-error=" + filepath.Join(l.dir, "init.err")}
		if isRoot() {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, l.binary, args...)
		// MySQL's only account after --initialize-insecure is root@localhost, which a TCP client
		// from 127.0.0.1 does not match under --skip-name-resolve; add one that does at every start.
		init := "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\nGRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n"
		if err := os.WriteFile(filepath.Join(l.dir, "init.sql"), []byte(init), 0o644); err != nil {
			return fmt.Errorf("mysqltest: write init file: %w", err)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("mysqltest: initialise data directory with %s: %w\n%s%s",
			cmd.Path, err, tail(out, 2000), l.logTail())
	}
	return nil
}

// startArgs returns the server's command line for port.
func (l *localServer) startArgs(port int) []string {
	args := []string{"--no-defaults"} // must come first
	if isRoot() {
		args = append(args, "--user=root")
	}
	args = append(args,
		"--datadir="+filepath.Join(l.dir, "data"),
		"--socket="+filepath.Join(l.dir, "sock"),
		"--pid-file="+filepath.Join(l.dir, "server.pid"),
		"--log-error="+filepath.Join(l.dir, "error.log"),
		// Not the shared /tmp: a starting server deletes every "#sql*" file in its tmpdir as a
		// leftover of its own last run, which removed the temporary tables of concurrent servers
		// (other test binaries) and crashed them.
		"--tmpdir="+filepath.Join(l.dir, "tmp"),
		"--port="+strconv.Itoa(port),
	)
	args = append(args, serverFlags...)
	if l.flavor == "mysql" {
		args = append(args, "--mysqlx=OFF", "--secure-file-priv=NULL",
			"--init-file="+filepath.Join(l.dir, "init.sql"))
	}
	return args
}

// runningLocked reports whether the current process is alive. l.mu must be held.
func (l *localServer) runningLocked() bool {
	if l.exited == nil {
		return false
	}
	select {
	case <-l.exited:
		return false
	default:
		return true
	}
}

// spawnLocked starts the server process in its own process group. l.mu must be held.
func (l *localServer) spawnLocked() error {
	out, err := os.OpenFile(filepath.Join(l.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("mysqltest: open server output: %w", err)
	}
	cmd := exec.Command(l.binary, l.args...) // not CommandContext: the server outlives the starting ctx
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("mysqltest: start %s: %w", l.binary, err)
	}
	exited := make(chan struct{})
	l.expectExit.Store(false)
	go func() {
		err := cmd.Wait() // the exit status of a killed server is expected, not an error
		out.Close()
		if !l.expectExit.Load() {
			msg := fmt.Sprintf("server process %d exited unexpectedly (%v)\n%s", cmd.Process.Pid, err, l.logTail())
			l.crash.CompareAndSwap(nil, &msg)
		}
		close(exited)
	}()
	l.pid, l.exited = cmd.Process.Pid, exited
	return nil
}

// startAndWait spawns the process and waits until it answers cfg's ping.
func (l *localServer) startAndWait(ctx context.Context, cfg *mysql.Config) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.spawnLocked(); err != nil {
		return err
	}
	if err := waitReady(ctx, cfg, l.exited); err != nil {
		return fmt.Errorf("%w\n%s", err, l.logTail())
	}
	return nil
}

// stopLocked stops the process gracefully, with SIGKILL after stopTimeout. l.mu must be held.
func (l *localServer) stopLocked() {
	if !l.runningLocked() {
		return
	}
	l.expectExit.Store(true)
	_ = signalTerm(l.pid)
	_ = signalCont(l.pid) // a paused server would not act on SIGTERM
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-l.exited:
	case <-t.C:
		_ = signalKill(l.pid)
		<-l.exited
	}
}

var errNotRunning = errors.New("mysqltest: server is not running")

func (l *localServer) kill() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.runningLocked() {
		return errNotRunning
	}
	l.expectExit.Store(true)
	if err := signalKill(l.pid); err != nil {
		return err
	}
	<-l.exited
	return nil
}

func (l *localServer) pause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.runningLocked() {
		return errNotRunning
	}
	if err := signalStop(l.pid); err != nil {
		return err
	}
	return waitStopped(l.pid, pauseTimeout)
}

func (l *localServer) resume() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.runningLocked() {
		return errNotRunning
	}
	return signalCont(l.pid)
}

func (l *localServer) restart(ctx context.Context, cfg *mysql.Config) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	l.mu.Lock()
	l.stopLocked()
	l.mu.Unlock()
	return l.startAndWait(ctx, cfg)
}

// crashReport describes an exit the harness did not cause, or returns "".
func (l *localServer) crashReport() string {
	if p := l.crash.Load(); p != nil {
		return *p
	}
	return ""
}

// close stops the server and removes its directory. It reports a crash seen during the
// server's life, since tests may only have seen "connection refused".
func (l *localServer) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked()
	var errs []error
	if c := l.crashReport(); c != "" {
		errs = append(errs, errors.New("mysqltest: "+c))
	}
	if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, fmt.Errorf("mysqltest: remove %s: %w", l.dir, err))
	}
	return errors.Join(errs...)
}

// logTail returns the end of the server's error log and raw output, for error messages.
func (l *localServer) logTail() string {
	var b strings.Builder
	for _, name := range []string{"error.log", "init.err", "stderr.log"} {
		data, err := readTail(filepath.Join(l.dir, name), 3000)
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

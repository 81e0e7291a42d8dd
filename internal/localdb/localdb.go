// Package localdb starts a throwaway MariaDB or MySQL server from a local
// mariadbd or mysqld binary, in a temporary directory, on a free loopback
// port, for `mend demo`. It follows the same steps and flags as the test
// harness (internal/mysqltest), which is test-only code.
//
// # Overview
//
// Start initialises a data directory (mariadb-install-db, or mysqld
// --initialize-insecure), starts the server in its own process group with
// a private tmpdir, and waits until it answers a ping. Close stops it with
// SIGTERM (SIGKILL after a timeout) and removes the directory, so nothing
// is left behind.
//
// # Failure handling
//
// A server that exits or never answers is reported with the tail of its
// error log; the directory is removed either way.
package localdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	readyTimeout = 2 * time.Minute
	stopTimeout  = 30 * time.Second
)

// serverFlags match the test harness: utf8mb4 and strict mode like
// production, relaxed flushing, loopback only.
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
}

// binaryDirs are searched after PATH.
var binaryDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/local/mysql/bin", "/usr/bin"}

// ErrNoBinary means no mariadbd or mysqld binary was found.
var ErrNoBinary = errors.New("localdb: no mariadbd or mysqld binary found")

// FindBinary returns the first mariadbd, else mysqld, from PATH, then the
// usual sbin directories.
func FindBinary() (string, error) {
	for _, name := range []string{"mariadbd", "mysqld"} {
		if p, ok := lookTool(name, nil); ok {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

func lookTool(name string, extra []string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, dir := range append(append([]string{}, extra...), binaryDirs...) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// Server is a running private server.
type Server struct {
	Binary string
	Flavor string // "mariadb" or "mysql"
	Dir    string // temporary directory: data, socket, logs, tmpdir
	cfg    *mysql.Config
	cmd    *exec.Cmd
	exited chan struct{}
}

// RootDSN returns a DSN for the passwordless root user, with dbName
// selected (may be empty).
func (s *Server) RootDSN(dbName string) string {
	c := s.cfg.Clone()
	c.DBName = dbName
	return c.FormatDSN()
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.cfg.Addr }

// Start starts a private server from binary (see FindBinary).
func Start(ctx context.Context, binary string) (_ *Server, err error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	flavor := "mysql"
	if strings.HasPrefix(filepath.Base(binary), "mariadb") {
		flavor = "mariadb"
	} else if out, err := exec.CommandContext(ctx, binary, "--version").CombinedOutput(); err == nil &&
		strings.Contains(strings.ToLower(string(out)), "mariadb") {
		flavor = "mariadb"
	}
	dir, err := os.MkdirTemp("", "mend-demo-")
	if err != nil {
		return nil, fmt.Errorf("localdb: temp dir: %w", err)
	}
	s := &Server{Binary: binary, Flavor: flavor, Dir: dir}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("localdb: temp dir: %w", err)
	}
	if err := s.initialize(ctx); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.cfg = mysql.NewConfig()
		s.cfg.User, s.cfg.Net, s.cfg.Addr = "root", "tcp", "127.0.0.1:"+strconv.Itoa(port)
		s.cfg.ParseTime, s.cfg.Loc, s.cfg.InterpolateParams = true, time.UTC, true
		err = s.start(ctx, port)
		if err == nil {
			return s, nil
		}
		s.stop()
		if attempt == 3 || !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
	}
}

func isRoot() bool { return os.Geteuid() == 0 }

func (s *Server) initialize(ctx context.Context) error {
	datadir := filepath.Join(s.Dir, "data")
	tmp := filepath.Join(s.Dir, "tmp")
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
		args := []string{"--no-defaults", "--datadir=" + datadir, "--tmpdir=" + tmp,
			"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}
		if prefix != "/usr" && prefix != "/" {
			args = append(args, "--basedir="+prefix)
		}
		if isRoot() {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, tool, args...)
	} else {
		args := []string{"--no-defaults", "--initialize-insecure", "--datadir=" + datadir, "--tmpdir=" + tmp,
			"--log-error=" + filepath.Join(s.Dir, "init.err")}
		if isRoot() {
			args = append(args, "--user=root")
		}
		cmd = exec.CommandContext(ctx, s.Binary, args...)
		// root@localhost does not match a TCP client under --skip-name-resolve.
		init := "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\nGRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n"
		if err := os.WriteFile(filepath.Join(s.Dir, "init.sql"), []byte(init), 0o644); err != nil {
			return fmt.Errorf("localdb: write init file: %w", err)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localdb: initialise data directory with %s: %w\n%s", cmd.Path, err, tail(out, 2000))
	}
	return nil
}

func (s *Server) start(ctx context.Context, port int) error {
	args := []string{"--no-defaults"}
	if isRoot() {
		args = append(args, "--user=root")
	}
	args = append(args,
		"--datadir="+filepath.Join(s.Dir, "data"),
		"--socket="+filepath.Join(s.Dir, "sock"),
		"--pid-file="+filepath.Join(s.Dir, "server.pid"),
		"--log-error="+filepath.Join(s.Dir, "error.log"),
		// Private: a starting server deletes every #sql* file in its tmpdir.
		"--tmpdir="+filepath.Join(s.Dir, "tmp"),
		"--port="+strconv.Itoa(port),
	)
	args = append(args, serverFlags...)
	if s.Flavor == "mysql" {
		args = append(args, "--mysqlx=OFF", "--secure-file-priv=NULL", "--init-file="+filepath.Join(s.Dir, "init.sql"))
	}
	out, err := os.OpenFile(filepath.Join(s.Dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localdb: %w", err)
	}
	cmd := exec.Command(s.Binary, args...) // outlives ctx, which bounds only the start
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("localdb: start %s: %w", s.Binary, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(s.exited)
	}()
	var last error
	for {
		if last = s.ping(ctx); last == nil {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-s.exited:
			t.Stop()
			return fmt.Errorf("localdb: server exited before it was ready (%v)\n%s", last, s.logTail())
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("localdb: server not ready: %w (%v)\n%s", ctx.Err(), last, s.logTail())
		case <-t.C:
		}
	}
}

func (s *Server) ping(ctx context.Context) error {
	c := s.cfg.Clone()
	c.Timeout = time.Second
	connector, err := mysql.NewConnector(c)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = signalGroup(s.cmd.Process.Pid, false)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		_ = signalGroup(s.cmd.Process.Pid, true)
		<-s.exited
	}
}

// Close stops the server and removes its directory. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.stop()
	if s.Dir == "" {
		return nil
	}
	err := os.RemoveAll(s.Dir)
	if err != nil {
		return fmt.Errorf("localdb: remove %s: %w", s.Dir, err)
	}
	return nil
}

func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"error.log", "init.err", "stderr.log"} {
		data, err := os.ReadFile(filepath.Join(s.Dir, name))
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s (tail) ---\n%s\n", name, tail(data, 3000))
	}
	return b.String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localdb: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

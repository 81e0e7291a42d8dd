package mysqlx

// DSNs from files (a Kubernetes Secret or a Vault agent template mounted
// as a file), re-read on every new connection so that a rotated password
// (or a rotated user, as Vault's dynamic credentials rotate both) is used
// by the next connection a pool opens, without a restart.
//
// The file holds a whole DSN rather than only a password: dynamic
// credentials change the user too, and one file per database keeps the
// DSN flags' meaning. Only the user and password are taken from a re-read:
// the address, database and parameters a pool was opened with stay until
// the process restarts (a pool cannot move to another server under open
// sessions).

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

// dsnFile is one registered DSN file and the credentials last read from it.
type dsnFile struct {
	path string

	mu         sync.Mutex
	raw        string // the file's last content that parsed
	user, pass string
	reads      int // how often the file was read on a connect (tests)

	onRead []func(dsn string) // ReadDSNFile's callers: told each new content (a rotated password)
}

// dsnFiles maps a pool's identity (credKey) to its file. Config consults it.
var dsnFiles sync.Map // string -> *dsnFile

// credKey identifies the pools a file's credentials are for: the user,
// network, address and database of the DSN read at start.
func credKey(cfg *mysql.Config) string {
	return cfg.User + "@" + cfg.Net + "(" + cfg.Addr + ")/" + cfg.DBName
}

// ReadDSNFile reads a DSN from path (surrounding white space, such as the
// newline an editor or `kubectl create secret --from-file` leaves, is
// dropped) and registers the file: every pool Config builds for that DSN's
// user, address and database then re-reads the file before each new
// connection and connects with the user and password it holds then. The
// DSN never appears in an error (it holds a password). field names the DSN
// in errors. Each onRead is called with the DSN read now and with every
// new content a later re-read finds, before it is used (the binary adds
// each to its log scrubber, so a rotated password is never printed).
func ReadDSNFile(path, field string, onRead ...func(dsn string)) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", &mend.ValidationError{Field: field + "-file", Reason: fmt.Sprintf("cannot be read: %v", err)}
	}
	dsn := strings.TrimSpace(string(raw))
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil || dsn == "" {
		return "", &mend.ValidationError{Field: field + "-file", Reason: fmt.Sprintf("%s does not hold a DSN; expected user:password@tcp(host:port)/database", path)}
	}
	for _, f := range onRead {
		f(dsn)
	}
	dsnFiles.Store(credKey(cfg), &dsnFile{path: path, raw: dsn, user: cfg.User, pass: cfg.Passwd, onRead: onRead})
	return dsn, nil
}

// applyDSNFile makes cfg re-read its DSN file on every connect, when its
// DSN came from one (ReadDSNFile), and its TLS files (tls.go's
// reloadTLS), when its TLS came from --*-tls-* files: one hook, since the
// driver keeps only one.
func applyDSNFile(cfg *mysql.Config) {
	v, ok := dsnFiles.Load(credKey(cfg))
	tlsHook := reloadTLS(cfg)
	if !ok && tlsHook == nil {
		return
	}
	_ = cfg.Apply(mysql.BeforeConnect(func(_ context.Context, c *mysql.Config) error {
		if ok {
			c.User, c.Passwd = v.(*dsnFile).credentials()
		}
		if tlsHook != nil {
			tlsHook(c)
		}
		return nil
	}))
}

// credentials re-reads the file and returns its user and password. A file
// that cannot be read or parsed right now (mid-rotation by a tool that does
// not swap files atomically) leaves the last good credentials in use: the
// connection then fails or succeeds on them, as it would have without the
// re-read.
func (f *dsnFile) credentials() (user, pass string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if raw, err := os.ReadFile(f.path); err == nil {
		dsn := strings.TrimSpace(string(raw))
		if dsn != f.raw {
			if cfg, err := mysql.ParseDSN(dsn); err == nil {
				for _, on := range f.onRead {
					on(dsn)
				}
				f.raw, f.user, f.pass = dsn, cfg.User, cfg.Passwd
			}
		}
	}
	return f.user, f.pass
}

// DSNFileReads reports how often the file registered for dsn was re-read
// on a connect (for tests); -1 when none is registered.
func DSNFileReads(dsn string) int {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return -1
	}
	v, ok := dsnFiles.Load(credKey(cfg))
	if !ok {
		return -1
	}
	f := v.(*dsnFile)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// Current returns a copy of cfg holding what a new connection of a pool
// built from cfg would use now: the user and password its DSN file holds
// now (ReadDSNFile; a file being rewritten leaves the last good ones) and
// its TLS files as they are now (tls.go). For connections the driver does
// not make, such as the binary-log reader's replication connection, which
// must follow a rotated secret as every pool does.
func Current(cfg *mysql.Config) *mysql.Config {
	c := cfg.Clone()
	if v, ok := dsnFiles.Load(credKey(cfg)); ok {
		c.User, c.Passwd = v.(*dsnFile).credentials()
	}
	if reload := reloadTLS(cfg); reload != nil {
		reload(c)
	}
	return c
}

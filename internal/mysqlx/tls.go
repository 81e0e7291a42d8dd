package mysqlx

// TLS to a database beyond what a DSN's own tls= parameter can say: a
// private CA (managed MySQL's provider CA is not in the system roots), a
// client certificate, a server name other than the address, a minimum
// version. The result is registered with the driver under a name
// (mysql.RegisterTLSConfig) and the DSN names it (tls=<name>), so every
// pool opened from that DSN, through any package, uses it.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
)

// TLSFiles is how one DSN's connections are encrypted and verified. The
// zero value changes nothing (the DSN's own tls= applies).
type TLSFiles struct {
	// CAFile is a PEM file of the CA certificates the server's certificate
	// must chain to; empty: the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key (PEM),
	// for users created with REQUIRE X509 or REQUIRE SUBJECT; both or
	// neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; empty:
	// the DSN's host.
	ServerName string
	// MinVersion is the lowest TLS version accepted, "1.2" (the default)
	// or "1.3".
	MinVersion string
}

// IsZero reports whether t asks for nothing.
func (t TLSFiles) IsZero() bool { return t == TLSFiles{} }

// TLSError reports a TLS setting mend cannot use; it matches mend.ErrInvalid.
type TLSError struct {
	Field  string // the DSN it is for: "dsn", "host-dsn", "queue-dsn"
	Reason string
}

func (e *TLSError) Error() string { return fmt.Sprintf("mend: TLS for %s: %s", e.Field, e.Reason) }

// Unwrap lets errors.Is(err, mend.ErrInvalid) match.
func (e *TLSError) Unwrap() error { return mend.ErrInvalid }

// Config builds the *tls.Config t describes, reading its files now: a
// missing or unreadable file, a CA file without a certificate, a
// certificate without its key or a key that does not match are refused
// before any connection is made. field names the DSN in errors.
func (t TLSFiles) Config(field string) (*tls.Config, error) {
	bad := func(format string, args ...any) (*tls.Config, error) {
		return nil, &TLSError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	switch t.MinVersion {
	case "", "1.2":
	case "1.3":
		c.MinVersion = tls.VersionTLS13
	default:
		return bad("minimum version %q: use 1.2 or 1.3", t.MinVersion)
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return bad("CA file: %v", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return bad("CA file %s holds no PEM certificate", t.CAFile)
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return bad("client certificate: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	case t.CertFile != "" || t.KeyFile != "":
		return bad("a client certificate needs both its certificate file and its key file")
	}
	return c, nil
}

// RegisterTLS builds t's configuration and registers it with the driver
// under a name derived from field and t (so two configurations never share
// a name), and returns dsn with tls=<that name>. dsn's own tls= may be
// absent or true (t refines it); false, preferred or skip-verify contradict
// a CA and are refused, as is a custom name registered elsewhere.
func RegisterTLS(dsn, field string, t TLSFiles) (string, error) {
	c, err := t.Config(field)
	if err != nil {
		return "", err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", &mend.ValidationError{Field: field, Reason: "cannot be parsed; expected user:password@tcp(host:port)/database"}
	}
	switch cfg.TLSConfig {
	case "", "true":
	default:
		return "", &TLSError{Field: field, Reason: fmt.Sprintf("the DSN says tls=%s, which the TLS options contradict; remove tls= from the DSN (the options imply a verified connection)", cfg.TLSConfig)}
	}
	if cfg.AllowFallbackToPlaintext {
		return "", &TLSError{Field: field, Reason: fallbackReason}
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{field, t.CAFile, t.CertFile, t.KeyFile, t.ServerName, t.MinVersion}, "\x00")))
	name := "mend-" + field + "-" + hex.EncodeToString(sum[:6])
	if err := mysql.RegisterTLSConfig(name, c); err != nil {
		return "", &TLSError{Field: field, Reason: err.Error()}
	}
	if t.CAFile != "" || t.CertFile != "" {
		r := &tlsReloader{files: t, field: field, cfg: c}
		r.sum, _ = t.contentSum()
		tlsReloaders.Store(name, r)
	}
	cfg.TLSConfig, cfg.TLS = name, nil
	return cfg.FormatDSN(), nil
}

// RequireTLS reports, without connecting, whether every connection made
// through cfg is encrypted and verified: TLS is configured (tls=true or a
// registered name), the server's certificate is checked (not
// tls=skip-verify) and the driver may not fall back to plain text
// (tls=preferred or allowFallbackToPlaintext may). A Unix socket counts as secure, as the server's own
// require_secure_transport counts it. field names the DSN in the error.
func RequireTLS(cfg *mysql.Config, field string) error {
	switch {
	case cfg.Net == "unix":
		return nil
	case cfg.TLS == nil:
		return &TLSError{Field: field, Reason: "connects without TLS; add tls=true to the DSN (system roots) or give its CA file"}
	case cfg.AllowFallbackToPlaintext && cfg.TLSConfig == "preferred":
		return &TLSError{Field: field, Reason: fmt.Sprintf("says tls=%s, which falls back to plain text; use tls=true or give its CA file", cfg.TLSConfig)}
	case cfg.AllowFallbackToPlaintext:
		return &TLSError{Field: field, Reason: fallbackReason}
	case cfg.TLS.InsecureSkipVerify:
		// Encrypted, but anyone on the path can present a certificate of
		// their own: not what --require-tls promises.
		return &TLSError{Field: field, Reason: fmt.Sprintf("says tls=%s, which does not verify the server's certificate; use tls=true or give its CA file", cfg.TLSConfig)}
	}
	return nil
}

// fallbackReason is why allowFallbackToPlaintext is refused with TLS.
const fallbackReason = "has allowFallbackToPlaintext=true, which connects in plain text to a server (or anyone on the path) that offers no TLS; remove it from the DSN"

// RefuseDowngrade reports a DSN whose TLS can be downgraded: TLS is
// configured (tls=true, skip-verify, a registered name) and
// allowFallbackToPlaintext=true lets a server that offers no TLS, which
// is what a man in the middle presents, get the connection in plain text.
// tls=preferred, which says so itself, is left to RequireTLS and doctor's
// warning. field names the DSN in the error.
func RefuseDowngrade(cfg *mysql.Config, field string) error {
	if cfg.Net != "unix" && cfg.TLS != nil && cfg.AllowFallbackToPlaintext && cfg.TLSConfig != "preferred" {
		return &TLSError{Field: field, Reason: fallbackReason}
	}
	return nil
}

// -- name: SessionCipher
const sessionCipherSQL = `SHOW SESSION STATUS LIKE 'Ssl_cipher'`

// SessionCipher returns the TLS cipher of one session of db, "" when the
// session is not encrypted.
func SessionCipher(ctx context.Context, db *sql.DB) (string, error) {
	var name, cipher string
	err := db.QueryRowContext(ctx, sessionCipherSQL).Scan(&name, &cipher)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return cipher, err
}

// Error numbers of a server that refuses a connection without TLS
// (require_secure_transport=ON): MySQL's ER_SECURE_TRANSPORT_REQUIRED, and
// MariaDB's number for the same refusal.
const (
	ErrSecureTransportRequired        = 3159
	ErrSecureTransportRequiredMariaDB = 4036
)

// TLSRequiredError wraps the server's refusal of a plain connection with
// what to change. It unwraps to the driver's error.
type TLSRequiredError struct{ Err error }

func (e *TLSRequiredError) Error() string {
	return "the server accepts only encrypted connections (require_secure_transport=ON): add tls=true to the DSN, " +
		"or give the server's CA with --dsn-tls-ca (--host-dsn-tls-ca, --queue-dsn-tls-ca for the host's databases) (" + e.Err.Error() + ")"
}

func (e *TLSRequiredError) Unwrap() error { return e.Err }

// ExplainTLS returns err wrapped in a *TLSRequiredError when it is the
// server's refusal of a connection without TLS, else err.
func ExplainTLS(err error) error {
	var already *TLSRequiredError
	if errors.As(err, &already) {
		return err
	}
	switch ErrNumber(err) {
	case ErrSecureTransportRequired, ErrSecureTransportRequiredMariaDB:
		return &TLSRequiredError{Err: err}
	}
	return err
}

// A CA, certificate or key file is re-read before every new connection
// (cert-manager renews them on the same mount; a rotated server CA or an
// expiring client certificate would otherwise fail every new connection
// until a restart). Connections already open keep the TLS they made.

// tlsReloader is one registered TLS configuration and its files.
type tlsReloader struct {
	files TLSFiles
	field string

	mu    sync.Mutex
	sum   [32]byte    // of the files' content cfg was built from
	cfg   *tls.Config // the last configuration that built
	loads int         // how often the files changed and were loaded (tests)
}

// tlsReloaders maps a registered TLS name (RegisterTLS) to its files.
var tlsReloaders sync.Map // string -> *tlsReloader

// contentSum hashes the files' content.
func (t TLSFiles) contentSum() ([32]byte, error) {
	h := sha256.New()
	for _, p := range []string{t.CAFile, t.CertFile, t.KeyFile} {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return [32]byte{}, err
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// current returns the configuration for a new connection: rebuilt when
// the files' content changed, else the last one. Files that cannot be read
// or do not build right now (a writer that does not swap them atomically)
// leave the last good configuration in use.
func (r *tlsReloader) current() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum, err := r.files.contentSum()
	if err != nil || sum == r.sum {
		return r.cfg
	}
	if c, err := r.files.Config(r.field); err == nil {
		r.cfg, r.sum = c, sum
		r.loads++
	}
	return r.cfg
}

// TLSReloads reports how often the TLS files registered under dsn's tls=
// name changed and were loaded again (for tests); -1 when none is.
func TLSReloads(dsn string) int {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return -1
	}
	v, ok := tlsReloaders.Load(cfg.TLSConfig)
	if !ok {
		return -1
	}
	r := v.(*tlsReloader)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loads
}

// reloadTLS is the part of a connect hook that gives the connection the
// current TLS files' configuration; nil when cfg's TLS has no files.
func reloadTLS(cfg *mysql.Config) func(*mysql.Config) {
	v, ok := tlsReloaders.Load(cfg.TLSConfig)
	if !ok {
		return nil
	}
	r := v.(*tlsReloader)
	return func(c *mysql.Config) {
		fresh := r.current()
		if c.TLS == nil || fresh == nil {
			return
		}
		name := c.TLS.ServerName // the DSN's host, as the driver set it, unless the options name one
		c.TLS = fresh.Clone()
		if c.TLS.ServerName == "" {
			c.TLS.ServerName = name
		}
	}
}

package mysqlx_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/internal/tlstest"
)

// TLS settings mend cannot use are refused before any connection, naming
// what is wrong; a usable one is registered and named by the DSN.
func TestTLSFilesRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	p := tlstest.NewPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	const dsn = "u:pw@tcp(db.example:3306)/mend"
	for _, tt := range []struct {
		name string
		dsn  string
		t    mysqlx.TLSFiles
		want string // "" : accepted
	}{
		{"CA", dsn, mysqlx.TLSFiles{CAFile: p.CA}, ""},
		{"CA, refining tls=true", dsn + "?tls=true", mysqlx.TLSFiles{CAFile: p.CA, MinVersion: "1.3"}, ""},
		{"client certificate", dsn, mysqlx.TLSFiles{CAFile: p.CA, CertFile: p.ClientCert, KeyFile: p.ClientKey}, ""},
		{"missing CA file", dsn, mysqlx.TLSFiles{CAFile: p.CA + ".gone"}, "CA file"},
		{"CA file without a certificate", dsn, mysqlx.TLSFiles{CAFile: notPEM}, "no PEM certificate"},
		{"certificate without key", dsn, mysqlx.TLSFiles{CertFile: p.ClientCert}, "both"},
		{"key of another certificate", dsn, mysqlx.TLSFiles{CertFile: p.ClientCert, KeyFile: p.ServerKey}, "client certificate"},
		{"min version", dsn, mysqlx.TLSFiles{CAFile: p.CA, MinVersion: "1.0"}, "1.2 or 1.3"},
		{"contradicts tls=skip-verify", dsn + "?tls=skip-verify", mysqlx.TLSFiles{CAFile: p.CA}, "tls=skip-verify"},
		{"contradicts tls=preferred", dsn + "?tls=preferred", mysqlx.TLSFiles{CAFile: p.CA}, "tls=preferred"},
		{"falls back to plain text", dsn + "?allowFallbackToPlaintext=true", mysqlx.TLSFiles{CAFile: p.CA}, "allowFallbackToPlaintext"},
		{"tls=true falls back to plain text", dsn + "?tls=true&allowFallbackToPlaintext=true", mysqlx.TLSFiles{CAFile: p.CA}, "allowFallbackToPlaintext"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mysqlx.RegisterTLS(tt.dsn, "dsn", tt.t)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, mend.ErrInvalid) {
					t.Fatalf("err = %v; want mend.ErrInvalid naming %q", err, tt.want)
				}
				if strings.Contains(err.Error(), "pw@") {
					t.Fatalf("the error shows the DSN: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := mysqlx.Config(got, mysqlx.Pool{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.TLS == nil || cfg.TLS.RootCAs == nil || cfg.TLS.InsecureSkipVerify || cfg.TLS.ServerName != "db.example" {
				t.Fatalf("TLS = %+v; want the CA, verification, and the DSN's host as server name", cfg.TLS)
			}
			if (tt.t.CertFile != "") != (len(cfg.TLS.Certificates) == 1) {
				t.Fatalf("client certificates = %d", len(cfg.TLS.Certificates))
			}
			if cfg.Passwd != "pw" || cfg.DBName != "mend" {
				t.Fatalf("the DSN changed beyond tls=: %s", cfg.FormatDSN())
			}
		})
	}
}

func TestRequireTLS(t *testing.T) {
	t.Parallel()
	p := tlstest.NewPKI(t)
	registered, err := mysqlx.RegisterTLS("u@tcp(h:1)/db", "dsn", mysqlx.TLSFiles{CAFile: p.CA})
	if err != nil {
		t.Fatal(err)
	}
	for dsn, ok := range map[string]bool{
		"u@tcp(h:1)/db":                                        false,
		"u@tcp(h:1)/db?tls=false":                              false,
		"u@tcp(h:1)/db?tls=preferred":                          false,
		"u@tcp(h:1)/db?tls=true":                               true,
		"u@tcp(h:1)/db?tls=skip-verify":                        false, // encrypted but not verified
		"u@tcp(h:1)/db?tls=true&allowFallbackToPlaintext=true": false,
		"u@unix(/run/mysqld.sock)/db":                          true,
		registered:                                             true,
	} {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if err := mysqlx.RequireTLS(cfg, "dsn"); (err == nil) != ok {
			t.Errorf("RequireTLS(%s) = %v; want ok=%v", dsn, err, ok)
		}
	}
}

// A DSN with TLS configured and allowFallbackToPlaintext=true is refused:
// against a server that offers no TLS (what a man in the middle presents)
// the driver would connect in plain text.
func TestRefuseDowngrade(t *testing.T) {
	t.Parallel()
	for dsn, refused := range map[string]bool{
		"u@tcp(h:1)/db?tls=true&allowFallbackToPlaintext=true":               true,
		"u@tcp(h:1)/db?tls=skip-verify&allowFallbackToPlaintext=true":        true,
		"u@tcp(h:1)/db?tls=true":                                             false,
		"u@tcp(h:1)/db?allowFallbackToPlaintext=true":                        false, // no TLS at all: RequireTLS's and doctor's
		"u@tcp(h:1)/db?tls=preferred":                                        false, // says it falls back: RequireTLS's
		"u@unix(/run/mysqld.sock)/db?tls=true&allowFallbackToPlaintext=true": false,
	} {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		err = mysqlx.RefuseDowngrade(cfg, "dsn")
		if (err != nil) != refused || (refused && !strings.Contains(err.Error(), "allowFallbackToPlaintext")) {
			t.Errorf("RefuseDowngrade(%s) = %v; want refused=%v", dsn, err, refused)
		}
	}
}

// A DSN file is re-read on every connect of a pool built from its DSN
// (the end-to-end rotation is cmd/mend's TestDSNFileRotation); a file
// that holds no DSN is refused without showing its content.
func TestDSNFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "dsn")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("u1:pw1@tcp(rotate.example:3306)/db\n")
	dsn, err := mysqlx.ReadDSNFile(file, "dsn")
	if err != nil || dsn != "u1:pw1@tcp(rotate.example:3306)/db" {
		t.Fatalf("ReadDSNFile = %q, %v; want the DSN without its newline", dsn, err)
	}
	cfg, err := mysqlx.Config(dsn, mysqlx.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the dial fails at once; the hook runs before it
	before := mysqlx.DSNFileReads(dsn)
	_, _ = connector.Connect(ctx)
	write("u2:pw2@tcp(rotate.example:3306)/db\n")
	_, _ = connector.Connect(ctx)
	if got := mysqlx.DSNFileReads(dsn) - before; got != 2 {
		t.Fatalf("file read %d times on 2 connects; want 2", got)
	}
	// Control: a pool from a DSN typed on the command line reads no file.
	if got := mysqlx.DSNFileReads("u1:pw1@tcp(elsewhere.example:3306)/db"); got != -1 {
		t.Fatalf("a DSN never read from a file has %d reads; want -1", got)
	}

	for content, want := range map[string]string{"": "does not hold a DSN", "s3cr3t-only\n": "does not hold a DSN"} {
		bad := filepath.Join(dir, "bad")
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := mysqlx.ReadDSNFile(bad, "dsn")
		if err == nil || !strings.Contains(err.Error(), want) || (content != "" && strings.Contains(err.Error(), "s3cr3t")) {
			t.Errorf("ReadDSNFile(%q) = %v; want %q without the content", content, err, want)
		}
	}
	if _, err := mysqlx.ReadDSNFile(filepath.Join(dir, "missing"), "dsn"); err == nil || !errors.Is(err, mend.ErrInvalid) {
		t.Errorf("missing file: %v", err)
	}
}

// copyFile writes src's content to dst, atomically (a rename, as the
// kubelet and cert-manager swap files).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// The CA, certificate and key files are re-read before each new
// connection of a running pool: a CA swapped for one that did not sign
// the server's certificate fails the next connection (unknown authority),
// swapped back it succeeds; a half-written key leaves the last good
// certificate in use. No restart, the same *sql.DB.
func TestTLSFilesReloaded(t *testing.T) {
	t.Parallel()
	srv := tlstest.Start(t, tlstest.NewPKI(t))
	p := srv.PKI
	srv.Admin(t,
		"CREATE DATABASE reload",
		"CREATE USER 'certuser'@'%' IDENTIFIED BY 'reload-pw' REQUIRE X509",
		"GRANT ALL ON reload.* TO 'certuser'@'%'",
	)
	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, p.CA, ca)
	copyFile(t, p.ClientCert, cert)
	copyFile(t, p.ClientKey, key)
	dsn, err := mysqlx.RegisterTLS(srv.DSN("certuser", "reload-pw", "reload"), "dsn",
		mysqlx.TLSFiles{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: tlstest.ServerName})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysqlx.Config(dsn, mysqlx.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxIdleConns(0) // every query a new connection, as after the server closed idle ones
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	}
	if err := ping(); err != nil {
		t.Fatalf("with the right CA and certificate: %v", err)
	}
	copyFile(t, p.OtherCA, ca)
	if err := ping(); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("after the CA file was swapped for another CA: %v; want unknown authority (the file re-read)", err)
	}
	copyFile(t, p.CA, ca)
	if err := ping(); err != nil {
		t.Fatalf("after the CA file was swapped back: %v", err)
	}
	if err := os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----\nhalf"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err != nil {
		t.Fatalf("with a half-written key the last good certificate must stay in use: %v", err)
	}
	if n := mysqlx.TLSReloads(dsn); n != 2 {
		t.Fatalf("TLS files loaded again %d times; want 2 (the other CA, the CA back)", n)
	}
}

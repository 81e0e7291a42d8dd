// Package tlstest gives tests a certificate authority of their own and a
// MySQL or MariaDB server (a container of the engine's test image) that
// presents a certificate from it and accepts only encrypted connections
// (require_secure_transport=ON).
//
// The server's certificate names only ServerName (no IP address), so a
// client that verifies against the address it dialled (127.0.0.1) is
// refused: a test must give the server name, as an operator behind a load
// balancer or a managed service's endpoint does.
package tlstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"database/sql/driver"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/dockerdb"
	"github.com/mendq/mend/internal/testserver"
)

// ServerName is the only name the server's certificate carries.
const ServerName = "mysql.test"

// PKI is a set of PEM files in Dir: a CA, a server certificate and a client
// certificate it signed, and a second, unrelated CA. The CA also signed two
// server certificates for ServerName outside their validity: one expired a
// day ago, one valid only from tomorrow (Start presents one when a test
// puts it in ServerCert and ServerKey).
type PKI struct {
	Dir                                 string
	CA                                  string // the CA that signed the server and client certificates
	OtherCA                             string // a CA that signed nothing here
	ServerCert, ServerKey               string
	ClientCert, ClientKey               string
	ExpiredServerCert, ExpiredServerKey string // NotAfter a day ago
	FutureServerCert, FutureServerKey   string // NotBefore a day from now
}

// NewPKI writes a fresh PKI into a new directory readable by a server in a
// container (the keys are test keys, made for this test only).
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &PKI{Dir: dir}
	ca, caKey := newCA(t, "mend test CA")
	p.CA = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	other, _ := newCA(t, "unrelated CA")
	p.OtherCA = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	p.ServerCert, p.ServerKey = newLeaf(t, dir, "server", ca, caKey, func(c *x509.Certificate) {
		c.DNSNames = []string{ServerName}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	p.ClientCert, p.ClientKey = newLeaf(t, dir, "client", ca, caKey, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
	p.ExpiredServerCert, p.ExpiredServerKey = newLeaf(t, dir, "server-expired", ca, caKey, func(c *x509.Certificate) {
		c.DNSNames = []string{ServerName}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	})
	p.FutureServerCert, p.FutureServerKey = newLeaf(t, dir, "server-future", ca, caKey, func(c *x509.Certificate) {
		c.DNSNames = []string{ServerName}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		c.NotBefore, c.NotAfter = time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour)
	})
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func template(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"mend tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

func newCA(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tmpl := template(cn)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func newLeaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, edit func(*x509.Certificate)) (certPath, keyPath string) {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	// 0644: the server in the container may run as another user.
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Server is a running server that accepts only TLS connections.
type Server struct {
	*dockerdb.Server
	PKI    *PKI
	Engine string
}

// Start runs the test image of the engine MEND_TEST_ENGINE names (MySQL by
// default) with p's server certificate, then turns
// require_secure_transport on. It skips the test when no Docker engine or
// image is there, and fails it instead when CI=true. The server is removed
// when the test ends.
func Start(t testing.TB, p *PKI) *Server {
	t.Helper()
	engine, _, err := testserver.Engine(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	skip := t.Skipf
	if ci, _ := strconv.ParseBool(os.Getenv(testserver.EnvCI)); ci {
		skip = t.Fatalf
	}
	if engine == testserver.EngineVitess {
		t.Skip("tlstest: vtgate's TLS is configured apart; these tests run on MySQL and MariaDB")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := dockerdb.Ping(ctx); err != nil {
		skip("tlstest: no Docker engine: %v", err)
	}
	image := testserver.LocalImage(engine)
	if ok, err := dockerdb.HasImage(image); image == "" || err != nil || !ok {
		skip("tlstest: no image %q for %s (bash scripts/build-test-image.sh %s builds it)", image, engine, engine)
	}
	srv, err := dockerdb.StartWith(ctx, image, dockerdb.Options{
		Args: []string{
			"--ssl-ca=/certs/" + filepath.Base(p.CA),
			"--ssl-cert=/certs/" + filepath.Base(p.ServerCert),
			"--ssl-key=/certs/" + filepath.Base(p.ServerKey),
		},
		Binds: []string{p.Dir + ":/certs:ro"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	// Started plain so the harness's readiness probe could connect; from
	// now on every new connection must be encrypted.
	root := srv.Config()
	db, err := sql.Open("mysql", root.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "SET GLOBAL require_secure_transport = ON"); err != nil {
		t.Fatal(err)
	}
	return &Server{Server: srv, PKI: p, Engine: engine}
}

// Admin runs statements as root over a verified TLS connection.
func (s *Server) Admin(t testing.TB, stmts ...string) {
	t.Helper()
	cfg := s.Config()
	cfg.TLS = s.clientTLS(t)
	db := sql.OpenDB(mustConnector(t, cfg))
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("tlstest: %s: %v", q, err)
		}
	}
}

// PresentedCertificate connects as root with TLS but without verifying the
// server's certificate, and returns the certificate the server presented:
// what a test that starts the server with a certificate a verifying client
// refuses (expired, not yet valid) checks it really serves.
func (s *Server) PresentedCertificate(t testing.TB) *x509.Certificate {
	t.Helper()
	var got *x509.Certificate
	cfg := s.Config()
	cfg.TLS = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12, // only to read the certificate
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				got = cs.PeerCertificates[0]
			}
			return nil
		}}
	db := sql.OpenDB(mustConnector(t, cfg))
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatalf("tlstest: connect without verifying the certificate: %v", err)
	}
	if got == nil {
		t.Fatal("tlstest: the server presented no certificate")
	}
	return got
}

// DSN is a DSN for user and password on database db, without any tls=.
func (s *Server) DSN(user, password, db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s", user, password, s.Addr(), db)
}

func (s *Server) clientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(s.PKI.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: roots, ServerName: ServerName, MinVersion: tls.VersionTLS12}
}

func mustConnector(t testing.TB, cfg *mysql.Config) driver.Connector {
	t.Helper()
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

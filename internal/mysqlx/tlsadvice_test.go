package mysqlx_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqlx"
)

// pki is an in-memory CA and the means to issue server certificates.
type pki struct {
	t    *testing.T
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestPKI(t *testing.T) *pki {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "advice CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &pki{t: t, ca: ca, key: key, pool: pool}
}

func (p *pki) leaf(edit func(*x509.Certificate)) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"db.test"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	edit(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// handshake runs a real TLS handshake between client and server over
// loopback TCP and returns the client's error (a read after it, for a
// refusal the server sends once the handshake is done, as TLS 1.3 does
// for a missing client certificate).
func handshake(t *testing.T, client, server *tls.Config) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, err := l.Accept()
		if err != nil {
			return
		}
		ss := tls.Server(s, server)
		_ = ss.SetDeadline(time.Now().Add(10 * time.Second))
		_ = ss.Handshake()
		_ = ss.Close()
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := tls.Client(c, client)
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	err = cc.Handshake()
	if err == nil {
		_, err = cc.Read(make([]byte, 1))
	}
	_ = c.Close()
	<-done
	return err
}

// Every TLS failure class, produced by a real handshake, gets advice
// naming the option that fixes it.
func TestTLSAdvice(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	other := newTestPKI(t)
	good := p.leaf(func(*x509.Certificate) {})
	client := func(edit func(*tls.Config)) *tls.Config {
		c := &tls.Config{RootCAs: p.pool, ServerName: "db.test", MinVersion: tls.VersionTLS12}
		edit(c)
		return c
	}
	server := func(cert tls.Certificate, edit func(*tls.Config)) *tls.Config {
		c := &tls.Config{Certificates: []tls.Certificate{cert}}
		edit(c)
		return c
	}
	none := func(*tls.Config) {}
	for _, tt := range []struct {
		class          string
		client, server *tls.Config
		option         string // what the advice must name
	}{
		{"unknown authority", client(func(c *tls.Config) { c.RootCAs = other.pool }), server(good, none), "--queue-dsn-tls-ca"},
		{"no IP SAN", client(func(c *tls.Config) { c.ServerName = "127.0.0.1" }), server(good, none), "--queue-dsn-tls-server-name"},
		{"name mismatch", client(func(c *tls.Config) { c.ServerName = "other.test" }), server(good, none), "--queue-dsn-tls-server-name"},
		{"expired", client(none), server(p.leaf(func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
		}), none), "renew"},
		{"not yet valid", client(none), server(p.leaf(func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour)
		}), none), "clock"},
		{"client certificate required", client(none), server(good, func(c *tls.Config) {
			c.ClientAuth, c.MinVersion = tls.RequireAnyClientCert, tls.VersionTLS13
		}), "--queue-dsn-tls-cert"},
		{"protocol version", client(func(c *tls.Config) { c.MinVersion = tls.VersionTLS13 }), server(good, func(c *tls.Config) {
			c.MaxVersion = tls.VersionTLS12
		}), "--queue-dsn-tls-min-version"},
	} {
		t.Run(tt.class, func(t *testing.T) {
			t.Parallel()
			err := handshake(t, tt.client, tt.server)
			if err == nil {
				t.Fatal("the handshake succeeded")
			}
			class, advice := mysqlx.TLSAdvice(err.Error(), "--queue-dsn")
			if class != tt.class || !strings.Contains(advice, tt.option) {
				t.Fatalf("%v: class %q, advice %q; want %q naming %q", err, class, advice, tt.class, tt.option)
			}
			if _, generic := mysqlx.TLSAdvice(err.Error(), ""); strings.Contains(generic, "%!") {
				t.Fatalf("advice without a flag is malformed: %q", generic)
			}
		})
	}
	// Control: an error that is no TLS failure gets none.
	if class, advice := mysqlx.TLSAdvice("dial tcp 127.0.0.1:1: connect: connection refused", "--dsn"); class != "" || advice != "" {
		t.Fatalf("a refused connection got TLS advice %q %q", class, advice)
	}
}

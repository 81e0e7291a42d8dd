package main

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/tlstest"
)

// Each TLS failure class gets, in doctor's fix and on the last line of
// migrate and run, the option that fixes it, never "check the address,
// user, password" (issue 45). Expired and not yet valid are servers of
// their own presenting such a certificate (MySQL and MariaDB load it and
// serve it; the subtest checks what was presented). The protocol version
// class is mysqlx's TestTLSAdvice alone, from real handshakes: the test
// image's OpenSSL cannot be made to offer only a version Go refuses.
func TestTLSFailureAdvice(t *testing.T) {
	t.Parallel()
	srv := tlstest.Start(t, tlstest.NewPKI(t))
	p := srv.PKI
	srv.Admin(t,
		"CREATE DATABASE mend_adv",
		"CREATE USER 'mend'@'%' IDENTIFIED BY 'adv-pw-1'",
		"GRANT ALL ON mend_adv.* TO 'mend'@'%'",
		"CREATE USER 'certuser'@'%' IDENTIFIED BY 'adv-pw-2' REQUIRE X509",
		"GRANT ALL ON mend_adv.* TO 'certuser'@'%'",
	)
	dsn := srv.DSN("mend", "adv-pw-1", "mend_adv")
	for _, tt := range []struct {
		name   string
		args   []string
		option string
	}{
		{"unknown authority", []string{"--dsn", dsn, "--dsn-tls-ca", p.OtherCA, "--dsn-tls-server-name", tlstest.ServerName}, "--dsn-tls-ca"},
		{"no IP SAN", []string{"--dsn", dsn, "--dsn-tls-ca", p.CA}, "--dsn-tls-server-name"},
		{"name mismatch", []string{"--dsn", dsn, "--dsn-tls-ca", p.CA, "--dsn-tls-server-name", "other.test"}, "--dsn-tls-server-name"},
		{"client certificate required", []string{"--dsn", srv.DSN("certuser", "adv-pw-2", "mend_adv"), "--dsn-tls-ca", p.CA,
			"--dsn-tls-server-name", tlstest.ServerName}, "--dsn-tls-cert"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := doctorChecks(t, tt.args...)["connect"]
			if c.Status != doctor.Fail || !strings.Contains(c.Fix, tt.option) {
				t.Fatalf("doctor connect = %+v; want a failure whose fix names %s", c, tt.option)
			}
			for _, cmd := range [][]string{{"migrate", "up"}, {"run", "--once", "--host-dsn", "same"}} {
				code, _, errOut := mendCmd(t, append(cmd, tt.args...)...)
				if code != exitFailure || !strings.Contains(errOut, tt.option) {
					t.Fatalf("mend %s: exit %d, %q; want exit 1 naming %s", cmd[0], code, errOut, tt.option)
				}
			}
		})
	}
	// A server presenting a certificate outside its validity: the advice
	// names the server's certificate setting or the clock.
	for _, tt := range []struct {
		name      string
		cert, key string
		option    string
		presented func(*x509.Certificate) bool
	}{
		{"expired", p.ExpiredServerCert, p.ExpiredServerKey, "ssl_cert", func(c *x509.Certificate) bool { return time.Now().After(c.NotAfter) }},
		{"not yet valid", p.FutureServerCert, p.FutureServerKey, "notBefore", func(c *x509.Certificate) bool { return time.Now().Before(c.NotBefore) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := *p
			q.ServerCert, q.ServerKey = tt.cert, tt.key
			s := tlstest.Start(t, &q)
			if c := s.PresentedCertificate(t); !tt.presented(c) {
				t.Fatalf("the server presented a certificate valid %s to %s; want it %s", c.NotBefore, c.NotAfter, tt.name)
			}
			args := []string{"--dsn", s.DSN("mend", "adv-pw-1", "mend_adv"), "--dsn-tls-ca", p.CA, "--dsn-tls-server-name", tlstest.ServerName}
			c := doctorChecks(t, args...)["connect"]
			if c.Status != doctor.Fail || !strings.Contains(c.Fix, tt.option) {
				t.Fatalf("doctor connect = %+v; want a failure whose fix names %s", c, tt.option)
			}
			for _, cmd := range [][]string{{"migrate", "up"}, {"run", "--once", "--host-dsn", "same"}} {
				code, _, errOut := mendCmd(t, append(cmd, args...)...)
				if code != exitFailure || !strings.Contains(errOut, tt.option) {
					t.Fatalf("mend %s: exit %d, %q; want exit 1 naming %s", cmd[0], code, errOut, tt.option)
				}
			}
		})
	}
	// Control: the same server and user with the right options connects.
	ok := []string{"--dsn", dsn, "--dsn-tls-ca", p.CA, "--dsn-tls-server-name", tlstest.ServerName}
	if code, _, errOut := mendCmd(t, append([]string{"migrate", "up"}, ok...)...); code != exitOK {
		t.Fatalf("control: migrate up with the right CA and name: exit %d: %s", code, errOut)
	}
	certOK := []string{"--dsn", srv.DSN("certuser", "adv-pw-2", "mend_adv"), "--dsn-tls-ca", p.CA, "--dsn-tls-server-name", tlstest.ServerName,
		"--dsn-tls-cert", p.ClientCert, "--dsn-tls-key", p.ClientKey}
	if code, _, errOut := mendCmd(t, append([]string{"migrate", "up"}, certOK...)...); code != exitOK {
		t.Fatalf("control: migrate up as certuser with its certificate: exit %d: %s", code, errOut)
	}
}

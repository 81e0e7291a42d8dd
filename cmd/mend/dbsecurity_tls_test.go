package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/tlstest"
)

// mendCmd runs the binary in-process with no environment.
func mendCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, &out, &errOut, func(string) string { return "" })
	return code, out.String(), errOut.String()
}

// doctorChecks runs doctor --json and returns its checks by name.
func doctorChecks(t *testing.T, args ...string) map[string]doctor.Check {
	t.Helper()
	code, out, errOut := mendCmd(t, append([]string{"doctor", "--json"}, args...)...)
	var report struct{ Checks []doctor.Check }
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("doctor exit %d: not JSON (%v): %s %s", code, err, out, errOut)
	}
	m := map[string]doctor.Check{}
	for _, c := range report.Checks {
		m[c.Name] = c
	}
	return m
}

// TestTLS connects mend to a server with a CA of the test's own that
// accepts only encrypted connections (require_secure_transport=ON). Each
// refusal is paired with the connection that differs from it in one
// option only and succeeds (its negative control), so a refusal cannot
// come from anything else being wrong.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := tlstest.Start(t, tlstest.NewPKI(t))
	p := srv.PKI
	srv.Admin(t,
		"CREATE DATABASE mend_tls",
		"CREATE USER 'mend'@'%' IDENTIFIED BY 'tls-pw-1'",
		"GRANT ALL ON mend_tls.* TO 'mend'@'%'",
		"CREATE USER 'certuser'@'%' IDENTIFIED BY 'tls-pw-2' REQUIRE X509",
		"GRANT ALL ON mend_tls.* TO 'certuser'@'%'",
	)
	dsn := srv.DSN("mend", "tls-pw-1", "mend_tls")
	verified := []string{"--dsn", dsn, "--dsn-tls-ca", p.CA, "--dsn-tls-server-name", tlstest.ServerName}
	if code, _, errOut := mendCmd(t, append([]string{"migrate", "up"}, verified...)...); code != exitOK {
		t.Fatalf("migrate up over verified TLS: exit %d: %s", code, errOut)
	}
	// connected reports whether doctor got past connecting, and the detail.
	connected := func(t *testing.T, args ...string) (bool, map[string]doctor.Check) {
		t.Helper()
		checks := doctorChecks(t, args...)
		c, failed := checks["connect"]
		return !failed || c.Status != doctor.Fail, checks
	}

	t.Run("verified connection works and doctor says so", func(t *testing.T) {
		ok, checks := connected(t, verified...)
		if !ok {
			t.Fatalf("verified connection refused: %+v", checks["connect"])
		}
		if c := checks["dsn tls"]; c.Status != doctor.OK || !strings.Contains(c.Detail, "verified") {
			t.Fatalf("dsn tls = %+v; want ok, encrypted and verified", c)
		}
		// Control: an encrypted but unverified session is reported as such.
		_, checks = connected(t, "--dsn", dsn+"?tls=skip-verify")
		if c := checks["dsn tls"]; c.Status != doctor.Warn || !strings.Contains(c.Detail, "not verified") {
			t.Fatalf("dsn tls with tls=skip-verify = %+v; want a warning that the certificate is not verified", c)
		}
	})

	t.Run("wrong CA refused", func(t *testing.T) {
		ok, checks := connected(t, "--dsn", dsn, "--dsn-tls-ca", p.OtherCA, "--dsn-tls-server-name", tlstest.ServerName)
		if ok || !strings.Contains(checks["connect"].Detail, "unknown authority") {
			t.Fatalf("a CA that signed nothing: connect = %+v; want refused for an unknown authority", checks["connect"])
		}
		if ok, checks := connected(t, verified...); !ok {
			t.Fatalf("control, the right CA: %+v", checks["connect"])
		}
	})

	t.Run("wrong server name refused", func(t *testing.T) {
		for name, want := range map[string]string{
			"wrong.test": "certificate is valid for " + tlstest.ServerName + ", not wrong.test",
			"":           "cannot validate certificate for 127.0.0.1", // the address, which the certificate does not name
		} {
			args := []string{"--dsn", dsn, "--dsn-tls-ca", p.CA}
			if name != "" {
				args = append(args, "--dsn-tls-server-name", name)
			}
			ok, checks := connected(t, args...)
			if ok || !strings.Contains(checks["connect"].Detail, want) {
				t.Fatalf("server name %q: connect = %+v; want refused with %q", name, checks["connect"], want)
			}
		}
		if ok, checks := connected(t, verified...); !ok {
			t.Fatalf("control, the certificate's name: %+v", checks["connect"])
		}
	})

	t.Run("client certificate required and given", func(t *testing.T) {
		certDSN := srv.DSN("certuser", "tls-pw-2", "mend_tls")
		base := []string{"--dsn", certDSN, "--dsn-tls-ca", p.CA, "--dsn-tls-server-name", tlstest.ServerName}
		ok, checks := connected(t, base...)
		if ok || !strings.Contains(checks["connect"].Detail, "access denied") {
			t.Fatalf("REQUIRE X509 user without a certificate: connect = %+v; want access denied", checks["connect"])
		}
		ok, checks = connected(t, append(base, "--dsn-tls-cert", p.ClientCert, "--dsn-tls-key", p.ClientKey)...)
		if !ok {
			t.Fatalf("with the client certificate: %+v", checks["connect"])
		}
		if c := checks["dsn tls"]; c.Status != doctor.OK {
			t.Fatalf("dsn tls = %+v", c)
		}
	})

	t.Run("plain connection refused with the fix named", func(t *testing.T) {
		code, _, errOut := mendCmd(t, "migrate", "up", "--dsn", dsn)
		if code != exitFailure || !strings.Contains(errOut, "tls=true") || !strings.Contains(errOut, "--dsn-tls-ca") {
			t.Fatalf("plain connection: exit %d, %q; want exit 1 naming tls=true and --dsn-tls-ca", code, errOut)
		}
		if ok, checks := connected(t, "--dsn", dsn); ok || !strings.Contains(checks["connect"].Detail, "tls=true") {
			t.Fatalf("doctor, plain connection: %+v; want the fix named", checks["connect"])
		}
		// Control: a refusal for another reason (a wrong password over TLS)
		// does not send the operator after TLS.
		code, _, errOut = mendCmd(t, "migrate", "up", "--dsn", srv.DSN("mend", "not-the-password", "mend_tls"),
			"--dsn-tls-ca", p.CA, "--dsn-tls-server-name", tlstest.ServerName)
		if code != exitFailure || strings.Contains(errOut, "tls=true") || !strings.Contains(errOut, "access denied") {
			t.Fatalf("wrong password over TLS: exit %d, %q; want access denied without the TLS hint", code, errOut)
		}
		if code, _, errOut := mendCmd(t, append([]string{"migrate", "up"}, verified...)...); code != exitOK {
			t.Fatalf("control, the same DSN over TLS: exit %d: %s", code, errOut)
		}
	})

	t.Run("require-tls refuses a pool that may be plain", func(t *testing.T) {
		for _, d := range []string{dsn, dsn + "?tls=preferred", dsn + "?tls=false", dsn + "?tls=skip-verify"} {
			code, _, errOut := mendCmd(t, "doctor", "--require-tls", "--dsn", d)
			if code != exitUsage || !strings.Contains(errOut, "--require-tls: --dsn") {
				t.Fatalf("--require-tls with %s: exit %d, %q; want exit 2 naming --dsn", d, code, errOut)
			}
		}
		code, _, errOut := mendCmd(t, append([]string{"run", "--once", "--require-tls", "--host-dsn", dsn}, verified...)...)
		if code != exitUsage || !strings.Contains(errOut, "--require-tls: --host-dsn") {
			t.Fatalf("run --require-tls with a plain --host-dsn: exit %d, %q; want exit 2 naming --host-dsn", code, errOut)
		}
		// Control: the verified DSN passes the check and connects.
		code, _, errOut = mendCmd(t, append([]string{"migrate", "up", "--require-tls"}, verified...)...)
		if code != exitOK {
			t.Fatalf("--require-tls with a verified DSN: exit %d: %s", code, errOut)
		}
	})
}

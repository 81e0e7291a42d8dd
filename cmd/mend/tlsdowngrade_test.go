package main

import (
	"strings"
	"testing"

	"github.com/mendq/mend/internal/tlstest"
)

// With TLS configured, a DSN that could fall back to plain text is refused
// before any connection, by every command, --require-tls or not; and
// --require-tls means verified: tls=skip-verify does not satisfy it. Each
// refusal is paired with the DSN without the offending part (accepted, so
// the refusal comes from that part alone).
func TestTLSDowngradeRefused(t *testing.T) {
	t.Parallel()
	p := tlstest.NewPKI(t)
	const dsn = "u:pw@tcp(127.0.0.1:1)/mend" // nothing listens: an accepted DSN fails to connect, exit 1
	for _, tt := range []struct {
		name    string
		args    []string
		refused string // "": accepted (exit 1: cannot connect)
	}{
		{"tls=true with fallback", []string{"--dsn", dsn + "?tls=true&allowFallbackToPlaintext=true"}, "allowFallbackToPlaintext"},
		{"control: tls=true", []string{"--dsn", dsn + "?tls=true"}, ""},
		{"CA option with fallback", []string{"--dsn", dsn + "?allowFallbackToPlaintext=true", "--dsn-tls-ca", p.CA}, "allowFallbackToPlaintext"},
		{"control: CA option", []string{"--dsn", dsn, "--dsn-tls-ca", p.CA}, ""},
		{"skip-verify with fallback", []string{"--dsn", dsn + "?tls=skip-verify&allowFallbackToPlaintext=true"}, "allowFallbackToPlaintext"},
		{"require-tls with skip-verify", []string{"--require-tls", "--dsn", dsn + "?tls=skip-verify"}, "does not verify"},
		{"control: require-tls with tls=true", []string{"--require-tls", "--dsn", dsn + "?tls=true"}, ""},
		{"queue dsn with fallback", []string{"--dsn", dsn + "?tls=true", "--queue-dsn", dsn + "?tls=true&allowFallbackToPlaintext=true"}, "--queue-dsn"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, cmd := range [][]string{{"doctor", "--timeout=5s"}, {"migrate", "up", "--timeout=5s"}, {"status", "--timeout=5s"}} {
				if cmd[0] != "doctor" && strings.Contains(strings.Join(tt.args, " "), "--queue-dsn") && cmd[0] == "migrate" {
					continue // migrate has no --queue-dsn
				}
				code, _, errOut := mendCmd(t, append(cmd, tt.args...)...)
				if tt.refused != "" {
					if code != exitUsage || !strings.Contains(errOut, tt.refused) {
						t.Fatalf("mend %s %v: exit %d, %q; want exit 2 naming %q", cmd[0], tt.args, code, errOut, tt.refused)
					}
					if strings.Contains(errOut, "pw@") {
						t.Fatalf("the error shows the DSN's password: %s", errOut)
					}
					continue
				}
				if code == exitUsage {
					t.Fatalf("mend %s %v: exit 2, %q; want it accepted (exit 1, nothing listens)", cmd[0], tt.args, errOut)
				}
			}
		})
	}
}

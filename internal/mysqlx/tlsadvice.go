package mysqlx

import (
	"fmt"
	"strings"
)

// TLS failure classes, each with what fixes it. The driver returns the
// crypto/tls and crypto/x509 errors of the handshake as they are (the
// types are lost behind its own wrapping in some paths), so the class is
// read from their text, which Go has kept stable for years.
var tlsClasses = []struct {
	class, marker, advice string
}{
	{"unknown authority", "certificate signed by unknown authority",
		"the server's certificate is signed by a CA mend does not trust: give that CA's PEM file with %[1]s-tls-ca (for a managed service, its CA bundle)"},
	{"no IP SAN", "doesn't contain any IP SANs",
		"the DSN connects to an IP address and the server's certificate names no IP address: give the name the certificate carries with %[1]s-tls-server-name, or put that name in the DSN instead of the address"},
	{"name mismatch", "certificate is valid for",
		"the server's certificate does not carry the DSN's host: give the name it carries with %[1]s-tls-server-name, or connect by that name"},
	{"name mismatch", "certificate is not valid for any names",
		"the server's certificate carries no name: reissue it with the server's name (and %[1]s-tls-server-name if the DSN uses an address)"},
	{"expired", "certificate has expired or is not yet valid: current time", ""}, // split below by after/before
	{"client certificate required", "certificate required",
		"the server requires a client certificate: give it with %[1]s-tls-cert and its key with %[1]s-tls-key"},
	{"protocol version", "protocol version",
		"mend and the server share no TLS version: mend accepts TLS 1.2 and 1.3 (%[1]s-tls-min-version raises the floor to 1.3); enable TLSv1.2 or TLSv1.3 on the server (tls_version)"},
	{"protocol version", "no supported versions satisfy MinVersion and MaxVersion",
		"mend and the server share no TLS version: lower %[1]s-tls-min-version to 1.2, or enable TLSv1.3 on the server (tls_version)"},
}

// TLSAdvice returns the class of the TLS failure msg reports and what to
// change, naming flag's TLS options (flag is "--dsn", "--host-dsn" or
// "--queue-dsn"; "" names the option of every DSN). Both are "" when msg
// is no TLS failure mend knows.
func TLSAdvice(msg, flag string) (class, advice string) {
	opt := flag
	if opt == "" {
		opt = "--dsn"
	}
	for _, c := range tlsClasses {
		if !strings.Contains(msg, c.marker) {
			continue
		}
		class, advice = c.class, c.advice
		if c.class == "expired" {
			if strings.Contains(msg, " is before ") {
				class, advice = "not yet valid", "the server's certificate is not valid yet: check this host's clock and the server's (NTP), or the certificate's start date (notBefore)"
			} else {
				advice = "the server's certificate has expired: renew it on the server (ssl_cert, then ALTER INSTANCE RELOAD TLS on MySQL or FLUSH SSL on MariaDB); if it was renewed, check this host's clock"
			}
		}
		if strings.Contains(advice, "%[1]s") {
			advice = fmt.Sprintf(advice, opt)
		}
		if flag == "" && strings.Contains(advice, "--dsn-tls-") {
			advice += " (--host-dsn-tls-… and --queue-dsn-tls-… for the host's databases)"
		}
		return class, advice
	}
	return "", ""
}

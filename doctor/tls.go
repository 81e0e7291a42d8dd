package doctor

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqlx"
)

// tlsCheck is doctor's report of whether a session of db is encrypted,
// and how verified: ok for a verified TLS session, warn for a plain one or
// one whose certificate is not checked (tls=skip-verify or preferred).
func tlsCheck(ctx context.Context, db *sql.DB, cfg *mysql.Config, label string) Check {
	name := label + " tls"
	cipher, err := mysqlx.SessionCipher(ctx, db)
	switch {
	case err != nil:
		return Check{Name: name, Status: Warn, Detail: "cannot read Ssl_cipher: " + err.Error()}
	case cipher == "" && cfg.Net == "unix":
		return Check{Name: name, Status: OK, Detail: "not encrypted: a Unix socket, which never leaves this host"}
	case cipher == "":
		return Check{Name: name, Status: Warn, Detail: "the session is NOT encrypted: the password and every row cross the network in plain text",
			Fix: "add tls=true to the DSN (or the --*-tls-ca option with the server's CA), and --require-tls to mend run"}
	case cfg.TLS != nil && cfg.TLS.InsecureSkipVerify:
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("encrypted (%s) but the server's certificate is not verified (tls=%s): anyone on the path can pose as the server", cipher, cfg.TLSConfig),
			Fix: "give the server's CA with the --*-tls-ca option instead of tls=" + cfg.TLSConfig}
	}
	return Check{Name: name, Status: OK, Detail: fmt.Sprintf("encrypted (%s), the server's certificate verified", cipher)}
}

// PlainDeniedHint is what "access denied" may also mean on a connection
// without TLS: MariaDB answers a plain connection under
// require_secure_transport=ON with error 1045, not with MySQL's 3159. ""
// when cfg connects with TLS or over a Unix socket.
func PlainDeniedHint(cfg *mysql.Config) string {
	if cfg.TLS != nil || cfg.Net == "unix" {
		return ""
	}
	return "; or the server accepts only encrypted connections (MariaDB refuses a plain connection under require_secure_transport=ON" +
		" with access denied): add tls=true to the DSN, or give the server's CA with --dsn-tls-ca (--host-dsn-tls-ca, --queue-dsn-tls-ca)"
}

// NoCertHint is what "access denied" may also mean on a TLS connection
// without a client certificate: a user created REQUIRE X509 (SUBJECT,
// ISSUER) is refused with the same error as a wrong password.
func NoCertHint(flag string) string {
	hint := "; or the user requires a client certificate (REQUIRE X509, SUBJECT or ISSUER): give it with " + flag + "-tls-cert and " + flag + "-tls-key"
	if flag == "--dsn" {
		hint += " (--host-dsn-tls-…, --queue-dsn-tls-… for the host's databases)"
	}
	return hint
}

// connectFix is doctor's fix for a failed connection of the DSN flag
// gives: for a TLS failure, the option or file that fixes it.
func connectFix(err error, cfg *mysql.Config, flag string) string {
	if _, advice := mysqlx.TLSAdvice(err.Error(), flag); advice != "" {
		return advice
	}
	if mysqlx.ErrNumber(err) == 1045 && cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetClientCertificate == nil {
		return "check the user and password" + NoCertHint(flag)
	}
	return "check the address, user, password and that the database exists"
}

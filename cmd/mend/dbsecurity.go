package main

// This file gives every DSN flag (--dsn, --host-dsn, --queue-dsn) its
// companions: a file to read the DSN from (re-read on every new
// connection, so a rotated password needs no restart) and the TLS options a
// DSN's tls= cannot express (a private CA, a client certificate, a server
// name, a minimum version); --require-tls refuses a DSN whose connections
// would not all be encrypted. It also gives doctor its per-pool TLS check.

import (
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqlx"
)

// dsnFlags are the flags holding a DSN, in the order they are resolved.
var dsnFlags = []string{"dsn", "host-dsn", "queue-dsn"}

// tlsFlagSuffixes are each DSN flag's TLS companions, with their help.
var tlsFlagSuffixes = []struct{ suffix, help string }{
	{"-tls-ca", "PEM file of the CA that signed the server's certificate (implies a verified TLS connection; re-read when it changes)"},
	{"-tls-cert", "PEM file of the client certificate, for a user created with REQUIRE X509 or REQUIRE SUBJECT"},
	{"-tls-key", "PEM file of the client certificate's key"},
	{"-tls-server-name", "name the server's certificate must carry (default: the DSN's host)"},
	{"-tls-min-version", "lowest TLS version accepted: 1.2 or 1.3 (default 1.2)"},
}

// addDBSecurityFlags adds the companions of every DSN flag f has, and
// --require-tls when it has any. Called once per command, after the
// command defined its own flags.
func (f *flags) addDBSecurityFlags() {
	has := false
	for _, name := range dsnFlags {
		if f.Lookup(name) == nil {
			continue
		}
		has = true
		f.String(name+"-file", "", "read --"+name+" from this file (a mounted secret); re-read before every new connection, so a rotated\nuser or password is used without a restart (the address, database and parameters are read once)")
		if !hasEnvTwin(f.Lookup(name)) {
			// A flag kept off the environment (demo's --dsn: it drops
			// databases) keeps its file off it too: an exported
			// MEND_DSN_FILE must not send it to production either.
			f.cmdLineOnly(name + "-file")
		}
		for _, s := range tlsFlagSuffixes {
			f.String(name+s.suffix, "", s.help+" for --"+name)
		}
	}
	if has {
		f.Bool("require-tls", false, "refuse to start when a database connection would not be encrypted and verified (no tls= in its DSN,\ntls=preferred, tls=skip-verify, no TLS option): every DSN needs tls=true or a --*-tls-ca")
	}
}

// applyDBSecurity runs after the flags and their twins are parsed: each
// DSN flag is read from its file when one is given, gets its TLS options
// registered with the driver, and is checked against --require-tls. The
// flag's value becomes the DSN to use, so every command and package that
// reads it sees the result.
func (f *flags) applyDBSecurity() error {
	for _, name := range dsnFlags {
		fl := f.Lookup(name)
		if fl == nil {
			continue
		}
		if f.given(name + "-file") {
			if f.given(name) {
				return usagef("give --%s or --%s-file, not both", name, name)
			}
			// The scrubber learns the DSN read now and every rotated one
			// a later connect re-reads (issue 47: a rotated password was
			// never added).
			dsn, err := mysqlx.ReadDSNFile(f.str(name+"-file"), name, f.a.scrub.addDSN)
			if err != nil {
				return usagef("--%s-file: %v", name, err)
			}
			if err := fl.Value.Set(dsn); err != nil {
				return err
			}
			if f.fromFile == nil {
				f.fromFile = map[string]bool{}
			}
			f.fromFile[name] = true // given(name) from here on, as --name would be
		}
		t := mysqlx.TLSFiles{
			CAFile: f.str(name + "-tls-ca"), CertFile: f.str(name + "-tls-cert"), KeyFile: f.str(name + "-tls-key"),
			ServerName: f.str(name + "-tls-server-name"), MinVersion: f.str(name + "-tls-min-version"),
		}
		dsn := fl.Value.String()
		if t.IsZero() {
			continue
		}
		if dsn == "" || dsn == hostDSNSame {
			return usagef("--%s-tls-* options given without --%s (with --host-dsn=%s the host uses --dsn's TLS options)", name, name, hostDSNSame)
		}
		dsn, err := mysqlx.RegisterTLS(dsn, name, t)
		if err != nil {
			return usagef("--%s: %v", name, err)
		}
		if err := fl.Value.Set(dsn); err != nil {
			return err
		}
	}
	for _, name := range dsnFlags {
		dsn := f.str(name)
		if dsn == "" || dsn == hostDSNSame {
			continue
		}
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			continue // the command reports an unparsable DSN itself
		}
		if doctor.PlainDeniedHint(cfg) != "" {
			f.a.plainDB = true
		}
		if cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 {
			f.a.tlsNoCert = true
		}
		// With TLS configured, nothing may fall back to plain text,
		// --require-tls or not (issue 45).
		if err := mysqlx.RefuseDowngrade(cfg, name); err != nil {
			return usagef("--%s %s", name, strings.TrimPrefix(err.Error(), "mend: TLS for "+name+": "))
		}
	}
	if fl := f.Lookup("require-tls"); fl != nil && fl.Value.String() == "true" {
		for _, name := range dsnFlags {
			dsn := f.str(name)
			if dsn == "" || dsn == hostDSNSame {
				continue
			}
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				continue // the command reports an unparsable DSN itself
			}
			if err := mysqlx.RequireTLS(cfg, name); err != nil {
				return usagef("--require-tls: --%s %s", name, strings.TrimPrefix(err.Error(), "mend: TLS for "+name+": "))
			}
		}
	}
	return nil
}

// str is a flag's value as a string, "" when f has no such flag.
func (f *flags) str(name string) string {
	if fl := f.Lookup(name); fl != nil {
		return fl.Value.String()
	}
	return ""
}

// explainTLS adds to a connection error what to change when the server
// may have refused it for want of TLS, or the TLS handshake failed (an
// unknown CA, a name mismatch, an expired certificate, ...: the option or
// file that fixes it).
func (a *app) explainTLS(err error) error {
	if e := mysqlx.ExplainTLS(err); e != err {
		return e
	}
	if _, advice := mysqlx.TLSAdvice(err.Error(), ""); advice != "" {
		return fmt.Errorf("%w (fix: %s)", err, advice)
	}
	if a.plainDB && mysqlx.ErrNumber(err) == 1045 {
		return fmt.Errorf("%w%s", err, doctor.PlainDeniedHint(&mysql.Config{}))
	}
	if a.tlsNoCert && mysqlx.ErrNumber(err) == 1045 {
		return fmt.Errorf("%w%s", err, doctor.NoCertHint("--dsn"))
	}
	return err
}

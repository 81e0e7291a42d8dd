package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// The console's exposure rules are refused as usage errors before any
// database is opened.
func TestConsoleRefusesUnsafeSetups(t *testing.T) {
	t.Parallel()
	const dsn = "u:pw-7f3a9@tcp(127.0.0.1:1)/mend"
	hashFile := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(hashFile, []byte("alice:plaintext\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shortSecret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(shortSecret, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"actions without auth", []string{"--allow-actions"}, nil, "--allow-actions needs --auth-file or --auth-header"},
		{"proxy header beyond loopback", []string{"--auth-header", "X-Forwarded-User", "--listen", "0.0.0.0:8089"}, nil, "bind --listen to loopback"},
		{"both auth kinds", []string{"--auth-header", "X-User", "--auth-file", hashFile}, nil, "choose one"},
		{"auth file without bcrypt", []string{"--auth-file", hashFile}, nil, "not a bcrypt hash"},
		{"bad listen", []string{"--listen", "8089"}, nil, "want host:port"},
		// Issue 46: any local process (or a rebound web page) reaches loopback and sets a header.
		{"proxy header without its secret", []string{"--auth-header", "X-Forwarded-User"}, nil, "--auth-header needs --auth-secret-file"},
		{"proxy secret too short", []string{"--auth-header", "X-Forwarded-User", "--auth-secret-file", shortSecret}, nil, "at least 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			args := append([]string{"console", "--dsn", dsn}, tc.args...)
			code := Main(context.Background(), args, &out, &errOut, func(k string) string { return tc.env[k] })
			if code != exitUsage || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("mend %v: exit %d, stderr %q; want exit %d and %q", args, code, errOut.String(), exitUsage, tc.want)
			}
			if strings.Contains(errOut.String(), "pw-7f3a9") {
				t.Errorf("stderr shows the DSN's password: %q", errOut.String())
			}
		})
	}
	// --allow-actions has no environment twin: MEND_ALLOW_ACTIONS=true
	// without auth is not refused as actions-without-auth; the command goes
	// on to open the (unreachable) database and fails there.
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"console", "--dsn", dsn}, &out, &errOut,
		func(k string) string { return map[string]string{"MEND_ALLOW_ACTIONS": "true"}[k] })
	if code != exitFailure || strings.Contains(errOut.String(), "--allow-actions needs") {
		t.Errorf("MEND_ALLOW_ACTIONS=true: exit %d, stderr %q; want the env ignored (exit %d opening the database)", code, errOut.String(), exitFailure)
	}
	if !strings.HasPrefix(consoleListenDefault, "127.0.0.1:") {
		t.Errorf("the default listen address %q is not loopback", consoleListenDefault)
	}
}

// The Host names mend console answers: the listen address, its loopback
// spellings, and the external names.
func TestConsoleHosts(t *testing.T) {
	t.Parallel()
	got := strings.Join(consoleHosts("127.0.0.1:8089", []string{"mend.example.com"}), " ")
	if want := "127.0.0.1:8089 localhost:8089 127.0.0.1:8089 [::1]:8089 mend.example.com"; got != want {
		t.Errorf("consoleHosts = %q, want %q", got, want)
	}
	if got := strings.Join(consoleHosts("10.0.0.5:8089", nil), " "); got != "10.0.0.5:8089" {
		t.Errorf("consoleHosts(10.0.0.5:8089) = %q", got)
	}
}

// TestConsoleHealth: the console's health line runs mend doctor's checks of
// mend's database (package doctor) as the console's user, without the
// grants check (the console's user may be read-only by design). A migrated
// database passes them; one without mend's tables fails its schema check.
func TestConsoleHealth(t *testing.T) {
	t.Parallel()
	byName := func(checks []doctor.Check) map[string]doctor.Check {
		m := map[string]doctor.Check{}
		for _, c := range checks {
			m[c.Name] = c
		}
		return m
	}
	ok := byName(consoleHealth(mysqltest.NewDB(t, migrations.Up).DSN)(t.Context()))
	if _, has := ok["grants"]; has {
		t.Errorf("the console's health line has the grants check: %+v", ok["grants"])
	}
	for _, name := range []string{"connect", "server", "schema", "sql_mode", "identity columns", "time zone"} {
		if c, has := ok[name]; !has && name != "connect" {
			t.Errorf("no %q check in the console's health: %+v", name, ok)
		} else if has && c.Status == doctor.Fail {
			t.Errorf("%s fails on a migrated database: %+v", name, c)
		}
	}
	empty := byName(consoleHealth(mysqltest.NewDB(t).DSN)(t.Context()))
	if c := empty["schema"]; c.Status != doctor.Fail {
		t.Errorf("schema on a database without mend's tables = %+v; want a failure", c)
	}
}

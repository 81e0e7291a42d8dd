package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"
)

func TestScrubberAndRedactDSN(t *testing.T) {
	t.Parallel()
	const dsn = `mend:hunter2"x@tcp(db.internal:3306)/mend?parseTime=true`
	s := &scrubber{}
	s.addDSN(dsn)
	for _, in := range []string{
		"connect with " + dsn,
		`driver said: access denied (password hunter2"x)`,
		`quoted: "hunter2\"x"`,
	} {
		if got := s.clean(in); strings.Contains(got, "hunter2") {
			t.Errorf("clean(%q) = %q; the password survived", in, got)
		}
	}
	got := redactDSN(dsn)
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "mend:"+redacted+"@tcp(db.internal:3306)/mend") {
		t.Errorf("redactDSN = %q; want the user and address kept and the password replaced", got)
	}
	if got := redactDSN("not a dsn at all ::: secret"); strings.Contains(got, "secret") {
		t.Errorf("redactDSN(unparsable) = %q; want nothing of it shown", got)
	}
	if got := (&scrubber{}).clean("nothing to hide"); got != "nothing to hide" {
		t.Errorf("an empty scrubber changed the text: %q", got)
	}
}

func TestLoggerScrubsEveryAttribute(t *testing.T) {
	t.Parallel()
	s := &scrubber{}
	s.addDSN("u:pa55@tcp(127.0.0.1:3306)/db")
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log := newLogger(&buf, format, 0, s).With("component", "test", "dsn", "u:pa55@tcp(127.0.0.1:3306)/db")
		log.Info("message with pa55", "err", errors.New("wrapped pa55"), "group", map[string]string{"k": "v"})
		if strings.Contains(buf.String(), "pa55") {
			t.Errorf("%s log leaked the password: %s", format, buf.String())
		}
		if format == "json" && !json.Valid(bytes.TrimSpace(buf.Bytes())) {
			t.Errorf("json log line is not JSON: %s", buf.String())
		}
	}
}

func TestEnvTwins(t *testing.T) {
	t.Parallel()
	if got := envName("lease-ttl"); got != "MEND_LEASE_TTL" {
		t.Fatalf("envName(lease-ttl) = %q", got)
	}
	env := map[string]string{"MEND_DSN": "env:x@tcp(h:1)/envdb", "MEND_LOG_LEVEL": "debug"}
	a := &app{getenv: func(k string) string { return env[k] }, scrub: &scrubber{}, flagsOf: map[*cobra.Command]*flags{}}
	f := a.newCommand("x", "", "", withDSN|withLog)
	if err := f.Parse([]string{"--dsn", "flag@tcp(h:1)/flagdb"}); err != nil {
		t.Fatal(err)
	}
	if err := f.applyEnv(); err != nil {
		t.Fatal(err)
	}
	if f.dsn != "flag@tcp(h:1)/flagdb" || f.logLevel != "debug" {
		t.Fatalf("dsn %q level %q; want the flag's DSN and the environment's level", f.dsn, f.logLevel)
	}
	if a.scrub.clean("env:x@tcp(h:1)/envdb") == "env:x@tcp(h:1)/envdb" {
		t.Fatal("a DSN from the environment was not registered as a secret")
	}
}

func TestWithLockWait(t *testing.T) {
	t.Parallel()
	got := withLockWait("u@tcp(h:1)/db", 15*time.Second)
	cfg, err := mysql.ParseDSN(got)
	if err != nil || cfg.Params[lockWaitParam] != "5" {
		t.Fatalf("withLockWait = %q (%v); want innodb_lock_wait_timeout=5", got, err)
	}
	kept := "u@tcp(h:1)/db?innodb_lock_wait_timeout=2"
	if got := withLockWait(kept, 15*time.Second); got != kept {
		t.Fatalf("withLockWait overrode the DSN's own setting: %q", got)
	}
	if defaultLockWait(time.Second) != 1 {
		t.Fatal("a short TTL must still give a lock wait of at least 1 s")
	}
}

func TestMainUsage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	getenv := func(string) string { return "" }
	if code := Main(context.Background(), nil, &out, &errOut, getenv); code != exitUsage || !strings.Contains(out.String(), "mend [command]") {
		t.Fatalf("no args: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"run", "-h"}, &out, &errOut, getenv); code != exitOK || !strings.Contains(out.String(), "-lease-ttl") {
		t.Fatalf("run -h: exit %d, %q", code, out.String())
	}
}

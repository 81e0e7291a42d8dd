package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/mendq/mend/storage"
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

// TestRunRefusesBeforeConnecting: what mend run would write on every
// pass (its holder, its wake-up topic) and the lease TTL the lock waits
// derive from are checked before anything is connected (the DSN points
// nowhere): exit 2, naming the flag. Doctor accepts exactly the TTLs run
// accepts. Before, an invalid UTF-8 holder started a daemon that logged
// "invalid holder" every pass, and a bad wake topic exited 1 after
// connecting.
func TestRunRefusesBeforeConnecting(t *testing.T) {
	t.Parallel()
	const nowhere = "u:sekrit9@tcp(127.0.0.1:1)/db"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--once", "--dsn", nowhere, "--host-dsn", "same", "--holder", "h\xff"}, "--holder"},
		{[]string{"run", "--once", "--dsn", nowhere, "--host-dsn", "same", "--wake-topic", "t\xff"}, "--wake-topic"},
		{[]string{"run", "--once", "--dsn", nowhere, "--host-dsn", "same", "--wake-topic", strings.Repeat("w", 256)}, "--wake-topic"},
		{[]string{"run", "--once", "--dsn", nowhere, "--host-dsn", "same", "--lease-ttl", "1s"}, "--lease-ttl"},
		{[]string{"run", "--once", "--dsn", nowhere, "--host-dsn", "same", "--cluster-concurrency", "5000"}, "--cluster-concurrency"},
		{[]string{"doctor", "--dsn", nowhere, "--lease-ttl", "1s"}, "--lease-ttl"},
		{[]string{"run", "--once", "--dsn", nowhere + "?%60sql_mode%60=%27%27", "--host-dsn", "same"}, "sql_mode"},
		{[]string{"run", "--once", "--dsn", nowhere, "--host-dsn", nowhere + "?charset=gbk"}, "charset"},
		{[]string{"run", "--once", "--dsn", nowhere, "--host-dsn", "same", "--queue-dsn", nowhere + "?multiStatements=true"}, "--queue-dsn"},
	} {
		args := tt.args
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, &out, &errOut, func(string) string { return "" })
		if code != exitUsage || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("mend %s: exit %d, %q; want exit %d naming %s", strings.Join(args, " "), code, errOut.String(), exitUsage, tt.want)
		}
	}
	// Every TTL run accepts gives a lock wait below it, as doctor checks.
	for _, ttl := range []time.Duration{storage.MinLeaseTTL, 2500 * time.Millisecond, 15 * time.Second, maxLeaseTTL} {
		if err := checkLeaseTTL(ttl); err != nil {
			t.Fatalf("checkLeaseTTL(%v) = %v", ttl, err)
		}
		cfg, err := storage.SessionConfig("u@tcp(h:1)/db", storage.Options{LeaseTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if wait, _ := strconv.Atoi(cfg.Params["innodb_lock_wait_timeout"]); time.Duration(wait)*time.Second >= ttl {
			t.Errorf("lease TTL %v: lock wait %ds is not below it", ttl, wait)
		}
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

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/internal/tlstest"
)

// writeSwap writes content to path through a rename, as the kubelet and
// cert-manager swap files; 0644 so the server in its container reads it.
func writeSwap(t *testing.T, path string, content ...[]byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, bytes.Join(content, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTLSRotation rotates the server's certificate and mend's client
// certificate to a new CA under a running mend run, as cert-manager does
// on a mounted Secret: first both CAs are trusted (the client's
// --dsn-tls-ca and the server's ssl-ca hold both, the server and client
// certificates are the new CA's), then the old CA is dropped everywhere.
// After each step's files and the server's reload, no pass fails; then the
// test cuts every session of mend's user so the pools must dial again.
// Only the passes the cut overlaps (at most the ones that ended during it
// and the one in flight when it returned; passes run one at a time) may
// fail, and only on the killed session (invalid connection, ...); every
// later pass succeeds, and no pass ever fails on TLS. The last passes can
// only succeed if mend re-read its CA, certificate and key files (the
// server then trusts only the new CA, and presents only a certificate the
// old CA did not sign).
func TestTLSRotation(t *testing.T) {
	t.Parallel()
	old := tlstest.NewPKI(t)
	next := tlstest.NewPKI(t) // a new CA, its server and client certificates
	srv := tlstest.Start(t, old)
	srv.Admin(t,
		"CREATE DATABASE rotate",
		"CREATE USER 'certuser'@'%' IDENTIFIED BY 'rotate-pw' REQUIRE X509",
		"GRANT ALL ON rotate.* TO 'certuser'@'%'",
	)
	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeSwap(t, ca, readFile(t, old.CA))
	writeSwap(t, cert, readFile(t, old.ClientCert))
	writeSwap(t, key, readFile(t, old.ClientKey))
	args := []string{"--dsn", srv.DSN("certuser", "rotate-pw", "rotate"), "--dsn-tls-ca", ca, "--dsn-tls-cert", cert,
		"--dsn-tls-key", key, "--dsn-tls-server-name", tlstest.ServerName}
	if code, _, errOut := mendCmd(t, append([]string{"migrate", "up"}, args...)...); code != exitOK {
		t.Fatalf("migrate up: exit %d: %s", code, errOut)
	}
	ctx := context.Background()
	rootDB := tlsDB(t, srv, "rotate")
	if err := sqtest.CreateApp(ctx, rootDB); err != nil {
		t.Fatal(err)
	}
	if err := sqtest.CreateQueue(ctx, rootDB); err != nil {
		t.Fatal(err)
	}
	if err := (sqtest.World{App: rootDB, Queue: rootDB}).Join(ctx, "orchestrator", "speculate", "q"); err != nil {
		t.Fatal(err)
	}
	_ = rootDB.Close()

	log := &passLog{passes: make(chan bool, 1<<16)}
	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan int, 1)
	go func() {
		exited <- Main(runCtx, append([]string{"run", "--host-dsn", "same", "--interval", "20ms", "--log-format", "json", "--log-level", "debug"}, args...),
			&bytes.Buffer{}, log, func(string) string { return "" })
	}()
	defer func() {
		stop()
		select {
		case <-exited:
		case <-time.After(time.Minute):
			t.Error("mend run did not stop within a minute of its context ending")
		}
	}()
	pass := func() bool { t.Helper(); return log.next(t, exited) }
	for !pass() { // the first good pass on the old certificates
	}
	reload := "ALTER INSTANCE RELOAD TLS"
	if srv.Engine == "mariadb" {
		reload = "FLUSH SSL"
	}
	// cut kills certuser's sessions (over a fresh root connection that
	// trusts the server's CA file as it is now), so the pools dial again.
	cut := func() {
		t.Helper()
		root := tlsDB(t, srv, "")
		defer root.Close()
		rows, err := root.Query("SELECT id FROM information_schema.processlist WHERE user = 'certuser'")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		_ = rows.Close()
		for _, id := range ids {
			_, _ = root.Exec("KILL ?", id)
		}
	}
	// outcome is the next pass's: ok, or the error its "pass failed" line
	// gave (the k-th false on passes is the k-th such line).
	failedSoFar := 0
	outcome := func() (bool, string) {
		t.Helper()
		if pass() {
			return true, ""
		}
		failedSoFar++
		errs := failedPassErrs(log.String())
		if len(errs) < failedSoFar {
			t.Fatalf("pass %d failed but the log has %d failed-pass lines:\n%s", failedSoFar, len(errs), log.String())
		}
		return false, errs[failedSoFar-1]
	}
	// step applies change (the files swapped, the server reloaded), wants
	// five passes with none failed, then cuts the sessions: the passes the
	// cut overlaps may fail on the killed session alone, and five passes
	// after them must all succeed.
	step := func(name string, change func()) {
		t.Helper()
		// passes ended so far: none may have failed.
		drain := func(when string) {
			t.Helper()
			for len(log.passes) > 0 {
				if ok, err := outcome(); !ok {
					t.Fatalf("%s: a pass failed %s: %s\n%s", name, when, err, log.String())
				}
			}
		}
		drain("before the step")
		change()
		for range 5 {
			if ok, err := outcome(); !ok {
				t.Fatalf("%s: a pass failed after the files changed, before any session was cut: %s\n%s", name, err, log.String())
			}
		}
		drain("after the files changed, before any session was cut")
		cut()
		overlapped := len(log.passes) + 1 // ended during the cut, and the one in flight
		cutFailed := 0
		for range overlapped {
			ok, err := outcome()
			if !ok && !killedSession(err) {
				t.Fatalf("%s: a pass the cut overlapped failed on something else than the killed session: %s\n%s", name, err, log.String())
			}
			if !ok {
				cutFailed++
				t.Logf("%s: a pass the cut overlapped failed on the killed session: %s", name, err)
			}
		}
		t.Logf("%s: %d of the %d passes the cut overlapped failed", name, cutFailed, overlapped)
		for range 5 {
			if ok, err := outcome(); !ok {
				t.Fatalf("%s: a pass begun after the cut failed: %s\n%s", name, err, log.String())
			}
		}
	}

	oldCA, nextCA := readFile(t, old.CA), readFile(t, next.CA)
	step("both CAs trusted, the new certificates", func() {
		writeSwap(t, ca, oldCA, nextCA)
		writeSwap(t, old.CA, oldCA, nextCA) // the server's ssl-ca (and what tlsDB trusts)
		writeSwap(t, old.ServerCert, readFile(t, next.ServerCert))
		writeSwap(t, old.ServerKey, readFile(t, next.ServerKey))
		srv.Admin(t, reload)
		writeSwap(t, key, readFile(t, next.ClientKey))
		writeSwap(t, cert, readFile(t, next.ClientCert))
	})
	step("the old CA dropped", func() {
		writeSwap(t, ca, nextCA)
		writeSwap(t, old.CA, nextCA)
		srv.Admin(t, reload)
	})
	for _, err := range failedPassErrs(log.String()) {
		if tlsFailure(err) {
			t.Fatalf("a pass failed on TLS: %s\n%s", err, log.String())
		}
	}
	if out := log.String(); strings.Contains(out, "rotate-pw") {
		t.Fatalf("the password was printed:\n%s", out)
	}
}

// failedPassErrs are the errors of mend run's "pass failed" lines (JSON
// logs), in order.
func failedPassErrs(logs string) []string {
	var errs []string
	for _, line := range strings.Split(logs, "\n") {
		var l struct{ Msg, Err string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "pass failed" {
			errs = append(errs, l.Err)
		}
	}
	return errs
}

// tlsFailure reports whether a pass's error is a TLS or certificate one.
func tlsFailure(err string) bool {
	return strings.Contains(err, "x509") || strings.Contains(err, "tls:") || strings.Contains(err, "certificate")
}

// killedSession reports whether a pass's error is what a session the
// server killed under it gives, and not a TLS failure.
func killedSession(err string) bool {
	if tlsFailure(err) {
		return false
	}
	for _, s := range []string{"invalid connection", "bad connection", "connection was killed", "Lost connection", "EOF", "broken pipe", "connection reset"} {
		if strings.Contains(err, s) {
			return true
		}
	}
	return false
}

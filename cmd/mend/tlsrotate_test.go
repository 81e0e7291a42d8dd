package main

import (
	"bytes"
	"context"
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
// on a mounted Secret, and cuts every session so the pools must dial
// again: first both CAs are trusted (the client's --dsn-tls-ca and the
// server's ssl-ca hold both, the server and client certificates are the
// new CA's), then the old CA is dropped everywhere. No pass fails on TLS
// (the cut itself may fail one in flight), and the last passes can only
// succeed if mend re-read its CA, certificate and
// key files (the server then trusts only the new CA, and presents only a
// certificate the old CA did not sign).
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
	// settle drops the outcomes of passes begun before a step, then wants
	// five good passes in a row. The cut may kill a session under a pass
	// in flight ("invalid connection", as TestDSNFileRotation allows): at
	// most two such failures, and none from TLS.
	settle := func(step string) {
		t.Helper()
		for len(log.passes) > 0 {
			<-log.passes
		}
		failed := 0
		for good := 0; good < 5; {
			if pass() {
				good++
				continue
			}
			good = 0
			if failed++; failed > 2 {
				t.Fatalf("%s: %d passes failed:\n%s", step, failed, log.String())
			}
		}
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, "pass failed") && (strings.Contains(line, "x509") || strings.Contains(line, "tls:")) {
				t.Fatalf("%s: a pass failed on TLS: %s", step, line)
			}
		}
	}

	oldCA, nextCA := readFile(t, old.CA), readFile(t, next.CA)
	// Step 1: both CAs trusted on both sides; the new certificates in use.
	writeSwap(t, ca, oldCA, nextCA)
	writeSwap(t, old.CA, oldCA, nextCA) // the server's ssl-ca (and what tlsDB trusts)
	writeSwap(t, old.ServerCert, readFile(t, next.ServerCert))
	writeSwap(t, old.ServerKey, readFile(t, next.ServerKey))
	srv.Admin(t, reload)
	writeSwap(t, key, readFile(t, next.ClientKey))
	writeSwap(t, cert, readFile(t, next.ClientCert))
	cut()
	settle("both CAs trusted, the new certificates")
	// Step 2: the old CA dropped everywhere.
	writeSwap(t, ca, nextCA)
	writeSwap(t, old.CA, nextCA)
	srv.Admin(t, reload)
	cut()
	settle("the old CA dropped")
	if out := log.String(); strings.Contains(out, "rotate-pw") {
		t.Fatalf("the password was printed:\n%s", out)
	}
}

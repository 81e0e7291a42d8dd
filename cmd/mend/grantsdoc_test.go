package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// Issue 19, Why 4: the grants block of docs/operations.md could not be
// pasted before migrate up (ERROR 1146 at its line 7, so the later users
// were never created). This pastes the section's steps in order, as
// written, with only the names made unique for the shared test server:
// step 1 (SQL), step 2 (mend migrate up as the DDL user), step 3 (SQL); then
// doctor as the runtime user must find nothing missing.
func TestGrantsDocPastesInOrder(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	section = section[strings.Index(section, "## Least-privilege grants"):]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	blocks := regexp.MustCompile("(?s)```(sql|sh)\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 3 || blocks[0][1] != "sql" || blocks[1][1] != "sh" || blocks[2][1] != "sql" {
		t.Fatalf("the grants section has %d code blocks; want sql (step 1), sh (step 2: migrate up), sql (step 3)", len(blocks))
	}

	mendDB := mysqltest.NewDB(t)
	hostDB := mysqltest.NewDB(t, sqtest.Apply)
	root := hostDB.SQL(t)
	// A running host, quiet: its planner's subscriber heartbeats on speculate
	// and no group has a queue_offsets row, so doctor's wake topic check
	// passes only with the documented grant on queue_subscriber_heartbeats.
	if err := (sqtest.World{Queue: root}).Heartbeat(t.Context(), "orchestrator", "speculate", "orchestrator-1"); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	const password = "Doc-pw-19"
	users := map[string]string{"mend_ddl": "d19" + sfx, "mend": "r19" + sfx, "mend_read": "o19" + sfx}
	rewrite := func(s string) string {
		for doc, u := range users {
			s = strings.ReplaceAll(s, "'"+doc+"'@'%'", "'"+u+"'@'%'")
			s = strings.ReplaceAll(s, doc+":…@", u+":"+password+"@")
		}
		s = strings.ReplaceAll(s, "'…'", "'"+password+"'")
		s = regexp.MustCompile(`\bmend\.`).ReplaceAllString(s, "`"+mendDB.Name+"`.")
		s = regexp.MustCompile(`\b(submitqueue|queue)\.`).ReplaceAllString(s, "`"+hostDB.Name+"`.")
		return s
	}
	t.Cleanup(func() {
		for _, u := range users {
			_, _ = root.Exec("DROP USER IF EXISTS '" + u + "'@'%'")
		}
	})
	paste := func(step, sqlText string) {
		t.Helper()
		for _, stmt := range strings.Split(rewrite(sqlText), ";\n") {
			// Comment lines go, as the mysql client drops them; the
			// statement after them stays.
			var lines []string
			for _, l := range strings.Split(stmt, "\n") {
				if !strings.HasPrefix(strings.TrimSpace(l), "--") {
					lines = append(lines, l)
				}
			}
			if stmt = strings.TrimSpace(strings.Join(lines, "\n")); stmt == "" {
				continue
			}
			if _, err := root.Exec(stmt); err != nil {
				t.Fatalf("%s, as written: %s\n%v", step, stmt, err)
			}
		}
	}
	dsnAs := func(user, dsn string) string {
		cfg, _ := mysql.ParseDSN(dsn)
		cfg.User, cfg.Passwd = user, password
		return cfg.FormatDSN()
	}

	paste("step 1", blocks[0][2])
	// Step 2 is a mend command line: run it with the test's DSN.
	if cmd := blocks[1][2]; !strings.Contains(cmd, "mend migrate up") || !strings.Contains(cmd, "mend_ddl:") {
		t.Fatalf("step 2 = %q; want mend migrate up as mend_ddl", cmd)
	}
	opsMust(t, "migrate", "up", "--create-database", "--dsn", dsnAs(users["mend_ddl"], mendDB.DSN))
	paste("step 3", blocks[2][2])
	runtime := dsnAs(users["mend"], mendDB.DSN)
	if r := opsRun(t, nil, "doctor", "--dsn", runtime, "--host-dsn", dsnAs(users["mend"], hostDB.DSN)); r.code != exitOK {
		t.Fatalf("doctor as the documented runtime user = exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Issue 47: the pasted grants left out PROCESS, and then every doctor
	// and run warned about the subscription's view of open transactions.
	r := opsRun(t, nil, "doctor", "--json", "--dsn", runtime, "--host-dsn", dsnAs(users["mend"], hostDB.DSN), "--queue-dsn", dsnAs(users["mend"], hostDB.DSN), "--subscribe-mode", "offsets")
	if !strings.Contains(r.stdout, `"subscription open transactions"`) || regexp.MustCompile(`(?s)"name": "subscription open transactions",\s*"status": "(warn|fail)`).MatchString(r.stdout) {
		t.Errorf("doctor --queue-dsn as the documented runtime user: the open-transactions check is not OK:\n%s", r.stdout)
	}
	// Issue 44: binlog mode's grants (REPLICATION SLAVE and CLIENT, the
	// position table) are in the documented ones: doctor in binlog mode
	// finds nothing missing.
	if r := opsRun(t, nil, "doctor", "--dsn", runtime, "--host-dsn", dsnAs(users["mend"], hostDB.DSN), "--queue-dsn", dsnAs(users["mend"], hostDB.DSN),
		"--subscribe-mode", "binlog"); r.code != exitOK || !strings.Contains(r.stdout, "binlog REPLICATION SLAVE") {
		t.Errorf("doctor --subscribe-mode binlog as the documented runtime user = exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := opsRun(t, nil, "status", "--dsn", dsnAs(users["mend_read"], mendDB.DSN)); r.code != exitOK {
		t.Fatalf("status as the documented read-only user = exit %d\n%s", r.code, r.stderr)
	}
}

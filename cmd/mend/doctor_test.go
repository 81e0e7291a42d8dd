package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// hostUser is a restricted account on the test server, dropped when the
// test ends, with table grants on one database.
type hostUser struct {
	account string // 'name'@'%'
	dsn     string // db's DSN, logged in as the account
}

// newHostUser creates an account holding grants[table] on db's tables.
func newHostUser(t *testing.T, db *mysqltest.DB, grants map[string]string) hostUser {
	t.Helper()
	ctx := context.Background()
	root, err := sql.Open("mysql", db.Server.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "mend_doc_" + hex.EncodeToString(b[:])
	account := "'" + name + "'@'%'"
	const password = "doctor-pw"
	if _, err := root.ExecContext(ctx, "CREATE USER "+account+" IDENTIFIED BY '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := root.ExecContext(context.Background(), "DROP USER "+account); err != nil {
			t.Errorf("drop user %s: %v", account, err)
		}
	})
	for table, privs := range grants {
		if _, err := root.ExecContext(ctx, fmt.Sprintf("GRANT %s ON `%s`.`%s` TO %s", privs, db.Name, table, account)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = name, password
	return hostUser{account: account, dsn: cfg.FormatDSN()}
}

// hostGrants is the exact set of privileges mend's host statements need.
func hostGrants() map[string]string {
	return map[string]string{
		"batch":                "SELECT, UPDATE",
		"queue_batch_state":    "SELECT, INSERT, DELETE",
		"request":              "SELECT, UPDATE",
		"build":                "SELECT",
		"queue_messages":       "SELECT, INSERT, UPDATE",
		"queue_delivery_state": "SELECT",
	}
}

func checkNamed(checks []doctor.Check, name string) (doctor.Check, bool) {
	i := slices.IndexFunc(checks, func(c doctor.Check) bool { return c.Name == name })
	if i < 0 {
		return doctor.Check{}, false
	}
	return checks[i], true
}

// snapshot is what doctor must leave as it found it: the tables and the
// rows of the host database.
func snapshot(t *testing.T, db *mysqltest.DB) string {
	t.Helper()
	conn := db.SQL(t)
	var rows []string
	for _, table := range db.Tables(t) {
		var n int
		if err := conn.QueryRow("SELECT COUNT(*) FROM `" + table + "`").Scan(&n); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, fmt.Sprintf("%s=%d", table, n))
	}
	return strings.Join(rows, " ")
}

func TestDoctorHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) *mysqltest.DB {
		t.Helper()
		db := mysqltest.NewDB(t, sqtest.Apply)
		w := sqtest.World{App: db.SQL(t), Queue: db.SQL(t)}
		if err := w.SeedBatch(ctx, "q", "q/batch/1", "created", "q/1"); err != nil {
			t.Fatal(err)
		}
		if err := w.Publish(ctx, "speculate", "q", "q/batch/1", []byte(`{"id":"q/batch/1","queue":"q"}`), nil); err != nil {
			t.Fatal(err)
		}
		return db
	}

	t.Run("exact grants pass", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		u := newHostUser(t, db, hostGrants())
		before := snapshot(t, db)
		var checks []doctor.Check
		for _, c := range doctor.Host(ctx, u.dsn, u.dsn) {
			if strings.HasSuffix(c.Name, " tls") {
				continue // the test server is plain: a warning, tested by TestTLS
			}
			checks = append(checks, c)
			if c.Status != doctor.OK {
				t.Errorf("%s: %s %s (fix: %s)", c.Name, c.Status, c.Detail, c.Fix)
			}
		}
		if len(checks) != 2+4+2+2 { // four application tables, two queue tables
			t.Errorf("got %d checks, want one per database, its session settings and table: %+v", len(checks), checks)
		}
		if after := snapshot(t, db); after != before {
			t.Errorf("doctor changed the host database: %s, then %s", before, after)
		}
	})

	t.Run("missing grants are named with the GRANT that fixes them", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		g := hostGrants()
		g["queue_messages"] = "SELECT, INSERT"    // the dedupe's UPDATE is missing
		g["queue_batch_state"] = "SELECT, INSERT" // a transition's DELETE is missing
		u := newHostUser(t, db, g)
		checks := doctor.Host(ctx, u.dsn, u.dsn)
		for name, want := range map[string]string{
			"host queue queue_messages":  "GRANT UPDATE ON `" + db.Name + "`.`queue_messages` TO " + u.account,
			"host app queue_batch_state": "GRANT DELETE ON `" + db.Name + "`.`queue_batch_state` TO " + u.account,
		} {
			c, ok := checkNamed(checks, name)
			if !ok || c.Status != doctor.Fail || c.Fix != want {
				t.Errorf("%s = %+v; want FAIL with fix %q", name, c, want)
			}
		}
		if c, _ := checkNamed(checks, "host app batch"); c.Status != doctor.OK {
			t.Errorf("batch = %+v; want ok, its grants are complete", c)
		}
	})

	t.Run("without the stuck-queue scan's grant, a warning naming it", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		g := hostGrants()
		delete(g, "queue_delivery_state")
		u := newHostUser(t, db, g)
		checks := doctor.Host(ctx, u.dsn, u.dsn)
		c, ok := checkNamed(checks, "host queue queue_delivery_state")
		if !ok || c.Status != doctor.Warn || !strings.Contains(c.Detail, "--stuck-every 0") ||
			c.Fix != "point the DSN at the submit queue's own database; if the table is there: GRANT SELECT ON `"+db.Name+"`.`queue_delivery_state` TO "+u.account {
			t.Errorf("queue_delivery_state = %+v; want a warning with the GRANT", c)
		}
		for _, c := range checks {
			if c.Status == doctor.Fail {
				t.Errorf("%s: FAIL %s", c.Name, c.Detail)
			}
		}
	})

	t.Run("a missing table fails and nothing is created", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		if _, err := db.SQL(t).ExecContext(ctx, "DROP TABLE build"); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, db)
		checks := doctor.Host(ctx, db.DSN, "")
		c, ok := checkNamed(checks, "host app build")
		if !ok || c.Status != doctor.Fail || !strings.Contains(c.Detail, "table build is missing") {
			t.Errorf("build = %+v; want FAIL naming the missing table", c)
		}
		if _, ok := checkNamed(checks, "host queue queue_messages"); ok {
			t.Error("the queue database was checked although no --queue-dsn was given")
		}
		if after := snapshot(t, db); after != before {
			t.Errorf("doctor changed the host database: %s, then %s", before, after)
		}
	})

	t.Run("a table of another shape fails", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		conn := db.SQL(t)
		// The first round's model: no twelve columns, no (topic, partition_key, id) key.
		if _, err := conn.ExecContext(ctx, "CREATE TABLE queue_messages (topic VARBINARY(255) NOT NULL, id VARBINARY(255) NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (topic, id))"); err != nil {
			t.Fatal(err)
		}
		c, _ := checkNamed(doctor.Host(ctx, "", db.DSN), "host queue queue_messages")
		if c.Status != doctor.Fail || !strings.Contains(c.Detail, "missing column(s) metadata, partition_key") ||
			!strings.Contains(c.Detail, "no PRIMARY or UNIQUE key on exactly (topic, partition_key, id)") {
			t.Errorf("queue_messages = %+v; want FAIL naming the missing columns and key", c)
		}
	})

	t.Run("the command takes the DSNs from the environment and exits 1", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		g := hostGrants()
		delete(g, "build")
		u := newHostUser(t, db, g)
		env := map[string]string{"MEND_DSN": db.DSN, "MEND_HOST_DSN": u.dsn}
		var out, errOut bytes.Buffer
		code := Main(ctx, []string{"doctor"}, &out, &errOut, func(k string) string { return env[k] })
		if code != exitFailure || !strings.Contains(out.String(), "GRANT SELECT ON `"+db.Name+"`.`build` TO "+u.account) {
			t.Fatalf("exit %d; want 1 and the GRANT for build:\n%s%s", code, out.String(), errOut.String())
		}
		if strings.Contains(out.String()+errOut.String(), "doctor-pw") {
			t.Error("doctor printed the host DSN's password")
		}
	})
}

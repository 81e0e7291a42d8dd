package main

import (
	"strings"
	"testing"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/internal/sqtest"
)

// TestDoctorKnowsTheEngineDefaults: doctor's engine checks say what this
// server really does, read from the server rather than from a table of
// versions: the collation a table declared without COLLATE gets (the real
// queue's application tables, created here by sqtest as the queue declares
// them: utf8mb4_0900_ai_ci on MySQL, utf8mb4_general_ci on MariaDB 10.11,
// utf8mb4_uca1400_ai_ci on MariaDB 11.8) and whether it pads, and on
// MariaDB innodb_snapshot_isolation as the server has it (ON by default on
// 11.8, OFF on 10.11; absent on MySQL).
func TestDoctorKnowsTheEngineDefaults(t *testing.T) {
	mysqltest.SkipVitess(t, "vtgate answers collation questions itself")
	t.Parallel()
	db := mysqltest.NewDB(t, sqtest.Apply)
	raw := db.SQL(t)
	checks := doctor.Engine(t.Context(), raw)

	var coll string
	if err := raw.QueryRow(`SELECT TABLE_COLLATION FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'batch'`).Scan(&coll); err != nil {
		t.Fatal(err)
	}
	pads, err := sqtest.World{App: raw, Queue: raw}.PadSpace(t.Context(), "batch")
	if err != nil {
		t.Fatal(err)
	}
	c, ok := checkNamed(checks, "default collation")
	switch {
	case !ok:
		t.Fatalf("no default collation check in %+v", checks)
	case c.Status != doctor.OK || !strings.Contains(c.Detail, " get "+coll+" ("):
		t.Errorf("default collation: %s %q; the queue's batch table got %s", c.Status, c.Detail, coll)
	case pads != strings.Contains(c.Detail, "PAD SPACE"):
		t.Errorf("default collation: %q; %s pads trailing spaces: %v", c.Detail, coll, pads)
	}
	t.Logf("%s: %s", db.Server.Engine(), c.Detail)

	var v string
	err = raw.QueryRow("SELECT @@GLOBAL.innodb_snapshot_isolation").Scan(&v)
	c, ok = checkNamed(checks, "snapshot isolation")
	switch {
	case mysqlx.ErrNumber(err) == mysqlx.ErrUnknownSystemVariable:
		if ok {
			t.Errorf("a server without innodb_snapshot_isolation got a check: %+v", c)
		}
	case err != nil:
		t.Fatal(err)
	case !ok:
		t.Errorf("the server has innodb_snapshot_isolation=%s, doctor says nothing of it: %+v", v, checks)
	default:
		want := "innodb_snapshot_isolation=OFF"
		if v == "1" || strings.EqualFold(v, "ON") {
			want = "innodb_snapshot_isolation=ON"
		}
		if c.Status != doctor.OK || !strings.Contains(c.Detail, want) || !strings.Contains(c.Detail, "READ COMMITTED") {
			t.Errorf("snapshot isolation: %s %q; want OK naming %s and READ COMMITTED", c.Status, c.Detail, want)
		}
	}
}

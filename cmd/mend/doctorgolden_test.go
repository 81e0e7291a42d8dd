package main

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

var updateGolden = flag.Bool("update", false, "rewrite cmd/mend/testdata/doctor-<engine>-<version>.golden from this run")

// mend doctor's whole text, line by line, against a golden file per engine
// and release (the checks differ: MySQL's binlog and view definers,
// MariaDB's snapshot isolation, each release's collations and session
// variables), skipped where none is kept. It pins the content while the
// checks move between packages:
// a changed word is a changed line. What differs between runs (database
// names, the address, the server's version, the clock's skew) is replaced
// by a placeholder first.
func TestDoctorGolden(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	x := newWakeWorld(t)
	for _, seed := range []func() error{
		func() error { return x.w.SeedBatch(ctx, "q", "q/batch/1", "created", "q/1") },
		func() error { return x.w.Join(ctx, "orchestrator", "speculate", "q") },
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}
	var version string
	if err := x.mendDB.SQL(t).QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	// The checks' words depend on the engine and its release (collations,
	// session variables, defaults): one golden per engine and major.minor.
	engine := "mysql"
	if strings.Contains(strings.ToLower(version), "mariadb") {
		engine = "mariadb"
	}
	engine += "-" + regexp.MustCompile(`^\d+\.\d+`).FindString(version)
	cfg, err := mysql.ParseDSN(x.mendDB.DSN)
	if err != nil {
		t.Fatal(err)
	}
	skew := regexp.MustCompile(`database clock is [0-9.]+[µmn]?s from`)
	normal := func(out string) string {
		out = strings.NewReplacer(x.mendDB.Name, "<mend>", x.appDB.Name, "<app>", x.queueDB.Name, "<queue>",
			cfg.Addr, "<addr>", version, "<version>").Replace(out)
		return skew.ReplaceAllString(out, "database clock is <skew> from")
	}
	base := []string{"doctor", "--dsn", x.mendDB.DSN, "--host-dsn", x.appDB.DSN, "--queue-dsn", x.queueDB.DSN}
	var got strings.Builder
	// The default (auto: binlog mode on the test servers), then the offset
	// mode's checks, then a wrong wake topic without a subscription.
	offsets := append(append([]string{}, base...), "--subscribe-mode", "offsets")
	for _, args := range [][]string{base, offsets, append(base, "--wake-topic", "speculat", "--subscribe=false")} {
		code, out, errOut := wakeMain(ctx, args...)
		got.WriteString("$ mend " + strings.Join(args[7:], " ") + "\n")
		got.WriteString(normal(out))
		got.WriteString("exit " + string(rune('0'+code)) + ": " + normal(errOut) + "\n")
	}
	path := filepath.Join("testdata", "doctor-"+engine+".golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no golden for %s: run with -update on a commit whose doctor output is known good to write %s", version, path)
	}
	if err != nil {
		t.Fatal(err)
	}
	gotLines, wantLines := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("%s line %d:\n got %q\nwant %q", path, i+1, g, w)
		}
	}
}

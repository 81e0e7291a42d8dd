package vitessdb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/vitessdb"
	"github.com/mendq/mend/migrations"
)

// TestStartAndCloseLeaveNothing starts a one-keyspace cluster with mend's schema, reads the
// schema version through vtgate, empties a keyspace through Acquire, and checks that Close
// leaves no process, port or directory behind.
func TestStartAndCloseLeaveNothing(t *testing.T) {
	if os.Getenv("MEND_TEST_ENGINE") != "vitess" {
		t.Skip("starts a Vitess cluster (about 45 s, 365 MB): runs with MEND_TEST_ENGINE=vitess (make test-vitess)")
	}
	dir, err := vitessdb.Find()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := vitessdb.MendSchema()
	if err != nil {
		t.Fatal(err)
	}
	s, err := vitessdb.Start(t.Context(), vitessdb.Config{VitessDir: dir, Keyspaces: 1, Schema: schema, VSchema: migrations.VSchema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ks, err := s.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", s.DSN(ks))
	if err != nil {
		t.Fatal(err)
	}
	var version int
	err = db.QueryRowContext(context.Background(), "SELECT version FROM mend_schema_migrations").Scan(&version)
	_ = db.Close()
	if latest, _ := migrations.Mend.Latest(); err != nil || version != int(latest) {
		t.Fatalf("schema version through vtgate = %d, %v; want %d", version, err, latest)
	}
	s.Release(ks)

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !errors.Is(s.Close(), nil) {
		t.Error("second Close returned a different result")
	}
	if s.Running() {
		t.Error("still running after Close")
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("directory %s: %v; want it removed", s.Dir, err)
	}
	for _, addr := range []string{s.VTGate, s.MySQL} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("port %s still taken after Close: %v", addr, err)
			continue
		}
		_ = l.Close()
	}
}

// envOrphan makes the test binary, run again by TestReapStopsAnOrphanedCluster, start a
// cluster and exit without Close, as a panicking test binary does.
const envOrphan = "MEND_VITESSDB_ORPHAN"

// TestReapStopsAnOrphanedCluster starts a cluster in a child test binary that exits without
// Close, and checks that Reap stops every process of it and removes its directory, while a
// directory whose owner still runs (this process) is left alone.
func TestReapStopsAnOrphanedCluster(t *testing.T) {
	const prefix = "mend-vitessdb-reap-test-"
	if os.Getenv(envOrphan) == "1" {
		dir, err := vitessdb.Find()
		if err != nil {
			t.Fatal(err)
		}
		s, err := vitessdb.Start(t.Context(), vitessdb.Config{VitessDir: dir, Keyspaces: 1, DirPrefix: prefix, VSchema: migrations.VSchema})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("ORPHAN " + s.Dir)
		os.Exit(0)
	}
	if os.Getenv("MEND_TEST_ENGINE") != "vitess" {
		t.Skip("starts a Vitess cluster (about 45 s, 365 MB): runs with MEND_TEST_ENGINE=vitess (make test-vitess)")
	}
	live, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(live) })
	if err := os.WriteFile(filepath.Join(live, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestReapStopsAnOrphanedCluster$")
	cmd.Env = append(os.Environ(), envOrphan+"=1")
	out, err := cmd.CombinedOutput()
	_, orphan, ok := strings.Cut(string(out), "ORPHAN ")
	orphan, _, _ = strings.Cut(orphan, "\n")
	if err != nil || !ok {
		t.Fatalf("child that starts a cluster and exits: %v\n%s", err, out)
	}
	if n := len(processesNaming(t, orphan)); n == 0 {
		t.Fatalf("no process of the orphaned cluster in %s runs; the child did not leave one", orphan)
	}
	if err := vitessdb.Reap(prefix); err != nil {
		t.Fatalf("Reap: %v", err)
	}
	if ps := processesNaming(t, orphan); len(ps) != 0 {
		t.Errorf("processes %v of the orphaned cluster still run after Reap", ps)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("directory %s: %v; want it removed", orphan, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("directory %s of a running owner: %v; want it left alone", live, err)
	}
}

// processesNaming lists the pids whose command line names dir.
func processesNaming(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), dir+"/") {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

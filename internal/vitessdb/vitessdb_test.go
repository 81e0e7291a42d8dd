package vitessdb_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
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

package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mendq/mend/internal/dockerdb"
)

// TestMain is Main plus a leak check, so the harness itself is shown not to leave goroutines
// behind for its callers' goleak checks.
func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	if shared.srv != nil {
		if err := shared.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	shared.mu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// eventually polls f until it returns nil or the deadline passes, returning the last error.
func eventually(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func schemaExists(t *testing.T, srv *Server, name string) bool {
	t.Helper()
	admin, err := sql.Open("mysql", srv.RootDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var n int
	err = admin.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestNewDB(t *testing.T) {
	t.Run("distinct usable databases", func(t *testing.T) {
		a, b := NewDB(t), NewDB(t)
		if a.Name == b.Name {
			t.Fatalf("two NewDB calls gave the same database %q", a.Name)
		}
		if a.Server != b.Server {
			t.Errorf("NewDB used two different shared servers")
		}
		for _, d := range []*DB{a, b} {
			db := d.SQL(t)
			if _, err := db.ExecContext(t.Context(), "CREATE TABLE t (id BIGINT PRIMARY KEY, at DATETIME(6) NOT NULL)"); err != nil {
				t.Fatalf("%s: %v", d.Name, err)
			}
			if _, err := db.ExecContext(t.Context(), "INSERT INTO t VALUES (?, NOW(6))", 1); err != nil {
				t.Fatalf("%s: %v", d.Name, err)
			}
			var cur string
			var at time.Time // parseTime=true gives time.Time
			if err := db.QueryRowContext(t.Context(), "SELECT DATABASE(), at FROM t").Scan(&cur, &at); err != nil {
				t.Fatalf("%s: %v", d.Name, err)
			}
			if cur != d.Name {
				t.Errorf("DATABASE() = %q, want %q", cur, d.Name)
			}
			if at.Location() != time.UTC {
				t.Errorf("time location = %v, want UTC", at.Location())
			}
		}
	})

	t.Run("dropped at cleanup", func(t *testing.T) {
		var d *DB
		t.Run("user", func(t *testing.T) { d = NewDB(t) })
		if d == nil {
			t.Fatal("inner test did not create a database")
		}
		if schemaExists(t, d.Server, d.Name) {
			t.Errorf("database %s still exists after its test ended", d.Name)
		}
	})

	t.Run("migrators run in order", func(t *testing.T) {
		var order []string
		step := func(name, stmt string) Migrator {
			return func(ctx context.Context, dsn string) error {
				order = append(order, name)
				db, err := sql.Open("mysql", dsn)
				if err != nil {
					return err
				}
				defer db.Close()
				_, err = db.ExecContext(ctx, stmt)
				return err
			}
		}
		d := NewDB(t,
			step("create", "CREATE TABLE m (id INT PRIMARY KEY)"),
			step("alter", "ALTER TABLE m ADD COLUMN v INT NOT NULL DEFAULT 7"),
		)
		if fmt.Sprint(order) != "[create alter]" {
			t.Errorf("migrator order = %v, want [create alter]", order)
		}
		if _, err := d.SQL(t).ExecContext(t.Context(), "INSERT INTO m (id) VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPrivate(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*Server, *DB, *sql.DB) {
		t.Helper()
		srv := StartPrivate(t)
		if !srv.Private() {
			t.Fatal("StartPrivate gave a non-private server")
		}
		d := NewDBOn(t, srv)
		db := d.SQL(t)
		if _, err := db.ExecContext(t.Context(), "CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR(20) NOT NULL) ENGINE=InnoDB"); err != nil {
			t.Fatal(err)
		}
		return srv, d, db
	}

	t.Run("kill and restart keep committed data", func(t *testing.T) {
		t.Parallel()
		srv, d, db := setup(t)
		for i := range 50 {
			if _, err := db.ExecContext(t.Context(), "INSERT INTO kv VALUES (?, ?)", i, fmt.Sprint("v", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := srv.Kill(); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if err := srv.Kill(); err == nil {
			t.Error("second Kill of a dead server returned nil")
		}
		if err := db.PingContext(t.Context()); err == nil {
			t.Fatal("ping answered after Kill")
		}
		if err := srv.Restart(t.Context()); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		fresh, err := sql.Open("mysql", d.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		var n int
		if err := fresh.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM kv").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 50 {
			t.Errorf("rows after kill and restart = %d, want 50", n)
		}
		// The old pool recovers too: database/sql discards the dead connections.
		if err := eventually(t.Context(), 10*time.Second, db.PingContext); err != nil {
			t.Errorf("old pool after restart: %v", err)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		t.Parallel()
		srv, _, db := setup(t)
		if err := srv.Pause(); err != nil {
			t.Fatalf("Pause: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kv").Scan(new(int))
		cancel()
		if err == nil {
			t.Error("query answered while the server was paused")
		}
		if err := srv.Resume(); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		err = eventually(t.Context(), 10*time.Second, func(ctx context.Context) error {
			return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kv").Scan(new(int))
		})
		if err != nil {
			t.Errorf("query after Resume: %v", err)
		}
	})

	t.Run("close is idempotent and removes what the server left", func(t *testing.T) {
		t.Parallel()
		srv, _, _ := setup(t)
		dir, container := srv.Dir(), srv.ContainerID()
		if err := srv.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if dir != "" {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temp dir %s after Close: %v", dir, err)
			}
		}
		if container != "" {
			left, err := dockerdb.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range left {
				if l.Name == container {
					t.Errorf("container %.12s still exists after Close", container)
				}
			}
		}
		if err := srv.Pause(); err == nil {
			t.Error("Pause after Close returned nil")
		}
	})
}

func TestProxy(t *testing.T) {
	t.Run("cut and heal", func(t *testing.T) {
		d := NewDB(t)
		p := NewProxy(t, d.Server.Addr())
		db, err := sql.Open("mysql", d.DSNVia(p.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.PingContext(t.Context()); err != nil {
			t.Fatalf("ping through proxy: %v", err)
		}
		p.Cut()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err = db.QueryRowContext(ctx, "SELECT 1").Scan(new(int))
		cancel()
		if err == nil {
			t.Fatal("query through a cut proxy succeeded")
		}
		p.Heal()
		if err := eventually(t.Context(), 10*time.Second, func(ctx context.Context) error {
			return db.QueryRowContext(ctx, "SELECT 1").Scan(new(int))
		}); err != nil {
			t.Errorf("query after Heal: %v", err)
		}
	})

	t.Run("toxics", func(t *testing.T) {
		d := NewDB(t)
		p := NewProxy(t, d.Server.Addr())
		db, err := sql.Open("mysql", d.DSNVia(p.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.PingContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := p.AddToxic("bogus", "no_such_toxic", "downstream", 1, nil); err == nil {
			t.Error("AddToxic accepted an unknown type")
		}
		const latency = 150 * time.Millisecond
		if err := p.AddToxic("lat", "latency", "downstream", 1, map[string]any{"latency": latency.Milliseconds()}); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if err := db.QueryRowContext(t.Context(), "SELECT 1").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(begin); got < latency {
			t.Errorf("query with a %v latency toxic took %v", latency, got)
		}
		if err := p.RemoveToxic("lat"); err != nil {
			t.Fatal(err)
		}
		if err := p.RemoveToxic("lat"); err == nil {
			t.Error("removing a removed toxic returned nil")
		}
	})
}

// Package migrations holds mend's schema as embedded golang-migrate files and
// applies them to a DSN.
//
// Every file holds exactly one DDL statement: MySQL commits DDL implicitly, so
// a file of two statements that fails half way would leave the schema between
// versions and golang-migrate's "dirty" flag set. The migration bookkeeping
// table is mend_schema_migrations, so mend's versions never mix with a host's.
//
// Every migration follows the compatibility rule in rule.go (expand, or a
// contract that says so on its first line) and runs online on both engines,
// so a binary keeps working while a newer one migrates under it; compat.go
// is how a binary judges a schema against its range (docs/operations.md,
// "Upgrading").
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/mendq/mend/internal/mysqlx"
)

//go:embed *.sql
var files embed.FS

// Set is one independent series of migrations with its own bookkeeping table.
type Set struct {
	FS    fs.FS  // the *.up.sql / *.down.sql files
	Table string // the golang-migrate version table
}

// Mend is mend's own schema.
var Mend = Set{FS: files, Table: "mend_schema_migrations"}

// Up applies mend's migrations to the database named in dsn.
func Up(ctx context.Context, dsn string) error { return Mend.Up(ctx, dsn) }

// Down reverts all of mend's migrations. It drops mend's tables and their data.
func Down(ctx context.Context, dsn string) error { return Mend.Down(ctx, dsn) }

// Version reports mend's schema version and whether a failed migration left
// it dirty. Version 0 means no migration has been applied.
func Version(ctx context.Context, dsn string) (uint, bool, error) { return Mend.Version(ctx, dsn) }

// Latest returns the highest version in the set.
func (s Set) Latest() (uint, error) {
	src, err := iofs.New(s.FS, ".")
	if err != nil {
		return 0, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, fmt.Errorf("migrations: no migration files: %w", err)
	}
	for {
		next, err := src.Next(v)
		if errors.Is(err, fs.ErrNotExist) {
			return v, nil
		}
		if err != nil {
			return 0, fmt.Errorf("migrations: list files: %w", err)
		}
		v = next
	}
}

// Up applies every pending migration of the set. Concurrent migrators are
// serialised by golang-migrate's advisory lock; a migrator that finds the lock
// taken waits and tries again until ctx ends, then finds nothing left to do.
func (s Set) Up(ctx context.Context, dsn string) error {
	return s.run(ctx, dsn, "up", func(m *migrate.Migrate) error { return m.Up() })
}

// Down reverts every migration of the set.
func (s Set) Down(ctx context.Context, dsn string) error {
	return s.run(ctx, dsn, "down", func(m *migrate.Migrate) error { return m.Down() })
}

// Version reports the set's applied version and dirty flag.
func (s Set) Version(ctx context.Context, dsn string) (version uint, dirty bool, err error) {
	err = s.run(ctx, dsn, "version", func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		return err
	})
	return version, dirty, err
}

// Force sets the recorded version and clears the dirty flag without running
// any migration. Use it only after repairing a half-applied migration by hand.
func (s Set) Force(ctx context.Context, dsn string, version int) error {
	return s.run(ctx, dsn, "force", func(m *migrate.Migrate) error { return m.Force(version) })
}

// lockRetry is how long a migrator waits before trying a taken lock again;
// golang-migrate itself already waits up to 10 s inside GET_LOCK.
const lockRetry = 200 * time.Millisecond

func (s Set) run(ctx context.Context, dsn, what string, fn func(*migrate.Migrate) error) error {
	for {
		err := s.runOnce(ctx, dsn, fn)
		if errors.Is(err, migrate.ErrNoChange) {
			return nil
		}
		if !errors.Is(err, database.ErrLocked) {
			if err != nil {
				var dirty migrate.ErrDirty
				if errors.As(err, &dirty) {
					return fmt.Errorf("migrations: %s: schema is dirty at version %d: a migration failed half way; make the schema match a version by hand, record it with `mend migrate force <version>` (migrations.Set.Force), then migrate again: %w", what, dirty.Version, err)
				}
				return fmt.Errorf("migrations: %s: %w", what, err)
			}
			return nil
		}
		t := time.NewTimer(lockRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("migrations: %s: waiting for another migrator: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

func (s Set) runOnce(ctx context.Context, dsn string, fn func(*migrate.Migrate) error) (err error) {
	// The one session constructor of mend's pools: the same refusals and
	// forced settings (utf8mb4, strict, autocommit) as every other pool.
	// golang-migrate runs each file as one Exec; multiStatements lets a file
	// carry a trailing comment or statement separator without a syntax error.
	cfg, err := mysqlx.Config(dsn, mysqlx.Pool{Field: "dsn", MultiStatements: true})
	if err != nil {
		return err
	}
	if err := mysqlx.Resolve(ctx, cfg); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("dsn: %w", err)
	}
	db := sql.OpenDB(connector)
	defer func() { err = errors.Join(err, db.Close()) }()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	drv, err := migratemysql.WithInstance(db, &migratemysql.Config{MigrationsTable: s.Table, DatabaseName: cfg.DBName})
	if err != nil {
		return fmt.Errorf("open migration driver: %w", err)
	}
	src, err := iofs.New(s.FS, ".")
	if err != nil {
		return fmt.Errorf("read embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
	if err != nil {
		return fmt.Errorf("init migrate: %w", err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		err = errors.Join(err, srcErr, dbErr)
	}()
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()
	return fn(m)
}

// Migration is one embedded migration: its version, name and both scripts.
type Migration struct {
	Version  uint
	Name     string // e.g. "create_records"
	Up, Down string
}

// List returns the set's migrations in version order.
func (s Set) List() ([]Migration, error) {
	entries, err := fs.ReadDir(s.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	byVersion := map[uint]*Migration{}
	var order []uint
	for _, e := range entries {
		var v uint
		var rest string
		if _, err := fmt.Sscanf(e.Name(), "%d_%s", &v, &rest); err != nil {
			continue
		}
		name, dir, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		body, err := fs.ReadFile(s.FS, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", e.Name(), err)
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: name}
			byVersion[v] = m
			order = append(order, v)
		}
		switch dir {
		case "up.sql":
			m.Up = string(body)
		case "down.sql":
			m.Down = string(body)
		}
	}
	slices.Sort(order)
	out := make([]Migration, len(order))
	for i, v := range order {
		out[i] = *byVersion[v]
	}
	return out, nil
}

// Step applies one migration up (n = 1) or reverts one (n = -1) from the
// current version, so a caller can report each as it happens.
func (s Set) Step(ctx context.Context, dsn string, n int) error {
	return s.run(ctx, dsn, "step", func(m *migrate.Migrate) error { return m.Steps(n) })
}

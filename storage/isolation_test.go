package storage_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// TestTransactionsRunReadCommitted: the store no longer names an isolation
// level when it begins a transaction; every connection sets READ COMMITTED
// once, when it is made. Each DSN below tries to override that with some
// spelling of either server's variable. The test holds several store
// transactions open at once, so each is on its own pooled connection, and
// in each one reads the session's level and shows the behaviour: a row
// committed by another session after the transaction's first read is seen
// by its second read (REPEATABLE READ would still show the old value).
func TestTransactionsRunReadCommitted(t *testing.T) {
	mysqltest.SkipVitess(t, "the test creates its own table, which the sharded keyspace's vschema does not know (vtgate: table not found)")
	t.Parallel()
	b := setup(t)
	raw := b.db.SQL(t)
	if _, err := raw.Exec("CREATE TABLE iso_probe (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	name := isolationVariable(t, raw)
	const conns = 6
	for i := range conns {
		if _, err := raw.Exec("INSERT INTO iso_probe VALUES (?, 0)", i); err != nil {
			t.Fatal(err)
		}
	}
	for _, param := range []string{
		"", "transaction_isolation=%27SERIALIZABLE%27", "tx_isolation=%27REPEATABLE-READ%27",
		"@@SESSION.TX_ISOLATION=%27SERIALIZABLE%27", "Transaction_Isolation=%27REPEATABLE-READ%27",
	} {
		t.Run("dsn+"+param, func(t *testing.T) {
			if param != "" {
				// The level is mend's: a DSN choosing one is refused.
				_, err := storage.Open(t.Context(), b.db.DSN+"&"+param, storage.Options{})
				var pe *mysqlx.ParamError
				if !errors.As(err, &pe) {
					t.Fatalf("Open with %s = %v; want a ParamError", param, err)
				}
				return
			}
			store := openStore(t, b.db.DSN, storage.Options{})
			store.SQL().SetMaxIdleConns(0) // fresh sessions for every subtest
			var started, wrote sync.WaitGroup
			started.Add(conns)
			wrote.Add(1)
			errs := make([]error, conns)
			var all sync.WaitGroup
			for i := range conns {
				all.Go(func() {
					errs[i] = storage.InTx(store, t.Context(), func(ctx context.Context, tx *sqlx.Tx) error {
						var level string
						var before, after int
						err := tx.QueryRowContext(ctx, "SELECT @@SESSION."+name).Scan(&level)
						if err == nil {
							err = tx.QueryRowContext(ctx, "SELECT v FROM iso_probe WHERE id = ?", i).Scan(&before)
						}
						started.Done()
						if err != nil {
							return err
						}
						wrote.Wait()
						if err := tx.QueryRowContext(ctx, "SELECT v FROM iso_probe WHERE id = ?", i).Scan(&after); err != nil {
							return err
						}
						if level != "READ-COMMITTED" || after != before+1 {
							return fmt.Errorf("transaction %d: %s = %q, read %d then %d after another session's commit; want READ-COMMITTED and the new value", i, name, level, before, after)
						}
						return nil
					})
				})
			}
			started.Wait() // every transaction is open, each on its own connection
			if _, err := raw.Exec("UPDATE iso_probe SET v = v + 1"); err != nil {
				t.Fatal(err)
			}
			wrote.Done()
			all.Wait()
			for _, err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// isolationVariable is the server's name for the session isolation level.
func isolationVariable(t *testing.T, db *sql.DB) string {
	t.Helper()
	var v string
	if err := db.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"transaction_isolation", "tx_isolation"} {
		if err := db.QueryRow("SELECT @@SESSION." + name).Scan(&v); err == nil {
			return name
		}
	}
	t.Fatal("the server has no isolation variable")
	return ""
}

// TestSnapshotIsolationNeverFailsAStoreWrite: MariaDB 11.8 turns
// innodb_snapshot_isolation on by default, which makes a REPEATABLE READ
// transaction that writes a row another session changed since its snapshot
// fail with error 1020 (ER_CHECKREAD, "Record has changed since last read").
// mend's store reads then writes in one transaction (the fenced writes read
// the lease row, then write), but every session of its pools runs READ
// COMMITTED, where each statement takes a fresh view and the variable does
// not apply. The control is the server's default level, REPEATABLE READ, on
// a raw session: on a server with the variable on it fails with 1020 (on
// MySQL and MariaDB 10.11, which have no such check, it succeeds); the same
// sequence in a store transaction succeeds everywhere.
func TestSnapshotIsolationNeverFailsAStoreWrite(t *testing.T) {
	mysqltest.SkipVitess(t, "the test creates its own table, which the sharded keyspace's vschema does not know (vtgate: table not found)")
	t.Parallel()
	b := setup(t)
	raw := b.db.SQL(t)
	if _, err := raw.Exec("CREATE TABLE snap_probe (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec("INSERT INTO snap_probe VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	snapshot := false
	var on sql.NullString
	switch err := raw.QueryRow("SELECT @@GLOBAL.innodb_snapshot_isolation").Scan(&on); {
	case err == nil:
		snapshot = on.String == "1" || on.String == "ON"
	case mysqlx.ErrNumber(err) != mysqlx.ErrUnknownSystemVariable:
		t.Fatal(err)
	}
	// readThenWrite reads row id in tx, lets another session change it and
	// commit, then writes the row from tx.
	readThenWrite := func(ctx context.Context, q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}, id int) error {
		var v int
		if err := q.QueryRowContext(ctx, "SELECT v FROM snap_probe WHERE id = ?", id).Scan(&v); err != nil {
			return err
		}
		if _, err := raw.ExecContext(ctx, "UPDATE snap_probe SET v = v + 1 WHERE id = ?", id); err != nil {
			return fmt.Errorf("the other session's update: %w", err)
		}
		_, err := q.ExecContext(ctx, "UPDATE snap_probe SET v = v + 10 WHERE id = ?", id)
		return err
	}

	t.Run("control: repeatable read", func(t *testing.T) {
		tx, err := raw.BeginTx(t.Context(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		err = readThenWrite(t.Context(), tx, 1)
		switch {
		case snapshot && mysqlx.ErrNumber(err) != 1020:
			t.Fatalf("with innodb_snapshot_isolation on, a REPEATABLE READ write of a row changed since the snapshot = %v; want error 1020 (the control does not show what the store is kept from)", err)
		case !snapshot && err != nil:
			t.Fatalf("without snapshot isolation, the REPEATABLE READ write = %v; want it to succeed", err)
		}
	})
	t.Run("store transaction", func(t *testing.T) {
		err := storage.InTx(b.store, t.Context(), func(ctx context.Context, tx *sqlx.Tx) error {
			return readThenWrite(ctx, tx, 2)
		})
		if err != nil {
			t.Fatalf("store transaction reading then writing a row another session changed: %v (snapshot isolation %v)", err, snapshot)
		}
		var v int
		if err := raw.QueryRow("SELECT v FROM snap_probe WHERE id = 2").Scan(&v); err != nil || v != 11 {
			t.Fatalf("row 2 is %d (%v); want 11: both writes", v, err)
		}
	})
}

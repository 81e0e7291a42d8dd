package host_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

type bundle struct {
	db  *mysqltest.DB
	h   *host.DB
	sql *sql.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := mysqltest.NewDB(t, host.Migrations.Up)
	h, err := host.Open(context.Background(), db.DSN, db.DSN, host.Options{})
	if err != nil {
		t.Fatalf("host.Open: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &bundle{db: db, h: h, sql: db.SQL(t)}
}

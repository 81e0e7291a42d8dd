package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
)

// TestRunOnceEndsBesideHeldTransaction: mend run --once (cron) beside a
// MoveToDLQ-like transaction held open on the queue database (10 minutes
// would do: the test's timeout is a minute) records what is visible and
// exits 0 within the bound it states at the start, naming the partition
// that stays held and the session holding it. Before, it waited for the
// transaction, and cron piled up runs.
func TestRunOnceEndsBesideHeldTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	if err := w.Join(ctx, "orchestrator", "speculate", "q"); err != nil { // the host reads speculate/q
		t.Fatal(err)
	}
	if err := w.Publish(ctx, "speculate", "q", "q/batch/1", []byte(`{"id":"q/batch/1","queue":"q"}`), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.MoveToDLQ(ctx, "speculate", "q", "q/batch/1", sqtest.Failure{Count: 3, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
	tx, err := queueDB.SQL(t).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
		"VALUES ('speculate_dlq', 'q/batch/held', '{}', NULL, 'q', 1, 1, 1760000000000, 1, 'boom', 'speculate', NULL)"); err != nil {
		t.Fatal(err)
	}
	var session int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&session); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	began := time.Now()
	code := Main(rctx, []string{"run", "--once", "--dsn", mendDB.DSN, "--host-dsn", appDB.DSN, "--queue-dsn", queueDB.DSN,
		"--subscribe-settle", "1s", "--subscribe-interval", "50ms"}, &out, &errOut, func(string) string { return "" })
	took := time.Since(began)
	logs := errOut.String() + out.String()
	if code != exitOK || rctx.Err() != nil {
		t.Fatalf("run --once beside a held transaction: exit %d after %v (context %v)\n%s", code, took, rctx.Err(), logs)
	}
	for _, want := range []string{"ends_within=", "partition=q", fmt.Sprintf("held_by_session=%d", session)} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs do not say %q:\n%s", want, logs)
		}
	}
	var n int
	if err := mendDB.SQL(t).QueryRow("SELECT COUNT(*) FROM mend_records WHERE message_id = 'q/batch/1'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the visible dead letter was not recorded: %d, %v", n, err)
	}
}

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// Issue 57: mend status --queue-dsn (the form the docs suggest) printed the
// queue table and the subscription's lag, and dropped the failing-repairs
// block, the stuck-queue line and the repair-latency summary that status
// without it prints. Both forms print all three now.
func TestStatusQueueDSNKeepsBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	store, err := storage.Open(ctx, mendDB.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, src := range []mend.SourceID{
		{Queue: "q", Topic: "speculate_dlq", Partition: "q", MessageID: "q/batch/1"},
		{Queue: "q", Topic: mend.StuckTopic, Partition: "q", MessageID: "stuck/1"},
	} {
		if _, _, err := store.RecordCreate(ctx, mend.CreateParams{Source: src, Target: mend.Target{BatchID: "q/batch/1", Desired: mend.OutcomeFailed},
			OpID: mend.NewOpID(), Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	// The dead letter's record fails its attempts, "<b>" in its error.
	if _, err := mendDB.SQL(t).ExecContext(ctx, `UPDATE mend_records SET attempts = 2, last_error = 'host: Error 1142: UPDATE command denied <b>',
		next_attempt_at = NOW(6) + INTERVAL 30 SECOND WHERE message_id = 'q/batch/1'`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "--dsn", mendDB.DSN},
		{"status", "--dsn", mendDB.DSN, "--queue-dsn", queueDB.DSN},
	} {
		code, out, errOut := mendCmd(t, args...)
		if code != 0 {
			t.Fatalf("mend %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
		}
		for _, want := range []string{"failing repairs", "UPDATE command denied", "stuck-queue wake-ups", "repair latency"} {
			if !strings.Contains(out, want) {
				t.Errorf("mend status (queue DSN given: %v) lacks %q:\n%s", len(args) > 3, want, out)
			}
		}
		if len(args) > 3 && !strings.Contains(out, `group "mend"`) {
			t.Errorf("mend status --queue-dsn lacks the subscription's lag:\n%s", out)
		}
	}
}

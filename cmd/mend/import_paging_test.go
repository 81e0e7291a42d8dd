package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mendq/mend/internal/sqtest"
)

// Paging tests for mend import: each kills one planted one-line bug that
// the rest of the suite let through (issue 18). Resuming at page.Next+1
// skips the row after each page boundary when DLQ rows sit at adjacent
// offsets; stopping on a short page instead of page.Done ends the import
// early when a page holds rows the server matched but the byte-exact check
// dropped.

// rawDeadLetter inserts a DLQ row directly, with all twelve columns as
// MoveToDLQ's INSERT names them, so a test can spell the topic as no
// MoveToDLQ would.
func (b *importBundle) rawDeadLetter(t *testing.T, topic, partition, id, payload string) {
	t.Helper()
	if _, err := b.world.Queue.Exec("INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) "+
		"VALUES (?, ?, ?, NULL, ?, 1, 1, 1760000000000, 1, 'boom', 'speculate', NULL)", topic, id, payload, partition); err != nil {
		t.Fatal(err)
	}
}

func (b *importBundle) recordedIDs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, r := range b.records(t) {
		out = append(out, strings.Split(r, "|")[2])
	}
	return out
}

func TestImportPaging(t *testing.T) {
	t.Parallel()

	t.Run("dead letters at adjacent offsets across page boundaries are all recorded", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		ctx := context.Background()
		var ids []string
		for i := range 7 {
			id := fmt.Sprintf("q/batch/%d", i)
			ids = append(ids, id)
			if err := b.world.Publish(ctx, "speculate", "q", id, []byte(fmt.Sprintf(`{"id":%q,"queue":"q"}`, id)), nil); err != nil {
				t.Fatal(err)
			}
		}
		// Moved after all were published: the DLQ rows take adjacent offsets.
		for _, id := range ids {
			b.deadLetterMove(t, "speculate", "q", id)
		}
		code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--page-size", "2")
		if code != exitOK || !strings.Contains(out, "recorded 7 /") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s\nrecords: %v", code, out, errOut, b.recordedIDs(t))
		}
	})

	t.Run("pages holding rows the server matched only through PAD SPACE do not end the import", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		b.rawDeadLetter(t, "speculate_dlq", "q", "real-1", `{"id":"q/batch/1","queue":"q"}`)
		for i := range 5 {
			b.rawDeadLetter(t, "speculate_dlq ", "q", fmt.Sprintf("pad-%d", i), `{}`) // = 'speculate_dlq' under PAD SPACE
		}
		b.rawDeadLetter(t, "speculate_dlq", "q", "real-2", `{"id":"q/batch/2","queue":"q"}`)
		code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--topic", "speculate_dlq", "--page-size", "2")
		if code != exitOK || !strings.Contains(out, "recorded 2 /") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s\nrecords: %v", code, out, errOut, b.recordedIDs(t))
		}
	})

	t.Run("on a case-insensitive queue table, upper-case _DLQ rows do not end the import", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		if _, err := b.world.Queue.Exec("ALTER TABLE queue_messages CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"); err != nil {
			t.Fatal(err)
		}
		b.rawDeadLetter(t, "speculate_dlq", "q", "real-1", `{"id":"q/batch/1","queue":"q"}`)
		for i := range 5 {
			b.rawDeadLetter(t, "speculate_DLQ", "q", fmt.Sprintf("upper-%d", i), `{}`) // matches RIGHT(topic, 4) = '_dlq' here
		}
		b.rawDeadLetter(t, "speculate_dlq", "q", "real-2", `{"id":"q/batch/2","queue":"q"}`)
		code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--page-size", "2")
		if code != exitOK || !strings.Contains(out, "recorded 2 /") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s\nrecords: %v", code, out, errOut, b.recordedIDs(t))
		}
	})
}

func (b *importBundle) deadLetterMove(t *testing.T, topic, partition, id string) {
	t.Helper()
	if err := b.world.MoveToDLQ(context.Background(), topic, partition, id, sqtest.Failure{Count: 1, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
}

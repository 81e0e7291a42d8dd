package main

import (
	"bytes"
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
)

// importBundle is mend's database and a submit queue's (application and
// queue tables in one database), holding dead letters written the way the
// real message store writes them.
type importBundle struct {
	mendDSN, queueDSN string
	mend              *sql.DB
	world             sqtest.World
}

func setupImport(t *testing.T) *importBundle {
	t.Helper()
	m := mysqltest.NewDB(t, migrations.Up)
	q := mysqltest.NewDB(t, sqtest.Apply)
	conn := q.SQL(t)
	return &importBundle{mendDSN: m.DSN, queueDSN: q.DSN, mend: m.SQL(t), world: sqtest.World{App: conn, Queue: conn}}
}

// deadLetter publishes a message and moves it to its DLQ topic.
func (b *importBundle) deadLetter(t *testing.T, topic, partition, id, payload string) {
	t.Helper()
	ctx := context.Background()
	if err := b.world.Publish(ctx, topic, partition, id, []byte(payload), map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	f := sqtest.Failure{Count: 3, LastError: "boom", Subjects: []sqtest.Subject{{Type: "queue", ID: "q"}}}
	if err := b.world.MoveToDLQ(ctx, topic, partition, id, f); err != nil {
		t.Fatal(err)
	}
}

// seedMixed writes dead letters of every kind, and live messages that
// import must leave alone.
func (b *importBundle) seedMixed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := b.world.SeedBuild(ctx, "q", "build-1", "q/batch/3"); err != nil {
		t.Fatal(err)
	}
	b.deadLetter(t, "speculate", "q", "q/batch/1", `{"id":"q/batch/1","queue":"q"}`)                               // recorded
	b.deadLetter(t, "merge-signal", "q", "q/batch/2", `{"id":"q/batch/2","outcome":"SUCCEEDED","queue_name":"q"}`) // recorded
	b.deadLetter(t, "buildsignal", "build-1", "build-1", `{"id":"build-1","queue":"q"}`)                           // recorded with --host-dsn
	b.deadLetter(t, "conclude", "r", "r/batch/1/conclude/speculate", `{"id":"r/batch/1","queue":""}`)              // recorded, queue r from the partition
	b.deadLetter(t, "buildsignal", "build-2", "build-2", `{"id":"build-2","queue":"q"}`)                           // parked: no such build
	b.deadLetter(t, "speculate", "q", "dup", `{"id":"q/batch/1","id":"q/batch/9","queue":"q"}`)                    // parked: duplicate key
	b.deadLetter(t, "build", "q/batch/4", "b@1", `{"id":"q/batch/4","queue":""}`)                                  // parked: no queue
	b.deadLetter(t, "cancel", "q/7", "q/7", `{"id":"q/7","queue":"q"}`)                                            // parked: request topic
	// Live messages, not dead letters.
	if err := b.world.Publish(ctx, "speculate", "q", "live-1", []byte(`{"id":"q/batch/5","queue":"q"}`), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.world.Publish(ctx, "speculate_dlqx", "q", "not-a-dlq", []byte(`{}`), nil); err != nil {
		t.Fatal(err)
	}
}

func (b *importBundle) run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), append([]string{"import"}, args...), &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

// records lists mend's records as "queue|topic|message_id|state|batch|desired", sorted.
func (b *importBundle) records(t *testing.T) []string {
	t.Helper()
	rows, err := b.mend.Query("SELECT queue, topic, message_id, state, batch_id, desired_outcome, original_topic FROM mend_records")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q, topic, id, state, batch, desired, orig string
		if err := rows.Scan(&q, &topic, &id, &state, &batch, &desired, &orig); err != nil {
			t.Fatal(err)
		}
		if orig+"_dlq" != topic {
			t.Errorf("record %s/%s: original topic %q", topic, id, orig)
		}
		out = append(out, strings.Join([]string{q, topic, id, state, batch, desired}, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestImport(t *testing.T) {
	t.Parallel()

	t.Run("twice: each dead letter recorded once, and the summary says so", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		b.seedMixed(t)
		code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--host-dsn", b.queueDSN, "--page-size", "3")
		if code != exitOK || !strings.Contains(out, "recorded 4 / already recorded 0 / parked undecodable 4 (of 8 dead letters read)") {
			t.Fatalf("first import: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		// Progress goes to stderr, page by page (8 rows in pages of 3, with live rows between).
		if n := strings.Count(errOut, "mend import: up to offset"); n < 3 {
			t.Errorf("stderr has %d progress lines; want one per page:\n%s", n, errOut)
		}
		want := []string{
			"q|buildsignal_dlq|build-1|pending|q/batch/3|failed",
			"q|buildsignal_dlq|build-2|parked||",
			"q|cancel_dlq|q/7|parked||",
			"q|merge-signal_dlq|q/batch/2|pending|q/batch/2|succeeded",
			"q|speculate_dlq|dup|parked||",
			"q|speculate_dlq|q/batch/1|pending|q/batch/1|failed",
			"r|conclude_dlq|r/batch/1/conclude/speculate|pending|r/batch/1|failed",
			"(unresolved)|build_dlq|b@1|parked||",
		}
		slices.Sort(want)
		if got := b.records(t); !slices.Equal(got, want) {
			t.Fatalf("records after the first import:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}

		code, out, errOut = b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--host-dsn", b.queueDSN)
		if code != exitOK || !strings.Contains(out, "recorded 0 / already recorded 8 / parked undecodable 0 (of 8 dead letters read)") {
			t.Fatalf("second import: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		if got := b.records(t); !slices.Equal(got, want) {
			t.Fatalf("records after the second import:\n%s", strings.Join(got, "\n"))
		}
	})

	t.Run("without --host-dsn a buildsignal is parked saying why", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		b.deadLetter(t, "buildsignal", "build-1", "build-1", `{"id":"build-1","queue":"q"}`)
		code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN)
		if code != exitOK || !strings.Contains(out, "recorded 0 / already recorded 0 / parked undecodable 1") || !strings.Contains(errOut, "no --host-dsn") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		var reason string
		if err := b.mend.QueryRow("SELECT last_error FROM mend_records").Scan(&reason); err != nil || !strings.Contains(reason, "without a build lookup") {
			t.Fatalf("park reason %q, %v", reason, err)
		}
	})

	t.Run("--topic with or without the suffix, and --queue", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		b.seedMixed(t)
		for _, topic := range []string{"speculate", "speculate_dlq"} {
			code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--topic", topic)
			if code != exitOK || !strings.Contains(out, "of 2 dead letters read") {
				t.Fatalf("--topic %s: exit %d\nstdout: %s\nstderr: %s", topic, code, out, errOut)
			}
		}
		if got := b.records(t); len(got) != 2 || !strings.HasPrefix(got[0], "q|speculate_dlq|") || !strings.HasPrefix(got[1], "q|speculate_dlq|") {
			t.Fatalf("records after --topic speculate: %v", got)
		}
		// --queue keeps the rows filed under r: the conclude row's queue
		// comes from its partition key, since its payload's is empty.
		code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--queue", "r")
		if code != exitOK || !strings.Contains(out, "recorded 1 / already recorded 0 / parked undecodable 0 (of 8 dead letters read, 7 of other queues skipped)") {
			t.Fatalf("--queue r: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})

	t.Run("--since keeps recent dead letters, by failed_at", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		old := time.Now().Add(-48 * time.Hour).UnixMilli()
		b.world.NowMS = func() int64 { return old }
		b.deadLetter(t, "speculate", "q", "old", `{"id":"q/batch/1","queue":"q"}`)
		b.world.NowMS = nil
		b.deadLetter(t, "speculate", "q", "new", `{"id":"q/batch/2","queue":"q"}`)
		code, out, errOut := b.run(t, nil, "--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--since", "24h")
		if code != exitOK || !strings.Contains(out, "recorded 1 / already recorded 0 / parked undecodable 0 (of 1 dead letters read)") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		if got := b.records(t); len(got) != 1 || !strings.Contains(got[0], "|new|") {
			t.Fatalf("records: %v; want only the recent one", got)
		}
	})

	t.Run("environment twins", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		b.deadLetter(t, "speculate", "q", "m", `{"id":"q/batch/1","queue":"q"}`)
		env := map[string]string{"MEND_DSN": b.mendDSN, "MEND_QUEUE_DSN": b.queueDSN, "MEND_TOPIC": "speculate", "MEND_QUEUE": "q", "MEND_SINCE": "1h", "MEND_PAGE_SIZE": "1"}
		code, out, errOut := b.run(t, env)
		if code != exitOK || !strings.Contains(out, "recorded 1 / already recorded 0 / parked undecodable 0 (of 1 dead letters read)") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		t.Parallel()
		b := setupImport(t)
		for _, args := range [][]string{
			{"--dsn", b.mendDSN},
			{"--dsn", b.mendDSN, "--queue-dsn", "not a dsn"},
			{"--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--since", "-1h"},
			{"--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--page-size", "0"},
			{"--dsn", b.mendDSN, "--queue-dsn", b.queueDSN, "--queue", "q\xff"},
		} {
			if code, _, errOut := b.run(t, nil, args...); code != exitUsage || !strings.HasPrefix(errOut, "mend import: ") {
				t.Errorf("import %q: exit %d, stderr %q; want a one-line usage error", args, code, errOut)
			}
		}
	})
}

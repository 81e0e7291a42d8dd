package subscribe_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/mendq/mend/subscribe"
)

// Discovery must not scan the table: the topics come from a loose index
// scan of (topic, partition_key, offset), whose cost grows with the
// distinct topics; a DLQ topic's partitions from a covering range of the
// same index on that topic alone (its rows not yet collected), never from
// the other topics' rows.
func TestDiscoveryUsesALooseIndexScan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Many rows over few topics and partitions, so a scan and a loose scan differ.
	for i := range 20 {
		var sb strings.Builder
		var args []any
		for j := range 200 {
			if j > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?, ?, '{}', NULL, ?, 1, 1, 0, 0, '', '', NULL)")
			topic := []string{"speculate", "build", "log", "speculate_dlq"}[j%4]
			args = append(args, topic, fmt.Sprintf("m-%d-%d", i, j), fmt.Sprintf("p%d", j%7))
		}
		if _, err := b.queue.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES "+sb.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.queue.ExecContext(ctx, "ANALYZE TABLE queue_messages"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		sql  string
		args []any
		want []string
	}{
		{"EXPLAIN SELECT DISTINCT topic FROM queue_messages", nil, []string{"Using index for group-by"}},
		{"EXPLAIN SELECT DISTINCT partition_key FROM queue_messages WHERE topic = ?", []any{"speculate_dlq"}, []string{"Using index", "ref=const"}},
	} {
		// MySQL 9 prints a tree unless told otherwise; MariaDB knows no FORMAT=TRADITIONAL.
		rows, err := b.queue.QueryContext(ctx, strings.Replace(q.sql, "EXPLAIN", "EXPLAIN FORMAT=TRADITIONAL", 1), q.args...)
		if err != nil {
			rows, err = b.queue.QueryContext(ctx, q.sql, q.args...)
		}
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		var plan []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, c := range cols {
				plan = append(plan, fmt.Sprintf("%s=%s", c, vals[i]))
			}
		}
		rows.Close()
		got := strings.Join(plan, " ")
		for _, w := range q.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: plan %s; want %q", q.sql, got, w)
			}
		}
	}
}

// The lag query runs on the host's queue database every few seconds, and
// during a backlog every row above the watermarks counts: it must read
// only the (topic, partition_key, offset) index, never look the rows up
// (reading failed_at per row made it about four times as costly).
func TestLagReadsOnlyTheIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i := range 4 {
		var sb strings.Builder
		var args []any
		for j := range 250 {
			if j > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("('speculate_dlq', ?, '{}', NULL, ?, 1, 1, 0, 0, '', '', NULL)")
			args = append(args, fmt.Sprintf("m-%d-%d", i, j), fmt.Sprintf("p%d", j%50))
		}
		if _, err := b.queue.ExecContext(ctx, "INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) VALUES "+sb.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.queue.ExecContext(ctx, "INSERT INTO queue_offsets SELECT DISTINCT 'mend', topic, partition_key, 0, 0 FROM queue_messages"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.queue.ExecContext(ctx, "ANALYZE TABLE queue_messages, queue_offsets"); err != nil {
		t.Fatal(err)
	}
	q := "EXPLAIN FORMAT=TRADITIONAL " + subscribe.SQLLag
	rows, err := b.queue.QueryContext(ctx, q, "mend")
	if err != nil {
		rows, err = b.queue.QueryContext(ctx, "EXPLAIN "+subscribe.SQLLag, "mend")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	found := false
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = vals[i].String
		}
		if row["table"] != "m" {
			continue
		}
		found = true
		if extra := row["Extra"]; !strings.Contains(extra, "Using index") || strings.Contains(extra, "Using index condition") {
			t.Errorf("the lag query reads queue_messages with %v; want the index alone (Extra: Using index)", row)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("no plan row for queue_messages (m)")
	}
}

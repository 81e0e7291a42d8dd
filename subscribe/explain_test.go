package subscribe_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
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

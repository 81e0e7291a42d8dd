package storage_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// TestDueQueriesUseTheirIndexes checks, with EXPLAIN, that finding due work
// reads the due-time indexes rather than scanning records, so its cost grows
// with due work and not with finished records. (bench/ measures the cost.)
func TestDueQueriesUseTheirIndexes(t *testing.T) {
	mysqltest.SkipVitess(t, "vtgate answers EXPLAIN with one shard's plan in MySQL's tree format (one column), not the rows this test reads; TestVitessPlans checks the routing there")
	t.Parallel()
	b := setup(t)
	db := b.db.SQL(t)
	for i := range 3 {
		b.create(t, src("q", fmt.Sprintf("due-%d", i)))
	}
	// Many finished records: next_attempt_at NULL, outside every due range.
	if _, err := db.Exec(`INSERT INTO mend_records (record_id, queue, source_key, topic, partition_key, message_id, payload,
		failure_count, failure_error, failed_at, failure_subjects, batch_id, desired_outcome, state, version, attempts,
		next_attempt_at, last_error, epoch, created_at, updated_at, state_since)
		SELECT UNHEX(LEFT(SHA2(CONCAT('r', seq), 256), 32)), 'q', UNHEX(SHA2(CONCAT('k', seq), 256)), 't', '', CONCAT('m', seq), '',
			0, '', NULL, '[]', '', 'failed', 'done', 3, 0, NULL, '', 1, NOW(6), NOW(6), NOW(6)
		FROM (SELECT a.n * 100 + b.n * 10 + c.n AS seq
			FROM (SELECT 0 n UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) a,
			     (SELECT 0 n UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) b,
			     (SELECT 0 n UNION SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5 UNION SELECT 6 UNION SELECT 7 UNION SELECT 8 UNION SELECT 9) c) nums`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ANALYZE TABLE mend_records"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, query, wantKey string
		args                 []any
	}{
		{"RecordsDue", "EXPLAIN " + storage.SQLRecordsDue, "mend_records_queue_due", []any{"q", 100}},
		{"QueuesDue", "EXPLAIN " + storage.SQLQueuesDue, "mend_records_due", []any{100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := db.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// MySQL 9 prints EXPLAIN as a tree by default; ask for the
			// table form. MariaDB has no such variable (1193) and always
			// prints the table.
			var me *mysql.MySQLError
			if _, err := conn.ExecContext(t.Context(), "SET SESSION explain_format = 'TRADITIONAL'"); err != nil &&
				!(errors.As(err, &me) && me.Number == 1193) {
				t.Fatal(err)
			}
			rows, err := conn.QueryContext(t.Context(), tt.query, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				plan := map[string]string{}
				for i, c := range cols {
					if v, ok := vals[i].([]byte); ok {
						plan[c] = string(v)
					}
				}
				if plan["key"] != tt.wantKey {
					t.Fatalf("plan %v uses key %q; want %q", plan, plan["key"], tt.wantKey)
				}
			}
		})
	}
}

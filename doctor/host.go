package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqlx"
)

// hostTable is one of the submit queue's tables as mend's host adapter
// relies on it: the columns its statements name, the key that makes its
// reads single-row and its publishes deduplicated, and the privileges its
// statements need. Everything here is derived from the statements in
// package host; change both together.
type hostTable struct {
	name    string
	columns []string
	key     []string // a PRIMARY or UNIQUE key with exactly these columns, in order
	privs   []hostPriv
	// optional: only a feature that can be turned off needs the table; a
	// problem with it is a warning that names the feature, not a failure.
	optional string
}

// hostPriv is one privilege and a write-free probe that needs exactly it:
// EXPLAIN checks a statement's privileges as running it would (roles,
// column grants and partial revokes included) but executes nothing.
type hostPriv struct {
	name  string // SELECT, INSERT, UPDATE or DELETE
	probe string
	why   string
}

// queueMessageColumns are the twelve columns a publish names (the table
// has no defaults, so an INSERT must name every one).
var queueMessageColumns = []string{"topic", "id", "payload", "metadata", "partition_key", "created_at", "published_at",
	"failed_at", "failure_count", "last_error", "original_topic", "failure_detail"}

// hostAppTables are the application database's tables mend uses.
var hostAppTables = []hostTable{
	{name: "batch", columns: []string{"queue", "id", "contains", "state", "version"}, key: []string{"queue", "id"},
		privs: []hostPriv{
			{"SELECT", "EXPLAIN SELECT queue FROM batch WHERE FALSE", "BatchGet and LiveBatches read batches"},
			{"UPDATE", "EXPLAIN UPDATE batch SET version = 0 WHERE FALSE", "BatchTransition's compare-and-set"},
		}},
	{name: "queue_batch_state", columns: []string{"queue", "state", "batch_id"}, key: []string{"queue", "state", "batch_id"},
		privs: []hostPriv{
			{"SELECT", "EXPLAIN SELECT queue FROM queue_batch_state WHERE FALSE", "LiveBatches reads the membership rows"},
			{"INSERT", "EXPLAIN INSERT INTO queue_batch_state (queue, state, batch_id) VALUES ('', '', '')", "a transition's INSERT IGNORE of the new state's row, and EnsureRecord"},
			{"DELETE", "EXPLAIN DELETE FROM queue_batch_state WHERE FALSE", "a transition deletes the old state's row"},
		}},
	{name: "request", columns: []string{"queue", "id", "state", "version"}, key: []string{"queue", "id"},
		privs: []hostPriv{
			{"SELECT", "EXPLAIN SELECT queue FROM request WHERE FALSE", "BatchFinish reads the member requests"},
			{"UPDATE", "EXPLAIN UPDATE request SET version = 0 WHERE FALSE", "BatchFinish's compare-and-set to the terminal state"},
		}},
	{name: "build", columns: []string{"queue", "id", "batch_id"}, key: []string{"queue", "id"},
		privs: []hostPriv{
			{"SELECT", "EXPLAIN SELECT queue FROM build WHERE FALSE", "BuildBatch traces a buildsignal dead letter to its batch"},
		}},
}

// hostQueueTables are the queue database's tables mend uses.
var hostQueueTables = []hostTable{
	{name: "queue_messages", columns: queueMessageColumns, key: []string{"topic", "partition_key", "id"},
		privs: []hostPriv{
			{"INSERT", "EXPLAIN INSERT INTO queue_messages (topic, id, payload, metadata, partition_key, created_at, published_at, failed_at, failure_count, last_error, original_topic, failure_detail) " +
				"VALUES ('', '', '', NULL, '', 0, 0, 0, 0, '', '', NULL)", "Wake and the RequestLog fan-out publish"},
			// ON DUPLICATE KEY UPDATE topic = topic, the store's dedupe:
			// the update needs UPDATE, and reading topic on its right-hand
			// side needs SELECT, even though no row is ever changed.
			{"UPDATE", "EXPLAIN UPDATE queue_messages SET failed_at = 0 WHERE FALSE", "the publish's ON DUPLICATE KEY UPDATE (the store's dedupe)"},
			{"SELECT", "EXPLAIN SELECT topic FROM queue_messages WHERE FALSE", "the publish's ON DUPLICATE KEY UPDATE topic = topic reads topic"},
		}},
	{name: "queue_delivery_state", columns: []string{"consumer_group", "topic", "partition_key", "message_offset", "acked"},
		key: []string{"consumer_group", "topic", "partition_key", "message_offset"},
		privs: []hostPriv{
			{"SELECT", "EXPLAIN SELECT topic FROM queue_delivery_state WHERE FALSE", "the stuck-queue scan reads acknowledgements above a group's watermark"},
		},
		optional: "the stuck-queue scan (mend run --stuck-every, mend import --stuck) needs it; without it every scan fails (--stuck-every 0 turns it off)"},
}

// Host checks the submit queue's databases as mend run would use
// them: appDSN for the application tables and queueDSN for the queue's
// (either may be empty: not checked). It only reads: catalog queries and
// EXPLAIN, never a statement that writes or creates anything.
func Host(ctx context.Context, appDSN, queueDSN string) []Check {
	var checks []Check
	if appDSN != "" {
		checks = append(checks, diagnoseHostDB(ctx, "host app", "--host-dsn", appDSN, hostAppTables)...)
	}
	if queueDSN != "" {
		checks = append(checks, diagnoseHostDB(ctx, "host queue", "--queue-dsn", queueDSN, hostQueueTables)...)
	}
	return checks
}

func diagnoseHostDB(ctx context.Context, label, flagName, dsn string, tables []hostTable) []Check {
	fail := func(detail, fix string) []Check {
		return []Check{{Name: label, Status: Fail, Detail: detail, Fix: fix}}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fail(flagName+" cannot be parsed: "+err.Error(), "use user:pass@tcp(host:port)/database")
	}
	if cfg.DBName == "" {
		return fail(flagName+" names no database", "add /<database> after the address")
	}
	if cfg.ClientFoundRows {
		return fail(flagName+" sets clientFoundRows=true: a compare-and-set that matched nothing would look applied, and the adapter refuses it",
			"remove clientFoundRows from "+flagName)
	}
	c, err := HostConfig(flagName, dsn)
	if err != nil {
		return fail(err.Error(), "remove the parameter from "+flagName+": mend sets its sessions itself")
	}
	db, err := mysqlx.OpenConfig(ctx, c)
	if err != nil {
		return fail(connectDetail(err, cfg), connectFix(err, cfg, flagName))
	}
	defer db.Close()
	var user string
	if err := db.QueryRowContext(ctx, currentUserQuery).Scan(&user); err != nil {
		return fail("cannot read the current user: "+err.Error(), "")
	}
	grantee := quoteAccount(user)
	out := []Check{{Name: label, Status: OK, Detail: fmt.Sprintf("%s/%s as %s", cfg.Addr, cfg.DBName, grantee)},
		sessionCheck(ctx, label+" session settings", db, c)}
	out = append(out, tlsCheck(ctx, db, c, label))
	for _, t := range tables {
		c := checkHostTable(ctx, db, label, cfg.DBName, grantee, t)
		if t.optional != "" && c.Status == Fail {
			c.Status, c.Detail = Warn, c.Detail+": "+t.optional
		}
		out = append(out, c)
	}
	return out
}

// checkHostTable checks one table's columns, key and privileges.
func checkHostTable(ctx context.Context, db *sql.DB, label, schema, grantee string, t hostTable) Check {
	name := label + " " + t.name
	grant := func(privs []string) string {
		return fmt.Sprintf("GRANT %s ON %s.%s TO %s", strings.Join(privs, ", "), quoteIdent(schema), quoteIdent(t.name), grantee)
	}
	var all []string
	for _, p := range t.privs {
		all = append(all, p.name)
	}
	cols, err := tableColumns(ctx, db, t.name)
	if err != nil {
		return Check{Name: name, Status: Fail, Detail: "cannot read the catalog: " + err.Error()}
	}
	if len(cols) == 0 {
		// The catalog shows only tables the user holds some privilege on.
		return Check{Name: name, Status: Fail,
			Detail: fmt.Sprintf("table %s is missing, or mend's user holds no privilege on it (mend never creates host tables)", t.name),
			Fix:    "point the DSN at the submit queue's own database; if the table is there: " + grant(all)}
	}
	var problems []string
	var missingCols []string
	for _, c := range t.columns {
		if !slices.Contains(cols, c) {
			missingCols = append(missingCols, c)
		}
	}
	if len(missingCols) > 0 {
		problems = append(problems, "missing column(s) "+strings.Join(missingCols, ", ")+" (or not visible to mend's user)")
	}
	keyOK, err := hasKey(ctx, db, t.name, t.key)
	if err != nil {
		return Check{Name: name, Status: Fail, Detail: "cannot read the indexes: " + err.Error()}
	}
	if !keyOK {
		problems = append(problems, fmt.Sprintf("no PRIMARY or UNIQUE key on exactly (%s)", strings.Join(t.key, ", ")))
	}
	var missing, whys []string
	for _, p := range t.privs {
		if len(missingCols) > 0 {
			break // the probes name columns; the shape is the first problem
		}
		if _, err := db.ExecContext(ctx, p.probe); err != nil {
			if !deniedError(err) {
				return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("cannot check the %s privilege: %v", p.name, err)}
			}
			missing = append(missing, p.name)
			whys = append(whys, p.name+" for "+p.why)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("mend's user lacks %s (%s)", strings.Join(missing, ", "), strings.Join(whys, "; ")))
	}
	if len(problems) > 0 {
		var fixes []string
		if len(missingCols) > 0 || !keyOK {
			fixes = append(fixes, "this is not uber/submitqueue's table: point the DSN at the submit queue's own database")
		}
		if len(missing) > 0 {
			fixes = append(fixes, grant(missing))
		}
		return Check{Name: name, Status: Fail, Detail: strings.Join(problems, "; "), Fix: strings.Join(fixes, "; ")}
	}
	return Check{Name: name, Status: OK, Detail: fmt.Sprintf("%d columns, key (%s), %s granted",
		len(t.columns), strings.Join(t.key, ", "), strings.Join(all, ", "))}
}

// tableColumns lists a table's columns in the connection's database.
func tableColumns(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, tableColumnsQuery, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, strings.ToLower(c))
	}
	return cols, rows.Err()
}

// hasKey reports whether the table has a unique index (the primary key
// included) on exactly cols, in that order.
func hasKey(ctx context.Context, db *sql.DB, table string, cols []string) (bool, error) {
	rows, err := db.QueryContext(ctx, uniqueKeysQuery, table)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	keys := map[string][]string{}
	for rows.Next() {
		var idx, col string
		if err := rows.Scan(&idx, &col); err != nil {
			return false, err
		}
		keys[idx] = append(keys[idx], strings.ToLower(col))
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, k := range keys {
		if slices.Equal(k, cols) {
			return true, nil
		}
	}
	return false, nil
}

// deniedError reports whether err is the server refusing a statement for a
// missing privilege: 1142 (table), 1143 (column), 1044 (database).
func deniedError(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1142, 1143, 1044:
		return true
	}
	return false
}

// quoteAccount turns CURRENT_USER()'s user@host into 'user'@'host'.
func quoteAccount(user string) string {
	i := strings.LastIndexByte(user, '@')
	if i < 0 {
		return quoteString(user)
	}
	return quoteString(user[:i]) + "@" + quoteString(user[i+1:])
}

func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

package doctor

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// Database checks mend's own database as mend run would use it (dsn, with
// the lease TTL run is given) and returns the checks with the target they
// ran on ("addr/db as user"). It runs every check it can; a check that cannot run (no
// connection) is reported as failed rather than skipped silently.
func Database(ctx context.Context, dsn string, ttl time.Duration) ([]Check, string) {
	var checks []Check
	add := func(name string, status Status, detail, fix string) {
		checks = append(checks, Check{Name: name, Status: status, Detail: detail, Fix: fix})
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		add("dsn", Fail, "cannot be parsed: "+err.Error(), "use user:pass@tcp(host:port)/database")
		return checks, "(unparsable DSN)"
	}
	target := fmt.Sprintf("%s/%s as %s", cfg.Addr, cfg.DBName, cfg.User)
	if cfg.DBName == "" {
		add("dsn", Fail, "names no database", "add /<database> after the address")
		return checks, target
	}
	if cfg.ClientFoundRows {
		add("clientFoundRows", Fail, "the DSN sets clientFoundRows=true: a no-op upsert would report 1 row, so create-if-absent could not tell an insert from a duplicate",
			"remove clientFoundRows from the DSN")
	} else {
		add("clientFoundRows", OK, "off (create-if-absent can tell an insert from a duplicate)", "")
	}

	// The session as the DSN gives it, and as mend's own connections see it.
	noCFR := strings.Replace(dsn, "clientFoundRows=true", "clientFoundRows=false", 1)
	mendCfg, err := storage.SessionConfig(noCFR, storage.Options{LeaseTTL: ttl})
	if err != nil {
		add("dsn parameters", Fail, err.Error(), "remove the parameter: mend sets its sessions itself (docs/operations.md)")
		return checks, target
	}
	asGiven, _ := HostConfig("--dsn", noCFR) // mend's session without the store's lock waits
	raw, err := mysqlx.OpenConfig(ctx, asGiven)
	if err != nil {
		add("connect", Fail, connectDetail(err, cfg), connectFix(err, cfg, "--dsn"))
		return checks, target
	}
	defer raw.Close()
	mendDB, err := mysqlx.OpenConfig(ctx, mendCfg)
	if err != nil {
		add("connect", Fail, err.Error(), "")
		return checks, target
	}
	defer mendDB.Close()

	checks = append(checks, checkServer(ctx, raw))
	checks = append(checks, Engine(ctx, raw)...)
	checks = append(checks, checkTopology(ctx, raw))
	checks = append(checks, Schema(ctx, raw))
	checks = append(checks, checkSQLMode(ctx, raw))
	checks = append(checks, checkIdentityColumns(ctx, raw)...)
	checks = append(checks, checkMendGrants(ctx, raw, cfg.DBName))
	checks = append(checks, checkTimeZone(ctx, mendDB))
	checks = append(checks, checkLockWait(ctx, raw, mendDB, cfg, ttl))
	checks = append(checks, sessionChecks(ctx, mendDB, mendCfg)...)
	checks = append(checks, tlsCheck(ctx, raw, asGiven, "dsn"))
	return checks, target
}

// checkTopology refuses what the fence cannot hold on: a multi-primary
// cluster, and statement-based binary logging (READ COMMITTED writes fail).
func checkTopology(ctx context.Context, db *sql.DB) Check {
	if err := storage.CheckTopology(ctx, db); err != nil {
		return Check{Name: "topology", Status: Fail, Detail: err.Error(),
			Fix: "point mend at a single primary (replicas for reads only) with binlog_format=ROW or MIXED"}
	}
	return Check{Name: "topology", Status: OK, Detail: "a single primary; no statement-based binary log"}
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

func checkServer(ctx context.Context, db *sql.DB) Check {
	var version, comment string
	if err := db.QueryRowContext(ctx, serverVersionQuery).Scan(&version, &comment); err != nil {
		return Check{Name: "server", Status: Fail, Detail: "cannot read the version: " + err.Error()}
	}
	flavor, minMajor, minMinor := "MySQL", 8, 0
	if strings.Contains(strings.ToLower(version+" "+comment), "mariadb") {
		flavor, minMajor, minMinor = "MariaDB", 10, 6
	}
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		return Check{Name: "server", Status: Warn, Detail: fmt.Sprintf("%s %s: cannot tell the version", flavor, version)}
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	detail := fmt.Sprintf("%s %s", flavor, version)
	if major < minMajor || (major == minMajor && minor < minMinor) {
		return Check{Name: "server", Status: Fail, Detail: detail + fmt.Sprintf(" is too old; mend needs %s %d.%d or later", flavor, minMajor, minMinor),
			Fix: "upgrade the server (MySQL 8.0+ or MariaDB 10.6+)"}
	}
	return Check{Name: "server", Status: OK, Detail: detail}
}

// Schema reads the version without golang-migrate, whose reader
// creates its bookkeeping table in whatever database it opens, and judges
// it against this module's schema range (SchemaRange): a newer schema
// made by expand migrations only is a warning, not a failure.
func Schema(ctx context.Context, db *sql.DB) Check {
	v, err := JudgeSchema(ctx, db)
	switch {
	case err != nil:
		return Check{Name: "schema", Status: Fail, Detail: "cannot read the schema version: " + err.Error()}
	case !v.OK:
		return Check{Name: "schema", Status: Fail, Detail: v.Detail, Fix: v.Fix}
	case v.Newer, v.Dirty:
		return Check{Name: "schema", Status: Warn, Detail: v.Detail, Fix: v.Fix}
	}
	return Check{Name: "schema", Status: OK, Detail: v.Detail}
}

func strictMode(mode string) bool {
	for m := range strings.SplitSeq(strings.ToUpper(mode), ",") {
		if m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" {
			return true
		}
	}
	return false
}

func checkSQLMode(ctx context.Context, db *sql.DB) Check {
	var global, session string
	if err := db.QueryRowContext(ctx, sqlModeQuery).Scan(&global, &session); err != nil {
		return Check{Name: "sql_mode", Status: Fail, Detail: "cannot read sql_mode: " + err.Error()}
	}
	fix := "include STRICT_TRANS_TABLES in the server's sql_mode and drop any sql_mode parameter from the DSN"
	switch {
	case !strictMode(session):
		return Check{Name: "sql_mode", Status: Fail, Fix: fix,
			Detail: fmt.Sprintf("sessions on this DSN run with sql_mode %q, which is not strict: an over-long identity is silently truncated instead of refused", session)}
	case !strictMode(global):
		return Check{Name: "sql_mode", Status: Fail, Fix: fix,
			Detail: fmt.Sprintf("the server's sql_mode %q is not strict: clients that do not set their own (ad-hoc SQL, the host) silently truncate", global)}
	}
	return Check{Name: "sql_mode", Status: OK, Detail: fmt.Sprintf("strict (%s); mend sets its own strict mode on every connection too", session)}
}

// identityColumns are the columns that must compare byte for byte.
var identityColumns = map[string][]string{
	"mend_records":       {"record_id", "queue", "source_key", "topic", "partition_key", "message_id", "batch_id"},
	"mend_events":        {"record_id", "queue", "op_id", "actor"},
	"mend_leases":        {"queue", "holder"},
	"mend_lease_history": {"queue", "holder"},
}

func checkIdentityColumns(ctx context.Context, db *sql.DB) []Check {
	var bad []string
	n := 0
	for _, table := range sortedKeys(identityColumns) {
		for _, col := range identityColumns[table] {
			var typ string
			err := db.QueryRowContext(ctx, columnTypeQuery, table, col).Scan(&typ)
			if err == sql.ErrNoRows {
				continue // no schema yet: the schema check says so
			}
			if err != nil {
				return []Check{{Name: "identity columns", Status: Fail, Detail: err.Error()}}
			}
			n++
			if typ = strings.ToLower(typ); typ != "binary" && typ != "varbinary" {
				bad = append(bad, fmt.Sprintf("%s.%s is %s", table, col, typ))
			}
		}
	}
	var hashIdx, engines int
	_ = db.QueryRowContext(ctx, hashIndexQuery).Scan(&hashIdx)
	_ = db.QueryRowContext(ctx, engineQuery).Scan(&engines)
	var out []Check
	switch {
	case n == 0:
		out = append(out, Check{Name: "identity columns", Status: Fail, Detail: "mend's tables are missing", Fix: "run: mend migrate up"})
	case len(bad) > 0:
		out = append(out, Check{Name: "identity columns", Status: Fail, Detail: strings.Join(bad, "; ") + ": a collation would fold case or trailing spaces and merge distinct identities",
			Fix: "restore the VARBINARY/BINARY column types of mend's migrations"})
	default:
		out = append(out, Check{Name: "identity columns", Status: OK, Detail: fmt.Sprintf("%d columns are BINARY/VARBINARY (byte-exact)", n)})
	}
	if hashIdx > 0 || engines > 0 {
		out = append(out, Check{Name: "indexes and engines", Status: Fail,
			Detail: fmt.Sprintf("%d non-BTREE index columns, %d non-InnoDB tables: MySQL 8 cannot load a USING HASH unique key, and fencing needs InnoDB row locks", hashIdx, engines),
			Fix:    "recreate the tables from mend's migrations"})
	}
	return out
}

func checkTimeZone(ctx context.Context, db *sql.DB) Check {
	var globalTZ, systemTZ string
	var offsetSec int64
	var dbNow time.Time
	err := db.QueryRowContext(ctx, clockQuery).Scan(&globalTZ, &systemTZ, &offsetSec, &dbNow)
	if err != nil {
		return Check{Name: "time zone", Status: Fail, Detail: "cannot read the clock: " + err.Error()}
	}
	if offsetSec != 0 {
		return Check{Name: "time zone", Status: Fail, Detail: fmt.Sprintf("NOW(6) is %d s off UTC in mend's sessions", offsetSec),
			Fix: "let mend set time_zone='+00:00' (do not override time_zone in the DSN)"}
	}
	skew := time.Since(dbNow)
	detail := fmt.Sprintf("mend's sessions run in UTC (server time_zone %s, system %s); database clock is %s from this host's",
		globalTZ, systemTZ, time.Duration(math.Abs(float64(skew))).Round(time.Millisecond))
	if skew > 5*time.Second || skew < -5*time.Second {
		return Check{Name: "time zone", Status: Warn, Detail: detail + " (mend compares only database times, but logs will not line up)"}
	}
	return Check{Name: "time zone", Status: OK, Detail: detail}
}

func checkLockWait(ctx context.Context, raw, mendDB *sql.DB, cfg *mysql.Config, ttl time.Duration) Check {
	var serverWait, mendWait int64
	if err := raw.QueryRowContext(ctx, lockWaitQuery).Scan(&serverWait); err != nil {
		return Check{Name: "lock wait timeout", Status: Fail, Detail: err.Error()}
	}
	if err := mendDB.QueryRowContext(ctx, lockWaitQuery).Scan(&mendWait); err != nil {
		return Check{Name: "lock wait timeout", Status: Fail, Detail: err.Error()}
	}
	wait := time.Duration(mendWait) * time.Second
	source := fmt.Sprintf("mend sets it from the lease TTL; the server default is %ds", serverWait)
	if wait >= ttl {
		return Check{Name: "lock wait timeout", Status: Fail,
			Detail: fmt.Sprintf("innodb_lock_wait_timeout %s (%s) is not below the lease TTL %s: a takeover could wait on the lease row longer than a whole term", wait, source, ttl),
			Fix:    fmt.Sprintf("raise --lease-ttl above %s", wait)}
	}
	return Check{Name: "lock wait timeout", Status: OK, Detail: fmt.Sprintf("%s (%s), below the lease TTL %s", wait, source, ttl)}
}

// mendTables are mend's tables with the privileges mend run needs on each
// (docs/operations.md, "Least-privilege grants"), each probed by EXPLAIN of
// a statement that needs exactly it and executes nothing.
var mendTables = []hostTable{
	{name: "mend_records", privs: []hostPriv{
		{"SELECT", "EXPLAIN SELECT record_id FROM mend_records WHERE FALSE", "every read of a record"},
		{"INSERT", "EXPLAIN INSERT INTO mend_records (record_id) VALUES (NULL)", "create-if-absent"},
		{"UPDATE", "EXPLAIN UPDATE mend_records SET version = 0 WHERE FALSE", "every state change, and create-if-absent's ON DUPLICATE KEY UPDATE"},
		{"DELETE", "EXPLAIN DELETE FROM mend_records WHERE FALSE", "retention pruning"},
	}},
	{name: "mend_events", privs: []hostPriv{
		{"SELECT", "EXPLAIN SELECT record_id FROM mend_events WHERE FALSE", "history and op lookups"},
		{"INSERT", "EXPLAIN INSERT INTO mend_events (record_id) VALUES (NULL)", "every event"},
		{"DELETE", "EXPLAIN DELETE FROM mend_events WHERE FALSE", "retention pruning"},
	}},
	{name: "mend_leases", privs: []hostPriv{
		{"SELECT", "EXPLAIN SELECT queue FROM mend_leases WHERE FALSE", "the fence check of every write"},
		{"INSERT", "EXPLAIN INSERT INTO mend_leases (queue) VALUES (NULL)", "a queue's first lease"},
		{"UPDATE", "EXPLAIN UPDATE mend_leases SET epoch = 0 WHERE FALSE", "acquire, renew and release"},
	}},
	{name: "mend_lease_history", privs: []hostPriv{
		{"SELECT", "EXPLAIN SELECT queue FROM mend_lease_history WHERE FALSE", "closing a term"},
		{"INSERT", "EXPLAIN INSERT INTO mend_lease_history (queue) VALUES (NULL)", "a row per term"},
		{"UPDATE", "EXPLAIN UPDATE mend_lease_history SET holder = '' WHERE FALSE", "closing a term"},
	}},
	{name: "mend_schema_migrations", privs: []hostPriv{
		{"SELECT", "EXPLAIN SELECT version FROM mend_schema_migrations WHERE FALSE", "readiness and doctor compare the schema version"},
	}},
}

// checkMendGrants probes every privilege mend run needs on its own tables,
// so a read-only or half-granted user fails here rather than on the first
// write of a repair.
func checkMendGrants(ctx context.Context, db *sql.DB, schema string) Check {
	var user string
	if err := db.QueryRowContext(ctx, currentUserQuery).Scan(&user); err != nil {
		return Check{Name: "grants", Status: Fail, Detail: "cannot read the current user: " + err.Error()}
	}
	grantee := quoteAccount(user)
	var problems, fixes []string
	for _, t := range mendTables {
		var missing []string
		for _, p := range t.privs {
			_, err := db.ExecContext(ctx, p.probe)
			switch {
			case err == nil:
			case deniedError(err):
				missing = append(missing, p.name)
				problems = append(problems, fmt.Sprintf("%s on %s (%s)", p.name, t.name, p.why))
			case mysqlErrNumber(err) == 1146:
				return Check{Name: "grants", Status: Fail, Detail: "mend's tables are missing, so their grants cannot be checked", Fix: "run: mend migrate up"}
			default:
				return Check{Name: "grants", Status: Fail, Detail: fmt.Sprintf("cannot check %s on %s: %v", p.name, t.name, err)}
			}
		}
		if len(missing) > 0 {
			fixes = append(fixes, fmt.Sprintf("GRANT %s ON %s.%s TO %s", strings.Join(missing, ", "), quoteIdent(schema), quoteIdent(t.name), grantee))
		}
	}
	if len(problems) > 0 {
		return Check{Name: "grants", Status: Fail, Detail: grantee + " lacks " + strings.Join(problems, "; "), Fix: strings.Join(fixes, "; ")}
	}
	return Check{Name: "grants", Status: OK, Detail: grantee + " holds every privilege mend run needs on mend's tables"}
}

// connectDetail says why a connection failed; an access denial (1045)
// says so in words rather than as the server's raw error.
func connectDetail(err error, cfg *mysql.Config) string {
	if mysqlErrNumber(err) == 1045 {
		return fmt.Sprintf("access denied for user %q: the password is wrong, or the user does not exist for this client host (%v)%s", cfg.User, err, PlainDeniedHint(cfg))
	}
	return mysqlx.ExplainTLS(err).Error()
}

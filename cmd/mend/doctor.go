package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend/fence"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// Outcomes of a doctor check. Only fail makes doctor exit non-zero.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "FAIL"
)

type check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func newDoctorCmd(a *app) *cobra.Command {
	f := a.newCommand("doctor", "check the server, schema and settings, and the host's tables and grants, for what breaks mend",
		"Check the server, the schema and the settings mend depends on, and with --host-dsn/--queue-dsn the submit queue's\n"+
			"tables and the privileges mend's statements need on them. It only reads. Exits 1 if anything is wrong.", withDSN|withLog|withJSON)
	f.addTimeout(opTimeout)
	ttl := f.Duration("lease-ttl", fence.TTLDefault, "the lease TTL mend run uses, to compare the lock wait timeout with")
	hostDSN := f.String("host-dsn", "", "DSN of uber/submitqueue's application database, as mend run gets it: check batch, queue_batch_state, request, build\n("+hostDSNSame+": the same database as --dsn; empty: the host is not checked)")
	queueDSN := f.String("queue-dsn", "", "DSN of uber/submitqueue's queue database, as mend run gets it: check queue_messages; default: --host-dsn")
	sub := addDoctorSubscribeFlags(f)
	wakeTopic := f.String("wake-topic", host.WakeTopicDefault, "the wake topic mend run publishes to: check that a consumer group of the host has joined it")
	var wakeUnjoined bool
	addWakeTopicUnjoinedFlag(f, &wakeUnjoined)
	return f.run(func(ctx context.Context, args []string) error {
		if f.dsn == "" {
			return usagef("--dsn is required (or MEND_DSN), e.g. user:pass@tcp(127.0.0.1:3306)/mend")
		}
		// The same rules as mend run's: doctor checks what run would use.
		hostChecked := *hostDSN != ""
		if *hostDSN == hostDSNSame {
			*hostDSN = f.dsn
		}
		if *queueDSN == "" {
			*queueDSN = *hostDSN
		}
		if err := checkLeaseTTL(*ttl); err != nil {
			return err
		}
		if err := host.ValidateWakeTopic(*wakeTopic); err != nil {
			return usagef("--wake-topic: %v", err)
		}
		checks, target := diagnose(ctx, f.dsn, *ttl)
		checks = append(checks, diagnoseHost(ctx, *hostDSN, *queueDSN)...)
		if *queueDSN != "" {
			checks = append(checks, diagnoseWakeTopic(ctx, *queueDSN, *wakeTopic, wakeTopicIgnore(sub.group), wakeUnjoined))
		}
		if hostChecked && !f.given("queue-dsn") {
			checks = append(checks, check{Name: "queue dsn", Status: checkOK,
				Detail: "--queue-dsn not given: the queue database is --host-dsn's, as mend run takes it (its tables were checked there)"})
		}
		if !hostChecked {
			checks = append(checks, check{Name: "host", Status: checkWarn, Detail: "not checked: no --host-dsn",
				Fix: "give --host-dsn as mend run gets it (--host-dsn=" + hostDSNSame + " when the submit queue's tables are in mend's database)"})
		}
		if sub.on(f) {
			checks = append(checks, diagnoseSubscription(ctx, *queueDSN, sub.group, sub.warnAge, sub.settle)...)
		}
		failed := 0
		for _, c := range checks {
			if c.Status == checkFail {
				failed++
			}
		}
		if f.json {
			if err := writeJSON(a.stdout, map[string]any{"target": target, "checks": checks, "problems": failed}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(a.stdout, "mend doctor: %s\n", target)
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			for _, c := range checks {
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Status, c.Name, c.Detail)
				if c.Fix != "" {
					fmt.Fprintf(tw, "  \t\tfix: %s\n", c.Fix)
				}
			}
			_ = tw.Flush()
		}
		if failed > 0 {
			return fmt.Errorf("%d problem(s) found; see the list above", failed)
		}
		if !f.json {
			fmt.Fprintln(a.stdout, "no problems found")
		}
		return nil
	})
}

// diagnose runs every check it can; a check that cannot run (no
// connection) is reported as failed rather than skipped silently.
func diagnose(ctx context.Context, dsn string, ttl time.Duration) ([]check, string) {
	var checks []check
	add := func(name, status, detail, fix string) {
		checks = append(checks, check{Name: name, Status: status, Detail: detail, Fix: fix})
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		add("dsn", checkFail, "cannot be parsed: "+err.Error(), "use user:pass@tcp(host:port)/database")
		return checks, "(unparsable DSN)"
	}
	target := fmt.Sprintf("%s/%s as %s", cfg.Addr, cfg.DBName, cfg.User)
	if cfg.DBName == "" {
		add("dsn", checkFail, "names no database", "add /<database> after the address")
		return checks, target
	}
	if cfg.ClientFoundRows {
		add("clientFoundRows", checkFail, "the DSN sets clientFoundRows=true: a no-op upsert would report 1 row, so create-if-absent could not tell an insert from a duplicate",
			"remove clientFoundRows from the DSN")
	} else {
		add("clientFoundRows", checkOK, "off (create-if-absent can tell an insert from a duplicate)", "")
	}

	// The session as the DSN gives it, and as mend's own connections see it.
	noCFR := strings.Replace(dsn, "clientFoundRows=true", "clientFoundRows=false", 1)
	mendCfg, err := storage.SessionConfig(noCFR, storage.Options{LeaseTTL: ttl})
	if err != nil {
		add("dsn parameters", checkFail, err.Error(), "remove the parameter: mend sets its sessions itself (docs/operations.md)")
		return checks, target
	}
	asGiven, _ := hostDoctorConfig("--dsn", noCFR) // mend's session without the store's lock waits
	raw, err := openConfig(ctx, asGiven)
	if err != nil {
		add("connect", checkFail, connectDetail(err, cfg), connectFix(err, cfg, "--dsn"))
		return checks, target
	}
	defer raw.Close()
	mendDB, err := openConfig(ctx, mendCfg)
	if err != nil {
		add("connect", checkFail, err.Error(), "")
		return checks, target
	}
	defer mendDB.Close()

	checks = append(checks, checkServer(ctx, raw))
	checks = append(checks, checkEngine(ctx, raw)...)
	checks = append(checks, checkTopology(ctx, raw))
	checks = append(checks, checkSchema(ctx, raw))
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
func checkTopology(ctx context.Context, db *sql.DB) check {
	if err := storage.CheckTopology(ctx, db); err != nil {
		return check{Name: "topology", Status: checkFail, Detail: err.Error(),
			Fix: "point mend at a single primary (replicas for reads only) with binlog_format=ROW or MIXED"}
	}
	return check{Name: "topology", Status: checkOK, Detail: "a single primary; no statement-based binary log"}
}

// openConfig opens a small pool of mend's sessions on cfg (from
// mysqlx.Config), resolved for its server as mysqlx.Open resolves every
// pool's (isolation level, sql_select_limit, ...).
func openConfig(ctx context.Context, cfg *mysql.Config) (*sql.DB, error) {
	if err := mysqlx.Resolve(ctx, cfg); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Addr, err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to %s: %w", cfg.Addr, err)
	}
	return db, nil
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

func checkServer(ctx context.Context, db *sql.DB) check {
	var version, comment string
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@version_comment").Scan(&version, &comment); err != nil {
		return check{Name: "server", Status: checkFail, Detail: "cannot read the version: " + err.Error()}
	}
	flavor, minMajor, minMinor := "MySQL", 8, 0
	if strings.Contains(strings.ToLower(version+" "+comment), "mariadb") {
		flavor, minMajor, minMinor = "MariaDB", 10, 6
	}
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		return check{Name: "server", Status: checkWarn, Detail: fmt.Sprintf("%s %s: cannot tell the version", flavor, version)}
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	detail := fmt.Sprintf("%s %s", flavor, version)
	if major < minMajor || (major == minMajor && minor < minMinor) {
		return check{Name: "server", Status: checkFail, Detail: detail + fmt.Sprintf(" is too old; mend needs %s %d.%d or later", flavor, minMajor, minMinor),
			Fix: "upgrade the server (MySQL 8.0+ or MariaDB 10.6+)"}
	}
	return check{Name: "server", Status: checkOK, Detail: detail}
}

// checkSchema reads the version without golang-migrate, whose reader
// creates its bookkeeping table in whatever database it opens, and judges
// it against this binary's schema range (schemarange.go): a newer schema
// made by expand migrations only is a warning, not a failure.
func checkSchema(ctx context.Context, db *sql.DB) check {
	v, err := judgeSchema(ctx, db)
	switch {
	case err != nil:
		return check{Name: "schema", Status: checkFail, Detail: "cannot read the schema version: " + err.Error()}
	case !v.OK:
		return check{Name: "schema", Status: checkFail, Detail: v.Detail, Fix: v.Fix}
	case v.Newer, v.Dirty:
		return check{Name: "schema", Status: checkWarn, Detail: v.Detail, Fix: v.Fix}
	}
	return check{Name: "schema", Status: checkOK, Detail: v.Detail}
}

func strictMode(mode string) bool {
	for m := range strings.SplitSeq(strings.ToUpper(mode), ",") {
		if m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" {
			return true
		}
	}
	return false
}

func checkSQLMode(ctx context.Context, db *sql.DB) check {
	var global, session string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.sql_mode, @@SESSION.sql_mode").Scan(&global, &session); err != nil {
		return check{Name: "sql_mode", Status: checkFail, Detail: "cannot read sql_mode: " + err.Error()}
	}
	fix := "include STRICT_TRANS_TABLES in the server's sql_mode and drop any sql_mode parameter from the DSN"
	switch {
	case !strictMode(session):
		return check{Name: "sql_mode", Status: checkFail, Fix: fix,
			Detail: fmt.Sprintf("sessions on this DSN run with sql_mode %q, which is not strict: an over-long identity is silently truncated instead of refused", session)}
	case !strictMode(global):
		return check{Name: "sql_mode", Status: checkFail, Fix: fix,
			Detail: fmt.Sprintf("the server's sql_mode %q is not strict: clients that do not set their own (ad-hoc SQL, the host) silently truncate", global)}
	}
	return check{Name: "sql_mode", Status: checkOK, Detail: fmt.Sprintf("strict (%s); mend sets its own strict mode on every connection too", session)}
}

// identityColumns are the columns that must compare byte for byte.
var identityColumns = map[string][]string{
	"mend_records":       {"record_id", "queue", "source_key", "topic", "partition_key", "message_id", "batch_id"},
	"mend_events":        {"record_id", "queue", "op_id", "actor"},
	"mend_leases":        {"queue", "holder"},
	"mend_lease_history": {"queue", "holder"},
}

func checkIdentityColumns(ctx context.Context, db *sql.DB) []check {
	var bad []string
	n := 0
	for _, table := range sortedKeys(identityColumns) {
		for _, col := range identityColumns[table] {
			var typ string
			err := db.QueryRowContext(ctx, `SELECT data_type FROM information_schema.columns
				WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?`, table, col).Scan(&typ)
			if err == sql.ErrNoRows {
				continue // no schema yet: the schema check says so
			}
			if err != nil {
				return []check{{Name: "identity columns", Status: checkFail, Detail: err.Error()}}
			}
			n++
			if typ = strings.ToLower(typ); typ != "binary" && typ != "varbinary" {
				bad = append(bad, fmt.Sprintf("%s.%s is %s", table, col, typ))
			}
		}
	}
	var hashIdx, engines int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name LIKE 'mend\_%' AND index_type <> 'BTREE'`).Scan(&hashIdx)
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name LIKE 'mend\_%' AND table_type = 'BASE TABLE' AND engine <> 'InnoDB'`).Scan(&engines)
	var out []check
	switch {
	case n == 0:
		out = append(out, check{Name: "identity columns", Status: checkFail, Detail: "mend's tables are missing", Fix: "run: mend migrate up"})
	case len(bad) > 0:
		out = append(out, check{Name: "identity columns", Status: checkFail, Detail: strings.Join(bad, "; ") + ": a collation would fold case or trailing spaces and merge distinct identities",
			Fix: "restore the VARBINARY/BINARY column types of mend's migrations"})
	default:
		out = append(out, check{Name: "identity columns", Status: checkOK, Detail: fmt.Sprintf("%d columns are BINARY/VARBINARY (byte-exact)", n)})
	}
	if hashIdx > 0 || engines > 0 {
		out = append(out, check{Name: "indexes and engines", Status: checkFail,
			Detail: fmt.Sprintf("%d non-BTREE index columns, %d non-InnoDB tables: MySQL 8 cannot load a USING HASH unique key, and fencing needs InnoDB row locks", hashIdx, engines),
			Fix:    "recreate the tables from mend's migrations"})
	}
	return out
}

func checkTimeZone(ctx context.Context, db *sql.DB) check {
	var globalTZ, systemTZ string
	var offsetSec int64
	var dbNow time.Time
	err := db.QueryRowContext(ctx, `SELECT @@GLOBAL.time_zone, @@system_time_zone,
		TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), NOW(6)), UTC_TIMESTAMP(6)`).Scan(&globalTZ, &systemTZ, &offsetSec, &dbNow)
	if err != nil {
		return check{Name: "time zone", Status: checkFail, Detail: "cannot read the clock: " + err.Error()}
	}
	if offsetSec != 0 {
		return check{Name: "time zone", Status: checkFail, Detail: fmt.Sprintf("NOW(6) is %d s off UTC in mend's sessions", offsetSec),
			Fix: "let mend set time_zone='+00:00' (do not override time_zone in the DSN)"}
	}
	skew := time.Since(dbNow)
	detail := fmt.Sprintf("mend's sessions run in UTC (server time_zone %s, system %s); database clock is %s from this host's",
		globalTZ, systemTZ, time.Duration(math.Abs(float64(skew))).Round(time.Millisecond))
	if skew > 5*time.Second || skew < -5*time.Second {
		return check{Name: "time zone", Status: checkWarn, Detail: detail + " (mend compares only database times, but logs will not line up)"}
	}
	return check{Name: "time zone", Status: checkOK, Detail: detail}
}

func checkLockWait(ctx context.Context, raw, mendDB *sql.DB, cfg *mysql.Config, ttl time.Duration) check {
	var serverWait, mendWait int64
	if err := raw.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&serverWait); err != nil {
		return check{Name: "lock wait timeout", Status: checkFail, Detail: err.Error()}
	}
	if err := mendDB.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&mendWait); err != nil {
		return check{Name: "lock wait timeout", Status: checkFail, Detail: err.Error()}
	}
	wait := time.Duration(mendWait) * time.Second
	source := fmt.Sprintf("mend sets it from the lease TTL; the server default is %ds", serverWait)
	if wait >= ttl {
		return check{Name: "lock wait timeout", Status: checkFail,
			Detail: fmt.Sprintf("innodb_lock_wait_timeout %s (%s) is not below the lease TTL %s: a takeover could wait on the lease row longer than a whole term", wait, source, ttl),
			Fix:    fmt.Sprintf("raise --lease-ttl above %s", wait)}
	}
	return check{Name: "lock wait timeout", Status: checkOK, Detail: fmt.Sprintf("%s (%s), below the lease TTL %s", wait, source, ttl)}
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
func checkMendGrants(ctx context.Context, db *sql.DB, schema string) check {
	var user string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&user); err != nil {
		return check{Name: "grants", Status: checkFail, Detail: "cannot read the current user: " + err.Error()}
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
				return check{Name: "grants", Status: checkFail, Detail: "mend's tables are missing, so their grants cannot be checked", Fix: "run: mend migrate up"}
			default:
				return check{Name: "grants", Status: checkFail, Detail: fmt.Sprintf("cannot check %s on %s: %v", p.name, t.name, err)}
			}
		}
		if len(missing) > 0 {
			fixes = append(fixes, fmt.Sprintf("GRANT %s ON %s.%s TO %s", strings.Join(missing, ", "), quoteIdent(schema), quoteIdent(t.name), grantee))
		}
	}
	if len(problems) > 0 {
		return check{Name: "grants", Status: checkFail, Detail: grantee + " lacks " + strings.Join(problems, "; "), Fix: strings.Join(fixes, "; ")}
	}
	return check{Name: "grants", Status: checkOK, Detail: grantee + " holds every privilege mend run needs on mend's tables"}
}

// connectDetail says why a connection failed; an access denial (1045)
// says so in words rather than as the server's raw error.
func connectDetail(err error, cfg *mysql.Config) string {
	if mysqlErrNumber(err) == 1045 {
		return fmt.Sprintf("access denied for user %q: the password is wrong, or the user does not exist for this client host (%v)%s", cfg.User, err, plainDeniedHint(cfg))
	}
	return mysqlx.ExplainTLS(err).Error()
}

func mysqlErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

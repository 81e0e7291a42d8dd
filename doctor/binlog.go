package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/binlog"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// Subscribe modes (mend run --subscribe-mode, client.Subscription.Mode).
const (
	// ModeAuto reads the binary log where every binlog prerequisite holds
	// (Binlog's Ready), else offsets.
	ModeAuto = "auto"
	// ModeBinlog reads the queue database server's binary log (package
	// binlog): no consumer group, nothing held back.
	ModeBinlog = "binlog"
	// ModeOffsets joins the *_dlq topics as a consumer group (package
	// subscribe).
	ModeOffsets = "offsets"
)

// ValidateMode refuses a subscribe mode other than ModeAuto, ModeBinlog,
// ModeOffsets or "" (auto), naming the valid values: mend run's
// --subscribe-mode and client.Subscription.Mode check through it.
func ValidateMode(mode string) error {
	switch mode {
	case "", ModeAuto, ModeBinlog, ModeOffsets:
		return nil
	}
	return fmt.Errorf("must be %s, %s or %s, got %q", ModeBinlog, ModeOffsets, ModeAuto, mode)
}

// BinlogParams are the binlog checks' inputs.
type BinlogParams struct {
	// DSN is mend's database (the position table, migration 0019).
	DSN string
	// QueueDSN is the host's queue database, whose server's binary log
	// is read.
	QueueDSN string
	// ServerID is the server_id mend's reader registers with.
	ServerID uint32
	// Source names the reader's position row; empty: the queue
	// database's schema name (binlog.Config.Source).
	Source string
	// Starting: the checks run before mend run starts (Preflight), which
	// recovers a purged position itself, so that is a warning, not a
	// refusal.
	Starting bool
}

// BinlogReport is what the binlog checks found.
type BinlogReport struct {
	Checks []Check
	// Ready: every prerequisite of binlog mode holds (warnings do not
	// count): auto mode reads the binary log.
	Ready bool
	// Why is the first prerequisite that fails, with its fix, when not
	// Ready; WhyTarget is where that check ran (Check.Target: the queue
	// database, or "" for mend's).
	Why, WhyTarget string
	// Source is the position row's source (BinlogParams.Source, else the
	// queue database's schema name). Saved is the position saved for it,
	// nil when none is (or it could not be read: see the position table
	// check). With a saved position auto mode stays in binlog mode
	// (StickyDetail).
	Source string
	Saved  *storage.BinlogPosition
}

// StickyDetail says why auto mode refuses to fall back to offsets beside
// a saved position (saved, of source) while binlog mode cannot run (why):
// what would be lost, and the way out. Open's refusal and doctor's FAIL
// say the same.
func StickyDetail(source string, saved storage.BinlogPosition, why string) string {
	return fmt.Sprintf("source %q has a saved binary-log position (%s), so auto mode stays in binlog mode, which cannot run: %s. "+
		"Falling back to offsets mode would never record the dead letters committed after that position and collected by the host's GC while offsets mode ran",
		source, DescribePosition(saved), why)
}

// StickyFix is StickyDetail's fix.
const StickyFix = "fix what the failing binlog check names, then start again (the reader resumes from the saved position); " +
	"to give the position up and accept that loss: --subscribe-mode offsets (docs/operations.md, \"Choosing the subscribe mode\")"

// BinlogGrants are the privileges binlog mode needs of the queue database
// user, beyond SELECT on queue_messages: reading the log as a replica
// (REPLICATION SLAVE) and listing its files (REPLICATION CLIENT; MariaDB
// 10.5+ calls it BINLOG MONITOR and accepts the old name).
const BinlogGrants = "REPLICATION SLAVE, REPLICATION CLIENT ON *.*"

// binlogGrantFix is the fix for a missing replication privilege.
func binlogGrantFix(grantee string) string {
	return "GRANT " + BinlogGrants + " TO " + grantee + " (docs/operations.md, \"Choosing the subscribe mode\"), or run --subscribe-mode offsets"
}

// Binlog checks what mend's binary-log reader needs of the queue database
// server and of mend's schema, and the saved position's health. Each check
// that fails names its fix; Ready says whether binlog mode can run.
func Binlog(ctx context.Context, p BinlogParams) BinlogReport {
	var r BinlogReport
	queueTarget := "--queue-dsn"
	prereq := func(c Check) {
		if c.Target == "" && c.Name != "binlog position table" {
			c.Target = queueTarget // every other check is of the queue database
		}
		r.add(c, true)
	}
	positionRead := false
	done := func() BinlogReport {
		r.finish()
		if !positionRead && r.Source != "" {
			// A check of the queue database failed before the position
			// was read: read it anyway, as auto mode's choice needs it.
			r.Saved = savedPosition(ctx, p.DSN, r.Source)
		}
		return r
	}
	cfg, err := HostConfig("--queue-dsn", p.QueueDSN)
	r.Source = p.Source
	if err != nil {
		prereq(Check{Name: "binlog", Status: Fail, Detail: err.Error(), Fix: "check --queue-dsn"})
		return done()
	}
	r.Source = cmpOr(p.Source, cfg.DBName)
	queueTarget = fmt.Sprintf("--queue-dsn %s/%s as %s", cfg.Addr, cfg.DBName, cfg.User)
	db, err := mysqlx.OpenConfig(ctx, cfg)
	if err != nil {
		prereq(Check{Name: "binlog", Status: Fail, Detail: "the queue database: " + err.Error(), Fix: "check --queue-dsn"})
		return done()
	}
	defer db.Close()
	var user string
	if err := db.QueryRowContext(ctx, currentUserQuery).Scan(&user); err != nil {
		prereq(Check{Name: "binlog", Status: Fail, Detail: "cannot read the current user: " + err.Error()})
		return done()
	}
	grantee := quoteAccount(user)
	srv, probeErr := binlog.Probe(ctx, db)
	if probeErr != nil && !errors.Is(probeErr, binlog.ErrNoReplicationClient) {
		prereq(Check{Name: "binlog", Status: Fail, Detail: oneLine(probeErr.Error()), Fix: "check --queue-dsn"})
		return done()
	}
	for _, c := range binlogSettings(srv) {
		prereq(c)
	}
	if srv.LogBin {
		prereq(binlogFilter(srv, cfg.DBName))
	}
	client := Check{Name: "binlog REPLICATION CLIENT", Status: OK, Detail: "the queue database user may list the binary logs (SHOW BINARY LOGS)"}
	if probeErr != nil {
		client.Status, client.Detail, client.Fix = Fail, oneLine(probeErr.Error()), binlogGrantFix(grantee)
	}
	prereq(client)
	prereq(replicationSlave(ctx, db, grantee))
	id := Check{Name: "binlog server id", Status: OK, Detail: "mend's reader registers with a server_id of its own, not the queue database server's"}
	if p.ServerID == srv.ServerID {
		id.Status, id.Detail = Fail, fmt.Sprintf("mend's reader would register as server_id %d, the queue database server's own @@server_id", p.ServerID)
		id.Fix = "give mend run --binlog-server-id a value no server or replica of the host's topology uses"
	}
	prereq(id)
	// The position table is a prerequisite; the position's health is not:
	// a purged or aging position is the reader's to recover.
	checks, saved := binlogPosition(ctx, p, cfg.DBName, srv, probeErr == nil)
	positionRead, r.Saved = true, saved
	for _, c := range checks {
		if c.Name == "binlog position table" {
			prereq(c)
		} else {
			r.add(c, false)
		}
	}
	return done()
}

// add appends c to the report. A prerequisite that fails (Fail, never a
// Warn: a warning is a risk to know of, not a reason to run offsets)
// becomes Why when it is the first.
func (r *BinlogReport) add(c Check, prereq bool) {
	r.Checks = append(r.Checks, c)
	if prereq && c.Status == Fail && r.Why == "" {
		r.Why, r.WhyTarget = c.Detail, c.Target
		if c.Fix != "" {
			r.Why += " (fix: " + c.Fix + ")"
		}
	}
}

// finish sets Ready: no prerequisite failed.
func (r *BinlogReport) finish() { r.Ready = r.Why == "" }

// savedPosition is the position saved for source in mend's database (dsn),
// nil when there is none or it cannot be read.
func savedPosition(ctx context.Context, dsn, source string) *storage.BinlogPosition {
	store, err := storage.Open(ctx, dsn, storage.Options{})
	if err != nil {
		return nil
	}
	defer store.Close()
	saved, err := store.BinlogPositionGet(ctx, binlog.LeaseName(source))
	if err != nil {
		return nil
	}
	return &saved
}

// binlogSettings are the server's binary-log settings as checks.
func binlogSettings(srv binlog.Server) []Check {
	fix := func(v string) string {
		if srv.Flavor == "mariadb" {
			return fmt.Sprintf("SET GLOBAL %s and the same in the server's config file ([mariadbd] section)", v)
		}
		return "SET PERSIST " + v
	}
	logBin := Check{Name: "binlog log_bin", Status: OK, Detail: "the binary log is on"}
	if !srv.LogBin {
		logBin.Status, logBin.Detail = Fail, "the binary log is off: binlog mode cannot run"
		logBin.Fix = "remove skip-log-bin / disable-log-bin (MySQL 8+ logs by default); MariaDB: log_bin=mysql-bin in the [mariadbd] section; or run --subscribe-mode offsets"
		return []Check{logBin}
	}
	out := []Check{logBin}
	format := Check{Name: "binlog format", Status: OK, Detail: "binlog_format=ROW: every insert is logged with its row"}
	if !strings.EqualFold(srv.Format, "ROW") {
		format.Status, format.Detail, format.Fix = Fail, fmt.Sprintf("binlog_format=%s: inserts are not logged as rows", srv.Format), fix("binlog_format=ROW")
	}
	image := Check{Name: "binlog row image", Status: OK, Detail: "binlog_row_image=FULL: every column of a dead letter is logged"}
	if !strings.EqualFold(srv.RowImage, "FULL") {
		image.Status, image.Detail, image.Fix = Fail, fmt.Sprintf("binlog_row_image=%s: a dead letter's row is not logged whole", srv.RowImage), fix("binlog_row_image=FULL")
	}
	gtid := Check{Name: "binlog GTIDs", Status: OK, Detail: "the server has GTIDs: the reader resumes by GTID on a new primary after a failover"}
	if srv.Flavor == "mysql" && !srv.GTIDs {
		gtid.Status = Warn
		gtid.Detail = fmt.Sprintf("gtid_mode=%s: a failover of the host's primary makes the reader start over from the tables (a file and offset mean nothing on another server); dead letters the host's GC collected meanwhile are lost", srv.GTIDMode)
		gtid.Fix = "turn gtid_mode=ON (with enforce_gtid_consistency=ON, stepping gtid_mode OFF_PERMISSIVE, ON_PERMISSIVE, ON)"
	}
	meta := Check{Name: "binlog row metadata", Status: OK, Detail: "binlog_row_metadata=FULL: the log names every column, so a column added to queue_messages does not stop the reader"}
	if !strings.EqualFold(srv.RowMetadata, "FULL") {
		meta.Status = Warn
		meta.Detail = fmt.Sprintf("binlog_row_metadata=%s: a column added to queue_messages while mend is behind stops the reader until it is set", cmpOr(srv.RowMetadata, "(none)"))
		meta.Fix = fix("binlog_row_metadata=FULL")
	}
	return append(out, format, image, gtid, meta)
}

// binlogFilter checks that the binary log logs the queue schema (the
// reader's own rule, binlog.Server.FilterProblem): a log filtered to leave
// it out would let the reader read on, caught up, recording nothing.
func binlogFilter(srv binlog.Server, schema string) Check {
	c := Check{Name: "binlog filters", Status: OK, Detail: "the binary log logs schema " + schema + " (no binlog-do-db or binlog-ignore-db leaves it out)"}
	if !srv.FiltersKnown {
		c.Status, c.Detail = Warn, "the binary log's filters could not be read (SHOW BINARY LOG STATUS needs REPLICATION CLIENT): a binlog-do-db or binlog-ignore-db leaving out "+schema+" would go unseen"
		return c
	}
	if p := srv.FilterProblem(schema); p != "" {
		c.Status, c.Detail = Fail, p
		c.Fix = "log the queue schema (binlog-do-db / binlog-ignore-db in the server's config, then restart it), or run --subscribe-mode offsets"
	}
	return c
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// replicationSlave checks the user's grants for REPLICATION SLAVE, which
// reading the log as a replica needs. It reads SHOW GRANTS: a privilege
// held only through a role that is not active by default is not seen.
func replicationSlave(ctx context.Context, db *sql.DB, grantee string) Check {
	c := Check{Name: "binlog REPLICATION SLAVE", Status: OK, Detail: "the queue database user may read the binary log as a replica (REPLICATION SLAVE, by SHOW GRANTS)"}
	rows, err := db.QueryContext(ctx, showGrantsQuery)
	if err != nil {
		c.Status, c.Detail, c.Fix = Fail, "cannot read the user's grants: "+oneLine(err.Error()), binlogGrantFix(grantee)
		return c
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			break
		}
		if grantsReplicationSlave(g) {
			return c
		}
	}
	c.Status = Fail
	c.Detail = "the queue database user has no REPLICATION SLAVE on *.* (SHOW GRANTS; a privilege held through a role counts only when the role is a default one)"
	c.Fix = binlogGrantFix(grantee)
	return c
}

// grantsReplicationSlave reports whether a SHOW GRANTS line grants
// REPLICATION SLAVE (or ALL PRIVILEGES) on *.*.
func grantsReplicationSlave(line string) bool {
	up := strings.ToUpper(line)
	rest, ok := strings.CutPrefix(up, "GRANT ")
	if !ok {
		return false
	}
	privs, _, ok := strings.Cut(rest, " ON *.* TO ")
	if !ok {
		return false
	}
	for _, p := range strings.Split(privs, ",") {
		switch strings.TrimSpace(p) {
		case "ALL", "ALL PRIVILEGES", "REPLICATION SLAVE", "REPLICATION REPLICA":
			return true
		}
	}
	return false
}

// binlogPosition checks mend's schema for the position table and the
// saved position against the server: purged (FAIL) or older than half the
// server's retention (WARN). listed: the server's files could be listed.
func binlogPosition(ctx context.Context, p BinlogParams, schema string, srv binlog.Server, listed bool) ([]Check, *storage.BinlogPosition) {
	table := Check{Name: "binlog position table", Status: OK, Detail: "mend's schema has mend_binlog_positions (migration 0019)"}
	store, err := storage.Open(ctx, p.DSN, storage.Options{})
	if err != nil {
		table.Status, table.Detail, table.Fix = Fail, "mend's database: "+oneLine(err.Error()), "check --dsn"
		return []Check{table}, nil
	}
	defer store.Close()
	name := binlog.LeaseName(cmpOr(p.Source, schema))
	saved, err := store.BinlogPositionGet(ctx, name)
	denied := err != nil && (deniedError(err) || errors.Is(err, mend.ErrDenied))
	switch {
	case errors.Is(err, storage.ErrNoBinlogPositions):
		table.Status, table.Detail, table.Fix = Fail, "mend's schema has no mend_binlog_positions (it is before migration 0019)", "mend migrate up"
		return []Check{table}, nil
	case errors.Is(err, mend.ErrNotFound):
	case err != nil && !denied:
		table.Status, table.Detail = Fail, oneLine(err.Error())
		return []Check{table}, nil
	}
	if c := positionGrants(ctx, store.SQL(), table); c.Status != OK {
		return []Check{c}, nil
	}
	if denied {
		// The probes passed but the read was denied (a privilege on some
		// columns only): the read's own error, with the grant that fixes it.
		table.Status, table.Detail = Fail, "mend's user may not read mend_binlog_positions: "+oneLine(err.Error())
		table.Fix = positionGrantFix(ctx, store.SQL(), "SELECT, INSERT, UPDATE")
		return []Check{table}, nil
	}
	if errors.Is(err, mend.ErrNotFound) {
		return []Check{table, {Name: "binlog position", Status: OK,
			Detail: "none saved yet: the reader's first start imports what the tables hold, then reads the log from the file the server writes now"}}, nil
	}
	return []Check{table, positionCheck(saved, srv, listed, p.Starting)}, &saved
}

// positionTable is mend_binlog_positions as the reader uses it.
var positionTable = hostTable{name: "mend_binlog_positions", privs: []hostPriv{
	{"SELECT", "EXPLAIN SELECT name FROM mend_binlog_positions WHERE FALSE", "reading the saved position"},
	{"INSERT", "EXPLAIN INSERT INTO mend_binlog_positions (name) VALUES (NULL)", "the first position saved"},
	{"UPDATE", "EXPLAIN UPDATE mend_binlog_positions SET holder = '' WHERE FALSE", "every position saved"},
}}

// positionGrants probes mend's user's privileges on the position table,
// as the grants check probes mend's other tables.
func positionGrants(ctx context.Context, db *sql.DB, c Check) Check {
	var missing []string
	for _, p := range positionTable.privs {
		if _, err := db.ExecContext(ctx, p.probe); err != nil {
			if !deniedError(err) {
				c.Status, c.Detail = Fail, fmt.Sprintf("cannot check %s on %s: %v", p.name, positionTable.name, oneLine(err.Error()))
				return c
			}
			missing = append(missing, p.name)
		}
	}
	if len(missing) == 0 {
		return c
	}
	c.Status = Fail
	c.Detail = fmt.Sprintf("mend's user lacks %s on mend_binlog_positions (the reader reads and saves its position there)", strings.Join(missing, ", "))
	c.Fix = positionGrantFix(ctx, db, strings.Join(missing, ", "))
	return c
}

// positionGrantFix is the GRANT of privs on mend_binlog_positions to
// mend's user (db's).
func positionGrantFix(ctx context.Context, db *sql.DB, privs string) string {
	var user, schema string
	_ = db.QueryRowContext(ctx, currentUserQuery).Scan(&user)
	_ = db.QueryRowContext(ctx, databaseQuery).Scan(&schema)
	return fmt.Sprintf("GRANT %s ON %s.%s TO %s", privs, quoteIdent(schema), quoteIdent(positionTable.name), quoteAccount(user))
}

// positionCheck compares the saved position with the server.
func positionCheck(saved storage.BinlogPosition, srv binlog.Server, listed, starting bool) Check {
	c := Check{Name: "binlog position", Status: OK, Detail: "saved " + DescribePosition(saved)}
	if !listed {
		c.Status, c.Detail = Warn, c.Detail+"; not compared with the server (its binary logs cannot be listed)"
		return c
	}
	if reason, purged := srv.Resumable(saved); purged {
		c.Status = Fail
		c.Detail = "the saved position (" + DescribePosition(saved) + ") is purged from the server's binary log: " + reason +
			": mend was down past binlog_expire_logs_seconds; dead letters collected meanwhile are lost; run re-imports what the tables hold"
		c.Fix = "start mend run (it imports what the tables hold, then reads on); keep mend down less than half of binlog_expire_logs_seconds, or raise it"
		if starting {
			c.Status = Warn
		}
		return c
	} else if reason != "" {
		c.Status, c.Detail = Warn, "the saved position cannot be resumed on this server: "+reason+"; run starts over from the tables"
		return c
	}
	age := PositionAge(saved, srv)
	if age == 0 {
		c.Detail += fmt.Sprintf(", not at risk: in the file the server writes now, or holding every GTID it executed (retention %s)", retentionText(srv.Retention))
		return c
	}
	c.Detail += fmt.Sprintf(", at risk of a purge for %s (retention %s)", fmtAge(age), retentionText(srv.Retention))
	if srv.Retention > 0 && age > srv.Retention/2 {
		c.Status = Warn
		c.Detail += ": past half the retention, the server purges the position if mend stays behind"
		c.Fix = "check that mend run is running with --queue-dsn in binlog mode and reading (mend status); or raise binlog_expire_logs_seconds"
	}
	return c
}

func retentionText(d time.Duration) string {
	if d <= 0 {
		return "none: never purged by age"
	}
	return fmtAge(d)
}

// PositionAge is how long the saved position has been at risk of a
// purge: 0 while it is in the file the server writes now (the server
// never purges that one) or its GTID set holds every transaction the
// server executed; else how long ago it was saved, by the database clock.
func PositionAge(p storage.BinlogPosition, srv binlog.Server) time.Duration {
	if p.ServerUUID == srv.Identity && p.File != "" && p.File == srv.Current {
		return 0
	}
	if p.GTIDSet != "" && srv.GTIDs && srv.Executed != "" && binlog.GTIDContains(srv.Flavor, p.GTIDSet, srv.Executed) {
		return 0
	}
	return p.Age
}

// DescribePosition is a saved position as mend shows it: file:pos, and the
// GTID set where there is one.
func DescribePosition(p storage.BinlogPosition) string {
	s := fmt.Sprintf("%s:%d", cmpOr(p.File, "(none)"), p.Pos)
	if p.GTIDSet != "" {
		s += " GTIDs " + p.GTIDSet
	}
	return s
}

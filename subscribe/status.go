package subscribe

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// errCannotConvert is MySQL's error 3854 (ER_CANNOT_CONVERT_STRING). MySQL
// fills information_schema.innodb_trx with every row's current statement
// as utf8mb3 before any WHERE or column list applies, so while any InnoDB
// transaction runs a statement holding bytes utf8mb3 cannot hold (a binary
// ID interpolated into it, as mend's own statements and many hosts' carry)
// the whole read fails with this error. MariaDB replaces such bytes
// instead. readOpen then reads the InnoDB monitor (openFromStatus).
const errCannotConvert = 3854

// The fallback read of the open transactions: the server's clock and the
// reader's session first, then the InnoDB monitor, which prints each
// statement's text as it is and lists only transactions that hold a
// read-write ID (a MoveToDLQ's INSERT is one from its first row on).
const (
	sqlOpenNow = "-- name: SubscribeOpenNow\n" +
		"SELECT CONNECTION_ID(), UTC_TIMESTAMP(6)"
	sqlOpenStatus = "-- name: SubscribeOpenStatus\n" +
		"SHOW ENGINE INNODB STATUS"
)

// statusTrx is one open transaction of the InnoDB monitor: its session
// (0 when the monitor named none, as for a recovered XA transaction) and
// how long it has been open, in whole seconds rounded down.
type statusTrx struct {
	session int64
	active  time.Duration
}

var (
	// "---TRANSACTION 1562, ACTIVE 2 sec inserting" (MySQL), "---TRANSACTION
	// (0x7faa58f34680), ACTIVE 2 sec" (MariaDB, a transaction without a
	// read-write ID), "ACTIVE (PREPARED) 5 sec" for a prepared XA one.
	statusHeader = regexp.MustCompile(`^---TRANSACTION ([^,]+), (.*)$`)
	statusActive = regexp.MustCompile(`^ACTIVE (?:\(PREPARED\) )?([0-9]+) sec`)
	// "MySQL thread id 11, OS thread handle ..." (MariaDB says MariaDB).
	statusThread = regexp.MustCompile(`^(?:MySQL|MariaDB) thread id ([0-9]+),`)
)

// statusTruncated is what the server puts in place of the beginning of
// the list of transactions when the monitor's text is over its size limit.
const statusTruncated = "\n...truncated...\n"

// parseInnoDBStatus reads the open transactions from the InnoDB monitor's
// text (the Status column of SHOW ENGINE INNODB STATUS). The text holds
// each session's current statement as it is, which can be anything,
// dead-letter payloads included, newlines and lines that look like the
// monitor's own among them. So the parser never stops early: every line
// after the list's heading is read, a header starts a transaction, and
// only the first thread line after a header names its session (the
// server prints that line before the statement's text). Text that mimics
// a header can therefore add a transaction, which only holds watermarks
// longer, but cannot hide or rename a real one. A transaction in a state
// other than active or not started (committing in memory, a forced
// rollback) has no age to read, and a truncated list misses transactions:
// both make the read unusable (an error), to be tried again on the next
// pass.
func parseInnoDBStatus(text string) ([]statusTrx, error) {
	if strings.Contains(text, statusTruncated) {
		return nil, errors.New("the InnoDB monitor's list of transactions is truncated (its text is over the server's limit)")
	}
	const heading = "LIST OF TRANSACTIONS FOR EACH SESSION:"
	i := strings.Index(text, heading)
	if i < 0 {
		return nil, errors.New("the InnoDB monitor's text has no list of transactions")
	}
	var out []statusTrx
	named := true // whether the transaction of the last header has its session
	sc := bufio.NewScanner(strings.NewReader(text[i+len(heading):]))
	sc.Buffer(make([]byte, 0, 64<<10), len(text)+1)
	for sc.Scan() {
		line := sc.Text()
		if m := statusHeader.FindStringSubmatch(line); m != nil {
			named = true
			state := m[2]
			if strings.HasPrefix(state, "not started") {
				continue
			}
			a := statusActive.FindStringSubmatch(state)
			if a == nil {
				return nil, fmt.Errorf("the InnoDB monitor lists transaction %s as %q, with no age", m[1], state)
			}
			secs, err := strconv.ParseInt(a[1], 10, 64)
			if err != nil || secs > 1<<32 {
				return nil, fmt.Errorf("the InnoDB monitor lists transaction %s as active for %q seconds", m[1], a[1])
			}
			out = append(out, statusTrx{active: time.Duration(secs) * time.Second})
			named = false
			continue
		}
		if named {
			continue
		}
		if m := statusThread.FindStringSubmatch(line); m != nil {
			id, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("the InnoDB monitor names session %q", m[1])
			}
			out[len(out)-1].session = id
			named = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the InnoDB monitor's text: %w", err)
	}
	return out, nil
}

// openFromStatus is readOpen's read of the other sessions' open
// transactions from the InnoDB monitor, inside the reader's transaction
// tx: each one's session and the earliest it can have begun by the
// server's clock in UTC (the monitor gives whole seconds of age, rounded
// down, counted after the clock was read, so a second is taken off). The
// monitor reads the server's live lists, not innodb_trx's cache, so the
// view is never stale. Needs PROCESS, as innodb_trx does.
func openFromStatus(ctx context.Context, tx *sql.Tx) ([]openTrx, error) {
	var self int64
	var now time.Time
	if err := tx.QueryRowContext(ctx, sqlOpenNow).Scan(&self, &now); err != nil {
		return nil, err
	}
	var typ, name, text sql.RawBytes
	rows, err := tx.QueryContext(ctx, sqlOpenStatus)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("SHOW ENGINE INNODB STATUS returned no row")
	}
	if err := rows.Scan(&typ, &name, &text); err != nil {
		return nil, err
	}
	found, err := parseInnoDBStatus(string(text))
	if err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	var out []openTrx
	for _, f := range found {
		if f.session == self {
			continue
		}
		out = append(out, openTrx{session: f.session, started: sql.NullTime{Time: now.Add(-f.active - time.Second), Valid: true}})
	}
	return out, nil
}

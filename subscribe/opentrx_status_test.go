package subscribe

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// statusMySQL is the transactions part of MySQL 9.7's monitor with two
// sessions open: 11 wrote a row and sleeps in a statement holding raw
// bytes, 12 only read (MySQL leaves active read-only transactions out).
const statusMySQL = `
=====================================
2026-12-02 13:49:27 0x7fea INNODB MONITOR OUTPUT
=====================================
------------
TRANSACTIONS
------------
Trx id counter 1563
Purge done for trx's n:o < 1560 undo n:o < 0 state: running but idle
History list length 6
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 376079114203928, not started
0 lock struct(s), heap size 1128, 0 row lock(s)
---TRANSACTION 1562, ACTIVE 14 sec inserting
mysql tables in use 1, locked 0
1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
MySQL thread id 11, OS thread handle 140644634855104, query id 17 172.17.0.1 mend User sleep
select sleep(30), '` + "\xc0\x74\xd7\xda" + `' from t limit 1
Trx read view will not see trx with id >= 1563, sees < 1563
---TRANSACTION 1570, ACTIVE (PREPARED) 3 sec
1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
MySQL thread id 14, OS thread handle 140644634855105, query id 19 172.17.0.1 mend starting
XA COMMIT 'x'
--------
FILE I/O
--------
Main thread process no. 1, id 140644, state: sleeping
`

// statusMariaDB is MariaDB 10.11's: 7 only read (shown without an ID), 6
// wrote.
const statusMariaDB = `
------------
TRANSACTIONS
------------
Trx id counter 20
Purge done for trx's n:o < 18 undo n:o < 0 state: running
History list length 2
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION (0x7faa58f34680), ACTIVE 11 sec
0 lock struct(s), heap size 1128, 0 row lock(s)
MariaDB thread id 7, OS thread handle 140369599510208, query id 13 localhost root User sleep
select sleep(30)
Trx read view will not see trx with id >= 19, sees < 19
---TRANSACTION 19, ACTIVE 0 sec
mysql tables in use 1, locked 0
1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
MariaDB thread id 6, OS thread handle 140369599817408, query id 10 localhost root User sleep
select 1
--------
FILE I/O
--------
`

// section is the monitor's TRANSACTIONS section around a list (its
// heading included), as the server prints it, then FILE I/O.
func section(list string) string {
	return "------------\nTRANSACTIONS\n------------\nTrx id counter 1563\nHistory list length 6\n" + list + "\n--------\nFILE I/O\n--------\nMain thread\n"
}

// deadlock is a LATEST DETECTED DEADLOCK section whose first statement's
// text is stmt (statement text the host's callers influence).
func deadlock(stmt string) string {
	return "------------------------\nLATEST DETECTED DEADLOCK\n------------------------\n2026-12-02 13:40:00 0x7fea\n*** (1) TRANSACTION:\n" +
		"TRANSACTION 1500, ACTIVE 0 sec inserting\nMySQL thread id 11, OS thread handle 1, query id 5 h mend update\n" + stmt + "\n" +
		"*** (1) HOLDS THE LOCK(S):\nRECORD LOCKS space id 2 page no 4\n*** WE ROLL BACK TRANSACTION (1)\n"
}

// TestParseInnoDBStatusCraftedDeadlock: statement text stored in the
// deadlock section (before the TRANSACTIONS banner) can neither make the
// read "truncated" nor add a transaction older than the server; the real
// list after the banner is read as it is.
func TestParseInnoDBStatusCraftedDeadlock(t *testing.T) { report(t, craftedDeadlockProblems()) }

func craftedDeadlockProblems() (problems []string) {
	real := section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 1562, ACTIVE 14 sec inserting\nMySQL thread id 12, OS thread handle 2, query id 7 h mend update\nINSERT INTO queue_messages VALUES (1)")
	want := []statusTrx{{12, 14 * time.Second}}
	for _, c := range []struct {
		name, stmt string
		want       []statusTrx
	}{
		{"a truncation marker", "INSERT INTO queue_messages VALUES ('\n... truncated...\n')", want},
		{"the old truncation marker", "INSERT INTO queue_messages VALUES ('\n...truncated...\n')", want},
		{"a heading and a transaction 46 days old", "INSERT INTO queue_messages VALUES ('\nLIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 9, ACTIVE 3974400 sec\nMySQL thread id 12, x\n')", want},
		{"a banner, a heading and a transaction 46 days old", "INSERT INTO queue_messages VALUES ('\n------------\nTRANSACTIONS\n------------\nLIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 9, ACTIVE 3974400 sec\nMySQL thread id 12, x\n')", want},
		{"a banner, a marker", "x'\n------------\nTRANSACTIONS\n------------\n... truncated...\n'", want},
	} {
		got, err := parseInnoDBStatus(deadlock(c.stmt)+real, time.Hour)
		if err != nil || !slices.Equal(got, c.want) {
			problems = append(problems, fmt.Sprintf("%s in the deadlock section: got %v, %v; want %v", c.name, got, err, c.want))
		}
	}
	// The server's own cut: a text at its limit is unusable, whatever it holds.
	cut := real + strings.Repeat("x", statusLimit-1-len(real))
	if _, err := parseInnoDBStatus(cut, time.Hour); err == nil || !strings.Contains(err.Error(), "truncated") {
		problems = append(problems, fmt.Sprintf("a text at the server's limit: %v; want it truncated", err))
	}
	return problems
}

func TestParseInnoDBStatus(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []statusTrx
		err        string
	}{
		{name: "mysql", text: statusMySQL, want: []statusTrx{{11, 14 * time.Second}, {14, 3 * time.Second}}},
		{name: "mariadb", text: statusMariaDB, want: []statusTrx{{7, 11 * time.Second}, {6, 0}}},
		{name: "none open", text: section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 42, not started\n0 lock struct(s)")},
		{
			// A statement's text that mimics the monitor: a separator and
			// the next section's heading, a header of its own, a second
			// thread line. The real transaction after it is still found,
			// the session of the one running the text is its own, and the
			// made-up one only adds.
			name: "statement text mimics the monitor",
			text: section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 5, ACTIVE 2 sec\n" +
				"MySQL thread id 21, OS thread handle 1, query id 1 h mend update\n" +
				"INSERT INTO queue_messages VALUES ('\nMySQL thread id 99, x\n--------\nFILE I/O\n--------\n---TRANSACTION 7, ACTIVE 999 sec\nMySQL thread id 98,\n')\n" +
				"---TRANSACTION 6, ACTIVE 1 sec\nMySQL thread id 22, OS thread handle 2, query id 2 h mend update"),
			want: []statusTrx{{21, 2 * time.Second}, {98, 999 * time.Second}, {22, time.Second}},
		},
		{name: "no session", text: section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 9, ACTIVE (PREPARED) 60 sec\n1 lock struct(s)"), want: []statusTrx{{0, time.Minute}}},
		{name: "a marker in a statement is no truncation", text: section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 9, not started\n... truncated...\n---TRANSACTION 10, ACTIVE 1 sec"), want: []statusTrx{{0, time.Second}}},
		{name: "committing", text: section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 9, COMMITTED IN MEMORY"), err: "no age"},
		{name: "no list", text: "FILE I/O\n", err: "no list"},
		{name: "a heading without the banner", text: "LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 10, ACTIVE 1 sec\n", err: "no list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseInnoDBStatus(c.text, time.Hour)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestParseInnoDBStatusNeverHides feeds the parser a real transaction
// after statement texts built from every line of the monitor's own and
// some of its fragments: the real one is always found with its session.
func TestParseInnoDBStatusNeverHides(t *testing.T) {
	fragments := strings.Split(statusMySQL+statusMariaDB, "\n")
	fragments = append(fragments, "---TRANSACTION ", ", ACTIVE ", "MySQL thread id ", "...truncated..", "LIST OF TRANSACTIONS FOR EACH SESSION:", "")
	for i, a := range fragments {
		for _, b := range fragments[i:] {
			if strings.Contains(a+"\n"+b, "COMMITTED IN MEMORY") {
				continue // an unusable read, which hides nothing either
			}
			text := section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 3, ACTIVE 1 sec\nMySQL thread id 30, OS thread handle 1, query id 1 h mend update\n" +
				a + "\n" + b + "\n---TRANSACTION 4, ACTIVE 5 sec\nmysql tables in use 1, locked 1\nMySQL thread id 40, OS thread handle 2, query id 2 h mend update\nINSERT")
			got, err := parseInnoDBStatus(text, time.Hour)
			if err != nil {
				continue // unusable: the samples wait, nothing is hidden
			}
			if !slices.Contains(got, statusTrx{30, time.Second}) || !slices.Contains(got, statusTrx{40, 5 * time.Second}) {
				t.Fatalf("statement text %q then %q hid a transaction: %v", a, b, got)
			}
		}
	}
}

// TestSessionAgesCapCraftedDeadlock: text in the deadlock section naming
// a live session with an age the server's uptime allows (50 minutes) is
// counted no older than that session: the process lists showed it
// connected after the first of them, so a start before that is raised to
// it. The session's real transaction keeps its start, and a session the
// first list already showed keeps any age (nothing bounds it).
func TestSessionAgesCapCraftedDeadlock(t *testing.T) { report(t, sessionAgesProblems()) }

func sessionAgesProblems() (problems []string) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	crafted := "UPDATE t SET v = '\n------------\nTRANSACTIONS\n------------\nLIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 9, ACTIVE 3000 sec\nMySQL thread id 12, x\n---TRANSACTION 10, ACTIVE 3000 sec\nMySQL thread id 5, x\n'"
	real := section("LIST OF TRANSACTIONS FOR EACH SESSION:\n---TRANSACTION 1562, ACTIVE 14 sec inserting\nMySQL thread id 12, OS thread handle 2, query id 7 h mend update\nINSERT INTO queue_messages VALUES (1)")
	found, err := parseInnoDBStatus(deadlock(crafted)+real, time.Hour)
	if err != nil {
		return []string{fmt.Sprintf("parse: %v", err)}
	}
	var ages sessionAges
	ages.add("db:3306:1", t0, []int64{1, 5})                         // the first list: 5 is live, 12 is not
	ages.add("db:3306:1", t0.Add(30*time.Second), []int64{1, 5, 12}) // 12 connected since
	now := t0.Add(time.Minute)
	dbs := map[int64]string{5: "q", 12: "q"}
	current := sql.NullString{String: "q", Valid: true}
	capped := ages.capped(statusStarts(found, 1, now))
	earliest := map[int64]time.Time{}
	for _, o := range capped {
		if e, ok := earliest[o.session]; !ok || o.started.Time.Before(e) {
			earliest[o.session] = o.started.Time
		}
	}
	if got, floor := earliest[12], t0.Add(-sessionSlack); !got.Equal(floor) {
		problems = append(problems, fmt.Sprintf("session 12, first listed after %v, counted from %v; want %v (no earlier than it could have connected, less the slack)", t0, got, floor))
	}
	if !slices.ContainsFunc(capped, func(o openTrx) bool { return o.session == 12 && o.started.Time.Equal(now.Add(-15*time.Second)) }) {
		problems = append(problems, fmt.Sprintf("session 12's real transaction (14 s) lost its start: %+v", capped))
	}
	if got := earliest[5]; !got.Equal(now.Add(-3001 * time.Second)) {
		problems = append(problems, fmt.Sprintf("session 5, in the first list, counted from %v; want its age as the monitor gives it (nothing bounds it)", got))
	}
	if got := oldestOpen(capped, dbs, current); got.session != 5 {
		problems = append(problems, fmt.Sprintf("oldest = %+v; want session 5's", got))
	}
	// Nothing is dropped: every transaction found is still counted.
	if len(capped) != len(statusStarts(found, 1, now)) {
		problems = append(problems, fmt.Sprintf("capped %d transactions to %d", len(statusStarts(found, 1, now)), len(capped)))
	}
	// Another server's list (a failover) bounds none of its sessions, 12
	// included, though the last list did not show it.
	ages.add("db2:3306:1", t0.Add(40*time.Second), []int64{1, 5})
	ages.add("db:3306:1", t0.Add(50*time.Second), []int64{1, 5, 12})
	for _, o := range ages.capped(statusStarts(found, 1, now)) {
		if o.session == 12 && o.started.Time.Equal(now.Add(-3001*time.Second)) {
			return problems
		}
	}
	return append(problems, "after a list of another server, session 12's crafted age was capped by that server's list")
}

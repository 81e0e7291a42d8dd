// Package binlog records the host's dead letters from the queue database
// server's binary log: mend run --subscribe-mode binlog, beside an
// unmodified submit queue, with no consumer group and nothing held back.
//
// # Why
//
// The offset subscription (package subscribe) reads *_dlq rows by offset
// and holds the host's GC back with a consumer group. Offsets are
// allocated before commit, so it must infer which rows may still appear (a
// settle window sized from lock waits, a view of the open transactions it
// must prove fresh), and a stopped mend holds the GC back until someone
// removes its group. The binary log needs no inference: every committed
// transaction is there, in commit order, with its rows' full images,
// whatever the GC deletes afterwards, and a transaction rolled back is not.
//
// # What it does
//
// One reader per queue database (the lease "mend-binlog/<source>", taken
// through package fence; other replicas stand by and take over from the
// saved position) streams the log as a replica would, with a server_id of
// its own, through go-mysql's replication client. Every INSERT into the
// schema's queue_messages on a topic ending in _dlq, in a transaction that
// commits, becomes a dlq.Row (columns matched by the names the log carries
// with binlog_row_metadata=FULL, else by the table's columns now, refused
// with ErrColumns when the counts differ) and is recorded through
// dlq.Intake.RecordMany in batches of up to BatchRows, at most
// FlushInterval after its commit. Only then is the position after those
// transactions saved, in mend_binlog_positions (migration 0019), by the
// lease's current term only (a fenced write). A recording that fails ends
// the term before anything is saved: the next reads the same transactions
// again, and create-if-absent makes that harmless. A row the intake refuses
// for good, or that fails ParkAfter times in a row, is parked as a stand-in
// (subscribe.StandIn).
//
// A host's XA transaction is logged at its XA PREPARE and decided by an XA
// COMMIT or XA ROLLBACK logged later: its dead letters wait for the
// commit (a rollback drops them); the commit of a prepare read before the
// term began has them imported from the tables.
//
// # Positions
//
// A position is a file and offset on one server (its server_uuid, or
// server_id on MariaDB) and, where the server has GTIDs (MariaDB always;
// MySQL with gtid_mode=ON, the default from 9.x, not in 8.x), the GTID set
// read. On the same server the reader resumes by file and offset; on
// another (the host's primary failed over) by the GTID set. A file of
// the saved name is not trusted when the server's GTID state lacks the
// saved set (RESET MASTER renumbers the files and clears the state; a
// MariaDB server rebuilt with the same server_id starts at .000001): that
// is a purge, loudly. A reader caught up checks the same at every refresh,
// since after RESET MASTER the server goes on sending it heartbeats from
// the deleted file, and that the queue DSN still reaches the server it
// streams from (a failover that moves a DNS name or a proxy leaves the
// replication connection with the old primary, which may stay up). Without GTIDs
// a file and offset of another server mean nothing: the reader refuses to
// guess and starts over. MySQL's set keeps tagged GTIDs (8.3+,
// uuid:tag:n), so a resume never asks again for tagged transactions the
// server purged; MariaDB's is its connect state, one GTID per domain (the
// last committed there, whichever server_id wrote it), as the server
// accepts it (two server_ids in a domain, from a primary that once
// replicated another, are refused with ERROR 1943).
//
// Starting over (a reset: the first start, a saved position the server has
// purged, a failover without GTIDs, a change of flavor) reads the start of
// the file the server writes now, imports every dead letter the tables
// hold (mend import's pages), and streams from that file's start. Every
// transaction before the file committed before the file began, so a dead
// letter is in the tables or in the stream, or in both (recorded once);
// one committed and collected by the host's GC before the file began is
// lost, which a purge of the saved position reports loudly (an error in the
// log, Status.Purges, the OnReset hook, the metric and its paging alert).
//
// # What it needs of the server
//
// log_bin, binlog_format=ROW, binlog_row_image=FULL, and no binlog-do-db
// or binlog-ignore-db leaving the queue schema out (Server.Problems says
// the fix for each; doctor and auto mode read the same list);
// binlog_row_metadata=FULL advised; every host session logging rows too
// (a session may set its own binlog_format, and one opened before a SET
// GLOBAL keeps the old one: a dead letter's INSERT logged as a statement
// carries no row to record, so the reader imports the tables after it, and
// says so: an error in the log, Status.Statements); REPLICATION SLAVE and REPLICATION
// CLIENT for mend's queue user. The queue DSN may name a TCP address or a
// Unix socket. Schema and table names are compared as the server compares
// them (lower_case_table_names). The replication connection takes the user,
// password and TLS files as every pool does at a connect
// (mysqlx.Current): a secret rotated through a DSN file is used at the
// next connect, with no restart. It needs no PROCESS and writes nothing on
// the host.
//
// # The invariant: never stopped in silence
//
// While a process runs a Reader, either a replica is reading the source or
// something says it is not. No path ends Run after New but ctx: a server
// without its binary log, a setting flipped for a moment, a refused
// password, a GTID state the server rejects, mend's store down, a lease
// lost, each ends the term only. The failure is counted by FailureReason
// (Status.Failures, Hooks.OnFailed: mend_binlog_failures_total), the
// reader's role is RoleRetrying until a later term saves a position
// (Status.FailingSince), and the next term starts after a pause doubling up
// to a minute. A reader that reads saves its position at least every
// RefreshInterval, even with nothing new (a heartbeat), so the saved row's
// age by the database clock, exported by every replica, grows only while
// nobody reads, and the shipped page alert fires on it. A dead letter whose
// recording keeps failing for a reason that may pass is counted across
// terms (per source identity) and parked after ParkAfter failures in a row,
// so one row never holds every later one back.
//
//	         TryAcquire
//	standby ───────────▶ reader ──(term ends: failure)──▶ retrying
//	   ▲                  │  ▲                               │
//	   └── lease held ────┘  └──────── backoff, TryAcquire ──┘
//	        by another             (Run returns only on ctx: stopped)
//
// Each way a term was once lost for good, or a row was skipped, has a
// scenario in paths_test.go with the broken reader planted as its negative
// control (binlog.Plant): returnOnProblem, parkCountPerTerm, parkOneLate,
// noParkDefault, staleCredentials, exactSchemaName, anySchema,
// ignoreFilters, gtidPerServer, dropTags, gtidFrozen; attack_test.go adds
// the ways users and servers broke it after that (a host session logging
// rows as statements, a log reset, a DSN moved by a failover while the old
// primary stays up, XA transactions) with theirs: ignoreStatements,
// trustFileName, trustHeartbeats, trustStreamServer, ignoreXA. Other
// planted variants make named tests fail (TestPlantedBugsFailTheirTests:
// resumeFileAnywhere, everyResetPurged, skipProblems, flushDeadlineSlides),
// and the simulation catches saveWhilePending with the older four.
//
// # Once
//
// CatchUp is mend run --once's intake: under the same lease, it reads from
// the saved position to the end of the log as it was when it began, saves,
// and returns; beside a reading replica it leaves intake to it
// (mend.ErrLeaseHeld). It never joins a consumer group.
package binlog

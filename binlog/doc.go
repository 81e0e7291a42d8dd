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
// # Positions
//
// A position is a file and offset on one server (its server_uuid, or
// server_id on MariaDB) and, where the server has GTIDs (MariaDB always;
// MySQL with gtid_mode=ON, the default from 9.x, not in 8.x), the GTID set
// read. On the same server the reader resumes by file and offset; on
// another (the host's primary failed over) by the GTID set. Without GTIDs
// a file and offset of another server mean nothing: the reader refuses to
// guess and starts over.
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
// log_bin, binlog_format=ROW, binlog_row_image=FULL (Server.Problems says
// the fix for each); binlog_row_metadata=FULL advised; REPLICATION SLAVE
// and REPLICATION CLIENT for mend's queue user; a TCP address in the queue
// DSN. It needs no PROCESS and writes nothing on the host.
package binlog

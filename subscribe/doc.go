// Package subscribe makes mend a consumer group of the host's *_dlq topics,
// in uber/submitqueue's own offset protocol, so that the queue's garbage
// collector keeps every dead letter until mend has recorded it. It is what
// `mend run --queue-dsn` runs: mend beside an unmodified submit queue, with
// no code linked into the host.
//
// # Overview
//
// The host's message queue keeps one watermark per (consumer group, topic,
// partition) in queue_offsets and deletes a partition's rows up to the
// smallest watermark of its groups (every 100 idle poll ticks, about 10 s).
// Once the host's orchestrator-dlq group has acknowledged a dead letter it
// is gone within seconds, so an importer that runs now and then (mend
// import from cron) loses exactly the dead letters mend exists for. A
// group of mend's own changes that: a row at watermark 0 holds the
// partition's GC back entirely, and mend's watermark passes a dead letter
// only once mend has recorded it.
//
// Two loops run side by side (Run), each on its own ticker, so neither
// waits for the other. Membership (membership.go), every PollInterval
// (1 s by default, a tenth of the host's GC idle period):
//
//  1. every AheadInterval, register ahead: join T_dlq for every partition
//     of T that one of the host's groups has joined (T in AheadTopics), each
//     *_dlq partition another group has joined, and, for each
//     queue-partitioned T the host reads (host.ReadEvidence: a live
//     subscriber heartbeat on T or a group's queue_offsets row), T_dlq of
//     every queue Config.Queues lists;
//  2. discover the *_dlq partitions that hold rows from the (topic,
//     partition_key, offset) index: SELECT DISTINCT topic (a loose index
//     scan, whose cost grows with the topics), then SELECT DISTINCT
//     partition_key per DLQ topic (a covering range over that topic's
//     entries: the dead letters not yet collected, as in the real
//     subscriber's own discovery). Never a scan of the table or of the
//     other topics' rows. A partition the group has no row for is joined
//     on first sight, one INSERT IGNORE for all of them.
//
// A join is never behind recording: not behind a pass that runs long
// during a backlog, nor behind a store that is down.
//
// The recording pass, every PollInterval (at once when the last left rows
// behind or membership found a new partition):
//
//  1. sample the table's highest committed offset, stamped with the time
//     its query returned (see "Out-of-order commits"), and, where mend's
//     user may, when the oldest open transaction began (see "Open
//     transactions");
//  2. read the group's rows (its partitions and watermarks);
//  3. read this replica's share of the partitions (see "Replicas"), each
//     from where this process left it, with the real FetchByOffset (topic =
//     ? AND partition_key = ? AND `offset` > ? ORDER BY `offset` LIMIT ?),
//     up to 16 partitions per statement as UNION ALL branches that share
//     one page of PageSize rows; record the rows through dlq's RecordMany,
//     at least a page per transaction, across partitions (reader.go). A
//     failure stops only the partitions it belongs to (see "Failure
//     handling");
//  4. release: advance each partition's watermark past what has been
//     recorded and has settled, after one statement checking the same
//     partitions' rows, for up to 100 partitions per statement (release.go,
//     deciding through ledger.go);
//  5. read the lag per topic: rows above the group's watermarks, and the
//     age of the earliest (lowest offset), from the index alone plus one
//     row per topic. A pass that moved no watermark reuses the lag read up
//     to 5 s before: during a backlog the read scans every entry above the
//     watermarks, and a replica polling beside another still recording
//     would otherwise pay it every PollInterval.
//
// Pass runs one membership step and then one recording pass; Drain (mend
// run --once) runs passes until everything visible is recorded and
// released, or DrainBound (the window plus five polls) after the last
// pass with rows left, whichever is first.
//
// The statements are the real subscriber's join (INSERT IGNORE at offset
// 0), advance and leave (DELETE, only for Remove), plus reads. The grants
// are the host's own consumers': SELECT on queue_messages; SELECT, INSERT,
// UPDATE on queue_offsets, and DELETE to leave; PROCESS, optional, lets it
// see open transactions.
//
// # State model
//
// Per partition, the database holds the watermark; the process holds how
// far it has read and recorded, and a checkpoint per pass that read
// something: the last offset read and how many rows the server returned
// between the watermark and it.
//
//	 watermark (queue_offsets)      seen (this process)
//	     │                              │
//	─────┼──────────────────────────────┼────────────▶ offset
//	     │ recorded, waiting to settle  │ not read yet
//	     └─ checkpoints c1 < c2 < ... ──┘
//
// A checkpoint is released once it has settled: its offset is at or below
// the table's highest committed offset as sampled at least Settle ago. Then
// the partition's rows between the watermark and it must be the very rows
// read there: the same COUNT(*), SUM(`offset`) and SUM(CRC32(`offset`)),
// a digest of the set that does not depend on order. A count alone would
// take a row the queue's ctl deleted or requeued plus one committed late
// for no change. If they match, the watermark moves to the checkpoint by a
// compare-and-set on the watermark the range was counted from (a replica
// paused past its slot lease, counting from a stale watermark, moves
// nothing). If not, a row committed late (or rows went), and the partition
// is read again from its watermark; recording is create-if-absent, so
// reading twice is harmless. The ledger (ledger.go) holds the samples and
// checkpoints and makes these decisions without a database; the
// simulation test drives it against a model of the queue's table and GC.
//
// # Out-of-order commits
//
// `offset` is an AUTO_INCREMENT value, allocated when a row is inserted and
// visible only when its transaction commits: a reader can see offset N+1
// while N is still open. A watermark moved past N then skips N for good,
// and the host's GC deletes it. The choices were:
//
//   - advance only to the highest contiguous offset: useless here, because
//     offsets are one counter over every topic, so a partition's offsets
//     always have gaps;
//   - a locking read over the range, which waits for open inserts: it needs
//     more than SELECT (MySQL 8.0.22 wants DELETE, UPDATE or LOCK TABLES
//     too), takes gap locks on the host's hottest table, and still misses an
//     insert caught between allocating its offset and writing its index
//     entry;
//   - information_schema.innodb_trx or the processlist alone: they need
//     PROCESS and do not show which offset a transaction allocated (where
//     PROCESS is granted they extend the window: "Open transactions");
//   - a settle window (chosen): an offset at or below the highest committed
//     offset sampled by a query that returned at time t was allocated before
//     t, so the transaction inserting it began before t. (The time is taken
//     after the query returns: stamped before, a query that stalled would
//     shrink the window by the stall.) Once every such transaction has
//     committed or rolled back, the range below is final. With Settle longer
//     than any transaction that inserts into queue_messages, the settle
//     check finds every late row before the watermark moves. MoveToDLQ is
//     one short transaction (SELECT, plain INSERT into the DLQ topic,
//     DELETE of the original, COMMIT), but after its INSERT allocates the
//     offset it can wait twice on a lock, each up to the server's
//     innodb_lock_wait_timeout (50 s by default): the INSERT on the DLQ
//     row's unique key, the DELETE on the original row; and with
//     semi-synchronous replication its COMMIT waits for a replica up to
//     rpl_semi_sync_*_timeout. The window is therefore a minute, or those
//     waits plus SettleMargin (10 s) when that is longer: 110 s with the
//     defaults (SettleFor, window.go, which mend run applies, and which a
//     Config with Settle zero reads from the server at its first pass); mend run and
//     doctor warn by the same bound (Waits.Covers) when --subscribe-settle
//     does not cover them. TestLossTwoLockWaits runs that MoveToDLQ.
//
// Recording is never delayed: a dead letter is recorded within one poll
// interval; only the watermark waits, so the host's GC keeps a dead letter
// for Settle longer than it would without mend. The assumption is
// explicit: a transaction held open longer than Settle (a client frozen
// mid-MoveToDLQ) can still be skipped without PROCESS (see "Open
// transactions"), and so can rows on a server whose
// auto-increment is not one increasing counter (auto_increment_increment
// across several writable primaries). The test that commits N+1 before N
// shows the window working, and its negative control (Settle 0) shows the
// skip.
//
// # Open transactions
//
// Where mend's user holds PROCESS, each sample also carries when the
// oldest transaction open just after the horizon query began (InnoDB
// transactions that are not read-only, in sessions whose current
// database is the queue's; by the server's clock, as is the sample), and
// the ledger holds every sample such a transaction began before (within a
// second: start times have whole seconds) until a later read no longer
// shows it, past the window, however long. A transaction that allocated
// an offset at or below a sample began before it, so while none that
// began before the sample is open, every offset at or below it is final.
// The protocol is one unit, opentrx.go (the read, its freshness proof, the
// monitor fallback and the reader's state), with the ledger's use of it in
// ledger.go (horizons). Its invariants:
//
//  1. A view is usable only if it proves itself newer than the read that
//     took it. innodb_trx is served from a cache InnoDB refreshes only
//     after 0.1 s without readers, and the pool reuses sessions, so a row
//     of the reader's own session proves nothing (it can be the previous
//     read's, frozen by other readers polling more often). The innodb_trx
//     statement carries a nonce drawn for this read; the view is fresh
//     only if the reader's own row shows that statement as its current
//     one. A view that is not fresh is never used: the read falls back to
//     SHOW ENGINE INNODB STATUS, which the server prints from its live
//     lists for each statement (and which MySQL's error 3854 on
//     innodb_trx also falls back to).
//  2. Statement text can add transactions to a view, never hide one. The
//     monitor's text is read by its structure (the list from the first
//     TRANSACTIONS banner's heading to the last FILE I/O banner; a header
//     starts a transaction; only the first thread line after it names its
//     session); an age above the server's uptime is no real transaction's
//     and is left out; the server cuts the text only at 1 MiB, so a text
//     that long is unusable and a truncation marker in a shorter one is a
//     statement's. No transaction counts as older than its session: the
//     reader keeps, from the process list it reads with each view (the
//     server's clock read just before it), when each live session was
//     first listed, and a session missing from the list before (of the
//     same server, by host name, port and server_id) connected after that
//     list's clock; a start earlier than that (less a second)
//     is raised to it, never dropped, so made-up text naming a live
//     session holds the watermarks no longer than a real transaction of
//     that session could (sessionAges, opentrx.go). That is the strongest
//     sound bound mend's grant gives: neither engine's process list shows
//     a session's connection time (MySQL's performance_schema threads
//     table has none either, and needs SELECT on performance_schema;
//     MariaDB's processlist has TIME and TIME_MS only), and SHOW
//     PROCESSLIST's Time is the current statement's or state's (a
//     sleeping session's since its last statement), while a transaction
//     spans statements: capping by it would hide a real transaction idle
//     between two statements, which loses dead letters. Session IDs grow
//     with each connection, but wrap (MySQL's are 32-bit) and restart
//     with the server, so they order nothing soundly. A session already
//     listed in the reader's first list is bounded by the uptime alone; so
//     is every session for one-off reads (OpenVisible).
//  3. An unusable read (stale with the monitor failing too, or any other
//     error) changes nothing already decided: the samples taken since the
//     last usable read (or before the first) wait for the next.
//  4. Reads unusable for longer than the window (staleReads in a row or
//     more) lapse the view: the window alone decides, as without PROCESS,
//     so a view that cannot refresh never holds the watermarks, and with
//     them the host's GC, for good. PassStats.OpenLapsed (the metric
//     mend_subscribe_open_view_lapsed and its alert) says so; OpenRead
//     says how each read went (usable, stale, hidden, failed); a stale
//     read was allowed, so SeesOpen stays true.
//  5. A refusal (no PROCESS, found by trying the read, again every
//     minute) makes the window alone decide: a MoveToDLQ held open longer
//     than the window can then be lost, and doctor says so.
//  6. A held sample holds every watermark, not only the partition the
//     transaction writes (neither view says which table or offset a
//     transaction holds); PassStats.Held counts such samples, and Drain
//     (mend run --once) ends within DrainBound beside one, naming the
//     partitions left unreleased and the session holding them.
//
// The ledger takes all of this as data on the sample (openView) and needs
// no database; the simulation holds inserts open past the window in the
// schedules where mend sees them. TestLossTransactionHeldOpen shows a
// MoveToDLQ held open four windows recorded with PROCESS and lost
// without; TestLossFrozenTrxCache shows it recorded while three readers
// poll innodb_trx every 10 ms (lost before the nonce); the crafted-text
// tests (TestParseInnoDBStatusCraftedDeadlock, TestSessionAgesCapCraftedDeadlock,
// and on a real deadlock TestOpenSessionAgeCapsCraftedDeadlock) show
// invariant 2.
//
// # Registering ahead
//
// A partition whose rows the host's GC removes before mend's row exists is
// lost: mend can only hold back collection it has joined. The host's
// subscriber joins a partition before reading it, so before it can move any
// of its messages to the DLQ; registering T_dlq for every partition of T a
// host group has joined therefore puts mend's row in place before the
// first dead letter exists. But the host's rows are not permanent: its
// subscriber releases a partition drained for 2 x its lease duration
// (60 s), deleting its group's queue_offsets row, so a quiet host has none.
// Its subscribers still heartbeat per topic (queue_subscriber_heartbeats),
// so for each queue-partitioned T the host reads by host.ReadEvidence's
// rule, T_dlq is registered for every queue Config.Queues lists (mend run
// passes host.DB.Queues: every queue with a request row). By default only
// the topics partitioned by queue are registered ahead: mend never
// deletes a row of its own except to leave (the grants allow DELETE for
// that alone), so registering ahead
// the topics partitioned by batch, build or request ID (build,
// buildsignal, cancel, log) would leave a row per batch, build or request
// ever. Their *_dlq partitions are joined on first sight, within one poll
// interval of their first dead letter, against the host's GC idle period
// of about 10 s; AheadTopics can close that window too, at that cost. The
// window test shows a dead letter lost when nothing registers ahead.
//
// # Replicas
//
// Several mend run processes may subscribe as one group at once. Safety
// needs no fencing: each records through create-if-absent (the first
// writer's record wins, the others see it), and each moves a watermark
// only past rows it has itself seen recorded, counted and settled, with the
// guarded UPDATE that never moves a watermark back. Overlap therefore costs
// duplicate work, never a skipped row or a watermark moving backwards; a
// replica that finds a watermark moved by another restarts that
// partition's reads from it. The replica test runs two side by side.
//
// Throughput needs the replicas to divide the work, which they do with
// Config.Leases (mend run sets it): each holds one of Slots (16) slot
// leases in mend's lease table, "mend-subscribe/<group>/replica/NN",
// through the fence package, with the queue leases' TTL. A pass reads the
// slot leases (all of them in one statement) before it hands out
// partitions and again every 200 ms until its reads end; with n slots live and this replica's the r-th of them, it reads
// the partitions whose hash modulo n is r. The lease decides who works,
// never what is safe, so the moments it is stale are harmless: while a
// replica starts, two may read a partition (overlap, as above); when one
// stops (Stop releases its slot) or is paused past the TTL (its slot
// expires), the others take its partitions on their next pass, from the
// watermarks, so what it had read and not released is read again and found
// recorded. Meanwhile its partitions wait: mend's rows keep the host's GC
// from them, so a dead letter is late, never lost. A replica whose slot
// ended under it, or that finds no free slot, or cannot read the lease
// table, reads every partition until it holds a slot again. A replica
// releases only its own share: what it read of another's partitions before
// it saw that replica's slot is forgotten, not released, since moving the
// watermark under the owner would make the owner read again everything it
// had read beyond it. Drain (mend run --once) never divides: it promises
// every dead letter. The share tests show the split, a paused replica's
// share taken over, its return, and two replicas starting together.
//
// # Failure handling
//
// A pass that fails on the queue database is logged and retried on the
// next; nothing moves a watermark before its rows are durable. A failure
// while recording belongs to its partition alone: the partition stops
// just before the row that failed, waits out a backoff of its own
// (doubling from PollInterval up to a minute), and the other partitions
// are read, recorded and released in the same pass. Each failure is
// counted (Hooks.OnFailed, PassStats.Failed and Failing) and named per
// partition (PassStats.FailingRows, Subscriber.Failing: the offset, how
// many times in a row, the last error, the park bound); Held reads from
// the queue database alone which row each partition waits on. A row that fails
// ParkAfter times in a row (10) for a reason that may pass (a buildsignal
// whose build lookup fails while the application database is down) is
// parked as the stand-in below, so it holds its partition's watermark, and
// the host's GC of that partition, for minutes, never forever; a failure
// of mend's store as a whole parks nothing.
//
// A row the intake refuses (an identity mend cannot store exactly, such as
// an empty message ID; a payload over the intake's cap) would otherwise
// hold the watermark, and with it the host's GC, forever: it is recorded
// instead as a parked stand-in under the message ID
// "mend-subscribe/unrecordable/offset/<offset>" whose reason names the
// row, counted (Hooks.OnUnrecordable, PassStats.Unrecordable) and passed.
// A stand-in that cannot be recorded now (the store) stops the partition
// like any failure. Rows matched only through the queue table's collation
// ("speculate_dlq " under PAD SPACE, "speculate_DLQ" on a
// case-insensitive table) are no dead letters of MoveToDLQ's; they are
// dropped, counted and passed, and a page holding them is not mistaken
// for the last one.
//
// A stopped mend keeps its rows in queue_offsets and so holds the host's
// GC back on every partition it joined, for good. Remove (mend subscribe
// --remove --yes) leaves; do it when mend stops for good.
package subscribe

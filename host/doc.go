// Package host is mend's adapter for uber/submitqueue, and it speaks only
// that system's real schema: the application database's tables batch,
// queue_batch_state, request, request_batch and build, and the queue
// database's queue_messages, exactly as the submit queue itself writes
// them. It implements the planner's ports, planner.Batches (read,
// transition, finish and list batches) and planner.Waker (publish a
// wake-up), plus BuildBatch for the DLQ intake. A host with other tables
// implements the ports itself.
//
// # Overview
//
// A DB holds two pools: the application database and the queue database.
// They may be one database or two; as in the submit queue, a batch write and
// a publish are never one transaction. Open takes both DSNs and creates
// nothing: mend never creates, migrates or installs triggers on a host's
// tables (tests build real-shaped tables with internal/sqtest).
//
// The tables, as the adapter relies on them:
//
//	batch              (queue, id) PK; contains JSON (member request IDs, in
//	                   order); state; version INT (starts at 1, bumped only
//	                   by transitions)
//	queue_batch_state  (queue, state, batch_id) PK: advisory membership
//	                   rows, 0..n per batch; batch.state is the authority
//	request            (queue, id) PK; state; version INT. No batch_id
//	build              (queue, id) PK; batch_id: a runner build's batch
//	queue_messages     `offset` PK; (topic, partition_key, id) UNIQUE, the
//	                   dedupe key; payload BLOB (<= 65,535 bytes); metadata
//	                   JSON NULL, a flat string map; epoch-ms times
//
// Every write is a single autocommit statement, as in the real protocols;
// no write holds a lock across statements. The sessions are mend's, not the
// DSN's (internal/mysqlx): autocommit=1 whatever the server's global,
// utf8mb4, a strict sql_mode, UTC, multiStatements off, and row and
// metadata lock waits of a third of Options.LeaseTTL; a DSN parameter that
// would change any of them is refused before connecting.
//
// # State model
//
// Batch states (stored as the strings of mend.BatchState):
//
//	creating ─▶ created ─▶ speculating ─▶ merging ─▶ succeeded
//	                 │            │           │
//	                 └────────────┴───────────┴────▶ failed
//	cancelling ─▶ cancelled
//
// Live: created, speculating, merging, cancelling. Terminal: succeeded,
// failed, cancelled. creating is inert and has no membership row.
//
// BatchTransition is the real three-step transition: (1) the CAS
// UPDATE batch SET state=<new>, version=<old+1> WHERE queue, id and
// version=<old> match, with an absolute version that must fit the INT
// column; (2) INSERT IGNORE of the new state's membership row; (3) when the
// state changed, DELETE of the old state's row. A missing or duplicate
// membership row is normal and tolerated at every step. A crash between
// the steps leaves a stale row (filtered out by LiveBatches) or a missing
// one (re-created by BatchFinish's EnsureRecord for terminal batches).
//
// BatchFinish fans a terminal batch out to its members as the real
// TerminateRequest does: over batch.contains in stored order, batch
// succeeded, failed, cancelled moving requests to landed, error,
// cancelled by a CAS on request.version, then publishing a RequestLog to
// topic "log" (ID "<request>/<status>", partition key the request ID, no
// message metadata, payload {"request_id", "queue", "timestamp_ms",
// "type": "status", "status", "event": "", "request_version",
// "last_error", "metadata"}) whose metadata carries the dead letter's
// context (dlq.original_topic, dlq.failure_count, dlq.failed_at,
// dlq.subject.<type>). A request already in the target state gets its log
// published again; one in another terminal state is left alone. The
// gateway's winner rule (versioned terminal statuses win, the higher
// request_version first) makes the republish harmless. The effect is the
// real loop's, but the statements are batched: one read of all members,
// one compare-and-set statement naming each member to move with its
// version, one multi-row publish of their logs; anything unusual (a
// member matched under another spelling, a compare-and-set that did not
// move every member it named) falls back to the one-request-at-a-time path.
//
// BatchTransitionFrom and BatchFinishFrom (planner.BatchesAsRead) act on a
// batch as BatchGet returned it, sparing the read BatchTransition and
// BatchFinish begin with: the compare-and-set names the version and state
// read, so a batch that moved since is a conflict exactly as after a fresh
// read, and a terminal batch never changes. A repair of one record alone
// on the planner's path costs seven host statements: BatchGet, the three
// of Transition, the member read, their compare-and-set and their logs'
// publish (plus LiveBatches and Wake).
//
// BatchGetMany, BatchTransitionMany and BatchFinishMany
// (planner.BatchesMany) do the same for all the records a planner run
// settles together, in statements that do not grow with them (per 256
// batches, and per 256 member requests): one read of every batch; one
// compare-and-set UPDATE pinning each batch to its own version and state
// (state = CASE id ..., version = version + 1), then one INSERT IGNORE of
// the new states' membership rows and one DELETE of the old ones, the real
// Transition's three steps in its order for each batch; one INSERT IGNORE
// of the EnsureRecord rows of batches found terminal; one read of every
// member request, one compare-and-set per target state, one insert of
// every RequestLog. When the batch compare-and-set changes fewer rows than
// it named, the batches are read again in one statement and each is judged
// alone: at the version and state the compare-and-set gives, it moved;
// elsewhere, it is a conflict the planner decides again for that record
// alone; gone, it is not found. A request that is a member of two of the
// batches is finished by the first and looked at again alone for the
// second, as the real loop would find it. A run of K dead letters whose
// batches are live thus costs the host seven statements whatever K (an
// eighth, EnsureRecord, when some are found terminal), not seven per
// record, plus LiveBatches and Wake (TestRunStatementsDoNotGrowWithRecords
// counts them on the wire).
//
// LiveBatches is the real ListByStates made robust, in one statement: the
// membership rows of the live states joined with their batches by primary
// key, kept when the batch's own state is live and its key byte-equal,
// deduplicated and sorted by bytes in Go.
//
// Wake publishes to "speculate" (Options.WakeTopic), partition key the
// queue, the real BatchID payload {"id": "<batch>", "queue": "<queue>"}
// and string-only metadata {"mend.record_id", "mend.epoch"}: the real
// store reads metadata into map[string]string, and a number there would
// make the whole partition unreadable. It names all twelve columns as the
// real publish does, with created_at and published_at in epoch ms from the
// client clock and the DLQ fields at their normal values (0, 0, empty
// strings, NULL).
//
// # Failure handling
//
// Every input is validated first (identities with mend.ValidateIdentity:
// at most 255 characters and 1020 bytes of UTF-8; versions within the INT
// column; payloads within the BLOB); a *mend.ValidationError returns
// before anything reaches the server.
//
// Identities are byte-exact although the host's are not: the application
// tables use the server's default collation (case- and accent-insensitive,
// PAD SPACE) and the queue tables utf8mb4_bin (PAD SPACE). After every
// read the stored queue and ID are compared with what was asked, byte for
// byte. A row matched under another spelling ("Q/batch/1" for
// "q/batch/1", "x " for "x") is a *mend.SpellingError naming both
// spellings; it matches mend.ErrNotFound, and the planner parks the record
// for an operator. Such a row is never written: a differently spelled
// request is skipped by the fan-out, a differently spelled membership row
// by LiveBatches.
//
// A CAS that changes no row is read again to tell the cases apart: no row
// is mend.ErrNotFound (never a conflict), a moved version mend.ErrConflict,
// a terminal batch mend.ErrInvalid. A request whose version moves under the
// fan-out is read and tried again a bounded number of times. A membership
// row naming no batch is reported to Options.OnDangling and the log and
// skipped, where the real ListByStates would fail the whole call.
//
// Driver errors are translated by number (internal/mysqlx): a deadlock
// reruns the statement (bounded; the server rolled it back whole) and then
// is mend.ErrBusy, as is a lock wait timeout; a value the server refuses is
// mend.ErrInvalid; a connection that failed with a write in flight is
// mend.ErrAmbiguous, since an autocommit statement may have been applied
// (read the row again); a missing table names itself.
//
// A write cut off by its context (the planner cancels it when its lease is
// lost) is mend.ErrAmbiguous too, wrapping the context's error: the
// statement may have reached the server, which may still apply it. How late
// is bounded: the session's lock waits are a third of the lease TTL, so a
// write blocked on the real queue's row locks gives up, rather than lands,
// within the TTL of the loss, with default Options too
// (TestHostWriteBoundedByLease holds the batch row with SELECT ... FOR
// UPDATE across a lease loss). Before the first write of a transition or a
// fan-out, every ID it would publish is checked: a member whose RequestLog
// ID "<request>/<status>" would exceed 255 characters is a
// *mend.ValidationError and nothing is written. A duplicate publish
// is a silent success that leaves the first row as it was; any error from
// Wake means the wake-up may not have been published.
package host

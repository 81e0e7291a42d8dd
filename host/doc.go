// Package host is the reference MySQL adapter for the ports mend calls on a
// submit queue: planner.Batches (read, transition, finish and list batches)
// and planner.Waker (publish a wake-up). It runs over a documented host schema
// shaped like the submit queue's. The end-to-end tests and the demo use it; a
// host whose tables differ implements the two ports itself, and this package
// shows what each method must guarantee.
//
// # Overview
//
// A DB holds two pools: the application database (batches, the membership
// index, requests) and the queue database (the message table). They may be
// one database or two; as in the submit queue, a batch write and a wake-up
// publish are never one transaction. Open takes both DSNs.
//
// The schema is its own migration series, Migrations, with the bookkeeping
// table mend_host_schema_migrations, so mend's migrations never touch a real
// host's database and the two version histories never mix. Apply it to each
// database the adapter uses (Migrate does both).
//
// Besides the ports, DB has helpers for tests, the demo and the end-to-end
// scenarios: SeedBatch, SetRequestState, Request, Requests, Publish (any
// message, DLQ rows with failure columns included), Messages,
// CheckMembership and the fault FailNextPublish.
//
// # Schema
//
// Every identity column (queue, batch and request IDs, topic, partition key,
// message ID) is VARBINARY(1020): compared byte for byte, never through a
// case-insensitive or PAD SPACE collation. States are VARBINARY(16) too. All
// tables are InnoDB with BTREE keys only (no key relies on MariaDB's USING
// HASH, which MySQL 8 refuses), and the SQL is portable between MySQL 8.0+
// and MariaDB 10.6+: no RETURNING, FOR SHARE, upsert alias or VALUES() in
// ON DUPLICATE KEY UPDATE.
//
//	sq_batches           (queue, id) PK; state, version (starts at 1, +1 per
//	                     transition), requests (JSON array of member request
//	                     IDs), created_at, updated_at
//	sq_batch_membership  (queue, state, batch_id) PK: the membership index.
//	                     Exactly one row per batch, naming its current state;
//	                     moved in the same transaction as every transition
//	sq_requests          (queue, id) PK; batch_id (key (queue, batch_id)),
//	                     state, version, created_at, updated_at
//	sq_messages          `offset` auto-increment PK; topic, partition_key, id;
//	                     payload BLOB; metadata JSON; failure_count,
//	                     last_error, failed_at (set on DLQ rows); created_at.
//	                     UNIQUE (topic, partition_key, id) is the dedupe key
//	                     (3 x 1020 = 3060 bytes, under InnoDB's 3072 with
//	                     ROW_FORMAT=DYNAMIC); key (topic, partition_key,
//	                     `offset`) reads a partition in order
//
// Batch states are mend.BatchState: creating, created, speculating, merging,
// succeeded, failed, cancelling, cancelled; live: created, speculating,
// merging, cancelling; terminal: succeeded, failed, cancelled. Request states
// are RequestState: started, validated, batched, processing, cancelling and
// the terminal landed, error, cancelled. BatchFinish maps a terminal batch to
// its requests:
//
//	batch succeeded  ->  requests landed
//	batch failed     ->  requests error
//	batch cancelled  ->  requests cancelled
//
// A wake-up (Wake) is a row on topic "speculate" (Options.WakeTopic) with the
// queue as partition key, the wake-up's message ID as id, the payload every
// speculate message has, {"batch_id": "..."}, and the metadata
// {"epoch": N, "record_id": "...", "batch_id": "..."}.
//
// LiveBatches reads the membership index only: one range scan per live state,
// each stopping after limit rows, merged by batch_id. Its cost follows the
// number of live batches asked for, not the size of the queue's history.
//
// # Failure handling
//
// Every input is validated first (identities with mend.ValidateIdentity, at
// most 255 characters and 1020 bytes of UTF-8); a *mend.ValidationError
// returns before anything reaches MySQL. Each mutating method is one READ
// COMMITTED transaction: a deadlock (1213) reruns it whole, bounded, with
// jitter; a lock wait timeout (1205) rolls it back whole; both surface as
// mend.ErrBusy. A duplicate key (1062) is mend.ErrConflict. A value the server
// refuses (1406, 1366) is mend.ErrInvalid. A SIGNAL (1644, SQLSTATE 45000),
// such as a host trigger refusing a write, stays a plain error: it is neither
// a version conflict nor a sign that retrying at once helps. A lost
// connection before COMMIT is mend.ErrUnavailable; a COMMIT that got no
// answer is mend.ErrAmbiguous (re-read the batch to learn the outcome).
//
// BatchTransition locks the batch row, then checks: no row is
// mend.ErrNotFound, a different version is mend.ErrConflict, a terminal state
// is mend.ErrInvalid (nothing leaves a terminal state). The UPDATE repeats the
// version check, and the membership row of the old state must exist, so a
// drifted index fails the transition instead of being papered over. Racing
// transitions from one version have exactly one winner.
//
// BatchFinish is idempotent: it moves only non-terminal requests the batch
// lists and still owns, each by a version compare-and-set, under a shared
// lock on the batch row. A request already terminal (even with another
// outcome) is left as it is.
//
// Wake and Publish are one INSERT ... ON DUPLICATE KEY UPDATE id = id: a
// duplicate (topic, partition_key, id) is a silent no-op, while a too-long
// value or a trigger's SIGNAL still fails (INSERT IGNORE would demote those
// to warnings). Any error from Wake means the wake-up may not be published.
//
// FailNextPublish injects the "lost wake-up" fault: a BEFORE INSERT trigger
// on sq_messages consumes one armed row of the MEMORY table sq_faults and
// SIGNALs, so exactly the next matching publish fails and later ones pass.
// The control table cannot be InnoDB: the SIGNAL rolls back the statement's
// transactional changes, the trigger's delete included.
package host

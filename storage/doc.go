// Package storage is mend's MySQL persistence. All of mend's SQL lives here,
// each statement a named const whose first line is a "-- name:" comment, so
// it can be recognised in the processlist and the slow log.
//
// # Overview
//
// A DB holds reconciliation records (mend_records, the projection) and their
// append-only history (mend_events, the log). It works on MySQL 8.0+ and
// MariaDB 10.6+ with one set of statements. Every exported method is one
// READ COMMITTED transaction; times that other processes compare come from
// the database clock (NOW(6), UTC). NOW(6) is a statement's start, taken
// before any lock wait, so whatever extends a lease term (acquire, renew)
// judges the term in a statement that already holds the lease row's lock. Every connection is READ COMMITTED from the moment it
// is made (the session variable, found once per Open), so no transaction
// pays a SET TRANSACTION round trip. A write transaction travels as one
// multi-statement packet (START TRANSACTION and its statements) plus COMMIT:
// two round trips for an append, fenced or not, three for a lease acquire;
// the single-record intake (RecordCreate) sends its COMMIT in the same
// packet, one round trip, since an ambiguous create is resolved by
// repeating it (docs/architecture.md, "Round trips"); RecordCreateMany records a whole batch the same way, and
// RecordAppendMany appends to many records of a queue as one UPDATE (each
// row's values and expected version chosen by CASE record_id) and one
// INSERT of their events, guarded by the UPDATE's row count, falling back
// to each record's own statements when any record missed.
//
// # State model
//
//	RecordCreate ──▶ row v1 + event seq 1 ("created")
//	RecordAppend(v) ──▶ UPDATE ... WHERE version = v  (v → v+1)
//	                    INSERT event seq v+1          (same transaction)
//
// Create-if-absent uses INSERT ... ON DUPLICATE KEY UPDATE record_id =
// record_id: zero rows affected identifies the loser, who reads back and
// returns the winner's record unchanged. An append that matches no row is
// explained by a probe: the record at another version (ErrConflict), the
// source identity under another record ID (ErrStaleRecord), or nothing at all
// (ErrNotFound).
//
// # Failure handling
//
// Driver errors are translated once, by MySQL error number: 1213 (deadlock)
// reruns the transaction a bounded number of times with jitter and then
// reports mend.ErrBusy; 1205 (lock wait timeout) rolls the whole transaction
// back and reports mend.ErrBusy; a connection failure before COMMIT is
// mend.ErrUnavailable (nothing was written). A COMMIT that fails without an
// answer from the server is a *mend.AmbiguousError: look the op ID up with
// OpLookup to learn whether it landed. See docs/architecture.md.
package storage

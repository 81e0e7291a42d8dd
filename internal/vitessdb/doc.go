// Package vitessdb runs a private Vitess cluster for tests: vttestserver (one mysqld holding
// every shard's database, and vtcombo: vtgate plus the tablets, in one process) with keyspaces
// sharded in two, in a temporary directory it removes on Close.
//
// # Overview
//
// The pinned Vitess (Version) is built once by scripts/vitess.sh into the user's cache (Dir):
// bin/ (vttestserver, vtcombo, mysqlctl, vtctldclient; vtcombo behind a wrapper), mysql/bin/ (wrappers that run the
// MySQL 9.7 root file system of scripts/mysql-rootfs.sh through its own loader; VT_MYSQL_ROOT)
// and config/ (Vitess's config with test-suite.cnf fixed for MySQL 9.7; VTROOT). Start runs
// vttestserver with DefaultKeyspaces keyspaces mend0, mend1, ..., each sharded -80 / 80-, every
// shard loaded with Config.Schema and every keyspace with Config.VSchema (--default-schema-dir).
// Tests get a keyspace with Acquire (waits for a free one and empties its tables directly on
// mysqld) and give it back with Release: a sharded keyspace cannot be created through vtgate
// (its CREATE DATABASE makes an unsharded one), so the set is made at start and reused.
//
// # State model
//
//	Start ──> running (vtgate on base+3, mysqld on base+2) ──Close──> stopped, directory removed
//	                     │
//	        Acquire ──> keyspace held (tables emptied) ──Release──> free
//
// vtgate runs with --transaction-mode=SINGLE: a transaction that would write to a second shard
// fails, so a suite that passes has written every transaction on one shard. Reads are exempt
// (vtgate opens a read-only session on another shard for them); their routes are checked by
// storage's TestVitessEveryStatementRoute. ShardOf says where a key lands under a vindex. The tablets run with
// the query consolidator on, vttablet's default (bin/vtcombo is a wrapper that states it; the
// binary is bin/vtcombo.bin): the consolidator hands a read the result of an identical one
// already in flight, which can be older than a write committed in between, so mend's reads carry
// a per-statement directive that turns it off (storage/vitess.go), and itest's
// TestConsolidatorNeedsTheDirective shows reads without it caught here (docs/scaling.md).
//
// # Failure handling
//
// mysqlctl and mysqld refuse to run as root: as root, Start runs the cluster as nobody through
// setpriv, with CAP_DAC_READ_SEARCH as an ambient capability so it can read the cache under a
// private home, and hands the temporary directory to nobody. Ports: a base below 32000 (the
// ephemeral range begins at 32768) with base..base+4 free. Close sends SIGTERM (vttestserver
// stops vtcombo and mysqld), then SIGKILL to the process group and waits until it is empty.
// The parent-death signal does not survive setpriv's change of user: a test binary that dies
// without Close (killed, or a panic, which skips mysqltest.Main) leaves the cluster running.
// Start writes its pid to owner.pid in the directory, and Reap, which Start calls first, stops
// and removes every cluster of its prefix whose owner is gone.
// There is no fault injection (kill, pause, restart): ErrUnsupported.
package vitessdb

// Package mysqltest gives tests a real MySQL-compatible server: a fresh database per test with
// migrations applied, private servers a test can kill, freeze and restart, and an in-process
// toxiproxy on loopback for network faults. It is imported only by _test.go files.
//
// # Overview
//
// The package's shared server is started on first use (NewDB, SharedServer), once per test
// binary, by package testserver's discovery, from the first of:
//
//  1. MEND_TEST_DSN: an existing server; the harness creates and drops its own databases there;
//  2. a Docker engine with an image: a container through dockertest (package dockerdb), of
//     mysql:8.4 where a registry answers, else of the MariaDB image scripts/build-test-image.sh
//     builds from Debian packages (MEND_TEST_IMAGE overrides);
//  3. a local mariadbd or mysqld binary: a private process in a temporary directory (package
//     localdb);
//  4. nothing: the test is skipped, or failed when CI=true, with a message naming the options.
//
// MEND_TEST_ENGINE=vitess replaces all four with a private Vitess cluster (package vitessdb):
// NewDB hands out one of its keyspaces, sharded in two with mend's schema and vschema loaded
// at start, its tables emptied; the migrators run through vtgate (migrations.Up finds nothing
// to do). StartPrivate skips there (no fault injection on Vitess), and a test that needs an
// empty database or tables of its own calls SkipVitess with the vtgate limitation it meets.
// The host's tables (package sqtest) go in NewHostDB: on Vitess a plain database on the mysqld
// under the cluster, reached directly (the submit queue's own server, beside mend's cluster),
// elsewhere the same as NewDB. DB.QueueShard says on which shard a queue's rows land, so a
// test can pick queues on both.
//
// MEND_TEST_BACKEND=dsn|docker|local allows only one of them. StartPrivate never uses option 1:
// fault tests must own the server, as a container (option 2) or a process (option 3). Call Main
// from TestMain so the shared server is stopped and removed when the tests end; Main also
// reports which backend the package used (see EnvReport).
//
// # State model
//
// A private server moves between these states; Close is allowed from any of them.
//
//	          Kill              Restart
//	running --------> killed ------------> running
//	   |  ^
//	Pause  Resume
//	   v  |
//	 paused
//
// Kill is SIGKILL to the process or `docker kill`; Pause and Resume are SIGSTOP/SIGCONT or
// `docker pause`/`unpause` (the cgroup freezer: the same effect for a client, connections stay
// open and nothing answers). Data survives Kill and Restart (a directory, or a volume: every
// acknowledged commit survives; writes cut off at COMMIT are ambiguous), and Close removes it.
//
// # Failure handling
//
// Startup waits for a ping with a deadline and reports the tail of the server's log if it exits
// or never answers. A server that exits without the harness asking (a crash) is reported by
// Close and by the drop of each database on it, again with the log tail. Each private process
// has its own temporary directory for data, socket, logs and tmpdir, so concurrent test binaries
// never share files; each container has its own volume and a label naming the process that made
// it, so leftovers of a killed test binary are reaped by the next start and caught by the check
// `make test` runs at the end.
package mysqltest

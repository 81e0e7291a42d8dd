// Package mysqltest gives tests a real MySQL-compatible server: a fresh database per test with
// migrations applied, private servers whose process a test can kill, freeze and restart, and an
// in-process toxiproxy on loopback for network faults. It is imported only by _test.go files.
//
// # Overview
//
// The package's shared server is started on first use (NewDB, SharedServer), once per test
// binary, from the first of:
//
//  1. MEND_TEST_DSN: an existing server; the harness creates and drops its own databases there;
//  2. a Docker engine that answers a ping: a container of mysql:8.4 (MEND_TEST_IMAGE overrides);
//  3. a local mariadbd or mysqld binary: a private process in a temporary directory, started
//     and owned by package localdb (shared with `mend demo`);
//  4. nothing: the test is skipped, or failed when CI=true, with a message naming the options.
//
// StartPrivate always uses option 3, because fault tests need to own the process. Call Main
// from TestMain so the shared server is stopped and its directory removed when the tests end.
//
// # State model
//
// A private server's process moves between these states; Close is allowed from any of them.
//
//	          Kill              Restart
//	running --------> killed ------------> running
//	   |  ^
//	Pause  Resume
//	   v  |
//	 paused
//
// Its data directory survives Kill and Restart (every acknowledged commit survives; writes cut
// off at COMMIT are ambiguous), and is removed by Close.
//
// # Failure handling
//
// Startup waits for a ping with a deadline and reports the tail of the server's error log if
// the server exits or never answers. A server that exits without the harness asking (a crash)
// is reported by Close and by the drop of each database on it, again with the log tail. Each
// private server has its own temporary directory for data, socket, logs and tmpdir, so
// concurrent test binaries never share files.
package mysqltest

// Package sqreal runs the real uber/submitqueue beside mend in tests: its own gateway, orchestrator and
// runway, built from the queue's source, as processes on 127.0.0.1, on databases of the test MySQL server
// (package mysqltest). It is imported only by _test.go files (the suite in itest/realqueue).
//
// # Overview
//
// Source finds the queue's source: SQ_SOURCE=<dir> (an unpacked tree), else the snapshot tarball
// ../shared/submitqueue-src/submitqueue-cfeea0d9.tar.gz beside the module root (a fresh clone in CI has a
// copy of shared/ beside it). Without either the test is skipped, saying how to get it; with CI=true it
// fails. The tree is unpacked (or copied) into the test's temporary directory, where a patch may be applied.
//
// Build compiles the services with GOFLAGS='-mod=mod -buildvcs=false' (the queue's dependencies come from
// the Go module proxy) into a cache keyed by the commit and the patch: ~/.cache/mend/submitqueue-cfeea0d9/
// bin (bin-<patch hash> for a patched tree; MEND_SQ_CACHE overrides the root). A lock file there makes two
// test binaries build one after the other; the second finds the first's binaries. From SQ_SOURCE, which may
// change between runs, the binaries are rebuilt every run (the Go build cache keeps that to seconds).
//
// Start makes two databases (application and queue) on the shared test server, applies the queue's DDL as
// its Makefile does (storage and counter schema to the application database, queue schema to the queue
// database), writes the configuration docker-compose.yml and docker-compose.fake.yml give the services
// (fake provider mode: profiles.yaml and merge.yaml from the source, a queues.yaml naming the test's
// queues, a CONSUMER_GATE_DIR of the test's own), starts the three services on free loopback ports with
// their output in log files, and waits until each answers on its port and has registered its subscribers.
// At cleanup each is stopped with SIGTERM, then SIGKILL after a grace period; a failed test prints the
// tail of every log. Restart stops and starts one service.
//
// # State model
//
// A Service is stopped or running:
//
//	         Start                Stop (SIGTERM, then SIGKILL)
//	stopped -------> running ---------------------------------> stopped
//
// # Failure handling
//
// The real queue runs only on MySQL: its DDL and SQL use `offset` unquoted, a reserved word on MariaDB.
// On another engine Start skips the test, saying so. A service that exits before it is ready fails the
// test with the tail of its log. The MySQL and the queue's own clocks are the same machine's, so the
// millisecond columns the queue writes (heartbeat_at, updated_at) compare with time.Now.
package sqreal

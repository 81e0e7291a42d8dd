// Package dockerdb runs a MySQL or MariaDB server in a Docker container for
// tests and the demo, through dockertest, with the fault methods a test
// needs: Kill, Pause, Resume, Restart.
//
// # Overview
//
// Start runs an image with the same server settings as a private local
// server (localdb.ServerFlags), publishes its port on a free 127.0.0.1 port
// chosen by the harness (so a restarted container keeps its address), and
// keeps its data on a volume of its own (so a killed container restarts on
// the same data, and InnoDB writes bypass the engine's container layer).
// Images: mysql:8.4 where a registry answers, else the MariaDB image that
// scripts/build-test-image.sh builds from Debian packages; package
// testserver chooses.
//
// # State model
//
//	          Kill (docker kill)     Restart (docker start)
//	running --------------------> exited ----------------------> running
//	   |  ^
//	Pause  Resume (docker pause / unpause: the cgroup freezer)
//	   v  |
//	 paused
//
// Close removes the container and its volume from any state.
//
// # Failure handling
//
// Every container and volume carries the label mend.testserver and the pid
// of the process that made it. A test binary killed by its timeout cannot
// clean up, so Reap (run before every start by package testserver) removes
// whatever belongs to a process that no longer exists; List shows what is
// there, for the check `make test` runs at the end. A container that exits
// without being asked to is reported by Crash with the tail of its log.
package dockerdb

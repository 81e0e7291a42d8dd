// Package localdb starts a throwaway MariaDB or MySQL server from a local
// mariadbd or mysqld binary, in a temporary directory, on a free loopback
// port. It is the one implementation behind both `mend demo` and the test
// harness's private servers (internal/mysqltest), which adds testing.TB
// plumbing, Docker and EnvDSN on top.
//
// # Overview
//
// FindBinary looks for mariadbd, then mysqld, on PATH and in the usual sbin
// directories. Start initialises a data directory (mariadb-install-db, or
// mysqld --initialize-insecure), starts the server in its own process group
// with a private tmpdir, and waits until it answers a ping. Close stops it
// with SIGTERM (SIGKILL after a timeout) and removes the directory, so
// nothing is left behind.
//
// The tmpdir is private because a starting mariadbd deletes every "#sql*"
// file in its tmpdir as a leftover of its own last run; in a shared /tmp
// that removed the temporary tables of concurrent servers and crashed them.
//
// # State model
//
// The process moves between these states; Close is allowed from any of them.
//
//	          Kill              Restart
//	running --------> killed ------------> running
//	   |  ^
//	Pause  Resume
//	   v  |
//	 paused
//
// The data directory and port survive Kill and Restart, so every
// acknowledged commit survives (flush-at-commit=2 still writes the log to
// the OS at each commit, and only the process dies); Close removes them.
//
// # Failure handling
//
// A server that exits or never answers during Start or Restart is reported
// with the tail of its error log, and Start removes the directory. An exit
// the caller did not cause (a crash) is recorded, with the log tail, and
// returned by Crash and by Close, since clients may only have seen
// "connection refused".
package localdb

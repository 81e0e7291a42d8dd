// Package bench holds mend's benchmarks against a real MySQL-compatible
// server (see internal/mysqltest). It has no code of its own besides this
// comment: the benchmarks live in _test.go files and `make bench` runs them
// through cmd/benchreport, which prints a table and writes
// docs/benchmarks.md; `make bench-scale` runs the scale benchmarks and
// writes docs/benchmarks-scale.md (docs/benchmarks-scale-mariadb.md with ENGINE=mariadb).
//
// # Overview
//
// Every throughput benchmark runs mend's code and two baselines in the
// same run, on the same server, at the same concurrency, each baseline on a
// clone of the database taken just before mend's run.
//
// The replay issues exactly the statements mend issued: a tap on each
// connection of mend's pools records every COM_QUERY packet (with
// client-side interpolation the packet is the whole statement text), and the
// baseline replays those texts, in order, through database/sql on pinned
// connections. The ratio lib/raw is mend's throughput over the replay's; the
// design target is at least 0.8. It measures mend's client-side overhead.
//
// The limit (limit_test.go) does the same logical effect in the fewest
// round trips a correct implementation needs, written independently of
// mend's storage and host code: one multi-statement packet per transaction.
// The TestLimit* tests hold it to mend's guarantees. The ratio lib/limit is
// mend's throughput over the limit's; it measures what mend's design costs.
//
// Round trips per operation (rt/op) are counted on the wire for mend, the
// replay and the limit alike: every command packet the server answers.
//
// BenchmarkScale (scale_test.go) runs in-process `mend run` equivalents in
// a world sized by MEND_BENCH_SCALE (10,000 queues and 10^6 finished records
// by default): the idle pass, a storm of dead letters, lease traffic and
// memory.
//
// BenchmarkBinlogBacklog (binlog_test.go) records BenchmarkSubscribeBacklog's
// backlog with one binlog.Reader (issue 44) resuming from a saved position;
// make bench runs the two in one process, on one server. Both count the
// statements sent to the queue database alone through stmtCounter, a
// counting proxy; the reader's delay from commit to record is timed per dead
// letter at its OnRecorded hook.
//
// BenchmarkVitess (vitess_test.go; make bench-vitess writes docs/benchmarks-vitess.md) runs
// on the Vitess backend only: intake, fenced append, lease acquire, planner repair and the due
// listing at 10,000 queues through vtgate on a keyspace sharded in two, and the same on a plain
// database on the mysqld under the same cluster, in the same run; BenchmarkVitessStorm runs
// BenchmarkScale's storm at reduced size the same way. The ratios are in docs/scaling.md.
package bench

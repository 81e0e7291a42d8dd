// Package bench holds mend's benchmarks against a real MySQL-compatible
// server (see internal/mysqltest). It has no code of its own besides this
// comment: the benchmarks live in _test.go files and `make bench` runs them
// through cmd/benchreport, which prints a table and writes
// docs/benchmarks.md.
//
// # Overview
//
// Every throughput benchmark runs mend's code and a raw-SQL baseline in the
// same run, on the same server, at the same concurrency. The baseline issues
// exactly the statements mend issued: a tap on each connection of mend's
// pools records every COM_QUERY packet (with client-side interpolation the
// packet is the whole statement text), and the baseline replays those texts,
// in order, through database/sql on pinned connections against a clone of
// the database taken just before mend's run. The ratio lib/raw is mend's
// throughput over the baseline's; the design target is at least 0.8.
package bench

// Package sqtest builds the real uber/submitqueue tables for tests and the
// demo, writes to them the way the real system does, and reads what mend
// publishes the way the real consumers would.
//
// # Overview
//
// CreateApp and CreateQueue create the application and queue databases'
// tables from DDL written for this project from the fact sheet
// (../shared/submitqueue.md): VARCHAR(255) utf8mb4 identities, INT versions,
// JSON members, epoch-millisecond message times, the app tables on the
// server's default (case-insensitive) collation and the queue tables on
// utf8mb4_bin (PAD SPACE). mend never creates or migrates a real host's
// tables; this package exists so tests run against tables shaped exactly
// like production's.
//
// World seeds batches, requests, builds and messages with the real write
// protocols (a batch row and its advisory membership row written apart, a
// publish naming all twelve columns, MoveToDLQ), and its Consume* methods
// are the consumer-side check of everything mend publishes: metadata must
// be a string map (else the real store wedges the partition), payloads must
// decode strictly.
//
// # Failure handling
//
// Every helper returns an error naming the row it was working on; the
// decoders say which rule a message broke.
package sqtest

// Package itest holds mend's integration, end-to-end and reliability tests,
// which cross packages and run against a real MySQL-compatible server
// provided by internal/mysqltest. The submit queue's side is its real
// schema, built by internal/sqtest: dead letters are the rows its store
// moves to <topic>_dlq, and every wake-up mend publishes is read back by
// sqtest's strict speculate consumer. It has no non-test code.
//
// TestMixedVersions (upgrade_test.go) builds the binary of the commit named
// in testdata/old-version from this repository's history (git archive; the
// build is cached per commit under $MEND_UPGRADE_CACHE, default the user's
// cache directory) and runs it beside the current binary on one database:
// an upgrade across a migration and its rollback, with dead letters
// arriving throughout.
package itest

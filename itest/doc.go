// Package itest holds mend's integration, end-to-end and reliability tests,
// which cross packages and run against a real MySQL-compatible server
// provided by internal/mysqltest. It has no non-test code.
package itest

package client_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// exampleT lets an Example use the test harness, which takes a testing.TB:
// an Example has none. Only the methods the harness calls are here; any
// other panics (the embedded TB is nil). A failure panics, which fails the
// Example.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                        {}
func (t *exampleT) Name() string                   { return "Example" }
func (t *exampleT) Context() context.Context       { return context.Background() }
func (t *exampleT) Cleanup(f func())               { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Log(...any)                     {}
func (t *exampleT) Logf(string, ...any)            {}
func (t *exampleT) Error(args ...any)              { panic(fmt.Sprint(args...)) }
func (t *exampleT) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleT) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (t *exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleT) Skipf(format string, a ...any) {
	panic("the example needs a test server: " + fmt.Sprintf(format, a...))
}
func (t *exampleT) Failed() bool { return false }
func (t *exampleT) close() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

// exampleWorld is an Example's submit queue with a dead letter on
// speculate_dlq: the DSNs of mend's database and the host's, the DLQ row,
// and a func that drops the databases.
func exampleWorld() (mendDSN, hostDSN string, dead DLQMessage, drop func()) {
	t := &exampleT{}
	w := newWorld(t)
	m := w.deadLetter(t)
	return w.mendDB.DSN, w.hostDB.DSN, DLQMessage{Topic: m.Topic, Partition: m.PartitionKey, ID: m.ID, Payload: m.Payload,
		FailedAtMS: m.FailedAt, Failures: m.FailureCount, LastError: m.LastError, OriginalTopic: m.OriginalTopic}, t.close
}

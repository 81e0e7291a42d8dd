package realqueue

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/sqreal"
)

// The real services log with zap's development logger (console encoding, debug level): one line per
// event, the fields a JSON object at its end. platform/consumer/consumer.go logs every delivery's end
// under one of these messages, with the message's ID in "message_id".
const (
	logProcessed = "message processed successfully"
	logPollError = "poll failed" // the subscriber could not fetch or decode a partition's rows
)

// logLevel matches the level column of a zap development line.
var logLevel = regexp.MustCompile(`\t(DEBUG|INFO|WARN|ERROR|DPANIC|PANIC|FATAL)\t`)

// logLines returns svc's log, one entry per line.
func logLines(t *testing.T, svc *sqreal.Service) []string {
	t.Helper()
	b, err := os.ReadFile(svc.Log)
	if err != nil {
		t.Fatalf("read %s's log: %v", svc.Name, err)
	}
	return strings.Split(string(b), "\n")
}

// namesMessage reports whether a log line's fields name message id.
func namesMessage(line, id string) bool {
	return strings.Contains(line, `"message_id": "`+id+`"`) || strings.Contains(line, `"message_id":"`+id+`"`)
}

// waitConsumed waits until the orchestrator's log shows its consumer processed every message of ids
// successfully (the line the consumer writes after the controller returned nil and the ack was stored).
func waitConsumed(t *testing.T, s *sqreal.Stack, ids []string) {
	t.Helper()
	s.Eventually(t, time.Minute, "the orchestrator's log to show each wake-up processed", func() (bool, string) {
		lines := logLines(t, s.Orchestrator)
		var missing []string
		for _, id := range ids {
			found := false
			for _, l := range lines {
				if strings.Contains(l, logProcessed) && namesMessage(l, id) && strings.Contains(l, `"controller": "speculate"`) {
					found = true
					break
				}
			}
			if !found {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, "no \"" + logProcessed + "\" line for " + strings.Join(missing, ", ")
	})
}

// checkNoLoggedErrors fails t for every loggedErrors line.
func checkNoLoggedErrors(t *testing.T, s *sqreal.Stack, topic string, ids []string) {
	t.Helper()
	for _, e := range loggedErrors(t, s, topic, ids) {
		t.Error(e)
	}
}

// loggedErrors returns every line of the stack's services' logs that names one of ids at WARN level or
// above (a nack, a reject into the DLQ, a decode failure), and every poll failure on topic other than a
// cancellation (a row the subscriber cannot read fails the fetch of its whole partition, naming no
// message), each with the service's name.
func loggedErrors(t *testing.T, s *sqreal.Stack, topic string, ids []string) []string {
	t.Helper()
	var out []string
	for _, svc := range []*sqreal.Service{s.Gateway, s.Orchestrator, s.Runway} {
		for _, l := range logLines(t, svc) {
			m := logLevel.FindStringSubmatch(l)
			if m == nil || m[1] == "DEBUG" || m[1] == "INFO" {
				continue
			}
			// A partition worker the subscriber stops (its idle release, a shutdown) ends its poll with
			// "context canceled": not a row it could not read.
			if strings.Contains(l, logPollError) && strings.Contains(l, `"topic": "`+topic+`"`) && !strings.Contains(l, "context canceled") {
				out = append(out, fmt.Sprintf("%s logged a poll failure on %s:\n%s", svc.Name, topic, l))
				continue
			}
			for _, id := range ids {
				if namesMessage(l, id) {
					out = append(out, fmt.Sprintf("%s logged an error about message %s:\n%s", svc.Name, id, l))
				}
			}
		}
	}
	return out
}

// processedLine returns the orchestrator's log line that says message id was processed ("" if none).
func processedLine(t *testing.T, s *sqreal.Stack, id string) string {
	t.Helper()
	for _, l := range logLines(t, s.Orchestrator) {
		if strings.Contains(l, logProcessed) && namesMessage(l, id) {
			return l
		}
	}
	return ""
}

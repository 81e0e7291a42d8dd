package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The shipped alert rules (deploy/prometheus/, tested by promtool in CI)
// name only metrics this binary defines: a renamed metric would otherwise
// leave an alert that can never fire. And the page on stuck repairs reads
// the due gauge, not the open one (issue 30).
func TestAlertRulesNameRealMetrics(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile("../../deploy/prometheus/mend-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range []string{"metrics.go", "subscribe.go", "verifymetric.go", "binlogmode.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	names := regexp.MustCompile(`\bmend_[a-z_]+`).FindAllString(string(rules), -1)
	if len(names) == 0 {
		t.Fatal("no mend_ metric in the rules")
	}
	for _, n := range names {
		base := regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(n, "")
		if !strings.Contains(src.String(), `"`+base+`"`) {
			t.Errorf("the rules name %s, which cmd/mend does not define", n)
		}
	}
	stuck := regexp.MustCompile(`(?s)alert: MendRepairStuck\s+expr: ([^\n]+)`).FindStringSubmatch(string(rules))
	if stuck == nil || !strings.Contains(stuck[1], "mend_oldest_due_seconds") {
		t.Errorf("MendRepairStuck = %q; want it on mend_oldest_due_seconds", stuck)
	}
}

package main

import (
	"fmt"
	"strings"
	"testing"
)

// A binlog row beside a RecordMany row of the same run: the report says
// how the reader's rate compares with the intake's, and when the intake
// itself is under the target, that the server's write rate bounds the
// reader. Without the RecordMany row it says nothing of a bound.
func TestRenderBinlogBound(t *testing.T) {
	const binlog = "BenchmarkBinlogBacklog/letters=100000/partitions=1000/readers=1/batch=500/flush=50ms-2 1 11845 records/s 118 delay-p99-ms\n"
	const intake = "BenchmarkRecordMany/conns=4/batch=500-2 40 14694 records/s 17167 raw-records/s\n"
	render := func(text string) (string, []string) {
		var md, sum strings.Builder
		w := func(f string, a ...any) { fmt.Fprintf(&md, f, a...) }
		misses := renderBinlog(w, &sum, parse(text))
		return md.String(), misses
	}

	md, misses := render(intake + binlog)
	if !strings.Contains(md, "14694 records/s (its replay 17167); the reader ran at 0.81 of it") {
		t.Errorf("no bound in the report:\n%s", md)
	}
	if !strings.Contains(md, "bounds the reader") {
		t.Errorf("an intake under the target is not named as the bound:\n%s", md)
	}
	if len(misses) != 1 || !strings.Contains(misses[0], "rate missed by 41%") || !strings.Contains(misses[0], "ran at 0.81 of it") {
		t.Errorf("misses = %q", misses)
	}

	fast := strings.Replace(intake, "14694 records/s 17167", "24694 records/s 27167", 1)
	if md, _ := render(fast + binlog); strings.Contains(md, "bounds the reader") {
		t.Errorf("an intake over the target is named as the bound:\n%s", md)
	}

	md, misses = render(binlog)
	if strings.Contains(md, "RecordMany` alone") || len(misses) != 1 || strings.Contains(misses[0], "RecordMany") {
		t.Errorf("a run without RecordMany speaks of it: %q\n%s", misses, md)
	}
}

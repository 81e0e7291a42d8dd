package storage_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// scatterReads are the named statements that vtgate sends to every shard, all reads; the
// "What scatters" list of docs/scaling.md names the same. TestVitessEveryStatementRoute
// fails when a statement joins or leaves this list, so the docs cannot drift from the code.
var scatterReads = []string{
	"AtRiskLeases", "AtRiskRecords", // mend doctor and the at-risk report
	"LeaseList", "StatusLeases", "StatusCounts", "OldestOpen", // mend status, leases and the metrics gauges
	"StatusFailing",                                            // mend status's failing repairs
	"RepairLatency", "RepairLatencyRank", "RepairLatencyWorst", // mend status's repair latency
	"PruneCandidates",            // the reconciler's prune listing (the deletes name their queue)
	"QueuesDue",                  // the reconciler's idle pass
	"StuckWakes",                 // mend status's stuck-queue wake-ups
	"RecordFind", "RecordPrefix", // mend inspect by ID or ID prefix without a queue
	"RecordsSelect",                 // mend list / retry / resolve selections: (? = '' OR queue = ?) routes nowhere
	"VerifyRecords", "VerifyEvents", // mend verify's pages
	// mend console's overview and parked pages (bounded by a page of queues or a LIMIT)
	"ConsoleDueQueues", "ConsoleLeaseQueues", "ConsoleOverdue", "ConsoleParked", "ConsoleParkedByQueue",
	"ConsoleRecentDone", "ConsoleRecordQueues", "ConsoleRecordedOpen", "ConsoleSlowRepairs",
	"ConsoleTotalDue", "ConsoleTotalOpen", "ConsoleTotalParked", "ConsoleTotalRecorded",
	"ConsoleFailing", "ConsoleFailingErrors", // the overview's "failing now"
	"ConsoleParkedScan", "ConsoleParkedRows", // the parked page's reason filter
}

// TestVitessEveryStatementRoute asks vtgate (VEXPLAIN PLAN) for the route of every named
// statement of package storage that reads or writes mend's sharded tables (each const whose
// text starts with "-- name:", read from the package's source; %s lists as one placeholder),
// and checks that exactly scatterReads scatter and that no write does.
func TestVitessEveryStatementRoute(t *testing.T) {
	b, _ := vitessSetup(t)
	stmts := namedStatements(t)
	if len(stmts) < 40 {
		t.Fatalf("found %d named statements in the package source; want the whole set (40 or more)", len(stmts))
	}
	sharded := regexp.MustCompile(`\bmend_(records|events|leases|lease_history)\b`)
	write := regexp.MustCompile(`^\s*(INSERT|UPDATE|DELETE)`)
	var scatter []string
	planned := 0
	for _, name := range slices.Sorted(maps.Keys(stmts)) {
		scatters, touches := false, false
		// A packet of several statements is planned one statement at a time.
		for _, q := range strings.Split(stripComment(strings.ReplaceAll(stmts[name], "%s", "?")), ";\n") {
			if !sharded.MatchString(q) {
				continue
			}
			touches = true
			var plan string
			if err := b.store.SQL().QueryRow("VEXPLAIN PLAN " + bindExample(q)).Scan(&plan); err != nil {
				t.Errorf("VEXPLAIN PLAN of %s: %v\n%s", name, err, q)
				continue
			}
			if strings.Contains(plan, `"Variant": "Scatter"`) {
				scatters = true
				if write.MatchString(q) {
					t.Errorf("%s writes to every shard:\n%s", name, plan)
				}
			}
		}
		if touches {
			planned++
		}
		if scatters {
			scatter = append(scatter, name)
		}
	}
	want := slices.Sorted(slices.Values(scatterReads))
	if !slices.Equal(scatter, want) {
		t.Errorf("statements that scatter: %v\nwant (scatterReads, docs/scaling.md): %v", scatter, want)
	}
	t.Logf("%d named statements, %d on sharded tables, %d of them scatter: %v", len(stmts), planned, len(scatter), scatter)
}

func stripComment(q string) string {
	if strings.HasPrefix(q, "-- ") {
		if _, rest, ok := strings.Cut(q, "\n"); ok {
			return rest
		}
	}
	return q
}

// namedStatements reads the package's non-test source and returns each string constant
// whose value starts with "-- name: NAME", by NAME, evaluating concatenations of literals
// and other constants of the package.
func namedStatements(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	exprs := map[string]ast.Expr{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						exprs[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	// Conditions built at init from the topic kinds' topics (topickind.go),
	// stood in for by the same shape: a statement's route depends on the
	// tables and keys it names, not on the topics it lists.
	fragments := map[string]string{
		"notRecorded": "NOT ((original_topic IN (?) OR (original_topic = '' AND topic IN (?, ?))))",
		"recorded":    "((original_topic IN (?) OR (original_topic = '' AND topic IN (?, ?))))",
		"statusAudit": "(original_topic IN (?) OR (original_topic = '' AND topic IN (?, ?)))",
		"statusHost":  "(original_topic IN (?) OR (original_topic = '' AND topic IN (?, ?)))",
	}
	var eval func(e ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.BinaryExpr:
			l, ok1 := eval(e.X)
			r, ok2 := eval(e.Y)
			return l + r, ok1 && ok2 && e.Op == token.ADD
		case *ast.Ident:
			if f, ok := fragments[e.Name]; ok {
				return f, true
			}
			if x, ok := exprs[e.Name]; ok {
				return eval(x)
			}
		case *ast.ParenExpr:
			return eval(e.X)
		}
		return "", false
	}
	out := map[string]string{}
	for _, e := range exprs {
		s, ok := eval(e)
		if !ok {
			continue
		}
		if rest, ok := strings.CutPrefix(s, "-- name: "); ok {
			name, _, _ := strings.Cut(rest, "\n")
			out[name] = s
		}
	}
	return out
}

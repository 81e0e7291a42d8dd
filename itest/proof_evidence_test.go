package itest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// EnvProofArtifacts names the directory under which a porcupine proof that
// fails (Illegal, or Unknown: the checker gave up) keeps its evidence, one
// subdirectory per failure. Unset, it is os.TempDir()/mend-proof-failures.
// The evidence outlives the test (t.TempDir would not): .ci/run points this
// at a directory it keeps and names when the suite fails.
const EnvProofArtifacts = "MEND_PROOF_ARTIFACTS"

// proofArtifactsRoot is where failures' evidence goes.
func proofArtifactsRoot() string {
	if d := os.Getenv(EnvProofArtifacts); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "mend-proof-failures")
}

// proofEvidence is what a failed proof leaves behind: the history checked,
// what the model can say about it, and whatever the database holds.
type proofEvidence struct {
	Model   porcupine.Model
	Info    porcupine.LinearizationInfo // from CheckOperationsVerbose; may be empty
	History []porcupine.Operation       // every operation recorded, checked or not
	// Checked says whether History[i] went to the checker (nil: all did).
	Checked func(i int) bool
	Result  porcupine.CheckResult
	// Summary is the PROOF line: counts, faults, checker result.
	Summary string
	// JSON files to write as they are (name -> value), e.g. the event log
	// and the lease history rows.
	JSON map[string]any
}

// keepEvidence writes e into a fresh directory under proofArtifactsRoot and
// returns its path, for the failure message. It never fails the test on
// its own: a file it cannot write is named in the returned text instead.
//
// The directory holds:
//   - summary.txt: the PROOF line and the checker's result;
//   - history.json: every operation (client, call and return in ns since
//     the run began, return null when unknown, input, output, whether it
//     was checked);
//   - history.txt: the same, one line each in call order, described by
//     the model;
//   - visualisation.html: porcupine's visualisation (open it in a browser;
//     for an illegal history it shows the longest partial linearisations
//     and the operations they could not place);
//   - the JSON files of e.JSON (the database's side).
func keepEvidence(t testing.TB, e proofEvidence) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	dir := filepath.Join(proofArtifactsRoot(), fmt.Sprintf("%s-%s", name, time.Now().UTC().Format("20060102T150405.000000")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Sprintf("(evidence not kept: %v)", err)
	}
	var problems []string
	write := func(file string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			problems = append(problems, err.Error())
		}
	}
	write("summary.txt", []byte(fmt.Sprintf("%s\nchecker: %s\n", e.Summary, e.Result)))

	type opJSON struct {
		Index    int    `json:"index"`
		Client   int    `json:"client"`
		CallNS   int64  `json:"call_ns"`
		ReturnNS *int64 `json:"return_ns"` // null: never returned (unknown outcome)
		Checked  bool   `json:"checked"`
		Input    any    `json:"input"`
		Output   any    `json:"output"`
		Describe string `json:"describe"`
	}
	ops := make([]opJSON, len(e.History))
	for i, op := range e.History {
		o := opJSON{Index: i, Client: op.ClientId, CallNS: op.Call, Checked: e.Checked == nil || e.Checked(i),
			Input: op.Input, Output: op.Output}
		if op.Return != maxReturn {
			r := op.Return
			o.ReturnNS = &r
		}
		if e.Model.DescribeOperation != nil {
			o.Describe = e.Model.DescribeOperation(op.Input, op.Output)
		} else {
			o.Describe = fmt.Sprintf("%+v -> %+v", op.Input, op.Output)
		}
		ops[i] = o
	}
	if b, err := json.MarshalIndent(ops, "", " "); err == nil {
		write("history.json", b)
	} else {
		problems = append(problems, err.Error())
	}
	sorted := append([]opJSON(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].CallNS < sorted[j].CallNS })
	var txt strings.Builder
	for _, o := range sorted {
		ret := "never"
		if o.ReturnNS != nil {
			ret = time.Duration(*o.ReturnNS).String()
		}
		skip := ""
		if !o.Checked {
			skip = " (not checked)"
		}
		fmt.Fprintf(&txt, "#%d client %d [%s, %s] %s%s\n", o.Index, o.Client, time.Duration(o.CallNS), ret, o.Describe, skip)
	}
	write("history.txt", []byte(txt.String()))
	for file, v := range e.JSON {
		if b, err := json.MarshalIndent(v, "", " "); err == nil {
			write(file, b)
		} else {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
		}
	}
	if err := porcupine.VisualizePath(e.Model, e.Info, filepath.Join(dir, "visualisation.html")); err != nil {
		problems = append(problems, fmt.Sprintf("visualisation: %v", err))
	}
	if len(problems) > 0 {
		return fmt.Sprintf("%s (incomplete: %s)", dir, strings.Join(problems, "; "))
	}
	return dir
}

// maxReturn is the return time of an operation whose outcome stayed
// unknown: it may take effect at any time after its call.
const maxReturn = int64(^uint64(0) >> 1)

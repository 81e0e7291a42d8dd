package itest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/mendq/mend"
	"github.com/mendq/mend/storage"
)

// fenceStates is every lease state over two holders and epochs 0 to 2:
// enough to hit every branch of fenceStep.
func fenceStates() []fenceState {
	var out []fenceState
	for epoch := range int64(3) {
		for _, holder := range []string{"", "h0", "h1"} {
			for _, live := range []bool{false, true} {
				for _, seen := range []bool{false, true} {
					out = append(out, fenceState{Epoch: epoch, Holder: holder, Live: live, SeenOver: seen})
				}
			}
		}
	}
	return out
}

// TestFenceFreeOpsAreFree: what freeOp leaves out of the check is free in
// the model: in every state, for every term, the step returns the state it
// was given and nothing else. So dropping it cannot make a legal history
// illegal or an illegal one legal. A renewal of unknown outcome is not free
// (it may clear what an observe saw), so it must stay in the check.
func TestFenceFreeOpsAreFree(t *testing.T) {
	unknown := fenceOutput{Unknown: true}
	// An acquire the lease history shows did not take effect, and one it
	// shows may have taken epoch 1 (narrowAcquires).
	none, maybe1 := fenceOutput{Unknown: true, Maybe: &fenceEpochs{}}, fenceOutput{Unknown: true, Maybe: &fenceEpochs{1}}
	renewMatters, maybeMatters := false, false
	for _, s := range fenceStates() {
		for _, holder := range []string{"h0", "h1"} {
			for epoch := range int64(4) {
				for kind := range fenceKind(len(fenceKindNames)) {
					for _, out := range []fenceOutput{unknown, none, maybe1} {
						in := fenceInput{Kind: kind, Queue: "q", Holder: holder, Epoch: epoch}
						op := porcupine.Operation{Input: in, Output: out}
						got := fenceStep(s, in, out)
						identity := reflect.DeepEqual(got, []any{s})
						if freeOp(op) && !identity {
							t.Errorf("%s is left out of the check but in state %+v its step gives %+v, not the state unchanged", fenceModel.DescribeOperation(in, out), s, got)
						}
						if kind == fenceRenew && !identity {
							renewMatters = true
						}
						if kind == fenceAcquire && out == maybe1 && !identity {
							maybeMatters = true
						}
					}
				}
			}
		}
	}
	if !maybeMatters {
		t.Errorf("an acquire that may have taken epoch 1 never changes the state: the test of the model is broken")
	}
	if op := (porcupine.Operation{Input: fenceInput{Kind: fenceAcquire}, Output: none}); !freeOp(op) {
		t.Errorf("an acquire the lease history shows did not take effect is checked: it constrains nothing and only slows the checker")
	}
	if !renewMatters {
		t.Errorf("an unknown renewal never changes the state: the test of the model is broken")
	}
	for kind := range fenceKind(len(fenceKindNames)) {
		op := porcupine.Operation{Input: fenceInput{Kind: kind}, Output: unknown}
		if want := kind == fenceWrite; freeOp(op) != want {
			t.Errorf("freeOp(unknown %s) = %v; want %v", fenceKindNames[kind], !want, want)
		}
	}
}

// fop builds one operation of a hand-written history; ret < 0 means it
// never returned (unknown outcome).
func fop(client int, in fenceInput, call, ret int64, out fenceOutput) porcupine.Operation {
	if ret < 0 {
		ret = maxReturn
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

// TestFenceModelNeedsUnknownRenewals feeds the checker histories in which
// a renewal matters, or must not be allowed to. The first is issue 35's
// question: h0 renews with its outcome unknown, an observe (a read without
// a lock) sees the term past its expiry, then h0 writes under it and is
// accepted. That is legal (the renewal committed while the observe read)
// only if the renewal is in the check: left out, as before issue 35, the
// history is illegal, so the filter was unsound once observes could say
// "expired" and the check could fail on a correct fence.
func TestFenceModelNeedsUnknownRenewals(t *testing.T) {
	acq := func(h string) fenceInput { return fenceInput{Kind: fenceAcquire, Queue: "q", Holder: h} }
	act := func(k fenceKind, h string, e int64) fenceInput {
		return fenceInput{Kind: k, Queue: "q", Holder: h, Epoch: e}
	}
	obs := fenceInput{Kind: fenceObserve, Queue: "q"}
	ok, refused, unknown := fenceOutput{Result: fenceOK}, fenceOutput{Result: fenceRefused}, fenceOutput{Unknown: true}
	granted := func(e int64) fenceOutput { return fenceOutput{Result: fenceOK, Epoch: e} }
	held := func(h string, e int64) fenceOutput { return fenceOutput{Result: fenceHeld, Holder: h, Epoch: e} }
	seen := func(h string, e int64, live bool) fenceOutput {
		return fenceOutput{Result: fenceOK, Holder: h, Epoch: e, Live: live}
	}
	cases := []struct {
		name string
		h    []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"an unknown renewal explains a write after an observe saw the term expired", []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(0, act(fenceRenew, "h0", 1), 15, -1, unknown),
			fop(1, obs, 20, 30, seen("h0", 1, false)),
			fop(0, act(fenceWrite, "h0", 1), 40, 50, ok),
		}, porcupine.Ok},
		{"a known renewal overlapping the observe explains it too", []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(0, act(fenceRenew, "h0", 1), 15, 35, ok),
			fop(1, obs, 20, 30, seen("h0", 1, false)),
			fop(0, act(fenceWrite, "h0", 1), 40, 50, ok),
			fop(2, acq("h1"), 55, 60, held("h0", 1)),
		}, porcupine.Ok},
		{"without a renewal a write after an observe saw the term expired is illegal", []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(1, obs, 20, 30, seen("h0", 1, false)),
			fop(0, act(fenceWrite, "h0", 1), 40, 50, ok),
		}, porcupine.Illegal},
		{"nor may the term be reported held", []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(1, obs, 20, 30, seen("h0", 1, false)),
			fop(2, acq("h1"), 40, 50, held("h0", 1)),
		}, porcupine.Illegal},
		{"a renewal never revives a term a refusal showed expired", []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(0, act(fenceWrite, "h0", 1), 20, 30, refused),
			fop(0, act(fenceRenew, "h0", 1), 40, 50, ok),
		}, porcupine.Illegal},
		{"nor one that was released", []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(0, act(fenceRenew, "h0", 1), 15, -1, unknown),
			fop(0, act(fenceRelease, "h0", 1), 20, 30, ok),
			fop(1, acq("h1"), 40, 50, held("h0", 1)),
		}, porcupine.Illegal},
		{"a late write under an old term after a newer one was seen is illegal", []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(1, acq("h1"), 20, 30, granted(2)),
			fop(2, obs, 35, 38, seen("h1", 2, true)),
			fop(0, act(fenceWrite, "h0", 1), 40, 50, ok),
		}, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _, _ := fenceCheck(tc.h)
			if got != tc.want {
				t.Fatalf("checker = %s; want %s", got, tc.want)
			}
		})
	}
	// The first history without its unknown renewal (what the check left
	// out before issue 35) is illegal: the renewal was not free.
	h := cases[0].h
	without := []porcupine.Operation{h[0], h[2], h[3]}
	if got := porcupine.CheckOperations(fenceModel.ToModel(), without); got {
		t.Fatalf("the history without its unknown renewal was accepted: the renewal would not matter")
	}
}

// TestFenceNarrowedAcquires: narrowAcquires gives each acquire of unknown
// outcome the epochs the lease history shows its holder was granted that
// no known acquire returned, and the checker holds the history to them.
func TestFenceNarrowedAcquires(t *testing.T) {
	acq := func(h string) fenceInput { return fenceInput{Kind: fenceAcquire, Queue: "q", Holder: h} }
	obs := fenceInput{Kind: fenceObserve, Queue: "q"}
	unknown := fenceOutput{Unknown: true}
	granted := func(e int64) fenceOutput { return fenceOutput{Result: fenceOK, Epoch: e} }
	seen := func(h string, e int64) fenceOutput {
		return fenceOutput{Result: fenceOK, Holder: h, Epoch: e, Live: true}
	}
	term := func(h string, e int64) fenceGrant {
		return fenceGrant{Term: mend.Term{Queue: "q", Holder: h, Epoch: e}}
	}
	// h1's acquire never returned; h2 was then granted epoch 3, so some
	// acquire took epoch 2.
	history := func() []porcupine.Operation {
		return []porcupine.Operation{
			fop(0, acq("h0"), 0, 10, granted(1)),
			fop(1, acq("h1"), 20, -1, unknown),
			fop(2, acq("h2"), 40, 50, granted(3)),
			fop(3, obs, 60, 70, seen("h2", 3)),
		}
	}
	t.Run("the epoch the lease history shows for the holder", func(t *testing.T) {
		h := history()
		narrowed, none, orphans := narrowAcquires(h, []fenceGrant{term("h0", 1), term("h1", 2), term("h2", 3)}, time.Time{})
		if narrowed != 1 || none != 0 || orphans != 0 {
			t.Fatalf("narrowed, none, orphans = %d, %d, %d; want 1, 0, 0", narrowed, none, orphans)
		}
		if m := h[1].Output.(fenceOutput).Maybe; m == nil || !slices.Equal(*m, fenceEpochs{2}) {
			t.Fatalf("h1's acquire may have taken %v; want [2]", m)
		}
		if got, _, _ := fenceCheck(h); got != porcupine.Ok {
			t.Fatalf("checker = %s; want Ok", got)
		}
	})
	t.Run("none: the acquire did not take effect and nothing explains epoch 2", func(t *testing.T) {
		// The lease history says epoch 2 went to h9, whose acquire is not
		// in the history (reported refused with nothing done). Unnarrowed,
		// the checker lets h1's acquire take epoch 2 and accepts; narrowed,
		// it must not.
		h := history()
		if got, _, _ := fenceCheck(h); got != porcupine.Ok {
			t.Fatalf("unnarrowed checker = %s; want Ok (the control of this case)", got)
		}
		narrowed, none, orphans := narrowAcquires(h, []fenceGrant{term("h0", 1), term("h9", 2), term("h2", 3)}, time.Time{})
		if narrowed != 1 || none != 1 || orphans != 1 {
			t.Fatalf("narrowed, none, orphans = %d, %d, %d; want 1, 1, 1", narrowed, none, orphans)
		}
		if !freeOp(h[1]) {
			t.Fatalf("an acquire that did not take effect is still checked")
		}
		if got, _, _ := fenceCheck(h); got != porcupine.Illegal {
			t.Fatalf("checker = %s; want Illegal: no acquire in the history took epoch 2", got)
		}
	})
	t.Run("several candidates are left to the checker", func(t *testing.T) {
		h := []porcupine.Operation{
			fop(1, acq("h1"), 0, -1, unknown),
			fop(1, acq("h1"), 20, -1, unknown),
			fop(1, acq("h1"), 40, -1, unknown),
			fop(2, acq("h2"), 60, 70, granted(3)),
		}
		narrowed, none, _ := narrowAcquires(h, []fenceGrant{term("h1", 1), term("h1", 2), term("h2", 3)}, time.Time{})
		if narrowed != 3 || none != 0 {
			t.Fatalf("narrowed, none = %d, %d; want 3, 0", narrowed, none)
		}
		for _, op := range h[:3] {
			if m := op.Output.(fenceOutput).Maybe; m == nil || !slices.Equal(*m, fenceEpochs{1, 2}) {
				t.Fatalf("an acquire of h1 may have taken %v; want [1 2]", m)
			}
		}
		if got, _, _ := fenceCheck(h); got != porcupine.Ok {
			t.Fatalf("checker = %s; want Ok (two of the three took epochs 1 and 2)", got)
		}
	})
	t.Run("an acquire takes only an epoch granted after its call", func(t *testing.T) {
		start := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
		at := func(g fenceGrant, d time.Duration) fenceGrant { g.At = start.Add(d); return g }
		sec := int64(time.Second)
		h := []porcupine.Operation{
			fop(1, acq("h1"), 0, -1, unknown),
			fop(1, acq("h1"), 1*sec, -1, unknown),
			fop(1, acq("h1"), 2*sec, -1, unknown),
			fop(2, acq("h2"), 3*sec, 3*sec+10, granted(3)),
		}
		grants := []fenceGrant{at(term("h1", 1), 500*time.Millisecond), at(term("h1", 2), 1500*time.Millisecond), at(term("h2", 3), 3*time.Second)}
		narrowed, none, _ := narrowAcquires(h, grants, start)
		if narrowed != 3 || none != 1 {
			t.Fatalf("narrowed, none = %d, %d; want 3, 1", narrowed, none)
		}
		for i, want := range []fenceEpochs{{1, 2}, {2}, {}} {
			if m := h[i].Output.(fenceOutput).Maybe; m == nil || !slices.Equal(*m, want) {
				t.Fatalf("acquire %d may have taken %v; want %v", i, m, want)
			}
		}
		if got, _, _ := fenceCheck(h); got != porcupine.Ok {
			t.Fatalf("checker = %s; want Ok", got)
		}
		// Epoch 1 granted before the first call: no acquire could have
		// taken it, and the checker must say so.
		h2 := h[:0:0]
		for _, op := range h {
			out := op.Output.(fenceOutput)
			out.Maybe = nil
			op.Output = out
			h2 = append(h2, op)
		}
		narrowAcquires(h2, []fenceGrant{at(term("h1", 1), -time.Second), grants[1], grants[2]}, start)
		if got, _, _ := fenceCheck(h2); got != porcupine.Illegal {
			t.Fatalf("checker = %s; want Illegal: epoch 1 was granted before any acquire asked", got)
		}
	})
}

// EnvProofRecheck names a directory of evidence a failed fence proof kept
// (keepEvidence): TestFenceRecheckEvidence checks its history again, with
// the acquires of unknown outcome narrowed by the lease history it holds,
// and with EnvProofRecheckTimeout (a Go duration, default 10m) for the
// checker. It judges evidence kept before the narrowing existed, or a
// result the checker gave up on ("Unknown") under load:
//
//	MEND_PROOF_RECHECK=/path/to/TestFenceLinearizableSoak-... go test -run TestFenceRecheckEvidence -v ./itest/
const (
	EnvProofRecheck        = "MEND_PROOF_RECHECK"
	EnvProofRecheckTimeout = "MEND_PROOF_RECHECK_TIMEOUT"
)

func TestFenceRecheckEvidence(t *testing.T) {
	dir := os.Getenv(EnvProofRecheck)
	if dir == "" {
		t.Skipf("set %s to a fence proof's evidence directory to check it again", EnvProofRecheck)
	}
	timeout := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv(EnvProofRecheckTimeout)); err == nil && d > 0 {
		timeout = d
	}
	var ops []struct {
		Client   int         `json:"client"`
		CallNS   int64       `json:"call_ns"`
		ReturnNS *int64      `json:"return_ns"`
		Input    fenceInput  `json:"input"`
		Output   fenceOutput `json:"output"`
	}
	readJSON(t, filepath.Join(dir, "history.json"), &ops)
	var terms map[string][]storage.LeaseTerm
	readJSON(t, filepath.Join(dir, "mend_lease_history.json"), &terms)
	h := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		o.Output.Maybe = nil // narrowed again below, from the lease history
		ret := maxReturn
		if o.ReturnNS != nil {
			ret = *o.ReturnNS
		}
		h[i] = porcupine.Operation{ClientId: o.Client, Input: o.Input, Call: o.CallNS, Output: o.Output, Return: ret}
	}
	var grants []fenceGrant
	for _, q := range terms {
		grants = append(grants, grantsOf(q)...)
	}
	// The history's wall-clock origin, kept since the narrowing by time;
	// older evidence has none, and is narrowed by holder alone.
	var start time.Time
	if _, err := os.Stat(filepath.Join(dir, "start.json")); err == nil {
		readJSON(t, filepath.Join(dir, "start.json"), &start)
	}
	narrowed, none, orphans := narrowAcquires(h, grants, start)
	begin := time.Now()
	res, info := porcupine.CheckOperationsVerbose(fenceModel.ToModel(), withoutFreeOps(h), timeout)
	prooff(t, "recheck of %s: %d operations, %d ambiguous acquires narrowed by the lease history (%d did not take effect), %d granted epochs no acquire claims; checker %s in %s",
		dir, len(h), narrowed, none, orphans, res, time.Since(begin).Round(time.Millisecond))
	if res != porcupine.Ok {
		viz := filepath.Join(t.TempDir(), "recheck.html")
		if err := porcupine.VisualizePath(fenceModel.ToModel(), info, viz); err == nil {
			t.Logf("visualisation: %s", viz)
		}
		t.Fatalf("the history is %s against the model", res)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestProofEvidenceKept: a failed check leaves its evidence in a directory
// under $MEND_PROOF_ARTIFACTS that outlives the test: the history (as JSON
// and as text, unchecked operations marked), the database's side and
// porcupine's visualisation.
func TestProofEvidenceKept(t *testing.T) {
	root := t.TempDir()
	t.Setenv(EnvProofArtifacts, root)
	h := []porcupine.Operation{
		fop(0, fenceInput{Kind: fenceAcquire, Queue: "q", Holder: "h0"}, 0, 10, fenceOutput{Result: fenceOK, Epoch: 1}),
		fop(0, fenceInput{Kind: fenceWrite, Queue: "q", Holder: "h0", Epoch: 1}, 12, -1, fenceOutput{Unknown: true}),
		fop(0, fenceInput{Kind: fenceWrite, Queue: "q", Holder: "h0", Epoch: 1}, 20, 30, fenceOutput{Result: fenceRefused}),
		fop(0, fenceInput{Kind: fenceRenew, Queue: "q", Holder: "h0", Epoch: 1}, 40, 50, fenceOutput{Result: fenceOK}),
	}
	res, info, _ := fenceCheck(h)
	if res != porcupine.Illegal {
		t.Fatalf("checker = %s; want Illegal", res)
	}
	dir := keepEvidence(t, proofEvidence{
		Model: fenceModel.ToModel(), Info: info, History: h, Result: res, Summary: "a test summary",
		Checked: func(i int) bool { return !freeOp(h[i]) },
		JSON:    map[string]any{"mend_events.json": []string{"e1"}},
	})
	if filepath.Dir(dir) != root {
		t.Fatalf("evidence in %q; want a directory under %s", dir, root)
	}
	for _, f := range []string{"summary.txt", "history.json", "history.txt", "visualisation.html", "mend_events.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %v); want a non-empty file", f, err, st)
		}
	}
	var ops []struct {
		Checked  bool   `json:"checked"`
		ReturnNS *int64 `json:"return_ns"`
		Describe string `json:"describe"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "history.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ops); err != nil || len(ops) != len(h) {
		t.Fatalf("history.json: %v, %d operations; want %d", err, len(ops), len(h))
	}
	if ops[1].Checked || ops[1].ReturnNS != nil || !ops[2].Checked || ops[2].ReturnNS == nil || *ops[2].ReturnNS != 30 {
		t.Fatalf("history.json = %+v; want the unknown write unchecked with no return, the refused write checked returning at 30", ops)
	}
}

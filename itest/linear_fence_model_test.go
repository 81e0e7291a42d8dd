package itest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/anishathalye/porcupine"
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
	renewMatters := false
	for _, s := range fenceStates() {
		for _, holder := range []string{"h0", "h1"} {
			for epoch := range int64(4) {
				for kind := range fenceKind(len(fenceKindNames)) {
					in := fenceInput{Kind: kind, Queue: "q", Holder: holder, Epoch: epoch}
					op := porcupine.Operation{Input: in, Output: unknown}
					got := fenceStep(s, in, unknown)
					identity := reflect.DeepEqual(got, []any{s})
					if freeOp(op) && !identity {
						t.Errorf("%s is left out of the check but in state %+v its step gives %+v, not the state unchanged", fenceModel.DescribeOperation(in, unknown), s, got)
					}
					if kind == fenceRenew && !identity {
						renewMatters = true
					}
				}
			}
		}
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

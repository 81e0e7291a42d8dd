package itest

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// EnvFenceSoak asks TestFenceLinearizableSoak for that many fence proof
// histories; unset (make test, CI), the soak does not run.
// EnvFenceSoakWorkers is how many run at once (default 3), each with its
// own database, toxiproxy and commit cutter on the shared server: their
// contenders are each other's load, as the packages of make test are.
// EnvFenceSoakFor (a Go duration) stops starting histories after that
// long, so a soak fits a time budget; the report gives the count reached.
// EnvFenceSoakStop names a file whose appearance stops it the same way, so a
// script can run the soak exactly as long as something else (the whole
// suite under make test-under-load, say) and still let it clean up.
const (
	EnvFenceSoak        = "MEND_FENCE_SOAK"
	EnvFenceSoakWorkers = "MEND_FENCE_SOAK_WORKERS"
	EnvFenceSoakFor     = "MEND_FENCE_SOAK_FOR"
	EnvFenceSoakStop    = "MEND_FENCE_SOAK_STOP"
)

// TestFenceLinearizableSoak runs the fence proof's workload and check
// (TestFenceLinearizable's, 1,500 operations from 6 contenders on 2 queues
// per history) many times and reports the failure rate; every failure keeps
// its evidence (see keepEvidence). Issue 35 asked for thousands of
// histories per engine to put a number on a rare Illegal:
//
//	MEND_FENCE_SOAK=2000 MEND_FENCE_SOAK_WORKERS=3 MEND_FENCE_SOAK_FOR=20m \
//	    make test PKGS=./itest/ TESTFLAGS='-run TestFenceLinearizableSoak -v' \
//	    TEST_TIMEOUT=60m ENGINE=mysql
func TestFenceLinearizableSoak(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(EnvFenceSoak))
	if n <= 0 {
		t.Skipf("set %s to a number of histories to run the soak", EnvFenceSoak)
	}
	workers := 3
	if w, err := strconv.Atoi(os.Getenv(EnvFenceSoakWorkers)); err == nil && w > 0 {
		workers = w
	}
	budget := time.Duration(1<<63 - 1)
	if d, err := time.ParseDuration(os.Getenv(EnvFenceSoakFor)); err == nil && d > 0 {
		budget = d
	}
	stop := func() bool { return false }
	if f := os.Getenv(EnvFenceSoakStop); f != "" {
		stop = func() bool { _, err := os.Stat(f); return err == nil }
	}
	const contenders, total = 6, 1500
	var (
		next, ran                     atomic.Int64
		ops, illegal, unknown, invert atomic.Int64
		mu                            sync.Mutex
		failures                      []string
		wg                            sync.WaitGroup
	)
	begin := time.Now()
	for w := range workers {
		wg.Go(func() {
			_, direct, stores, _, _, faults := fenceSetup(t, contenders)
			for {
				if time.Since(begin) > budget || t.Context().Err() != nil || stop() {
					return
				}
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				queues := []string{fmt.Sprintf("s%dh%da", w, i), fmt.Sprintf("s%dh%db", w, i)}
				records := fenceRecords(t, direct, queues)
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
				run := fenceWorkload(ctx, stores, direct, queues, records, fencedWrite, total)
				cancel()
				v := judgeFenceRun(t, run, direct, queues, records, faults, contenders, soakFaults(faults))
				ran.Add(1)
				ops.Add(int64(len(run.history)))
				switch v.res {
				case porcupine.Ok:
				case porcupine.Illegal:
					illegal.Add(1)
				default:
					unknown.Add(1)
				}
				if len(v.violations) > 0 {
					invert.Add(1)
				}
				if v.evidence != "" {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("history %d: %s; evidence in %s", i, v.res, v.evidence))
					mu.Unlock()
					t.Logf("history %d FAILED: %s", i, v.summary)
				}
			}
		})
	}
	wg.Wait()
	done := ran.Load()
	prooff(t, "soak: %d fence histories (%d operations) in %s with %d at once: %d Illegal, %d Unknown, %d with epoch inversions",
		done, ops.Load(), time.Since(begin).Round(time.Second), workers, illegal.Load(), unknown.Load(), invert.Load())
	if len(failures) > 0 {
		sort.Strings(failures)
		t.Fatalf("%d of %d histories failed:\n%s", len(failures), done, strings.Join(failures, "\n"))
	}
}

// soakFaults describes the faults a soak worker's routes have seen so far
// without stopping them (describe stops the chaos).
func soakFaults(f *linFaults) string {
	counts, _ := f.chaos.Faults()
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	req, reply := f.cutter.Cuts()
	return fmt.Sprintf("so far on this worker: %s commit-cut/request-lost=%d commit-cut/reply-lost=%d", strings.Join(parts, " "), req, reply)
}

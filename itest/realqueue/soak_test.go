package realqueue

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/sqreal"
)

// envSoak sets how long TestStuckScanBusyQueue sends traffic (a Go duration, e.g. 10m); soakDefault
// when unset, which is what CI runs.
const envSoak = "MEND_TEST_REALQUEUE_SOAK"

const soakDefault = 2 * time.Minute

// The busy queue's pace: a request submitted through the real gateway every soakEvery while fewer than
// soakInFlight are on their way (so the backlog stays bounded on a slow machine).
const (
	soakEvery    = 3 * time.Second
	soakInFlight = 4
)

// TestStuckScanBusyQueue is the stuck-queue scan's negative check against the real orchestrator: beside
// a healthy queue with requests landing continuously through the real gateway, mend run scanning every
// 10 s with a 30 s bound (--stuck-every 10s --stuck-bound 30s, far tighter than the defaults) must wake
// nothing: no stuck-queue record (topic mend/stuck), mend_stuck_wakes_total absent or 0, no wake-up of
// mend's on speculate. It runs soakDefault (2 minutes) by default; MEND_TEST_REALQUEUE_SOAK=10m runs the
// 10 minutes issue 42 asks for. Its failing variant is TestStuckBeforeAdoption's: the same scan does wake
// a queue that is stuck.
func TestStuckScanBusyQueue(t *testing.T) {
	requireOptIn(t)
	soak := soakDefault
	if v := os.Getenv(envSoak); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 30*time.Second {
			t.Fatalf("%s=%q: want a Go duration of at least 30s", envSoak, v)
		}
		soak = d
	}
	s := sqreal.Start(t, sqreal.Options{Queues: []string{queue}})
	observeSpeculate(t, s)
	warm := warmUp(t, s)
	m := newMend(t, s, "--stuck-every", "10s", "--stuck-bound", "30s")
	m.doctor(t)
	m.run.Start(t)

	ids := []string{warm}
	unfinished := func() int64 {
		return s.AppInt(t, "SELECT COUNT(*) FROM request WHERE queue = ? AND state <> 'landed'", queue)
	}
	var maxQuiet float64
	checkNothingWoken := func(when string) {
		t.Helper()
		if n := m.stuckRecords(t, queue); n != 0 {
			t.Fatalf("%s: the stuck-queue scan recorded %d wake-up(s) of a healthy busy queue\n%s", when, n, s.Snapshot(t, queue))
		}
	}
	began := time.Now()
	tick := time.NewTicker(soakEvery) // the traffic's pace, not a synchronisation
	defer tick.Stop()
	for time.Since(began) < soak {
		select {
		case <-tick.C:
		case <-m.run.Exited():
			t.Fatalf("mend run exited during the soak\n%s", sqreal.Tail(m.run.Log, 40))
		}
		if n := s.AppInt(t, "SELECT COUNT(*) FROM request WHERE queue = ? AND state = 'error'", queue); n != 0 {
			t.Fatalf("%d request(s) failed on a healthy queue\n%s", n, s.Snapshot(t, queue))
		}
		if unfinished() < soakInFlight {
			ids = append(ids, s.Land(t, queue, fmt.Sprintf("fake://realq/soak-%d", len(ids))))
		}
		maxQuiet = max(maxQuiet, scrape(t, m.run.Addr)[`mend_stuck_queues{verdict="quiet"}`])
		checkNothingWoken(fmt.Sprintf("after %v", time.Since(began).Round(time.Second)))
	}
	s.WaitRequests(t, 3*landTimeout, queue, ids, "landed")
	checkNothingWoken("at the end")
	got := scrape(t, m.run.Addr)
	scans, woke := got["mend_stuck_scans_total"], 0.0
	for k, v := range got {
		if strings.HasPrefix(k, "mend_stuck_wakes_total") {
			woke += v
		}
	}
	if woke != 0 || got["mend_stuck_scan_errors_total"] != 0 {
		t.Errorf("mend_stuck_wakes_total %v, mend_stuck_scan_errors_total %v: want both 0", woke, got["mend_stuck_scan_errors_total"])
	}
	if min := soak.Seconds()/10 - 2; scans < min {
		t.Errorf("mend ran %v stuck-queue scans in %v, want at least %v (one per 10 s)", scans, soak, min)
	}
	if ws := wakes(t, s, queue, "mend/"); len(ws) != 0 {
		t.Errorf("mend published %d wake-ups on a healthy queue: %+v", len(ws), ws)
	}
	t.Logf("soak %v: %d requests landed through the gateway (%.1f/min), %v stuck-queue scans (every 10 s, bound 30 s), "+
		"%v stuck wake-ups, 0 mend/stuck records, at most %v queue(s) quiet in one scan",
		soak, len(ids), float64(len(ids))/time.Since(began).Minutes(), scans, woke, maxQuiet)
}

// scrape reads mend's /metrics at addr: every sample, keyed by its name and labels as printed.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape mend's metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape mend's metrics: %v", err)
	}
	return out
}

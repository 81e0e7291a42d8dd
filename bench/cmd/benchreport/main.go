// Command benchreport runs mend's benchmarks (package bench), prints a table
// and writes docs/benchmarks.md with the machine, date, command, every ratio
// and curve, and the design targets each result meets or misses.
//
// Usage (from the module root; `make bench` runs it):
//
//	go run ./bench/cmd/benchreport [-ops 2000] [-passes 3] [-trials 5] [-out docs/benchmarks.md]
//	go run ./bench/cmd/benchreport -scale [-out docs/benchmarks-scale.md]   (make bench-scale)
//	go run ./bench/cmd/benchreport -vitess [-ops 1000] [-out docs/benchmarks-vitess.md]   (make bench-vitess)
//
// With -scale it runs BenchmarkScale instead, at the sizes MEND_BENCH_SCALE
// names (the full world by default; "smoke" for a small one), and writes
// its own report.
//
// With -vitess it runs BenchmarkVitess and BenchmarkVitessStorm on a 2-shard
// Vitess cluster (mend through vtgate beside the plain MySQL under it, same run)
// and writes docs/benchmarks-vitess.md (make bench-vitess).
//
// With -from FILE -took D it renders the report again from the saved output
// of an earlier run (e.g. after changing the explanations), without running;
// a run of make bench saves its output in the temporary directory for that.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// durabilityNote says what the test servers' flush setting means for the
// numbers: it was once stated only inside the server lines.
const durabilityNote = "- **Durability:** the test servers run with `innodb_flush_log_at_trx_commit=2` (the redo log is flushed once a second, not at every commit), so a commit costs less than on a production server at the default 1; every target is a ratio against the baseline or the limit on the same server in the same run, so the setting moves absolute numbers, not the verdicts"

func main() {
	ops := flag.Int("ops", 2000, "operations per throughput benchmark case")
	passes := flag.Int("passes", 3, "reconcile pass pairs per finished-records size")
	trials := flag.Int("trials", 5, "failover and re-send trials per setting")
	out := flag.String("out", "docs/benchmarks.md", "markdown report to write")
	goCmd := flag.String("go", "go", "go command")
	from := flag.String("from", "", "render from the saved output of an earlier run instead of running (with -took)")
	tookFlag := flag.Duration("took", 0, "with -from: how long that run took")
	scale := flag.Bool("scale", false, "run the scale benchmarks (BenchmarkScale) and write their report")
	vitess := flag.Bool("vitess", false, "run BenchmarkVitess and BenchmarkVitessStorm (through vtgate beside one MySQL, MEND_TEST_ENGINE=vitess) and write their report, -ops operations per case (the storm: one)")
	smoke := flag.Bool("smoke", false, "run every benchmark once at a small size past the planner's RunLimit, write nothing (make bench-smoke, for CI)")
	flag.Parse()
	if *smoke {
		if err := runSmoke(*goCmd, "bench"); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		return
	}
	if *vitess {
		if *out == "docs/benchmarks.md" {
			*out = "docs/benchmarks-vitess.md"
		}
		if err := runVitess(*goCmd, *ops, *out); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		return
	}
	if *scale {
		if *out == "docs/benchmarks.md" {
			*out = "docs/benchmarks-scale.md"
		}
		if err := runScale(*goCmd, *from, *tookFlag, *out); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		return
	}
	if *from != "" {
		if err := rerender(*from, *tookFlag, *out); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*goCmd, *ops, *passes, *trials, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

// rerender writes the report from a saved run: the lines that start with
// "$ " are its commands.
func rerender(from string, took time.Duration, out string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var commands []string
	for _, line := range strings.Split(string(b), "\n") {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			commands = append(commands, c)
		}
	}
	fi, err := os.Stat(from)
	if err != nil {
		return err
	}
	table := render(parse(string(b)), commands, took, fi.ModTime())
	fmt.Println(table.summary)
	return os.WriteFile(out, []byte(table.markdown), 0o644)
}

// A step is one `go test -bench` invocation.
type step struct {
	bench     string
	benchtime string
	env       []string
}

// steps are make bench's invocations, at the report's sizes.
func steps(ops, passes, trials int) []step {
	return []step{
		{bench: "^(BenchmarkIntake|BenchmarkAppend|BenchmarkLeaseAcquire|BenchmarkPlannerRepair)$", benchtime: strconv.Itoa(ops) + "x"},
		{bench: "^BenchmarkRecordMany$", benchtime: "40x"},
		// Issue 18's size, one replica and two (the target is two's).
		// Issue 44: with one replica beside the binlog reader, in one process (the same server).
		{bench: subscribeModesBench, benchtime: "1x", env: []string{"MEND_BENCH_SUBSCRIBE=full,replicas=1"}},
		{bench: "^BenchmarkSubscribeBacklog$", benchtime: "1x", env: []string{"MEND_BENCH_SUBSCRIBE=full,replicas=2"}},
		{bench: "^BenchmarkReconcilePass$", benchtime: strconv.Itoa(passes) + "x"},
		{bench: "^(BenchmarkFailover|BenchmarkWakeResend)$", benchtime: "1x", env: []string{"MEND_BENCH_TRIALS=" + strconv.Itoa(trials)}},
		// Issue 31: migrate up under writers on 1,000,000 records and 5,000,000 events.
		{bench: "^BenchmarkMigrateUnderLoad$", benchtime: "1x", env: []string{"MEND_BENCH_MIGRATE=full"}},
	}
}

// smokeOps is the smoke run's size of the throughput benchmarks: past the
// planner's RunLimit (20) per queue at every connection count (16 queues at
// 16 connections get 21 records each), so a benchmark that stops at the
// limit fails here. A -benchtime 1x run would not catch that.
const smokeOps = 21 * 16

// smokeSteps are every benchmark once at a small size: make bench's steps
// at smokeOps, one pass over one finished-records size, one trial, and the
// scale benchmark's smoke world cut down further (50 records a queue).
func smokeSteps() []step {
	s := steps(smokeOps, 1, 1)
	for i := range s {
		switch s[i].bench {
		case "^BenchmarkRecordMany$":
			s[i].benchtime = "1x"
		case "^BenchmarkSubscribeBacklog$":
			s[i].env = []string{strings.Replace(s[i].env[0], "full", "letters=2000,partitions=100", 1)}
		case subscribeModesBench:
			s[i].env = []string{strings.Replace(s[i].env[0], "full", "letters=2000,partitions=100", 1), "MEND_BENCH_BINLOG=live=200"}
		case "^BenchmarkReconcilePass$":
			s[i].env = []string{"MEND_BENCH_SIZES=0"}
		case "^BenchmarkMigrateUnderLoad$":
			s[i].env = []string{"MEND_BENCH_MIGRATE=smoke"}
		}
	}
	return append(s, step{bench: "^BenchmarkScale$", benchtime: "1x",
		env: []string{"MEND_BENCH_SCALE=smoke,queues=50,finished=1000,storm=500,storm_queues=10,idle_passes=3"}},
		// Skip unless MEND_TEST_ENGINE=vitess: make bench-vitess runs them on a cluster.
		step{bench: "^BenchmarkVitess(Storm)?$", benchtime: "1x", env: []string{"MEND_BENCH_VITESS_STORM=smoke"}})
}

// runSmoke runs smokeSteps and fails if a benchmark fails or if a
// Benchmark function in dir is matched by no step (a new benchmark must be
// added to the steps, so it is also smoke-tested).
func runSmoke(goCmd, dir string) error {
	begin := time.Now()
	ss := smokeSteps()
	if err := covered(dir, ss); err != nil {
		return err
	}
	if _, _, err := runSteps(goCmd, ss, "10m"); err != nil {
		return err
	}
	fmt.Printf("bench smoke: every benchmark ran once, took %s\n", time.Since(begin).Round(time.Second))
	return nil
}

var benchFunc = regexp.MustCompile(`(?m)^func (Benchmark\w+)\(b \*testing\.B\)`)

// covered returns an error naming the Benchmark functions in dir's test
// files that no step runs.
func covered(dir string, ss []step) error {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return err
	}
	var missing []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, m := range benchFunc.FindAllStringSubmatch(string(src), -1) {
			hit := false
			for _, s := range ss {
				if regexp.MustCompile(s.bench).MatchString(m[1]) {
					hit = true
				}
			}
			if !hit {
				missing = append(missing, m[1])
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("benchmarks no step runs (add them to benchreport's steps): %s", strings.Join(missing, ", "))
	}
	return nil
}

// runSteps runs each step's go test and returns the commands and their
// combined output.
func runSteps(goCmd string, ss []step, timeout string) ([]string, string, error) {
	var commands []string
	var all bytes.Buffer
	for _, s := range ss {
		args := []string{"test", "-run", "^$", "-bench", s.bench, "-benchtime", s.benchtime, "-count", "1", "-timeout", timeout, "./bench"}
		env := s.env
		commands = append(commands, strings.TrimSpace(strings.Join(env, " ")+" "+goCmd+" "+strings.Join(args, " ")))
		fmt.Println("$", commands[len(commands)-1])
		cmd := exec.Command(goCmd, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout = io.MultiWriter(os.Stdout, &all)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return commands, all.String(), fmt.Errorf("%s: %w", commands[len(commands)-1], err)
		}
	}
	return commands, all.String(), nil
}

func run(goCmd string, ops, passes, trials int, out string) error {
	begin := time.Now()
	commands, all, err := runSteps(goCmd, steps(ops, passes, trials), "20m")
	if err != nil {
		return err
	}
	took := time.Since(begin)
	saveOutput(commands, all, took)
	res := parse(all)
	table := render(res, commands, took, time.Now())
	fmt.Println()
	fmt.Println(table.summary)
	if err := os.WriteFile(out, []byte(table.markdown), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (whole run %s)\n", out, took.Round(time.Second))
	return nil
}

// saveOutput keeps a run's output where -from can render it again (a
// change to the report's text should not need a second 10-minute run on
// a quiet machine): the commands as "$ " lines, then what they printed.
func saveOutput(commands []string, all string, took time.Duration) {
	f, err := os.CreateTemp("", "mend-bench-*.txt")
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport: output not saved:", err)
		return
	}
	defer f.Close()
	for _, c := range commands {
		fmt.Fprintln(f, "$", c)
	}
	if _, err := f.WriteString(all); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport: output not saved:", err)
		return
	}
	fmt.Printf("saved the output to %s (render again: go run ./bench/cmd/benchreport -from %s -took %s -out ...)\n", f.Name(), f.Name(), took.Round(time.Second))
}

// result is one benchmark line: name without the -GOMAXPROCS suffix, and
// its metrics by unit.
type result struct {
	name    string
	n       int
	metrics map[string]float64
}

type results struct {
	list   []result
	byName map[string]result
	notes  []string // "mend-bench:" lines
	mixes  map[string]string
	cpu    string
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)
var mixLine = regexp.MustCompile(`mend-bench: mix (\S+) \(\d+ ops\): (.*)$`)

func parse(text string) results {
	r := results{byName: map[string]result{}, mixes: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := mixLine.FindStringSubmatch(line); m != nil {
			r.mixes[strings.TrimPrefix(m[1], "Benchmark")] = m[2]
			continue
		}
		if _, rest, ok := strings.Cut(line, "mend-bench: "); ok {
			r.notes = append(r.notes, rest)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "cpu: "); ok {
			r.cpu = rest
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		res := result{name: strings.TrimPrefix(m[1], "Benchmark"), n: n, metrics: map[string]float64{}}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				res.metrics[f[i+1]] = v
			}
		}
		r.list = append(r.list, res)
		r.byName[res.name] = res
	}
	return r
}

type report struct{ summary, markdown string }

const ratioTarget = 0.8

// limitTarget is issue 13's target for mend against the limit: the fenced
// append at one and at sixteen connections (the intake's is issue 50's).
const limitTarget = 0.6

// batchTarget is issue 13's batch-intake target at 4 connections, records/s.
const batchTarget = 10000

// subscribeTarget is issue 18's: records/s for 100,000 dead letters over
// 1,000 partitions with two replicas.
const subscribeTarget = 10000

// intakeLimitTarget is issue 50's for the single-record intake against the
// limit, at every connection count: Record's create-if-absent and event
// are one round trip, as the limit's.
const intakeLimitTarget = 0.85

// limitTargetOf returns the lib/limit target of bench at conns and the
// issue that set it; ok is false when there is none.
func limitTargetOf(bench, conns string) (target float64, issue string, ok bool) {
	switch {
	case bench == "Intake":
		return intakeLimitTarget, "issue 50's", true
	case bench == "Append/fenced=true" && (conns == "1" || conns == "16"):
		return limitTarget, "issue 13's", true
	}
	return 0, "", false
}

// limitNotes says, per benchmark, what its limit implementation does in
// its round trips (bench/limit_test.go).
var limitNotes = []struct{ bench, note string }{
	{"Intake", "one packet: `SET TRANSACTION` and `START TRANSACTION`, the record's `INSERT ... ON DUPLICATE KEY UPDATE record_id = record_id`, `SET @created = ROW_COUNT()`, the created event as `INSERT ... SELECT ... WHERE @created = 1`, the read-back `SELECT` of whichever record holds the source identity, `COMMIT`."},
	{"Append/fenced=false", "one packet: the versioned `UPDATE ... WHERE version = ?`, `SET @n = ROW_COUNT()`, the event as `INSERT ... SELECT ... WHERE @n = 1`, a `SELECT` of `@n` with the current version (conflict or not found, told apart in the same answer), `COMMIT`."},
	{"Append/fenced=true", "one packet as the unfenced append, with the queue's lease row joined into the `UPDATE` (`JOIN mend_leases ... AND l.holder = ? AND l.epoch = ? AND l.expires_at > NOW(6)`): the multi-table UPDATE share-locks the lease row until `COMMIT`, so a takeover waits behind the write, as behind mend's `LOCK IN SHARE MODE` read; the answer also says whether the term is current."},
	{"LeaseAcquire", "one packet: the lease row made sure of and locked exclusively by a no-op upsert, the clock read once after the lock, the replaced term closed in history at its expiry, the take (`epoch = epoch + 1` where free or expired), the new term opened in history only if the take happened, and a `SELECT` of the lease as it now is (the holder and time left when it was held)."},
	{"PlannerRepair", "three packets per record, one per database a repair touches (mend's, the host's application and queue databases, which a deployment may put on different servers, so no transaction spans them), plus the due read once per 100 records: the host packet reads the batch, decides, moves it with a CAS on the version read, writes and deletes the membership rows, finishes the fan-out of its members and answers with the queue's smallest live batch; the queue packet publishes every RequestLog and the wake-up in one `INSERT`; the record packet writes the settled and woken events in one fenced CAS. The record is finished only after the wake-up is durable, so a crash in between repeats a repair that changes nothing the second time."},
}

const flatTarget = 1.2

func render(r results, commands []string, took time.Duration, date time.Time) report {
	var md, sum strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }

	w("# Benchmarks\n\n")
	w("Generated by `make bench` (`go run ./bench/cmd/benchreport`) from a real run; do not edit by hand.\n")
	w("Both engines are measured the same way: `make bench` (MySQL, [benchmarks.md](benchmarks.md)) and `make bench\n")
	w("ENGINE=mariadb` ([benchmarks-mariadb.md](benchmarks-mariadb.md)); the server line below says which this is.\n")
	w("Numbers on these shared 2-core machines vary by 30-50%% between runs; read ratios, not absolutes.\n\n")
	w("- **Date:** %s\n", date.UTC().Format("2006-01-02 15:04 MST"))
	w("- **Machine:** %s\n", machine(r.cpu))
	w("- **Go:** %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, n := range r.notes {
		if strings.HasPrefix(n, "server ") {
			w("- **Server:** %s\n", strings.TrimPrefix(n, "server "))
		}
	}
	w("%s\n", durabilityNote)
	w("- **Whole run:** %s (target: under 10 minutes)\n", took.Round(time.Second))
	w("- **Commands:**\n")
	for _, c := range commands {
		w("  - `%s`\n", c)
	}
	w("\n")

	var misses []string

	// Throughput against the raw-SQL baseline and the limit.
	w("## Throughput against raw SQL and against the limit\n\n")
	w("Each case runs mend, then two baselines, in the same process, on the same server, at the same concurrency (one\n")
	w("goroutine per connection), each against its own clone of the database taken just before mend's run.\n\n")
	w("- **Replay** (`raw`): replays, through `database/sql` on pinned connections, exactly the statements mend sent\n")
	w("  (recorded from the wire by a tap on mend's connections), and fails if any statement fails. `lib/raw` is mend's\n")
	w("  throughput over the replay's; the target (design.md) is at least %.1f. The gap is the client-side cost per\n", ratioTarget)
	w("  operation (`overhead`, in µs: 1/mend − 1/raw per operation at that concurrency).\n")
	w("- **Limit**: the same logical effect in the fewest round trips a correct implementation needs, written\n")
	w("  independently of mend's code in `bench/limit_test.go` (raw SQL, one multi-statement packet per transaction) and\n")
	w("  held to mend's guarantees by the `TestLimit*` tests. `lib/limit` is mend's throughput over the limit's; issue 13's\n")
	w("  target is at least %.1f for the fenced append at 1 and 16 connections, issue 50's at least %.2f for the intake at\n", limitTarget, intakeLimitTarget)
	w("  every connection count (the column shows the row's target).\n")
	w("- **Round trips per operation** (`rt/op`) are counted on the wire for all three: every command packet the client\n")
	w("  sends that the server answers (with `interpolateParams` each statement, `BEGIN`, `COMMIT` and the driver's\n")
	w("  `SET TRANSACTION ISOLATION LEVEL` is one; a multi-statement packet is one).\n\n")
	w("| benchmark | conns | mend ops/s | replay ops/s | limit ops/s | lib/raw | lib/limit | rt/op mend | rt/op replay | rt/op limit | overhead µs/op | lib/raw ≥ %.1f | lib/limit target |\n", ratioTarget)
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	fmt.Fprintf(&sum, "%-34s %10s %10s %10s %8s %9s %7s %7s %7s\n", "benchmark", "mend op/s", "raw op/s", "limit op/s", "lib/raw", "lib/limit", "rt mend", "rt raw", "rt lim")
	for _, res := range r.list {
		ratio, ok := res.metrics["lib/raw"]
		if !ok || strings.HasPrefix(res.name, "RecordMany") {
			continue
		}
		bench, conns := splitConns(res.name)
		lib, raw, lim := res.metrics["ops/s"], res.metrics["raw-ops/s"], res.metrics["limit-ops/s"]
		libLimit := res.metrics["lib/limit"]
		over := (1/lib - 1/raw) * 1e6
		verdict := "met"
		if ratio < ratioTarget {
			verdict = fmt.Sprintf("**missed** by %.0f%%", (ratioTarget-ratio)/ratioTarget*100)
			misses = append(misses, fmt.Sprintf("`%s` at %s connections: lib/raw %.2f, %.0f%% below the %.1f target (mend %.0f ops/s, raw %.0f ops/s; %.0f µs of client-side work per operation).",
				bench, conns, ratio, (ratioTarget-ratio)/ratioTarget*100, ratioTarget, lib, raw, over))
		}
		limitVerdict := "—"
		if target, issue, ok := limitTargetOf(bench, conns); ok {
			limitVerdict = fmt.Sprintf("≥ %.2f met", target)
			if libLimit < target {
				limitVerdict = fmt.Sprintf("≥ %.2f **missed** by %.0f%%", target, (target-libLimit)/target*100)
				misses = append(misses, fmt.Sprintf("`%s` at %s connections: lib/limit %.2f, below %s %.2f (mend %.1f round trips per operation, the limit %.1f).",
					bench, conns, libLimit, issue, target, res.metrics["rt/op"], res.metrics["limit-rt/op"]))
			}
		}
		w("| %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %s | %s |\n", bench, conns, lib, raw, lim, ratio, libLimit,
			res.metrics["rt/op"], res.metrics["raw-rt/op"], res.metrics["limit-rt/op"], over, verdict, limitVerdict)
		fmt.Fprintf(&sum, "%-34s %10.0f %10.0f %10.0f %8.2f %9.2f %7.2f %7.2f %7.2f\n", res.name, lib, raw, lim, ratio, libLimit,
			res.metrics["rt/op"], res.metrics["raw-rt/op"], res.metrics["limit-rt/op"])
	}
	w("\nWhat each limit does in its round trips:\n\n")
	for _, n := range limitNotes {
		w("- `%s`: %s\n", n.bench, n.note)
	}
	w("\nStatements per operation, as recorded on the wire (1 connection):\n\n")
	var mixNames []string
	for k := range r.mixes {
		if strings.HasSuffix(k, "conns=1") {
			mixNames = append(mixNames, k)
		}
	}
	sort.Strings(mixNames)
	for _, k := range mixNames {
		w("- `%s`: %s\n", k, r.mixes[k])
	}
	w("\n")

	// Batch intake.
	w("## Batch intake (dlq.Intake.RecordMany)\n\n")
	w("A storm of dead letters recorded in batches of 500 new deliveries (50 queues), one worker per connection, each\n")
	w("batch one transaction: a multi-row upsert, the created events of the rows this call minted, a read-back, in one\n")
	w("packet, then COMMIT. `replay` re-sends the statements mend sent. Issue 13's target: at least %d records/s at 4\n", batchTarget)
	w("connections.\n\n")
	w("| benchmark | mend records/s | replay records/s | lib/raw | rt/batch | ≥ %d records/s at 4 conns |\n", batchTarget)
	w("|---|---:|---:|---:|---:|---|\n")
	for _, res := range r.list {
		if !strings.HasPrefix(res.name, "RecordMany") {
			continue
		}
		verdict := "—"
		if strings.Contains(res.name, "conns=4/") {
			verdict = "met"
			if res.metrics["records/s"] < batchTarget {
				verdict = fmt.Sprintf("**missed** by %.0f%%", (batchTarget-res.metrics["records/s"])/batchTarget*100)
				misses = append(misses, fmt.Sprintf("`%s`: %.0f records/s, below issue 13's %d (the replay of the same statements: %.0f records/s, so the server, not the client, is the limit here).",
					res.name, res.metrics["records/s"], batchTarget, res.metrics["raw-records/s"]))
			}
		}
		w("| %s | %.0f | %.0f | %.2f | %.2f | %s |\n", res.name, res.metrics["records/s"], res.metrics["raw-records/s"], res.metrics["lib/raw"], res.metrics["stmts/op"], verdict)
		fmt.Fprintf(&sum, "%-34s %10.0f records/s (replay %.0f), lib/raw %.2f, %.2f round trips per batch\n", res.name, res.metrics["records/s"], res.metrics["raw-records/s"], res.metrics["lib/raw"], res.metrics["stmts/op"])
	}
	w("\n")

	// The subscription.
	w("## Subscription backlog (package subscribe)\n\n")
	w("A backlog of dead letters on `speculate_dlq`, spread over many partitions, recorded by one subscription, then by two\n")
	w("of one consumer group side by side dividing the partitions through slot leases (`mend run --queue-dsn` on two\n")
	w("replicas). `records/s` counts distinct records until the last exists; `release s` is until no row is above the\n")
	w("group's watermarks (1 s settle window included); `heap MB` is the peak Go heap in use above the heap before the run,\n")
	w("and `KB/record` the bytes allocated per dead letter, both bounded by the page size, not the backlog; `steady ms` is,\n")
	w("once the backlog is released, the mean (and worst) time from a single dead letter's commit until a pass recorded it\n")
	w("at a 100 ms poll interval (mend run's default is 1 s); `reads/record` is the rows the replicas read per dead letter (1\n")
	w("when they divide the work perfectly; two replicas that did not divide it read 2). Issue 18's target: %d records/s for 100,000 over 1,000\n", subscribeTarget)
	w("partitions with two replicas.\n\n")
	w("| benchmark | records/s | recorded s | release s | heap MB | KB/record | reads/record | steady ms (max) | ≥ %d records/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n", subscribeTarget)
	for _, res := range r.list {
		if !strings.HasPrefix(res.name, "SubscribeBacklog") {
			continue
		}
		m := res.metrics
		verdict := "—"
		if strings.Contains(res.name, "letters=100000/partitions=1000/replicas=2/") {
			verdict = "met"
			if m["records/s"] < subscribeTarget {
				verdict = fmt.Sprintf("**missed** by %.0f%%", (subscribeTarget-m["records/s"])/subscribeTarget*100)
				misses = append(misses, fmt.Sprintf("`%s`: %.0f records/s, below issue 18's %d (compare the batch intake alone above: recording is the bound).",
					res.name, m["records/s"], subscribeTarget))
			}
		}
		w("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.2f | %.0f (%.0f) | %s |\n", res.name, m["records/s"], m["recorded-s"], m["release-s"], m["heap-MB"],
			m["alloc-KB/record"], m["reads/record"], m["steady-ms"], m["steady-max-ms"], verdict)
		fmt.Fprintf(&sum, "%-34s %10.0f records/s, released in %.1f s, heap %.1f MB, %.1f KB/record, steady %.0f ms (max %.0f)\n", res.name, m["records/s"], m["release-s"], m["heap-MB"],
			m["alloc-KB/record"], m["steady-ms"], m["steady-max-ms"])
	}
	w("\n")
	misses = append(misses, renderBinlog(w, &sum, r)...)

	// Reconcile pass curve.
	w("## Reconcile pass against finished records\n\n")
	w("`reconcile.Drain` (passes until nothing more is due, each queue one run a pass: `RunLimit` records, `FollowLimit` after a run that stopped at the limit) repairing 1,000 due records (4 queues on the submit queue's real tables, each record's batch\n")
	w("failed with the three-step transition, fanned out with a RequestLog per request, settled, the queue woken) while N\n")
	w("finished records (state done, with an event each) sit in the same queues. They are\n")
	w("bulk-inserted with multi-row `INSERT ... SELECT` from a numbers table. Target: within %.0f%% of the pass with none.\n\n", (flatTarget-1)*100)
	for _, n := range r.notes {
		if strings.HasPrefix(n, "bulk insert") || strings.HasPrefix(n, "innodb_buffer_pool_size") {
			w("- %s\n", n)
		}
	}
	w("\nEach size runs several pairs of passes: one in the queues that hold the finished records and a control pass in four\n")
	w("other queues that hold none, in alternating order. The pair sees the same load on this shared machine, so\n")
	w("`vs control` (total time over the control's) is the noise-robust measure of what the finished records cost the\n")
	w("queues they sit in; `vs 0 finished` compares the fastest pass with the fastest pass of the run with none, and also\n")
	w("shows effects on the whole table (which slow the control too). The verdict uses `vs control`, and the absolute\n")
	w("comparison where it is worse than the noise (see below).\n")
	w("\n| finished records | buffer pool | fastest ms/pass | mean ms/pass | vs control | vs 0 finished (fastest) | target ≤ %.1f× |\n|---:|---|---:|---:|---:|---:|---|\n", flatTarget)
	fmt.Fprintf(&sum, "\n%-44s %10s %10s %8s %8s\n", "reconcile pass", "min ms", "mean ms", "vs ctl", "vs 0")
	base := r.byName["ReconcilePass/finished=0"].metrics["min-ms/pass"]
	for _, res := range r.list {
		ms, ok := res.metrics["min-ms/pass"]
		if !ok {
			continue
		}
		mean := res.metrics["ms/pass"]
		size := strings.TrimPrefix(res.name, "ReconcilePass/finished=")
		pool := "2 GiB"
		if s, ok := strings.CutSuffix(size, "/pool=128MiB"); ok {
			size, pool = s, "128 MiB (harness default)"
		}
		rel := ms / base
		ctl := res.metrics["vs-control"]
		verdict := "met"
		if ctl > flatTarget {
			verdict = fmt.Sprintf("**missed** by %.0f%%", (ctl-flatTarget)/flatTarget*100)
			misses = append(misses, fmt.Sprintf("reconcile pass with %s finished records and a %s buffer pool: %.2f× its control pass (target ≤ %.1f×).", size, pool, ctl, flatTarget))
		} else if rel > flatTarget {
			verdict = fmt.Sprintf("met against its control; %.2f× the run with none", rel)
			misses = append(misses, fmt.Sprintf("reconcile pass with %s finished records and a %s buffer pool: %.2f× the fastest pass with none, though only %.2f× its own control pass run under the same load.", size, pool, rel, ctl))
		}
		w("| %s | %s | %.0f | %.0f | %.2f× | %.2f× | %s |\n", size, pool, ms, mean, ctl, rel, verdict)
		fmt.Fprintf(&sum, "%-44s %10.0f %10.0f %7.2fx %7.2fx\n", res.name, ms, mean, ctl, rel)
	}
	w("\n")

	// Failover and re-send latency.
	w("## Failover and lost wake-up re-send\n\n")
	w("**Failover:** a planner holding a queue's lease is killed (its connections cut, no release), while a second\n")
	w("reconciler polls every interval; measured from the kill to the first event written under the next epoch. Target:\n")
	w("within lease TTL + one interval.\n\n")
	w("**Re-send:** the wake-up publish fails once (sqtest.FaultyWaker refuses it before it reaches the host); measured\n")
	w("from the moment the failed attempt made the record due again (database clock) to the re-sent wake-up's `created_at`\n")
	w("in `queue_messages` (epoch ms from the publisher's clock, on the same machine). Target: within one reconcile interval.\n\n")
	w("| measurement | setting | trials | median | max | bound | target |\n|---|---|---:|---:|---:|---:|---|\n")
	fmt.Fprintf(&sum, "\n%-44s %10s %10s %10s\n", "latency", "median ms", "max ms", "bound ms")
	for _, res := range r.list {
		maxMs, ok := res.metrics["max-ms"]
		if !ok {
			continue
		}
		med, bound, trials := res.metrics["median-ms"], res.metrics["bound-ms"], res.metrics["trials"]
		verdict := "met"
		if maxMs > bound {
			verdict = fmt.Sprintf("**missed** by %.0f ms", maxMs-bound)
			misses = append(misses, fmt.Sprintf("`%s`: worst %.0f ms against a bound of %.0f ms.", res.name, maxMs, bound))
		}
		kind, setting, _ := strings.Cut(res.name, "/")
		w("| %s | %s | %.0f | %.0f ms | %.0f ms | %.0f ms | %s |\n", kind, setting, trials, med, maxMs, bound, verdict)
		fmt.Fprintf(&sum, "%-44s %10.0f %10.0f %10.0f\n", res.name, med, maxMs, bound)
	}
	w("\n")

	// Issue 31: a migration under load.
	w("## Migration under load\n\n")
	w("`mend migrate up` from schema 12 (before 0013 added the events' projection columns) on a store of done records\n")
	w("and their events, while writers record dead letters as a schema-12 binary does (a record and its created event\n")
	w("per transaction). The stall is the longest any write took that overlapped the migration; the longest write in\n")
	w("the second before it is the machine's own noise. Target: a stall under 1 s.\n\n")
	w("| store | migration | longest write during it | longest write before it | writes during it | target |\n|---|---:|---:|---:|---:|---|\n")
	fmt.Fprintf(&sum, "\n%-44s %10s %10s %10s\n", "migration under load", "migrate ms", "stall ms", "before ms")
	for _, res := range r.list {
		mig, ok := res.metrics["migrate-ms"]
		if !ok {
			continue
		}
		stall, base := res.metrics["stall-ms"], res.metrics["base-max-ms"]
		verdict := "met"
		if stall >= 1000 {
			verdict = fmt.Sprintf("**missed** by %.0f ms", stall-1000)
			misses = append(misses, fmt.Sprintf("`%s`: a write stalled %.0f ms during the migration (target under 1 s).", res.name, stall))
		}
		w("| %s | %.0f ms | %.0f ms | %.0f ms | %.0f | %s |\n", strings.TrimPrefix(res.name, "MigrateUnderLoad/"), mig, stall, base, res.metrics["writes-during"], verdict)
		fmt.Fprintf(&sum, "%-44s %10.0f %10.0f %10.0f\n", res.name, mig, stall, base)
	}
	w("\n")

	w("## Scale\n\n")
	w("The scale benchmarks (a world of 10,000 queues and 1,000,000 finished records with two and four reconcilers: the\n")
	w("idle pass, a storm of 100,000 dead letters over 1,000 queues, lease traffic per pass, the reconciler's memory)\n")
	w("take longer than `make bench` may, so they run with `make bench-scale` and write `docs/benchmarks-scale.md`.\n")
	w("%s\n\n", scaleStatus())
	w("## Targets missed\n\n")
	if len(misses) == 0 {
		w("None in this run.\n\n")
	} else {
		for _, m := range misses {
			w("- %s\n", m)
		}
		w("\n")
	}
	w("%s", analysis)
	return report{summary: sum.String(), markdown: md.String()}
}

// analysis explains what the misses seen in development runs come from;
// the list above says which targets this run actually missed.
const analysis = `### Why, and what would close them

**mend against the limit.** The limit sends each operation's transaction as one packet, so its round trips per
operation are 1 (3 for a repair, one per database, plus the due read) against mend's 5 to 8 (28 for a repair). The
ratio lib/limit is not the ratio of round trips: the server still executes every statement of the packet, and on two
cores shared by the server, the client and the benchmark, server CPU per operation bounds both sides once more than
one connection is busy. The round trips themselves cost most at one connection, where nothing overlaps them. A limit
that is itself slow would flatter mend: the limit planner's host packet was first measured statement by statement
(SHOW PROFILES) and its two expensive statements rewritten (see bench/limit_test.go), which doubled its throughput.

**Storage throughput at one connection (lib/raw around 0.8).** mend and the baseline send byte-identical statements,
so the gap is client-side. Repeating the one-connection append three times gave lib/raw 0.76, 0.87 and 0.81, and
replaying the same recording twice differs by up to 12%, so a miss of a few percent is within this machine's noise;
the gap itself is real. A CPU profile of that case (3,000 appends each way) puts the client at about 140 µs of CPU
per mend append against about 83 µs per replayed one. mend's own code — validation, JSON, sqlx, the driver's
interpolation — is under 5% of the samples. The rest is ` + "`database/sql`" + ` and driver work around the same five
statements: a pool checkout and return per transaction (the driver checks the connection's liveness with a syscall on
checkout), the transaction object and its bookkeeping, and the syscalls themselves. The baseline replays on one
pinned connection and skips all of that. On two cores shared with the server, client CPU adds straight to each round
trip at one connection; with more connections it overlaps with server work and the ratio rises to 0.9–1.0. What
would close it: keep the store's transactions on connections it holds (or turn the driver's liveness check off)
and, the larger lever for absolute throughput, send fewer round trips — the driver sends
` + "`SET TRANSACTION ISOLATION LEVEL`" + ` before every ` + "`START TRANSACTION`" + ` (one of the five round trips
of an append; set the session's isolation level once per connection instead), and a fenced append could join the
lease row into its UPDATE instead of reading it first.

**Reconcile pass against finished records.** Finding due work reads the due-time indexes, which hold due records
only, so the pass should not see finished ones. Early development runs without control passes showed the pass with
10^6 finished records 1.6–2.3× slower than with none; those runs shared the two cores with other test runs and the
largest case ran right after the bulk load (page flushing and purge in the background). With paired control passes
the effect is within the target, at a 2 GiB buffer pool and at the harness's 128 MiB one. The remaining cost that
grows with the table is on the write side: new records, events and op IDs use random keys (record ID, SHA-256 source
key, random op ID), so each write touches a random leaf page; once the tables outgrow the buffer pool those pages
come from disk. If that shows, what would close it is time-ordered record and op IDs (new rows on the right edge of
the indexes) and retention pruning, which keeps the working set bounded.

**Failover and re-send.** Failover takes at most the rest of the holder's term (up to one TTL after its last
renewal) plus the standby's next pass; measured well inside TTL + interval. Passes start at a fixed rate (a pass
that overruns is followed at once), so a record that becomes due waits at most one interval for the next pass to
start, plus the time that pass takes to reach it: a few milliseconds with one record per queue, more with a long
backlog. Earlier runs, when the reconciler waited one interval after each pass ended, missed the 250 ms bound by
the pass's own duration (2 ms); starting passes at a fixed rate closed that. What would shorten the wait further:
sleep only until the earliest next_attempt_at when that is sooner than the interval.
`

func splitConns(name string) (bench, conns string) {
	i := strings.LastIndex(name, "/conns=")
	if i < 0 {
		return name, "-"
	}
	return name[:i], name[i+len("/conns="):]
}

// machine describes the host: CPU model, cores, memory, kernel.
func machine(cpu string) string {
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
				mem = fmt.Sprintf(", %.0f GiB RAM", float64(kb)/(1<<20))
			}
		}
	}
	kernel := ""
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		kernel = ", " + strings.TrimSpace(string(out))
	}
	if cpu == "" {
		cpu = "unknown CPU"
	}
	return fmt.Sprintf("%s, %d cores%s%s", cpu, runtime.NumCPU(), mem, kernel)
}

// scaleDoc is the scale report docs/benchmarks.md refers to.
var scaleDoc = "docs/benchmarks-scale.md"

// scaleStatus says what the scale report holds: a full-size run, a smaller
// one, or none yet.
func scaleStatus() string {
	b, err := os.ReadFile(scaleDoc)
	if err != nil {
		return "**The full-size numbers come from `make bench-scale`, which has not been run yet.**"
	}
	var date, sizes string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "- **Date:** "); ok {
			date = v
		}
		if v, ok := strings.CutPrefix(line, "- **Sizes:** "); ok {
			sizes = v
		}
	}
	if strings.HasPrefix(sizes, "queues=10000 finished=1000000 storm=100000 storm_queues=1000 ") {
		return fmt.Sprintf("Its last run (%s) was at full size.", date)
	}
	return fmt.Sprintf("Its last run (%s) was a smoke run, at `%s`: **the full-size numbers come from `make bench-scale`, which has not been run at full size yet.**", date, sizes)
}

// runScale runs BenchmarkScale (or, with from, renders a saved run) and
// writes its report.
func runScale(goCmd, from string, took time.Duration, out string) error {
	var text string
	var commands []string
	date := time.Now()
	if from != "" {
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		text = string(b)
		for _, line := range strings.Split(text, "\n") {
			if c, ok := strings.CutPrefix(line, "$ "); ok {
				commands = append(commands, c)
			}
		}
		if fi, err := os.Stat(from); err == nil {
			date = fi.ModTime()
		}
	} else {
		begin := time.Now()
		// The storm is bounded inside the benchmark (bound=, 20 minutes a
		// run by default); the timeout only catches a hang.
		args := []string{"test", "-run", "^$", "-bench", "^BenchmarkScale$", "-benchtime", "1x", "-count", "1", "-timeout", "180m", "./bench"}
		env := ""
		if v := os.Getenv("MEND_BENCH_SCALE"); v != "" {
			env = "MEND_BENCH_SCALE=" + v + " "
		}
		commands = append(commands, env+goCmd+" "+strings.Join(args, " "))
		fmt.Println("$", commands[0])
		var all bytes.Buffer
		cmd := exec.Command(goCmd, args...)
		cmd.Stdout = io.MultiWriter(os.Stdout, &all)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", commands[0], err)
		}
		text, took = all.String(), time.Since(begin)
	}
	md := renderScale(parse(text), commands, took, date)
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", out)
	return nil
}

// compareReplicas says how the storm's settle times with two and four
// replicas compare: their means, and the spread between runs of the same
// count, which is how far apart two runs of identical code came in this
// run (the world grows by a storm a run, which the order 2, 4, 4, 2
// cancels; CPU steal does not cancel).
func compareReplicas(two, four []float64) string {
	if len(two) == 0 || len(four) == 0 {
		return ""
	}
	return fmt.Sprintf("Settled with 2 replicas in %s s (mean %.1f), with 4 in %s s (mean %.1f): 4 replicas took %+.1f%%; runs of the same count differed by up to %.1f s.",
		joinF(two), mean(two), joinF(four), mean(four), 100*(mean(four)-mean(two))/mean(two), max(spread(two), spread(four)))
}

// slower reports whether four replicas were slower than two: their mean
// settle time above two's by more than the spread between runs of the
// same count (with one run each, by anything). Two runs of each give a
// difference of means about as noisy as one run, so this calls equal
// counts slower in about 7 of 100 such runs and a real slowdown of twice
// a run's noise in about 6 of 10.
func slower(two, four []float64) bool {
	if len(four) == 0 {
		return true
	}
	return mean(four)-mean(two) > max(spread(two), spread(four))
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func spread(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	return slices.Max(xs) - slices.Min(xs)
}

func joinF(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, " and ")
}

func renderScale(r results, commands []string, took time.Duration, date time.Time) string {
	var md strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	note := func(prefix string) []string {
		var out []string
		for _, n := range r.notes {
			if rest, ok := strings.CutPrefix(n, prefix); ok {
				out = append(out, rest)
			}
		}
		return out
	}
	sizes := strings.Join(note("scale sizes "), "")
	full := strings.HasPrefix(sizes, "queues=10000 finished=1000000 storm=100000 storm_queues=1000 ")
	w("# Scale benchmarks\n\n")
	w("Generated by `make bench-scale` (`go run ./bench/cmd/benchreport -scale`) from a real run; do not edit by hand.\n\n")
	w("- **Date:** %s\n", date.UTC().Format("2006-01-02 15:04 MST"))
	w("- **Machine:** %s\n", machine(r.cpu))
	for _, n := range r.notes {
		if strings.HasPrefix(n, "server ") {
			w("- **Server:** %s\n", strings.TrimPrefix(n, "server "))
		}
	}
	w("- **Sizes:** %s\n", sizes)
	for _, n := range note("scale world seeded ") {
		w("- **World seeded** %s\n", n)
	}
	w("- **Whole run:** %s\n", took.Round(time.Second))
	w("- **Commands:**\n")
	for _, c := range commands {
		w("  - `%s`\n", c)
	}
	w("\n")
	if !full {
		w("**This is not the full-size world** (10,000 queues, 1,000,000 finished records, a storm of 100,000 dead letters\n")
		w("over 1,000 queues). The targets below are issues 13's and 20's for the full world; at these sizes they are shown, not judged.\n")
		w("Run `make bench-scale` without `MEND_BENCH_SCALE` on a quiet machine for the full numbers.\n\n")
	}
	w("The reconcilers run in-process: each replica is `reconcile.New` over its own `storage`, `fence`, `planner` and\n")
	w("`host` instances and connection pools, wired as `mend run` wires them, with its defaults (interval 10 s unless the\n")
	w("sizes say otherwise, concurrency 4 per replica and 8 across them, lease TTL 15 s); at full size two and four\n")
	w("replicas run twice each, in the order 2, 4, 4, 2, in one world that grows by a storm a run. The storm's dead\n")
	w("letters are recorded through the real intake\n")
	w("(`dlq.Intake.RecordMany` in pages of `intake_batch`, as the DLQ subscription records a page; `Record` when it is 1;\n")
	w("without an inline repair) by concurrent workers while the replicas run; the host's tables\n")
	w("hold, per storm queue, a live batch and, per dead letter, a speculating batch with one enrolled request.\n\n")

	w("| run | replicas | idle stmts/pass | idle median ms | idle max ms | storm intake/s | first delivery → last wake-up s | queue's first wake-up p50 / max s | all queues woken within deadline | round trips / record | passes | connects | purge wait s | CPU steal / idle %% | heap in use MiB | RSS / peak MiB |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	var misses []string
	drainOf := map[string][]float64{}
	run := 0
	for _, res := range r.list {
		if !strings.HasPrefix(res.name, "Scale/replicas=") {
			continue
		}
		run++
		m := res.metrics
		// A replica count run a second time is "replicas=N#01".
		reps, _, _ := strings.Cut(strings.TrimPrefix(res.name, "Scale/replicas="), "#")
		drain := "not drained"
		if m["storm-drained"] == 1 {
			drain = fmt.Sprintf("%.1f", m["storm-drain-s"])
		}
		within := "yes"
		if m["storm-within-deadline"] != 1 {
			within = fmt.Sprintf("**no**: slowest %.0f s", m["storm-firstwake-max-s"])
			if u := m["storm-queues-unwoken"]; u > 0 {
				within = fmt.Sprintf("**no**: %.0f queues never woken", u)
			}
			if full {
				misses = append(misses, fmt.Sprintf("storm with %s replicas: not every queue's first wake-up came within %.0f s of its first dead letter (slowest %.1f s).", reps, m["storm-deadline-s"], m["storm-firstwake-max-s"]))
			}
		}
		if full && (m["storm-drained"] != 1 || m["storm-drain-s"] > m["storm-settle-deadline-s"]) {
			misses = append(misses, fmt.Sprintf("storm with %s replicas: not settled and woken within %.0f s of the first delivery (%s s).", reps, m["storm-settle-deadline-s"], drain))
		}
		if full && m["storm-roundtrips/record"] > 4 {
			misses = append(misses, fmt.Sprintf("storm with %s replicas: %.2f round trips per record (target: at most 4).", reps, m["storm-roundtrips/record"]))
		}
		if m["storm-drained"] == 1 {
			drainOf[reps] = append(drainOf[reps], m["storm-drain-s"])
		}
		if full && (m["idle-stmts/pass"] > 1 || m["idle-max-ms"] > 5) {
			misses = append(misses, fmt.Sprintf("idle pass with %s replicas: %.2f statements, worst %.1f ms (target: one statement under 5 ms).", reps, m["idle-stmts/pass"], m["idle-max-ms"]))
		}
		w("| %d | %s | %.2f | %.2f | %.2f | %.0f | %s | %.1f / %.1f | %s | %.2f | %.0f | %.0f | %.1f | %.1f / %.1f | %.1f | %.0f / %.0f |\n", run, reps, m["idle-stmts/pass"], m["idle-median-ms"], m["idle-max-ms"],
			m["storm-intake/s"], drain, m["storm-firstwake-p50-s"], m["storm-firstwake-max-s"], within, m["storm-roundtrips/record"], m["storm-passes"], m["storm-connects"],
			m["storm-purge-wait-s"], m["storm-steal-%"], m["storm-idle-%"], m["heap-inuse-MiB"], m["rss-MiB"], m["rss-peak-MiB"])
	}
	verdict := compareReplicas(drainOf["2"], drainOf["4"])
	if verdict != "" {
		w("\n%s\n", verdict)
	}
	if full && len(drainOf["2"]) > 0 && len(drainOf["4"]) > 0 && slower(drainOf["2"], drainOf["4"]) {
		misses = append(misses, "4 replicas slower than 2: "+verdict)
	}
	w("\nLease traffic per pass during the storm (the fence's statements; each acquire attempt is `LeaseEnsure`, a granted one\n")
	w("also `LeaseTake`; the fenced writes' own `LeaseCheck` reads are counted with the writes):\n\n")
	w("| run | replicas | acquire attempts | terms taken | renewals | releases |\n|---:|---:|---:|---:|---:|---:|\n")
	run = 0
	for _, res := range r.list {
		if !strings.HasPrefix(res.name, "Scale/replicas=") {
			continue
		}
		run++
		m := res.metrics
		reps, _, _ := strings.Cut(strings.TrimPrefix(res.name, "Scale/replicas="), "#")
		w("| %d | %s | %.2f | %.2f | %.2f | %.2f |\n", run, reps, m["lease-acquires/pass"], m["lease-takes/pass"], m["lease-renews/pass"], m["lease-releases/pass"])
	}
	misses = append(misses, renderLimitStorm(w, r, full)...)
	w("\nStatements, as counted on the wire:\n\n")
	for _, prefix := range []string{"scale idle ", "scale explain ", "scale lease ", "scale storm-mix ", "scale seeded-storm ", "scale gave-up "} {
		for _, n := range note(prefix) {
			w("- %s%s\n", strings.TrimPrefix(prefix, "scale "), n)
		}
	}
	w("\nMemory is the benchmark process's: it also holds the intake workers, the storm's deliveries and the test\n")
	w("harness, so it bounds a replica's from above. `connects` counts connections the replicas' pools opened during the\n")
	w("storm (each pool keeps up to storage.MaxIdleConns idle, so few reconnects are expected).\n\n")
	w("## Targets (issues 13 and 20)\n\n")
	w("- Idle pass: one statement, under 5 ms, at 10,000 queues.\n")
	w("- Storm of 100,000 over 1,000 queues (issue 20): every queue's first wake-up within 60 s of its first dead letter;\n")
	w("  every record settled and woken within 120 s of the first delivery; 4 replicas no slower than 2 (judged on the\n")
	w("  mean settle time of each count's runs, beyond the spread between runs of the same count); at most 4 round\n")
	w("  trips per record on the wire, amortised (the replicas' statements, each packet once, over the storm's records).\n")
	w("- Against the limit storm of the same run (issue 50): settled within 1.5 times the limit's time, every queue's\n")
	w("  first wake-up within twice the limit's (the slowest queue's, each side).\n\n")
	switch {
	case !full:
		w("Not judged: this run is not at full size.\n")
	case len(misses) == 0:
		w("Met in this run.\n")
	default:
		w("Missed in this run:\n\n")
		for _, m := range misses {
			w("- %s\n", m)
		}
	}
	w("%s", scaleAnalysis)
	return md.String()
}

// scaleAnalysis explains what the first full-size run showed; the tables
// above say what this run measured.
const scaleAnalysis = `
### How the storm is repaired, and what bounds it

**Idle pass.** One statement (` + "`QueuesDue`" + `), read through the (next_attempt_at, queue) index whose due range is
empty when nothing is due, so it costs the same at 10,000 queues and 10^6 finished records as in an empty world.

**Storm.** A pass lists the due queues and takes each at most once: one planner run per queue, up to the planner's
` + "`RunLimit`" + ` (20) records, then the next queue; the next pass lists again. A run settles its records together (the host's
batches read, moved and finished in a few statements for all of them, each record's own fenced events kept) and
wakes the queue once, so every queue's first wake-up comes in the first round over the due queues rather than after
the queues before it are drained. A queue whose run stopped at ` + "`RunLimit`" + ` has been woken by it, so its next run
is a follow-up of up to ` + "`FollowLimit`" + ` (100) records: the rest of its storm goes in one or two large runs instead
of one per 20. What is left per record is its own settled event; the rest is shared by the run.

**Connections.** ` + "`connects`" + ` counts the connections the replicas' pools opened during the storm; the pools keep as
many as 16 idle connections (storage.MaxIdleConns), more than a replica works on at once.

**Replicas.** The replicas share one budget of runs in flight (` + "`--cluster-concurrency`" + `, 8): two run 4 queues at once
each, four run 2 each, so four put no more load on the server than two. Each pass runs first the due queues whose
name hashes to its replica's place among the working replicas, then helps with the others', so every queue's first
run comes after about one run per queue whatever the replica count, and few acquire attempts find a queue held.

**CPU.** The server, the replicas and the intake share the machine's cores; ` + "`CPU steal`" + ` is the share of the storm's
CPU time the hypervisor gave to other machines. Before each storm the benchmark waits (` + "`purge wait`" + `, at most a minute)
until InnoDB has purged the previous storm's old row versions, work that would otherwise run during the next one.

**Memory.** The benchmark process's heap stays in single-digit MiB; the peak RSS includes the storm's 100,000
deliveries held in memory by the benchmark.
`

// stormPair is one of mend's storms (its replica count and metrics) and
// the limit storm that followed it.
type stormPair struct {
	reps        string
	mend, limit map[string]float64
}

// renderLimitStorm writes the storm-against-its-limit section (issue 50):
// each of mend's storms beside the limit storm that followed it in the same
// run, their ratios, and where each side's round trips and CPU went. It
// returns the targets missed (judged at full size only).
func renderLimitStorm(w func(string, ...any), r results, full bool) []string {
	var pairs []stormPair
	var cur *stormPair
	for _, res := range r.list {
		switch {
		case strings.HasPrefix(res.name, "Scale/replicas="):
			reps, _, _ := strings.Cut(strings.TrimPrefix(res.name, "Scale/replicas="), "#")
			pairs = append(pairs, stormPair{reps: reps, mend: res.metrics})
			cur = &pairs[len(pairs)-1]
		case strings.HasPrefix(res.name, "Scale/limit") && cur != nil && cur.limit == nil:
			cur.limit = res.metrics
		}
	}
	if len(pairs) == 0 || pairs[0].limit == nil {
		return nil
	}
	var misses []string
	w("\n## The storm against its limit (issue 50)\n\n")
	w("After each of mend's storms the same storm (the same dead letters over the same queues, the same host tables,\n")
	w("the same server, in the same process) is handled by the limit storm (`bench/scale_limit_test.go`): the simplest\n")
	w("correct implementation of the same obligations in the fewest round trips. It records each page of dead letters in\n")
	w("one `INSERT`, and every interval (the replicas' own) lists the queues with work and drains each on one of 8\n")
	w("workers (mend's concurrency across its replicas) in pages of 500: one read of the page, one read and one\n")
	w("transaction on the application database (fail the pre-merge batches, membership, fan-out, the smallest live\n")
	w("batch), one `INSERT` of every RequestLog and the one wake-up, one `UPDATE` marking the page done. No fence, no event\n")
	w("log, no per-record attempts. The ratios are mend's over the limit's; a busy machine slows both.\n\n")
	w("| run | replicas | mend settled s | limit settled s | settle ratio | mend first wake-up p50 / max s | limit p50 / max s | first wake-up ratio (max) | mend rt / record | limit rt / record |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, p := range pairs {
		if p.limit == nil {
			continue
		}
		m, l := p.mend, p.limit
		settle, wake := "—", "—"
		if m["storm-drained"] == 1 && l["storm-drained"] == 1 && l["storm-drain-s"] > 0 {
			ratio := m["storm-drain-s"] / l["storm-drain-s"]
			settle = fmt.Sprintf("%.2f", ratio)
			if full && ratio > 1.5 {
				misses = append(misses, fmt.Sprintf("storm with %s replicas: settled in %.2f times the limit storm's time (target: at most 1.5).", p.reps, ratio))
			}
		}
		if l["storm-firstwake-max-s"] > 0 {
			ratio := m["storm-firstwake-max-s"] / l["storm-firstwake-max-s"]
			wake = fmt.Sprintf("%.2f", ratio)
			if full && ratio > 2 {
				misses = append(misses, fmt.Sprintf("storm with %s replicas: slowest first wake-up %.2f times the limit storm's (target: at most 2).", p.reps, ratio))
			}
		}
		w("| %d | %s | %.1f | %.1f | %s | %.1f / %.1f | %.1f / %.1f | %s | %.2f | %.3f |\n", i+1, p.reps, m["storm-drain-s"], l["storm-drain-s"], settle,
			m["storm-firstwake-p50-s"], m["storm-firstwake-max-s"], l["storm-firstwake-p50-s"], l["storm-firstwake-max-s"], wake,
			m["storm-roundtrips/record"], l["storm-roundtrips/record"])
	}
	w("\nWhere each storm went: round trips per record by phase on the wire (the reconcilers' statements: `fence` the lease\n")
	w("statements, `records` the due listings and the records' events and projections, `settle` the host's batches,\n")
	w("membership and requests, `wake` the publishes, `txn` COMMIT, ROLLBACK and session settings; `intake` the intake\n")
	w("workers' round trips), and CPU seconds during the storm of this process (reconcilers and intake workers), of the\n")
	w("server's own processes, and of Docker's userland port proxy in front of it (`proxy share` is the proxy's part of\n")
	w("the three; no production deployment has it; 0 on the local-binary backend):\n\n")
	w("| run | side | fence | records | settle | wake | txn | intake | CPU self s | CPU server s | CPU proxy s | proxy share |\n")
	w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, p := range pairs {
		for _, side := range []struct {
			name string
			m    map[string]float64
		}{{"mend ×" + p.reps, p.mend}, {"limit", p.limit}} {
			m := side.m
			if m == nil {
				continue
			}
			cpu := m["storm-cpu-self-s"] + m["storm-cpu-server-s"] + m["storm-cpu-proxy-s"]
			share := 0.0
			if cpu > 0 {
				share = 100 * m["storm-cpu-proxy-s"] / cpu
			}
			w("| %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %.0f%% |\n", i+1, side.name,
				m["storm-rt-fence/record"], m["storm-rt-records/record"], m["storm-rt-settle/record"], m["storm-rt-wake/record"], m["storm-rt-txn/record"],
				m["storm-intake-roundtrips/record"], m["storm-cpu-self-s"], m["storm-cpu-server-s"], m["storm-cpu-proxy-s"], share)
		}
	}
	if pairs[0].mend["storm-wait-settle-s"] > 0 || pairs[0].limit["storm-wait-settle-s"] > 0 {
		renderPhaseTime(w, pairs)
	}
	return misses
}

// stormPhases are the phases of a storm's time, in the report's order:
// the intake's, then the reconcilers' by what their statements do.
var stormPhases = []string{"intake", "fence", "records", "settle", "wake", "txn"}

// phaseRemedy says, per phase, what would shrink a storm's time there.
var phaseRemedy = map[string]string{
	"intake":  "the intake's statements per page (one packet a page already) cost the server the rows' index updates; fewer secondary indexes on mend_records and mend_events, or the records' event in the record's own row, would shrink it",
	"fence":   "taking and releasing a lease per planner run; more records per run (RunLimit, FollowLimit), or one term held across a pass's runs of the same queue, would shrink it",
	"records": "mend's own bookkeeping per run (the due read, the settled and woken events and projections); more records per run (RunLimit, FollowLimit), or the settled and woken events written in one append, would shrink it",
	"settle":  "the host's statements (read, move and finish the batches, membership, requests), which mend sends once per run (a first run of `RunLimit` records, follow-ups of `FollowLimit`) and the limit once per page of 500; fewer, larger runs would shrink it further, not a change to mend's own statements",
	"wake":    "the publishes, one per run; fewer runs per queue (more records per run) would shrink it",
	"txn":     "COMMIT and ROLLBACK packets of their own; sending each COMMIT in its transaction's last statement's packet, as the single-record intake does, would shrink it",
}

// renderPhaseTime writes where the storms' time went by phase: the wall
// clock split at the end of the intake, the connections' time waiting for
// replies by phase, and a sentence naming the phase that dominates mend's
// storms and what would shrink it.
func renderPhaseTime(w func(string, ...any), pairs []stormPair) {
	w("\nTime by phase. The wall clock splits at the end of the intake: `intake s` from the first delivery to the last\n")
	w("dead letter recorded, `after s` from there to the last wake-up. The other columns are the seconds the connections\n")
	w("spent waiting for replies in each phase (from a packet's write to its reply's first bytes: the server's work, the\n")
	w("loopback and the port proxy), summed over connections, so overlapping work adds up to more than the wall time;\n")
	w("`intake wait` is the intake workers', the rest the reconcilers'. `runs s` is mend's planner runs' time, summed,\n")
	w("and `slots busy` that time over the cluster's budget of runs at once (`run slots`) times the storm's settle time:\n")
	w("well below 100%% means the storm waited for the next pass, not for work in flight.\n\n")
	w("| run | side | intake s | after s | intake wait s | fence s | records s | settle s | wake s | txn s | reconcilers' wait s | runs s | slots busy |\n")
	w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	sum := map[string]map[string]float64{"mend": {}, "limit": {}}
	for i, p := range pairs {
		for _, side := range []struct {
			name, key string
			m         map[string]float64
		}{{"mend ×" + p.reps, "mend", p.mend}, {"limit", "limit", p.limit}} {
			m := side.m
			if m == nil {
				continue
			}
			var rec float64
			for _, ph := range stormPhases[1:] {
				rec += m["storm-wait-"+ph+"-s"]
			}
			// The sentence below compares mend with the limit over the
			// pairs that have both.
			if p.limit != nil {
				for _, ph := range stormPhases {
					sum[side.key][ph] += m["storm-wait-"+ph+"-s"]
				}
			}
			runs, busy := "—", "—"
			if m["storm-run-s"] > 0 {
				runs = fmt.Sprintf("%.0f", m["storm-run-s"])
				if m["storm-run-slots"] > 0 && m["storm-drain-s"] > 0 {
					busy = fmt.Sprintf("%.0f%%", 100*m["storm-run-s"]/(m["storm-run-slots"]*m["storm-drain-s"]))
				}
			}
			w("| %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |\n", i+1, side.name,
				m["storm-intake-s"], m["storm-drain-s"]-m["storm-intake-s"], m["storm-wait-intake-s"],
				m["storm-wait-fence-s"], m["storm-wait-records-s"], m["storm-wait-settle-s"], m["storm-wait-wake-s"], m["storm-wait-txn-s"], rec, runs, busy)
		}
	}
	dominant := func(m map[string]float64) (string, float64) {
		var best string
		var all float64
		for _, ph := range stormPhases[1:] {
			all += m[ph]
			if best == "" || m[ph] > m[best] {
				best = ph
			}
		}
		if all == 0 {
			return best, 0
		}
		return best, 100 * m[best] / all
	}
	ph, pct := dominant(sum["mend"])
	if pct == 0 {
		return
	}
	w("\nOver mend's storms that have a limit storm beside them the reconcilers waited longest in `%s` (%.0f%% of their wait on the server; the intake's wait\n", ph, pct)
	w("was %.1f s against the reconcilers' %.1f s): %s.\n", sum["mend"]["intake"], total(sum["mend"], stormPhases[1:]), phaseRemedy[ph])
	if lph, lpct := dominant(sum["limit"]); lpct > 0 {
		var extra string
		var most float64
		for _, p := range stormPhases[1:] {
			if d := sum["mend"][p] - sum["limit"][p]; extra == "" || d > most {
				extra, most = p, d
			}
		}
		w("The limit storms waited longest in `%s` (%.0f%%) and %.1f s in all; mend's wait exceeds the limit's most in\n", lph, lpct, total(sum["limit"], stormPhases[1:]))
		w("`%s` (%+.1f s over the runs).\n", extra, most)
	}
	var runS, slotS float64
	for _, p := range pairs {
		if m := p.mend; p.limit != nil && m["storm-run-s"] > 0 && m["storm-run-slots"] > 0 && m["storm-drain-s"] > 0 {
			runS += m["storm-run-s"]
			slotS += m["storm-run-slots"] * m["storm-drain-s"]
		}
	}
	if slotS > 0 {
		busy := 100 * runS / slotS
		w("mend's planner runs spent %.0f%% of their time waiting for replies, the rest in this process (mend's code, the\n", 100*total(sum["mend"], stormPhases[1:])/runS)
		w("intake workers and the Go scheduler on the shared cores). ")
		w("mend's run slots were busy %.0f%% of its storms' settle time", busy)
		if busy < 60 {
			w(":\nfor the rest no run was in flight, so the settle time is set more by the passes' cadence (a queue gets at most\n")
			w("one run a pass, the next pass an interval later) than by any phase on the wire; running a\n")
			w("queue again within the pass while it still has due records, or larger runs, would shrink it")
		} else {
			w(": the runs in flight, not the passes' cadence, set the settle time")
		}
		w(".")
	}
	w("\n")
}

// total sums m over keys.
func total(m map[string]float64, keys []string) float64 {
	var s float64
	for _, k := range keys {
		s += m[k]
	}
	return s
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/subscribe"
)

// twinForm is one of the four ways to give a DSN flag --X.
type twinForm struct {
	name string
	// args and env for the value v, whose file is path.
	give func(x, v, path string) (args []string, env map[string]string)
}

var twinForms = []twinForm{
	{"--X", func(x, v, _ string) ([]string, map[string]string) { return []string{"--" + x + "=" + v}, nil }},
	{"MEND_X", func(x, v, _ string) ([]string, map[string]string) { return nil, map[string]string{envName(x): v} }},
	{"--X-file", func(x, _, p string) ([]string, map[string]string) { return []string{"--" + x + "-file=" + p}, nil }},
	{"MEND_X_FILE", func(x, _, p string) ([]string, map[string]string) {
		return nil, map[string]string{envName(x + "-file"): p}
	}},
}

// twinOutcome is what a command decides from how a DSN flag was given:
// the DSN it uses, whether it counts the flag as given, and (where the
// command has one) whether the subscription is on.
type twinOutcome struct {
	Value     string
	Given     bool
	Subscribe string // "on", "off", or "" when the command has no --subscribe
}

// resolveTwin parses args and env for the command at path as Main does
// (flags, then every MEND_* twin, then the -file twins) and returns the
// outcome for flag x.
func resolveTwin(t *testing.T, path []string, x string, args []string, env map[string]string) twinOutcome {
	t.Helper()
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(k string) string { return env[k] },
		scrub: &scrubber{}, flagsOf: map[*cobra.Command]*flags{}}
	root := a.newRoot()
	cmd, _, err := root.Find(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if err := root.PersistentPreRunE(cmd, nil); err != nil {
		t.Fatalf("mend %s %v with %v: %v", strings.Join(path, " "), args, env, err)
	}
	f := a.flagsOf[cmd]
	o := twinOutcome{Value: f.str(x), Given: f.given(x)}
	if f.Lookup("subscribe") != nil {
		on := false
		switch cmd.Name() {
		case "run":
			c := &subscribeConfig{Interval: subscribe.PollIntervalDefault, Settle: subscribe.SettleDefault,
				PageSize: subscribe.PageSizeDefault, Group: subscribe.GroupDefault}
			if err := c.resolve(f); err != nil {
				t.Fatal(err)
			}
			on = c.On
		default:
			on = (&doctorSubscribe{}).on(f)
		}
		o.Subscribe = map[bool]string{true: "on", false: "off"}[on]
	}
	return o
}

// TestFlagTwins: every DSN flag of every command that has an --X-file twin
// means the same whichever of the four ways it is given (--X, MEND_X,
// --X-file, MEND_X_FILE): the same DSN, counted as given, and the same
// subscription decision (run and doctor turn it on for --queue-dsn; the
// shipped Deployment passes MEND_QUEUE_DSN_FILE). The pairs are found by
// walking the command tree, so a new command or DSN flag is covered
// without editing this test.
func TestFlagTwins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const dsn = "twin:twin-pw@tcp(127.0.0.1:1)/twin"
	file := filepath.Join(dir, "dsn")
	if err := os.WriteFile(file, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" },
		scrub: &scrubber{}, flagsOf: map[*cobra.Command]*flags{}}
	a.newRoot()
	type pair struct {
		path []string
		x    string
	}
	var pairs []pair
	for cmd, f := range a.flagsOf {
		for _, x := range dsnFlags {
			if f.Lookup(x) != nil && f.Lookup(x+"-file") != nil {
				pairs = append(pairs, pair{strings.Fields(cmd.CommandPath())[1:], x})
			}
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		return strings.Join(pairs[i].path, " ")+pairs[i].x < strings.Join(pairs[j].path, " ")+pairs[j].x
	})
	commands := map[string]bool{}
	for _, p := range pairs {
		commands[strings.Join(p.path, " ")+" --"+p.x] = true
	}
	// The commands the issue names must be among them.
	for _, want := range []string{"run --queue-dsn", "doctor --queue-dsn", "status --queue-dsn", "console --queue-dsn",
		"import --queue-dsn", "subscribe --queue-dsn", "run --dsn", "run --host-dsn", "doctor --host-dsn", "migrate --dsn"} {
		if !commands[want] {
			t.Errorf("no pair %q found in the command tree (found %d pairs)", want, len(pairs))
		}
	}
	for _, p := range pairs {
		t.Run(strings.Join(p.path, "_")+"/"+p.x, func(t *testing.T) {
			t.Parallel()
			a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" },
				scrub: &scrubber{}, flagsOf: map[*cobra.Command]*flags{}}
			cmd, _, _ := a.newRoot().Find(p.path)
			env := hasEnvTwin(cmd.Flags().Lookup(p.x))
			if env != hasEnvTwin(cmd.Flags().Lookup(p.x+"-file")) {
				t.Fatalf("--%s has an environment twin: %v, --%s-file: %v; want both or neither", p.x, env, p.x, !env)
			}
			var want twinOutcome
			for i, form := range twinForms {
				if !env && strings.HasPrefix(form.name, "MEND_") {
					continue // demo's --dsn: command line only, and so is its file
				}
				args, env := form.give(p.x, dsn, file)
				got := resolveTwin(t, p.path, p.x, args, env)
				if i == 0 {
					want = got
					if !got.Given || got.Value != dsn {
						t.Fatalf("--%s: %+v; want the DSN, given", p.x, got)
					}
					continue
				}
				if got != want {
					t.Errorf("%s: %+v; --%s gives %+v", form.name, got, p.x, want)
				}
			}
		})
	}
}

// TestFlagTwinsRun is TestFlagTwins by behaviour against a real server:
// mend run --once subscribes (it says so and its group joins the queue's
// offsets table) and mend doctor lists the same checks, whichever way the
// queue DSN is given.
func TestFlagTwinsRun(t *testing.T) {
	t.Parallel()
	mendDB := mysqltest.NewDB(t, migrations.Up)
	appDB := mysqltest.NewHostDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewHostDB(t, onDSN(sqtest.CreateQueue))
	// The host reads speculate/q: each run's group joins speculate_dlq/q ahead.
	w := sqtest.World{App: appDB.SQL(t), Queue: queueDB.SQL(t)}
	if err := w.Join(context.Background(), "orchestrator", "speculate", "q"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "queue-dsn")
	if err := os.WriteFile(file, []byte(queueDB.DSN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mend := func(t *testing.T, form twinForm, args ...string) (int, string, string) {
		t.Helper()
		more, env := form.give("queue-dsn", queueDB.DSN, file)
		var out, errOut bytes.Buffer
		code := Main(context.Background(), append(args, more...), &out, &errOut, func(k string) string { return env[k] })
		return code, out.String(), errOut.String()
	}
	var wantChecks []string
	for i, form := range twinForms {
		t.Run(form.name, func(t *testing.T) {
			code, _, errOut := mend(t, form, "run", "--once", "--dsn", mendDB.DSN, "--host-dsn", appDB.DSN,
				"--group", "twin-"+strconv.Itoa(i), "--subscribe-settle", "1s")
			if code != exitOK || !strings.Contains(errOut, "subscribing to the host's dead-letter topics") {
				t.Fatalf("run --once with the queue DSN as %s: exit %d, no subscription:\n%s", form.name, code, errOut)
			}
			var n int
			if err := queueDB.SQL(t).QueryRow("SELECT COUNT(*) FROM queue_offsets WHERE consumer_group = ?", "twin-"+strconv.Itoa(i)).Scan(&n); err != nil || n == 0 {
				t.Fatalf("run --once with the queue DSN as %s: group twin-%d has %d rows in queue_offsets (%v)", form.name, i, n, err)
			}
			_, out, errOut := mend(t, form, "doctor", "--json", "--dsn", mendDB.DSN, "--host-dsn", appDB.DSN, "--group", "twin-"+strconv.Itoa(i))
			var report struct{ Checks []doctor.Check }
			if err := json.Unmarshal([]byte(out), &report); err != nil {
				t.Fatalf("doctor: not JSON (%v): %s %s", err, out, errOut)
			}
			var names []string
			for _, c := range report.Checks {
				names = append(names, c.Name)
			}
			if i == 0 {
				wantChecks = names
				return
			}
			if strings.Join(names, ",") != strings.Join(wantChecks, ",") {
				t.Fatalf("doctor with the queue DSN as %s lists\n%v\nwith --queue-dsn\n%v", form.name, names, wantChecks)
			}
		})
	}
}

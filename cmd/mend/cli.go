package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqlx"
	"github.com/mendq/mend/storage"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed (database down, doctor found a problem, ...)
	exitUsage   = 2 // the command line or environment is wrong; nothing was done
)

// envPrefix prefixes every flag's environment twin: --lease-ttl is
// MEND_LEASE_TTL. A flag on the command line wins over its twin.
const envPrefix = "MEND_"

// app is one invocation of the binary.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	scrub          *scrubber // secrets seen in DSNs, removed from every line we print
	logFormat      string    // the parsed --log-format, so the final error line matches the logs
	flagsOf        map[*cobra.Command]*flags
	ran            bool // a command's RunE started: errors before it are usage errors
	plainDB        bool // some DSN connects without TLS (dbsecurity.go)
	tlsNoCert      bool // some DSN connects with TLS and no client certificate (dbsecurity.go)
}

// Shared flags a command can ask newCommand for.
const (
	withDSN  = 1 << iota // --dsn: mend's database
	withLog              // --log-format, --log-level
	withJSON             // --json
	withList             // -o table|json|wide and --no-headers (a list command; implies --json)
)

// Adding a flag to a command: define it on the command's *flags (a
// pflag.FlagSet) in its constructor, e.g.
//
//	f.StringVar(&c.Topic, "topic", "", "only this dead-letter topic")
//
// and nothing else: every flag gets its MEND_* environment twin (--topic is
// MEND_TOPIC) when the command runs, the flag on the command line winning,
// and the twin is shown in the command's help. A flag that must come from
// the command line only (a confirmation such as --yes) is defined with
// f.cmdLineOnly. Value completion for a flag: f.completeValues.

// newCommand starts a subcommand: use is its name and positional
// arguments, short its line in `mend help`, long its help text; shared picks
// the shared flags (withDSN|withLog|withJSON). Finish it with f.run.
func (a *app) newCommand(use, short, long string, shared int) *flags {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: noArgs}
	f := &flags{FlagSet: cmd.Flags(), a: a, cmd: cmd}
	if shared&withDSN != 0 {
		f.StringVar(&f.dsn, "dsn", "", "go-sql-driver DSN of mend's database, e.g. user:pass@tcp(127.0.0.1:3306)/mend")
	}
	f.logFormat, f.logLevel = "text", "info"
	if shared&withLog != 0 {
		f.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
		f.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
		f.completeValues("log-format", "text", "json")
		f.completeValues("log-level", "debug", "info", "warn", "error")
	}
	if shared&(withJSON|withList) != 0 {
		f.BoolVar(&f.json, "json", false, "print data as JSON")
	}
	if shared&withList != 0 {
		f.StringVarP(&f.output, "output", "o", "table", "output format: table, json (as --json) or wide (a table with more columns)")
		f.BoolVar(&f.noHeaders, "no-headers", false, "print tables without their header line")
		f.completeValues("output", "table", "json", "wide")
		f.list = true
	}
	a.flagsOf[cmd] = f
	return f
}

// run sets the command's action and returns the command.
func (f *flags) run(fn func(ctx context.Context, args []string) error) *cobra.Command {
	f.cmd.RunE = func(cmd *cobra.Command, args []string) error {
		f.a.ran = true
		ctx := cmd.Context()
		if f.timeout <= 0 || (f.timeoutApplies != nil && !f.timeoutApplies()) {
			return fn(ctx, args)
		}
		ctx, cancel := context.WithTimeoutCause(ctx, f.timeout, errTimedOut)
		defer cancel()
		err := fn(ctx, args)
		if err != nil && errors.Is(context.Cause(ctx), errTimedOut) {
			return fmt.Errorf("gave up after %s (--timeout): is the database up and answering? (%w)", f.timeout, err)
		}
		return err
	}
	return f.cmd
}

// cmdLineOnly marks a flag as having no environment twin: a confirmation
// must be typed, never inherited from a shell (MEND_YES=1 once dropped every
// table with nothing on the command line).
func (f *flags) cmdLineOnly(name string) {
	_ = f.SetAnnotation(name, annotNoEnv, []string{"true"})
}

// completeValues makes shell completion offer values for a flag.
func (f *flags) completeValues(name string, values ...string) {
	_ = f.cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

const annotNoEnv = "mend_no_env"

// hasEnvTwin reports whether a flag is read from its MEND_* twin.
func hasEnvTwin(fl *pflag.Flag) bool {
	return fl.Name != "help" && fl.Name != "version" && len(fl.Annotations[annotNoEnv]) == 0
}

// noArgs refuses positional arguments, as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q (run '%s -h' for the flags)", args[0], cmd.CommandPath())
	}
	return nil
}

// errTimedOut is the cause of a --timeout.
var errTimedOut = errors.New("--timeout reached")

// commandHints answer the commands newcomers look for that mend has under
// another name (issue 57: "mend stuck" said only "unknown command").
var commandHints = map[string]string{
	"stuck": "stuck-queue detection is not a command: mend run scans for stuck queues every --stuck-every (default " +
		stuckEveryDefault.String() + ") and wakes a queue quiet for --stuck-bound; mend status shows the scan's wake-ups " +
		"(\"stuck-queue wake-ups\") and mend inspect --queue Q their records (docs/operations.md, \"Stuck queues\")",
}

// errNoCommand: mend without a command printed the help; exit 2.
var errNoCommand = errors.New("no command given")

// newRoot builds the command tree for one invocation.
func (a *app) newRoot() *cobra.Command {
	bi := readBuildInfo()
	root := &cobra.Command{
		Use:   "mend",
		Short: "mend makes a submit queue's dead-letter handling converge.",
		Long: "mend makes a submit queue's dead-letter handling converge.\n\n" +
			"Every flag of every command has an environment twin: --dsn is MEND_DSN, --lease-ttl is MEND_LEASE_TTL;\n" +
			"the flag wins. Confirmations (--yes, --force) have none. Exit codes: 0 ok, 1 failure, 2 usage error.",
		Version:       bi.line(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				if hint, ok := commandHints[args[0]]; ok {
					return usagef("unknown command %q: %s", args[0], hint)
				}
				return usagef("unknown command %q; run 'mend help' for the list", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			_ = cmd.Help()
			return errNoCommand
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			f := a.flagsOf[cmd]
			if f == nil {
				return nil // help, completion
			}
			if err := f.applyEnv(); err != nil {
				return err
			}
			return f.applyDBSecurity() // dbsecurity.go
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usagef("%v (run '%s -h' for the flags)", err, cmd.CommandPath())
	})
	root.AddCommand(
		newMigrateCmd(a),
		newRunCmd(a),
		newStatusCmd(a),
		newInspectCmd(a),
		newRecordCmd(a),
		newImportCmd(a),
		newAdoptCmd(a),
		newSubscribeCmd(a),
		newRetryCmd(a),
		newResolveCmd(a),
		newLeaseCmd(a),
		newDoctorCmd(a),
		newVerifyCmd(a),
		newConsoleCmd(a),
		newDemoCmd(a),
		newVersionCmd(a),
	)
	// cobra's completion command (bash, zsh, fish, powershell) and help
	// command, made to exit 2 on a shell or topic they do not know.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					// One line on stderr, as every usage error: help on
					// stdout would be fed to the shell by
					// source <(mend completion).
					return usagef("name a shell: mend completion bash|zsh|fish|powershell")
				}
				return usagef("unknown shell %q: use bash, zsh, fish or powershell", args[0])
			}
		}
	}
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "help about any command",
		Args:  cobra.ArbitraryArgs,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, c := range root.Commands() {
				if c.IsAvailableCommand() {
					names = append(names, c.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, _, err := root.Find(args)
			if err != nil || (len(args) > 0 && cmd == root) {
				return usagef("no help for %q: not a command; run 'mend help' for the list", strings.Join(args, " "))
			}
			return cmd.Help()
		},
	})
	// Every DSN flag's file and TLS companions (dbsecurity.go).
	for _, f := range a.flagsOf {
		f.addDBSecurityFlags()
	}
	// Each flag's help names its twin.
	for cmd := range a.flagsOf {
		cmd.Flags().VisitAll(func(fl *pflag.Flag) {
			if hasEnvTwin(fl) {
				fl.Usage += " [$" + envName(fl.Name) + "]"
			}
		})
	}
	return root
}

// Main runs the binary with args (without the program name) and returns
// the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: getenv, scrub: &scrubber{}, flagsOf: map[*cobra.Command]*flags{}}
	root := a.newRoot()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if errors.Is(err, errNoCommand) {
		return exitUsage
	}
	if err != nil && !a.ran {
		var ue *usageError
		if !errors.As(err, &ue) {
			err = &usageError{msg: err.Error()}
		}
	}
	name := ""
	if cmd != nil && cmd != root {
		name = cmd.Name()
	}
	return a.exit(name, err)
}

// usageError is a mistake on the command line or in the environment.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// exit prints err as one line and maps it to an exit code.
func (a *app) exit(name string, err error) int {
	if err == nil {
		return exitOK
	}
	if mysqlx.ErrNumber(err) == 1045 {
		err = fmt.Errorf("access denied: the user or password in the DSN is wrong (%w)", err)
	}
	err = a.explainTLS(err) // dbsecurity.go: a server that refuses plain connections: say what to add
	line := a.scrub.clean(oneLine(err.Error()))
	code := exitFailure
	var ue *usageError
	if errors.As(err, &ue) {
		code = exitUsage
	}
	prefix := "mend"
	if name != "" {
		prefix += " " + name
	}
	if a.logFormat == "json" {
		// With JSON logs every stderr line is JSON, the last one included.
		newLogger(a.stderr, "json", slog.LevelError, a.scrub).Error(prefix+": "+line, "command", name, "exit_code", code)
		return code
	}
	fmt.Fprintf(a.stderr, "%s: %s\n", prefix, line)
	return code
}

// say prints a progress line on stderr: plain in text, a JSON log line with
// --log-format json (where every stderr line is JSON).
func (a *app) say(format string, args ...any) {
	msg := a.scrub.clean(fmt.Sprintf(format, args...))
	if a.logFormat == "json" {
		newLogger(a.stderr, "json", slog.LevelInfo, a.scrub).Info(msg)
		return
	}
	fmt.Fprintln(a.stderr, msg)
}

// oneLine folds a multi-line error (errors.Join) into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "; ")
}

// flags is a subcommand's flag set with the options every command shares.
type flags struct {
	*pflag.FlagSet
	a         *app
	cmd       *cobra.Command
	dsn       string
	logFormat string
	logLevel  string
	json      bool
	fromEnv   map[string]bool // flags set from their MEND_* twin
	fromFile  map[string]bool // DSN flags set from their --X-file twin (dbsecurity.go)
	list      bool            // has -o and --no-headers
	output    string          // table, json or wide
	noHeaders bool
	timeout   time.Duration // --timeout; 0: none
	// timeoutApplies says whether --timeout bounds this invocation (run:
	// only with --once); nil: always.
	timeoutApplies func() bool
}

// addTimeout gives a one-shot command --timeout with default def (0: no
// limit): the whole command, connecting included, gives up after it, with
// a line that names the flag instead of "context deadline exceeded".
func (f *flags) addTimeout(def time.Duration) {
	f.DurationVar(&f.timeout, "timeout", def, "give up after this long, e.g. when the database does not answer (0: no limit)")
}

// listOpts is how a list command prints a table.
type listOpts struct {
	wide, noHeaders bool
}

func (f *flags) listOpts() listOpts {
	return listOpts{wide: f.output == "wide", noHeaders: f.noHeaders}
}

// header writes a table's header line unless --no-headers.
func (o listOpts) header(w io.Writer, cols string) {
	if !o.noHeaders {
		fmt.Fprintln(w, cols)
	}
}

// given reports whether the flag was set on the command line, through its
// environment twin, or (a DSN flag) through its --X-file twin or that
// twin's environment twin: all four mean the same (issue 45: the
// Deployment's MEND_QUEUE_DSN_FILE once left the subscription off).
func (f *flags) given(name string) bool {
	return f.Changed(name) || f.fromEnv[name] || (f.fromFile[name] && plantFileTwinNotGiven == "")
}

// plantFileTwinNotGiven is empty in every release. A test links a binary
// with it set (-ldflags -X main.plantFileTwinNotGiven=1) to plant issue
// 45's old resolution, in which --X-file did not count as --X given, and
// shows TestManifestsRun catches it.
var plantFileTwinNotGiven string

// setDefault changes a flag's default, as -h shows it too.
func (f *flags) setDefault(name, value string) {
	fl := f.Lookup(name)
	_ = fl.Value.Set(value)
	fl.DefValue = value
}

// envName is a flag's environment twin.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv runs after the command line was parsed: every flag not given on
// it takes its MEND_* twin's value; every DSN's password becomes a secret;
// the log flags are checked.
func (f *flags) applyEnv() error {
	var envErr error
	f.VisitAll(func(fl *pflag.Flag) {
		if !hasEnvTwin(fl) || envErr != nil {
			return
		}
		v := f.a.getenv(envName(fl.Name))
		if v == "" {
			return
		}
		if strings.HasSuffix(fl.Name, "dsn") {
			f.a.scrub.addDSN(v) // a secret even when the flag overrides it
		}
		if fl.Changed {
			return // the command line wins
		}
		if f.fromEnv == nil {
			f.fromEnv = map[string]bool{}
		}
		f.fromEnv[fl.Name] = true
		if err := fl.Value.Set(v); err != nil {
			// Only DSN flags hold secrets, and a string flag never fails.
			envErr = usagef("environment variable %s=%q is not a valid value for --%s (%v)", envName(fl.Name), v, fl.Name, err)
		}
	})
	if envErr != nil {
		return envErr
	}
	f.VisitAll(func(fl *pflag.Flag) {
		if strings.HasSuffix(fl.Name, "dsn") {
			f.a.scrub.addDSN(fl.Value.String())
		}
	})
	switch f.logFormat {
	case "text", "json":
	default:
		return usagef("--log-format must be text or json, not %q", f.logFormat)
	}
	if _, err := parseLevel(f.logLevel); err != nil {
		return err
	}
	if f.list {
		switch {
		case f.json && f.given("output") && f.output != "json":
			return usagef("--json and -o %s disagree; give one", f.output)
		case f.json:
			f.output = "json"
		}
		switch f.output {
		case "table", "wide":
		case "json":
			f.json = true
		default:
			return usagef("-o must be table, json or wide, not %q", f.output)
		}
	}
	if f.timeout < 0 {
		return usagef("--timeout must not be negative")
	}
	f.a.logFormat = f.logFormat
	driverLogger.Store(f.logger().With("component", "mysql"))
	return nil
}

// needDSN checks that a DSN was given and is one mend can use.
func (f *flags) needDSN() (string, error) {
	return checkDSN("--dsn", f.dsn)
}

func checkDSN(flagName, dsn string) (string, error) {
	if dsn == "" {
		return "", usagef("%s is required (or %s), e.g. user:pass@tcp(127.0.0.1:3306)/mend", flagName, envName(strings.TrimPrefix(flagName, "--")))
	}
	if _, err := storage.NormalizeDSN(dsn); err != nil {
		return "", usagef("%s: %v", flagName, err)
	}
	return dsn, nil
}

// logger builds the command's logger on stderr.
func (f *flags) logger() *slog.Logger {
	lvl, _ := parseLevel(f.logLevel)
	return newLogger(f.a.stderr, f.logFormat, lvl, f.a.scrub)
}

// requireFlag fails when a required flag is empty.
func requireFlag(name, value string) error {
	if value == "" {
		return usagef("--%s is required (or %s)", name, envName(name))
	}
	return nil
}

// fmtAge prints a duration for people: "-" for zero, else rounded, as
// doctor's checks print it.
func fmtAge(d time.Duration) string { return doctor.FormatAge(d) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func quoteIdent(s string) string { return storage.QuoteIdent(s) }

// deniedError reports whether err is the server refusing a statement for a
// missing privilege: 1142 (table), 1143 (column), 1044 (database).
func deniedError(err error) bool {
	switch mysqlx.ErrNumber(err) {
	case mysqlx.ErrTableAccessDenied, mysqlx.ErrColumnAccessDenied, mysqlx.ErrDBAccessDenied:
		return true
	}
	return false
}

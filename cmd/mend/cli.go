package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

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
}

// command is one subcommand.
type command struct {
	name    string
	args    string // the positional arguments, for usage
	summary string
	run     func(ctx context.Context, a *app, args []string) error
}

func commands() []command {
	return []command{
		{"migrate", "up [N]|down [N]|goto V|version|force V|sql", "apply, revert, show or print mend's schema; force records a version by hand", runMigrate},
		{"run", "", "run the reconciler: repair due records under per-queue leases", runRun},
		{"status", "", "per queue: records by state, oldest due age, lease holder", runStatus},
		{"inspect", "", "a record and its full event history (or a queue's records)", runInspect},
		{"record", "", "record a dead letter by hand (replaying old dead letters)", runRecord},
		{"import", "", "record every dead letter already in the host's queue database (adopting mend), idempotently", runImport},
		{"retry", "", "put parked records back to pending (one by --record, or a selection)", runRetry},
		{"resolve", "", "close records by hand, with who and why (one by --record, or a selection)", runResolve},
		{"lease", "list|history|release", "show lease terms and their history; end a dead holder's term", runLease},
		{"doctor", "", "check the server, schema and settings, and the host's tables and grants, for what breaks mend", runDoctor},
		{"demo", "", "run the stuck-queue scenario on a throwaway server and print its timeline", runDemo},
		{"version", "", "print the binary's version (also: mend --version)", runVersion},
		{"completion", "bash|zsh", "print a shell completion script", runCompletion},
	}
}

// Main runs the binary with args (without the program name) and returns
// the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: getenv, scrub: &scrubber{}}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		a.usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name := args[0]
	if name == "--version" || name == "-version" {
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, a, args[1:])
		return a.exit(name, err)
	}
	fmt.Fprintf(stderr, "mend: unknown command %q; run 'mend help' for the list\n", name)
	return exitUsage
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintln(w, "mend makes a submit queue's dead-letter handling converge.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: mend <command> [flags]")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every flag of every command has an environment twin: --dsn is MEND_DSN, --lease-ttl is MEND_LEASE_TTL; the flag wins.")
	fmt.Fprintln(w, "Run 'mend <command> -h' for a command's flags. Exit codes: 0 ok, 1 failure, 2 usage error.")
}

// errHelp is returned after -h printed a command's flags.
var errHelp = errors.New("help shown")

// usageError is a mistake on the command line or in the environment.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// exit prints err as one line and maps it to an exit code.
func (a *app) exit(name string, err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	line := a.scrub.clean(oneLine(err.Error()))
	code := exitFailure
	var ue *usageError
	if errors.As(err, &ue) {
		code = exitUsage
	}
	if a.logFormat == "json" {
		// With JSON logs every stderr line is JSON, the last one included.
		newLogger(a.stderr, "json", slog.LevelError, a.scrub).Error("mend "+name+": "+line, "command", name, "exit_code", code)
		return code
	}
	fmt.Fprintf(a.stderr, "mend %s: %s\n", name, line)
	return code
}

// oneLine folds a multi-line error (errors.Join) into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "; ")
}

// flags is a subcommand's flag set with the options every command shares.
type flags struct {
	*flag.FlagSet
	a         *app
	dsn       string
	logFormat string
	logLevel  string
	json      bool
	hasJSON   bool
	fromEnv   map[string]bool // flags set from their MEND_* twin
	help      func()          // prints the command's usage and flags
}

// newFlags starts a command's flag set with --dsn and the log flags;
// withJSON adds --json.
func (a *app) newFlags(name, positional, summary string, withJSON bool) *flags {
	fs := flag.NewFlagSet("mend "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, a: a, hasJSON: withJSON}
	fs.StringVar(&f.dsn, "dsn", "", "go-sql-driver DSN of mend's database, e.g. user:pass@tcp(127.0.0.1:3306)/mend")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	if withJSON {
		fs.BoolVar(&f.json, "json", false, "print data as JSON")
	}
	fs.Usage = func() {} // a parse error is one line on stderr, not the whole usage
	f.help = func() {
		w := a.stdout
		fmt.Fprintf(w, "Usage: mend %s %s[flags]\n\n%s\n\nFlags (each also read from MEND_<NAME>, e.g. --dsn from MEND_DSN):\n", name, positional, summary)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return f
}

// given reports whether the flag was set on the command line or through
// its environment twin.
func (f *flags) given(name string) bool {
	found := false
	f.Visit(func(fl *flag.Flag) { found = found || fl.Name == name })
	return found || f.fromEnv[name]
}

// setDefault changes a flag's default, as -h shows it too.
func (f *flags) setDefault(name, value string) {
	_ = f.Set(name, value)
	f.Lookup(name).DefValue = value
}

// envName is a flag's environment twin.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse applies the environment twins, then the command line (which wins),
// and records every DSN's password as a secret.
func (f *flags) parse(args []string) error {
	var envErr error
	f.VisitAll(func(fl *flag.Flag) {
		v := f.a.getenv(envName(fl.Name))
		if v == "" || envErr != nil {
			return
		}
		if strings.HasSuffix(fl.Name, "dsn") {
			f.a.scrub.addDSN(v) // a secret even when the flag overrides it
		}
		if f.fromEnv == nil {
			f.fromEnv = map[string]bool{}
		}
		f.fromEnv[fl.Name] = true
		if err := f.Set(fl.Name, v); err != nil {
			// Only DSN flags hold secrets, and a string flag never fails.
			envErr = usagef("environment variable %s=%q is not a valid value for --%s (%v)", envName(fl.Name), v, fl.Name, err)
		}
	})
	if envErr != nil {
		return envErr
	}
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.help()
			return errHelp
		}
		return usagef("%v (run '%s -h' for the flags)", err, f.Name())
	}
	f.VisitAll(func(fl *flag.Flag) {
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
	f.a.logFormat = f.logFormat
	driverLogger.Store(f.logger().With("component", "mysql"))
	return nil
}

// noArgs refuses positional arguments.
func (f *flags) noArgs() error {
	if f.NArg() > 0 {
		return usagef("unexpected argument %q (run '%s -h' for the flags)", f.Arg(0), f.Name())
	}
	return nil
}

// parseNoArgs parses args (see parse) and refuses positional arguments.
func (f *flags) parseNoArgs(args []string) error {
	if err := f.parse(args); err != nil {
		return err
	}
	return f.noArgs()
}

// parseWithDSN is parseNoArgs for a command that needs mend's database: it also returns the
// checked --dsn. Errors come in command-line order: flags, arguments, then the DSN.
func (f *flags) parseWithDSN(args []string) (string, error) {
	if err := f.parseNoArgs(args); err != nil {
		return "", err
	}
	return f.needDSN()
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

// fmtAge prints a duration for people: "-" for zero, else rounded.
func fmtAge(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// flagLine matches a flag in the -h output of a command (flag.PrintDefaults).
var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// commandFlags returns each command's flags, read from its own -h output so
// that completion can never drift from what the commands accept.
func commandFlags(ctx context.Context) map[string][]string {
	out := map[string][]string{}
	for _, c := range commands() {
		if c.name == "completion" {
			out[c.name] = []string{"log-format", "log-level", "dsn"}
			continue
		}
		var buf bytes.Buffer
		a := &app{stdout: &buf, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }, scrub: &scrubber{}}
		_ = c.run(ctx, a, []string{"-h"})
		for _, m := range flagLine.FindAllStringSubmatch(buf.String(), -1) {
			out[c.name] = append(out[c.name], m[1])
		}
		sort.Strings(out[c.name])
	}
	return out
}

// actions are the positional words some commands take.
var actions = map[string]string{
	"migrate":    "up down goto version force sql",
	"lease":      "list history release",
	"completion": "bash zsh",
}

func runCompletion(ctx context.Context, a *app, args []string) error {
	f := a.newFlags("completion", "bash|zsh ", "Print a completion script for bash or zsh, e.g.\n  source <(mend completion bash)\n  mend completion zsh > \"${fpath[1]}/_mend\"", false)
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() != 1 {
		return usagef("name the shell: mend completion bash|zsh")
	}
	flags := commandFlags(ctx)
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	switch f.Arg(0) {
	case "bash":
		fmt.Fprint(a.stdout, bashCompletion(names, flags))
	case "zsh":
		// zsh runs bash completion scripts through bashcompinit.
		fmt.Fprint(a.stdout, "#compdef mend\nautoload -U +X bashcompinit && bashcompinit\n"+bashCompletion(names, flags))
	default:
		return usagef("unknown shell %q; use bash or zsh", f.Arg(0))
	}
	return nil
}

func bashCompletion(names []string, flags map[string][]string) string {
	var b strings.Builder
	b.WriteString("# mend bash completion: source <(mend completion bash)\n_mend() {\n")
	b.WriteString("  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}\n")
	fmt.Fprintf(&b, "  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(append(names, "--version", "help"), " "))
	b.WriteString("  case \"$cmd\" in\n")
	for _, n := range names {
		var words []string
		for _, fl := range flags[n] {
			words = append(words, "--"+fl)
		}
		if act := actions[n]; act != "" {
			words = append(words, act)
		}
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", n, strings.Join(words, " "))
	}
	b.WriteString("  esac\n}\ncomplete -o default -F _mend mend\n")
	return b.String()
}

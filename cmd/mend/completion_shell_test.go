package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Issue 19, Done when: completion works in the shells themselves, not only
// through `mend __complete`. Each case loads the script `mend completion
// <shell>` prints into a real bash (with the bash-completion package, as a
// user's interactive shell has it), zsh or fish and asks for the candidates
// at a command line, as pressing TAB there would.
//
// A shell that is not installed is skipped, unless MEND_REQUIRE_SHELLS=1
// (CI installs bash-completion, zsh and fish). PowerShell is not in
// Debian's archive and cannot be fetched here, so its script is only
// checked to call back into mend (TestOperatorSurface's completion case).

// shellCases are command lines (ending where TAB is pressed) and candidates
// each must offer.
var shellCases = []struct {
	line string
	want []string
}{
	{"mend ins", []string{"inspect"}},
	{"mend lease ", []string{"list", "history", "release"}},
	{"mend inspect --st", []string{"--state"}},
	{"mend inspect --state ", []string{"parked", "waiting", "done"}},
	{"mend record --topic ", []string{"speculate_dlq", "buildsignal_dlq"}},
	{"mend help mig", []string{"migrate"}},
}

// shellScripts ask a shell for the candidates at $LINE, one per line.
var shellScripts = map[string]struct {
	need   []string // files the script relies on
	script string
}{
	"bash": {need: []string{"/usr/share/bash-completion/bash_completion"}, script: `
source /usr/share/bash-completion/bash_completion
source <(mend completion bash)
read -r -a COMP_WORDS <<<"$LINE"
[[ $LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE=$LINE
COMP_POINT=${#LINE}
__start_mend mend "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"
`},
	// zsh's completion builtins (compadd) work only inside a completion
	// widget, so compsys's entry points the script calls are replaced by
	// printers; everything else (splitting the line, asking mend, reading
	// the directive) is the script's own code in a real zsh.
	"zsh": {script: `
compdef() { : }
_describe() { print -rl -- ${completions[@]%%:*} }
compadd() { : }
_arguments() { : }
eval "$(mend completion zsh)"
words=(${=LINE})
[[ $LINE == *" " ]] && words+=("")
CURRENT=${#words}
_mend
`},
	"fish": {script: `
mend completion fish | source
complete -C "$LINE" | string replace -r '\t.*' ''; true # string replace fails when no line has a description
`},
}

func TestCompletionInRealShells(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "mend")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	path := filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	for shell, s := range shellScripts {
		t.Run(shell, func(t *testing.T) {
			t.Parallel()
			exe, err := exec.LookPath(shell)
			missing := err != nil
			for _, f := range s.need {
				if _, err := os.Stat(f); err != nil {
					missing = true
				}
			}
			if missing {
				if os.Getenv("MEND_REQUIRE_SHELLS") == "1" {
					t.Fatalf("%s (or %v) is not installed and MEND_REQUIRE_SHELLS=1", shell, s.need)
				}
				t.Skipf("%s (or %v) is not installed", shell, s.need)
			}
			for _, c := range shellCases {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				cmd := exec.CommandContext(ctx, exe, "-c", s.script)
				// HOME: fish writes its history and config there.
				cmd.Env = append(os.Environ(), "PATH="+path, "LINE="+c.line, "HOME="+t.TempDir())
				out, err := cmd.Output()
				cancel()
				if err != nil {
					t.Errorf("%s completing %q: %v\n%s", shell, c.line, err, out)
					continue
				}
				got := strings.Fields(string(out))
				for _, w := range c.want {
					if !slices.Contains(got, w) {
						t.Errorf("%s completing %q offers %q; want %q among them", shell, c.line, got, w)
					}
				}
			}
		})
	}
}

package main

import (
	"strings"
	"testing"
)

// Issue 57: "mend stuck" does not exist; its error says where stuck-queue
// detection lives instead of only "unknown command".
func TestUnknownCommandHints(t *testing.T) {
	t.Parallel()
	code, out, errOut := mendCmd(t, "stuck")
	if code != exitUsage {
		t.Errorf("mend stuck exits %d; want %d", code, exitUsage)
	}
	for _, want := range []string{`unknown command "stuck"`, "mend run", "--stuck-every", "--stuck-bound", "mend status", "Stuck queues"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("mend stuck: stderr %q lacks %q (stdout %q)", errOut, want, out)
		}
	}
	if _, _, errOut := mendCmd(t, "no-such-command"); !strings.Contains(errOut, "run 'mend help' for the list") {
		t.Errorf("an unknown command without a hint: %q", errOut)
	}
}

func TestPlural(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 tries"}, {1, "1 try"}, {2, "2 tries"}} {
		if got := plural(tc.n, "try", "tries"); got != tc.want {
			t.Errorf("plural(%d) = %q; want %q", tc.n, got, tc.want)
		}
	}
}

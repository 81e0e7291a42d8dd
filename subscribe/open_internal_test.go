package subscribe

import (
	"errors"
	"fmt"
	"testing"
)

// TestOpenAllowed: doctor's question ("may mend's user read the open
// transactions?") is yes after a stale read as after a usable one; only a
// refusal is no, and any other error stays an error. Before, a stale read
// on a busy server made doctor warn that it could not tell.
func TestOpenAllowed(t *testing.T) {
	refusal := fmt.Errorf("%w: Error 1227", ErrOpenHidden)
	other := errors.New("connection refused")
	for _, c := range []struct {
		name string
		read error
		want error
	}{
		{"usable", nil, nil},
		{"stale", errOpenStale, nil},
		{"refused", refusal, refusal},
		{"failed", other, other},
	} {
		if got := openAllowed(c.read); got != c.want {
			t.Errorf("%s: openAllowed = %v; want %v", c.name, got, c.want)
		}
	}
}

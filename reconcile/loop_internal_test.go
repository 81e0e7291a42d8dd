package reconcile

import (
	"errors"
	"testing"
	"time"
)

func TestNextPass(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	for _, c := range []struct {
		name string
		took time.Duration
		ps   PassStats
		err  error
		want time.Duration
	}{
		{"nothing more: the rest of the interval", 3 * time.Second, PassStats{Ran: 5}, nil, 7 * time.Second},
		{"overran: at once", 12 * time.Second, PassStats{Ran: 5}, nil, 0},
		{"more due: at once", time.Second, PassStats{Ran: 5, More: 1}, nil, 0},
		{"failed pass: the rest of the interval", time.Second, PassStats{More: 1}, errors.New("list due queues"), 9 * time.Second},
	} {
		if got := nextPass(interval, c.took, c.ps, c.err); got != c.want {
			t.Errorf("%s: nextPass = %s; want %s", c.name, got, c.want)
		}
	}
}

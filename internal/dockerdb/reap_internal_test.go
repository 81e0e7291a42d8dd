package dockerdb

import (
	"errors"
	"fmt"
	"testing"

	dc "github.com/ory/dockertest/v3/docker"
)

// TestRemovalUnderWay: the engine's answer to a second removal of the same container is
// taken as another reaper's work, and no other conflict or error is.
func TestRemovalUnderWay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&dc.Error{Status: 409, Message: "removal of container 3ded56da3240 is already in progress"}, true},
		{fmt.Errorf("wrapped: %w", &dc.Error{Status: 409, Message: "removal of container x is already in progress"}), true},
		{&dc.Error{Status: 409, Message: "You cannot remove a running container"}, false},
		{&dc.Error{Status: 500, Message: "removal of container x is already in progress"}, false},
		{errors.New("removal of container x is already in progress"), false},
	} {
		if got := removalUnderWay(c.err); got != c.want {
			t.Errorf("removalUnderWay(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

package dockerdb

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// Leftover is a container or volume this package created.
type Leftover struct {
	Kind     string // "container" or "volume"
	Name     string
	OwnerPID int
}

// List returns every container and volume carrying Label, whoever owns them.
func List(ctx context.Context) ([]Leftover, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, err
	}
	filter := map[string][]string{"label": {Label}}
	cs, err := pool.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: filter, Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("dockerdb: list containers: %w", err)
	}
	var out []Leftover
	for _, c := range cs {
		pid, _ := strconv.Atoi(c.Labels[LabelOwner])
		out = append(out, Leftover{Kind: "container", Name: c.ID, OwnerPID: pid})
	}
	vs, err := pool.Client.ListVolumes(dc.ListVolumesOptions{Filters: filter, Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("dockerdb: list volumes: %w", err)
	}
	for _, v := range vs {
		pid, _ := strconv.Atoi(v.Labels[LabelOwner])
		out = append(out, Leftover{Kind: "volume", Name: v.Name, OwnerPID: pid})
	}
	return out, nil
}

// alive reports whether a process with pid exists on this machine.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Reap removes the containers and volumes whose creating process is gone: what
// a test binary killed by its timeout (or SIGKILL) could not clean up. Servers
// of live processes are left alone. It returns what it removed.
func Reap(ctx context.Context) error {
	_, err := ReapDead(ctx)
	return err
}

// ReapDead is Reap, returning what it removed.
func ReapDead(ctx context.Context) ([]Leftover, error) {
	all, err := List(ctx)
	if err != nil {
		return nil, err
	}
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, err
	}
	var removed []Leftover
	var errs []error
	// Containers first: a volume in use cannot be removed.
	for _, kind := range []string{"container", "volume"} {
		for _, l := range all {
			if l.Kind != kind || alive(l.OwnerPID) {
				continue
			}
			var err error
			if kind == "container" {
				err = reapContainer(ctx, pool, l.Name)
			} else {
				err = reapVolume(ctx, pool, l.Name)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("dockerdb: reap %s %.12s: %w", kind, l.Name, err))
				continue
			}
			removed = append(removed, l)
		}
	}
	return removed, errors.Join(errs...)
}

// Test binaries start side by side (go test runs packages in parallel), and each reaps
// at start, so two reapers often find the same leftover. The engine answers the second
// one's removal of a container with 409 "removal ... already in progress", and its
// volume stays "in use" until that removal ends. Neither is a failure of the reap: the
// other reaper finishes it, and the harness's leftover check at the end of the run
// still catches anything that really stays.

// reapContainer removes a leftover container; one gone already or being removed by
// another reaper counts as removed.
func reapContainer(ctx context.Context, pool *dockertest.Pool, id string) error {
	_ = pool.Client.UnpauseContainer(id)
	err := pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: id, Force: true, RemoveVolumes: true, Context: ctx})
	if err == nil || removalUnderWay(err) {
		return nil
	}
	var nsc *dc.NoSuchContainer
	if errors.As(err, &nsc) {
		return nil
	}
	return err
}

// volumeFreeWithin bounds how long a reaper waits for another's container removal to
// release a volume. Removing a stopped test container takes well under a second; the
// bound only keeps a wedged engine from hanging the start of a test binary.
const volumeFreeWithin = 30 * time.Second

// reapVolume removes a leftover volume, waiting while a container that another reaper
// is removing still holds it.
func reapVolume(ctx context.Context, pool *dockertest.Pool, name string) error {
	deadline := time.Now().Add(volumeFreeWithin)
	for {
		err := pool.Client.RemoveVolumeWithOptions(dc.RemoveVolumeOptions{Name: name, Force: true, Context: ctx})
		if err == nil || errors.Is(err, dc.ErrNoSuchVolume) {
			return nil
		}
		if !errors.Is(err, dc.ErrVolumeInUse) || time.Now().After(deadline) {
			return err
		}
		// Polling an outside engine for a state change it has no event for here.
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// removalUnderWay reports the engine's answer to removing a container that another
// client is removing already.
func removalUnderWay(err error) bool {
	var de *dc.Error
	return errors.As(err, &de) && de.Status == http.StatusConflict && strings.Contains(de.Message, "already in progress")
}

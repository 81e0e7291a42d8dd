package dockerdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"

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
				_ = pool.Client.UnpauseContainer(l.Name)
				err = pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: l.Name, Force: true, RemoveVolumes: true, Context: ctx})
				var nsc *dc.NoSuchContainer
				if errors.As(err, &nsc) {
					err = nil
				}
			} else {
				err = pool.Client.RemoveVolumeWithOptions(dc.RemoveVolumeOptions{Name: l.Name, Force: true, Context: ctx})
				if errors.Is(err, dc.ErrNoSuchVolume) {
					err = nil
				}
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

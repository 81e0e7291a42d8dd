package dockerdb

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/mendq/mend/internal/localdb"
)

// Labels put on every container and volume this package creates. LabelOwner
// holds the creating process's pid, so Reap can tell leftovers of a process
// that died (a test binary killed by its timeout) from servers in use.
const (
	Label      = "mend.testserver"
	LabelOwner = "mend.testserver.owner-pid"
)

// Timeouts. Generous because shared machines and the race detector are slow;
// polling returns as soon as the server answers.
const (
	readyTimeout = 5 * time.Minute // InnoDB alone took 45 s to initialise beside a CPU hog (issue 28)
	stopTimeout  = 30 * time.Second
	pingTimeout  = 2 * time.Second
)

// dataDir is where the server's data lives inside the container: a volume, so
// a killed container restarts on the same data, off the engine's (slow,
// fuse-overlayfs here) container layer.
const dataDir = "/var/lib/mend-mysql"

// ErrNotRunning is returned by the fault methods when the container is not running.
var ErrNotRunning = errors.New("dockerdb: server container is not running")

// Ping reports whether a Docker engine answers within a couple of seconds.
func Ping(ctx context.Context) error {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return pool.Client.PingWithContext(ctx)
}

// HasImage reports whether the engine holds image locally.
func HasImage(image string) (bool, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return false, err
	}
	_, err = pool.Client.InspectImage(image)
	if errors.Is(err, dc.ErrNoSuchImage) {
		return false, nil
	}
	return err == nil, err
}

// Pull fetches image from its registry.
func Pull(ctx context.Context, image string) error {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return err
	}
	repo, tag := SplitImage(image)
	return pool.Client.PullImage(dc.PullImageOptions{Repository: repo, Tag: tag, Context: ctx}, dc.AuthConfiguration{})
}

// SplitImage splits "repo[:tag]" (the registry host may contain a colon), defaulting to "latest".
func SplitImage(image string) (repo, tag string) {
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		return image[:colon], image[colon+1:]
	}
	return image, "latest"
}

// Server is a MySQL or MariaDB server in a container of its own, published on
// 127.0.0.1 only, with its data on a volume of its own. Its fault methods
// mirror a local process's: Kill is `docker kill` (SIGKILL to the server,
// which is the container's first process), Pause and Resume are `docker
// pause`/`unpause` (the cgroup freezer: connections stay open, nothing is
// answered), Restart starts the same container again on the same volume and
// the same host port.
type Server struct {
	// Image is the image the container runs; Flavor is "mariadb" or "mysql".
	Image, Flavor string

	pool   *dockertest.Pool
	id     string // container ID
	volume string
	cfg    *mysql.Config

	mu         sync.Mutex
	expectExit atomic.Bool // set before a kill or stop the caller asked for
	closed     bool
}

// Start runs image with the server settings a private local server uses
// (localdb.ServerFlags), its port published on a free 127.0.0.1 port, and
// waits until it answers (at most two minutes, less if ctx ends sooner). On
// failure nothing is left behind and the error carries the container's log.
func Start(ctx context.Context, image string) (*Server, error) {
	return StartWith(ctx, image, Options{})
}

// Options adds to what Start gives every server.
type Options struct {
	// Args are extra server options, after the usual ones
	// ("--ssl-ca=/certs/ca.pem").
	Args []string
	// Binds are host directories mounted into the container, in docker's
	// "host-path:container-path[:ro]" form.
	Binds []string
}

// StartWith is Start with extra server options and mounted directories.
func StartWith(ctx context.Context, image string, o Options) (_ *Server, err error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("dockerdb: %w", err)
	}
	repo, tag := SplitImage(image)
	s := &Server{Image: image, Flavor: flavorOf(repo), pool: pool}
	labels := map[string]string{Label: "1", LabelOwner: strconv.Itoa(os.Getpid())}

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "mend-testserver-" + hex.EncodeToString(rnd[:])
	vol, err := pool.Client.CreateVolume(dc.CreateVolumeOptions{Name: name, Labels: labels, Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("dockerdb: create volume: %w", err)
	}
	s.volume = vol.Name
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()

	// The images built here keep their data in dataDir; the official mysql and
	// mariadb images in /var/lib/mysql, and read settings given after the server name.
	target := dataDir
	if !strings.HasPrefix(repo, "mend-test/") {
		target = "/var/lib/mysql"
	}
	cmd := []string{}
	for _, f := range localdb.ServerFlags(s.Flavor) {
		if !strings.HasPrefix(f, "--bind-address") { // inside the container it listens on all interfaces
			cmd = append(cmd, f)
		}
	}
	cmd = append(cmd, o.Args...)
	const attempts = 3 // the free port may be taken between the probe and the bind
	for attempt := 1; ; attempt++ {
		port, perr := freePort()
		if perr != nil {
			return nil, perr
		}
		res, rerr := pool.RunWithOptions(&dockertest.RunOptions{
			Name:         name,
			Repository:   repo,
			Tag:          tag,
			Env:          []string{"MYSQL_ALLOW_EMPTY_PASSWORD=yes", "MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=yes"},
			Cmd:          cmd,
			Mounts:       append([]string{s.volume + ":" + target}, o.Binds...),
			ExposedPorts: []string{"3306/tcp"},
			PortBindings: map[dc.Port][]dc.PortBinding{"3306/tcp": {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}}},
			Labels:       labels,
		}, func(hc *dc.HostConfig) {
			hc.AutoRemove = false // a killed container must stay, to be started again
			hc.PublishAllPorts = false
			hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
		})
		if rerr == nil {
			s.id = res.Container.ID
			s.cfg = rootConfig("127.0.0.1:" + strconv.Itoa(port))
			break
		}
		// A failed start may leave a created container under our name.
		_ = pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: name, Force: true})
		if attempt == attempts || !strings.Contains(rerr.Error(), "address already in use") {
			return nil, fmt.Errorf("dockerdb: run %s: %w", image, rerr)
		}
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func flavorOf(repo string) string {
	if strings.Contains(strings.ToLower(repo), "mariadb") {
		return "mariadb"
	}
	return "mysql"
}

func rootConfig(addr string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", addr
	cfg.ParseTime, cfg.Loc, cfg.InterpolateParams = true, time.UTC, true
	return cfg
}

// Addr returns the server's address on the host, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.cfg.Addr }

// Config returns the driver config of the passwordless root user over TCP.
func (s *Server) Config() *mysql.Config { return s.cfg.Clone() }

// ID returns the container's ID.
func (s *Server) ID() string { return s.id }

// waitReady polls until the server answers, the container exits, or ctx ends.
// The official images start a temporary server while they initialise, so a
// first answer may come from it; a ping is retried until the final one is up.
func (s *Server) waitReady(ctx context.Context) error {
	for {
		last := localdb.Ping(ctx, s.cfg, time.Second)
		if last == nil {
			return nil
		}
		if !s.Running() {
			return fmt.Errorf("dockerdb: %s exited before it was ready (last ping: %v)\n%s", s.Image, last, s.logTail())
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("dockerdb: %s not ready: %w (last ping: %v)\n%s", s.Image, context.Cause(ctx), last, s.logTail())
		case <-t.C:
		}
	}
}

// state inspects the container: running, paused.
func (s *Server) state() (running, paused bool, err error) {
	c, err := s.pool.Client.InspectContainer(s.id)
	if err != nil {
		return false, false, err
	}
	return c.State.Running, c.State.Paused, nil
}

// Running reports whether the container is running (it may be paused).
func (s *Server) Running() bool {
	running, _, err := s.state()
	return err == nil && running
}

// Kill sends SIGKILL to the server (the container's first process) and waits
// until the container has stopped. The volume is kept, so Restart brings the
// server back with every acknowledged commit. Returns ErrNotRunning if the
// container is not running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.Running() {
		return ErrNotRunning
	}
	s.expectExit.Store(true)
	if err := s.pool.Client.KillContainer(dc.KillContainerOptions{ID: s.id, Signal: dc.SIGKILL}); err != nil {
		return fmt.Errorf("dockerdb: kill: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if _, err := s.pool.Client.WaitContainerWithContext(s.id, ctx); err != nil {
		return fmt.Errorf("dockerdb: wait for killed container: %w", err)
	}
	return nil
}

// Pause freezes the container (docker pause). It returns once the engine
// reports it paused. Returns ErrNotRunning if the container is not running.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.Running() {
		return ErrNotRunning
	}
	// The cgroup freezer gives up ("unable to freeze") when a task of the
	// container does not stop in time, which a loaded machine's I/O makes
	// happen now and then; the freeze is tried again a few times, as an
	// operator would, before the fault test is failed for the machine.
	var err error
	for attempt := range 5 {
		if err = s.pool.Client.PauseContainer(s.id); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond) // a retry's pause, not a synchronisation
	}
	if err != nil {
		return fmt.Errorf("dockerdb: pause: %w", err)
	}
	return nil
}

// Resume thaws a paused container (docker unpause). Returns ErrNotRunning if
// the container is not running.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.Running() {
		return ErrNotRunning
	}
	if err := s.pool.Client.UnpauseContainer(s.id); err != nil {
		return fmt.Errorf("dockerdb: unpause: %w", err)
	}
	return nil
}

// Restart starts the container again on the same volume and host port and
// waits until the server answers. A container still running is first stopped
// gracefully (SIGTERM, SIGKILL after a timeout).
func (s *Server) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if running, paused, err := s.state(); err == nil && running {
		if paused {
			_ = s.pool.Client.UnpauseContainer(s.id)
		}
		s.expectExit.Store(true)
		if err := s.pool.Client.StopContainerWithContext(s.id, uint(stopTimeout/time.Second), ctx); err != nil {
			return fmt.Errorf("dockerdb: stop before restart: %w", err)
		}
	}
	s.expectExit.Store(false)
	if err := s.pool.Client.StartContainerWithContext(s.id, nil, ctx); err != nil {
		return fmt.Errorf("dockerdb: start: %w", err)
	}
	return s.waitReady(ctx)
}

// Crash returns an error describing an exit of the container the caller did
// not cause, with the tail of its log, or nil if there was none.
func (s *Server) Crash() error {
	if s.expectExit.Load() {
		return nil
	}
	c, err := s.pool.Client.InspectContainer(s.id)
	if err != nil || c.State.Running {
		return nil
	}
	return fmt.Errorf("dockerdb: container %.12s exited unexpectedly (code %d)\n%s", s.id, c.State.ExitCode, s.logTail())
}

// Close removes the container and its volume. It is safe to call more than
// once; later calls do nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.id != "" {
		errs = append(errs, s.Crash())
		s.expectExit.Store(true)
		// Unpause first: some engines refuse to remove a paused container.
		_ = s.pool.Client.UnpauseContainer(s.id)
		if err := s.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: s.id, Force: true, RemoveVolumes: true}); err != nil {
			var nsc *dc.NoSuchContainer
			if !errors.As(err, &nsc) {
				errs = append(errs, fmt.Errorf("dockerdb: remove container: %w", err))
			}
		}
	}
	if s.volume != "" {
		if err := s.pool.Client.RemoveVolumeWithOptions(dc.RemoveVolumeOptions{Name: s.volume, Force: true}); err != nil && !errors.Is(err, dc.ErrNoSuchVolume) {
			errs = append(errs, fmt.Errorf("dockerdb: remove volume: %w", err))
		}
	}
	return errors.Join(errs...)
}

// logTail returns the end of the container's output, for error messages.
func (s *Server) logTail() string {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.pool.Client.Logs(dc.LogsOptions{Context: ctx, Container: s.id, OutputStream: &out, ErrorStream: &out,
		Stdout: true, Stderr: true, Tail: "40"})
	if err != nil {
		return fmt.Sprintf("(no container log: %v)", err)
	}
	return "--- container log (tail) ---\n" + out.String()
}

// freePort asks the kernel for an unused port on 127.0.0.1. The container's
// port is bound to it explicitly (not left to the engine) so that a restarted
// container keeps its address.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("dockerdb: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

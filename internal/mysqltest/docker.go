package mysqltest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/mendq/mend/internal/localdb"
)

// readyTimeout bounds the container's start and initialisation, which are slow on shared CI
// machines; the polling returns as soon as the server answers.
const readyTimeout = 2 * time.Minute

// dockerExpiry is a safety net: the engine removes the container after this long even if the
// test binary dies before Close.
const dockerExpiry = 30 * 60 // seconds

// startDocker runs image (MySQL or MariaDB) with the same settings as a private server (localdb.ServerFlags), its port
// published on 127.0.0.1 only, and waits until it answers.
func startDocker(ctx context.Context, image string) (_ *Server, err error) {
	begin := time.Now()
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("mysqltest: docker: %w", err)
	}
	pool.MaxWait = readyTimeout
	repo, tag := splitImage(image)
	flavor := "mysql"
	if strings.Contains(strings.ToLower(repo), "mariadb") {
		flavor = "mariadb"
	}
	cmd := []string{}
	for _, f := range localdb.ServerFlags() {
		if !strings.HasPrefix(f, "--bind-address") { // inside the container it must listen on all interfaces
			cmd = append(cmd, f)
		}
	}
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: repo,
		Tag:        tag,
		Env: []string{
			"MYSQL_ALLOW_EMPTY_PASSWORD=yes",
			"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=yes",
		},
		Cmd:          cmd,
		ExposedPorts: []string{"3306/tcp"},
		PortBindings: map[dc.Port][]dc.PortBinding{"3306/tcp": {{HostIP: "127.0.0.1", HostPort: ""}}},
		Labels:       map[string]string{"mend.mysqltest": "1"},
	}, func(hc *dc.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return nil, fmt.Errorf("mysqltest: docker run %s: %w", image, err)
	}
	defer func() {
		if err != nil {
			_ = pool.Purge(res)
		}
	}()
	if err := res.Expire(dockerExpiry); err != nil {
		return nil, fmt.Errorf("mysqltest: docker expire: %w", err)
	}
	addr := res.GetHostPort("3306/tcp")
	if addr == "" {
		return nil, fmt.Errorf("mysqltest: docker: no published port for %s", image)
	}
	addr = strings.Replace(addr, "localhost:", "127.0.0.1:", 1)
	cfg := rootConfig(addr)
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// The entrypoint starts a temporary server during initialisation and restarts it, so poll
	// until the final one answers.
	if err := localdb.WaitReady(ctx, cfg); err != nil {
		return nil, fmt.Errorf("mysqltest: docker %s: %w", image, err)
	}
	return &Server{
		kind: sourceDocker, flavor: flavor, cfg: cfg, startedIn: time.Since(begin),
		closeFn: func() error {
			if err := pool.Purge(res); err != nil {
				return fmt.Errorf("mysqltest: docker purge: %w", err)
			}
			return nil
		},
	}, nil
}

// splitImage splits "repo[:tag]" (the registry host may contain a colon), defaulting to "latest".
func splitImage(image string) (repo, tag string) {
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		return image[:colon], image[colon+1:]
	}
	return image, "latest"
}

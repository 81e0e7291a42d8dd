package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/mendq/mend/internal/testserver"
)

// startDemoServer gets the demo its throwaway server through the same
// discovery as the tests' private servers: a container when a Docker engine
// has an image of the engine (MySQL by default: mysql:8.4, or the image
// scripts/build-test-image.sh builds; MEND_TEST_ENGINE=mariadb for MariaDB),
// else a local server process; MEND_TEST_BACKEND, MEND_TEST_ENGINE and
// MEND_TEST_IMAGE steer it as they steer the tests.
func startDemoServer(ctx context.Context, a *app) (*testserver.Server, error) {
	p := testserver.SystemProbes()
	p.Getenv = a.getenv
	c := testserver.DiscoverPrivate(p)
	if c.Note != "" {
		fmt.Fprintf(a.stderr, "mend demo: %s\n", c.Note)
	}
	if c.Backend == testserver.BackendNone {
		return nil, errors.New("no MySQL-compatible server for the demo: pass --dsn user:pass@tcp(host:port)/ of a server it may create a database on, " +
			"start a Docker engine (make demo builds a MySQL or MariaDB image when it has no registry), or install mariadb-server " +
			"(make demo does that when run as root on Debian/Ubuntu)")
	}
	what := "a Docker container of " + c.Image
	if c.Backend == testserver.BackendLocal {
		what = "a private server from " + c.Binary
	}
	fmt.Fprintf(a.stdout, "Starting %s (it is stopped and removed at the end) ...\n\n", what)
	srv, err := testserver.Start(ctx, c)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(a.stdout, "The server is %s (MEND_TEST_ENGINE=mysql|mariadb picks the engine).\n\n", srv.Engine())
	return srv, nil
}

// stopDemoServer removes the throwaway server and says so.
func stopDemoServer(a *app, srv *testserver.Server) {
	if err := srv.Close(); err != nil {
		fmt.Fprintf(a.stderr, "mend demo: %v\n", err)
		return
	}
	switch srv.Backend() {
	case testserver.BackendDocker:
		fmt.Fprintf(a.stdout, "Removed the container %.12s and its volume.\n", srv.ContainerID())
	default:
		fmt.Fprintf(a.stdout, "Stopped the private server and removed %s.\n", srv.Dir())
	}
}

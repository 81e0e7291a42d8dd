package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/doctor"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// EnvTestImage turns TestImage on: it builds the container image (a
// minute or more of compiling on a cold cache), so only the CI job for it
// and a developer asking for it run it.
const EnvTestImage = "MEND_TEST_MEND_IMAGE"

// TestImage builds the container image with scripts/image.sh (what make
// image runs) under a tag of its own, and runs it as an operator would:
// read-only root file system, the image's own non-root user, on the host's
// network so the test server's 127.0.0.1 port is reachable and no traffic
// leaves loopback. mend version shows the baked-in version; mend doctor
// connects and checks the server.
func TestImage(t *testing.T) {
	if v, _ := strconv.ParseBool(os.Getenv(EnvTestImage)); !v {
		t.Skip(EnvTestImage + "=1 builds and tests the container image (needs a Docker engine)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Fatalf("%s=1 but there is no docker command: %v", EnvTestImage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tag := "mend-imagetest:" + strconv.Itoa(os.Getpid())
	const version = "v0.0.0-imagetest"
	build := exec.CommandContext(ctx, "bash", filepath.Join("..", "..", "scripts", "image.sh"))
	const revision = "0123456789abcdef0123456789abcdef01234567"
	build.Env = append(os.Environ(), "IMAGE="+tag, "VERSION="+version, "REVISION="+revision, "GOFLAGS=-mod=readonly -buildvcs=false")
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", "-f", tag).Run() })
	t.Logf("%s", strings.TrimSpace(string(out)))

	docker := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		return string(out), err
	}
	user, err := docker("image", "inspect", "-f", "{{.Config.User}}", tag)
	if err != nil || strings.TrimSpace(user) != "65532:65532" {
		t.Fatalf("image user = %q (%v); want 65532:65532, not root", user, err)
	}
	run := func(args ...string) (string, error) {
		return docker(append([]string{"run", "--rm", "--read-only", "--network", "host", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges", tag}, args...)...)
	}
	got, err := run("version")
	if err != nil || !strings.Contains(got, "mend "+version+", revision "+revision) {
		t.Fatalf("mend version in the image: %q (%v); want the baked-in %s and revision %s (issue 47: -buildvcs=false left it unknown)", got, err, version, revision)
	}
	db := mysqltest.NewDB(t, migrations.Up)
	got, _ = run("doctor", "--json", "--dsn", db.DSN) // exit 1 on any problem; the report is what counts
	var report struct {
		Checks []doctor.Check
	}
	if err := json.Unmarshal([]byte(got), &report); err != nil {
		t.Fatalf("doctor in the image: not JSON (%v):\n%s", err, got)
	}
	seen := map[string]doctor.Check{}
	for _, c := range report.Checks {
		seen[c.Name] = c
	}
	if c, ok := seen["connect"]; ok && c.Status == doctor.Fail {
		t.Fatalf("doctor in the image could not connect: %+v", c)
	}
	if seen["server"].Status != doctor.OK || seen["schema"].Status != doctor.OK {
		t.Fatalf("doctor in the image: server %+v, schema %+v; want both ok (the database is migrated)", seen["server"], seen["schema"])
	}
}

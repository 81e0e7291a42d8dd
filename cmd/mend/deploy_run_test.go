package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	corev1 "k8s.io/api/core/v1"

	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/internal/tlstest"
)

// kubelet runs a pod's containers with Docker as a kubelet would run them
// from the manifests: the pod's user and group, fsGroup as a supplementary
// group, each Secret volume projected into a directory laid out as the
// kubelet's atomic writer lays it out (a timestamped directory, ..data, a
// symlink per key) with its ownership and modes, a read-only root, the
// capabilities dropped, no privilege escalation, the memory limit, the
// env (fieldRef metadata.name is the pod's name) and args. Host network
// (the test server is on 127.0.0.1); the server's certificate name
// resolves to it through --add-host, as DNS would in a cluster.
type kubelet struct {
	t       *testing.T
	images  map[string]string            // the manifests' image -> the local tag a node has for it
	dir     string                       // secret volumes are projected under it
	secrets map[string]map[string]string // Secret name -> key -> content
	hosts   []string                     // --add-host entries
	env     map[string]string            // added to every container (the test server's private CA)
}

// project writes Secret name as the kubelet would for a pod with fsGroup
// (nil: none) and the volume's defaultMode, and returns the directory.
func (k *kubelet) project(pod string, v corev1.Volume, fsGroup *int64) string {
	t := k.t
	data, ok := k.secrets[v.Secret.SecretName]
	if !ok {
		t.Fatalf("pod %s mounts secret %s, which the test did not create", pod, v.Secret.SecretName)
	}
	mode := os.FileMode(0o644)
	if v.Secret.DefaultMode != nil {
		mode = os.FileMode(*v.Secret.DefaultMode)
	}
	gid := 0
	if fsGroup != nil {
		gid = int(*fsGroup)
		mode |= 0o440 // the kubelet's SetVolumeOwnership for a read-only volume
	}
	root := filepath.Join(k.dir, pod, v.Name)
	ts := "..2026_01_01_00_00_00.000000001"
	if err := os.MkdirAll(filepath.Join(root, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for key, content := range data {
		p := filepath.Join(root, ts, key)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(root, key)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{root, filepath.Join(root, ts)} {
		if err := os.Chown(d, 0, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ts, filepath.Join(root, "..data")); err != nil {
		t.Fatal(err)
	}
	return root
}

// args are docker run's arguments for container c of pod spec, named pod.
func (k *kubelet) args(pod string, spec corev1.PodSpec, c corev1.Container, extra ...string) []string {
	t := k.t
	a := []string{"--name", pod, "--network", "host"}
	for _, h := range k.hosts {
		a = append(a, "--add-host", h)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsUser == nil {
		t.Fatalf("pod %s: no runAsUser", pod)
	}
	uid, gid := *psc.RunAsUser, int64(0)
	if psc.RunAsGroup != nil {
		gid = *psc.RunAsGroup
	}
	if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	a = append(a, "--user", fmt.Sprintf("%d:%d", uid, gid))
	if psc.FSGroup != nil {
		a = append(a, "--group-add", strconv.FormatInt(*psc.FSGroup, 10))
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			a = append(a, "--read-only")
		}
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			a = append(a, "--security-opt", "no-new-privileges")
		}
		if sc.Capabilities != nil {
			for _, d := range sc.Capabilities.Drop {
				a = append(a, "--cap-drop", string(d))
			}
			for _, d := range sc.Capabilities.Add {
				a = append(a, "--cap-add", string(d))
			}
		}
	}
	if m := c.Resources.Limits.Memory(); !m.IsZero() {
		a = append(a, "--memory", strconv.FormatInt(m.Value(), 10))
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Fatalf("pod %s: env %s: only fieldRef metadata.name is simulated", pod, e.Name)
			}
			v = pod
		}
		a = append(a, "-e", e.Name+"="+v)
	}
	for name, v := range k.env {
		a = append(a, "-e", name+"="+v)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok || v.Secret == nil {
			t.Fatalf("pod %s: mount %s is not a secret volume; only those are simulated", pod, vm.Name)
		}
		opt := ""
		if vm.ReadOnly {
			opt = ":ro"
		}
		a = append(a, "-v", k.project(pod, v, psc.FSGroup)+":"+vm.MountPath+opt)
	}
	if len(c.Command) > 0 {
		t.Fatalf("pod %s: command is not simulated (the image's entrypoint is /mend)", pod)
	}
	image, ok := k.images[c.Image]
	if !ok {
		t.Fatalf("pod %s: image %q is on no node (the test tagged %v)", pod, c.Image, k.images)
	}
	a = append(a, image)
	return append(append(a, c.Args...), extra...)
}

func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return string(out), err
}

// tlsDB opens database name on srv as root over verified TLS.
func tlsDB(t *testing.T, srv *tlstest.Server, name string) *sql.DB {
	t.Helper()
	pem, err := os.ReadFile(srv.PKI.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cfg := srv.Config()
	cfg.DBName = name
	cfg.TLS = &tls.Config{RootCAs: roots, ServerName: tlstest.ServerName, MinVersion: tls.VersionTLS12}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// until polls cond every interval until it holds or d passes (the way a
// kubelet probes: at a period, with a failure threshold).
func until(d, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// TestManifestsRun runs deploy/kubernetes as a kubelet would, with Docker
// and the image make image builds, against a test server that accepts only
// verified TLS (tlstest) with the real queue's tables (sqtest) and the
// least-privilege users of docs/operations.md: the migrate Job first, as
// the DDL user from its own Secret; then both Deployment replicas until
// /readyz answers; a dead letter moved to the DLQ on the queue database is
// recorded, repaired and the next batch woken (the subscription is on in
// the shipped configuration); the CronJob's run --once exits 0 with the
// subscription on. Then a rollout to the next release, rendered as the docs
// say (the image tag and the migrate Job's name changed; the same image
// tagged again on the node): that release's migrate Job, under its own
// name, to exit 0; the replicas rolled one at a time (the old one stopped
// with SIGTERM, exit 0; the new one ready); a dead letter recorded and
// woken by the new replicas; SIGTERM stops them with exit 0. Its controls
// show it fails on the two blockers: manifests without fsGroup
// (permission denied on the Secret's files) and a binary whose
// MEND_QUEUE_DSN_FILE does not count as --queue-dsn given (the
// subscription off: no "subscribing" line from the CronJob). What it does
// not cover: docs/operations.md.
func TestManifestsRun(t *testing.T) {
	if v, _ := strconv.ParseBool(os.Getenv(EnvTestImage)); !v {
		t.Skip(EnvTestImage + "=1 builds the image and runs the manifests' containers (needs a Docker engine)")
	}
	files, user := readManifests(t)
	m, err := loadManifests(files)
	if err != nil {
		t.Fatal(err)
	}
	m.imageUser = user
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	srv := tlstest.Start(t, tlstest.NewPKI(t))
	const ddlPW, runPW = "k8s-ddl-pw", "k8s-run-pw"
	srv.Admin(t,
		"CREATE DATABASE mend", "CREATE DATABASE submitqueue", "CREATE DATABASE queue",
		"CREATE USER 'mend_ddl'@'%' IDENTIFIED BY '"+ddlPW+"'",
		"GRANT CREATE, ALTER, DROP, INDEX, CREATE VIEW, SHOW VIEW, SELECT, INSERT, UPDATE, DELETE ON mend.* TO 'mend_ddl'@'%'",
		"CREATE USER 'mend'@'%' IDENTIFIED BY '"+runPW+"'",
	)
	app, queue := tlsDB(t, srv, "submitqueue"), tlsDB(t, srv, "queue")
	if err := sqtest.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	if err := sqtest.CreateQueue(ctx, queue); err != nil {
		t.Fatal(err)
	}
	srv.Admin(t, // step 1 of the grants
		"GRANT SELECT, UPDATE ON submitqueue.batch TO 'mend'@'%'",
		"GRANT SELECT, INSERT, DELETE ON submitqueue.queue_batch_state TO 'mend'@'%'",
		"GRANT SELECT, UPDATE ON submitqueue.request TO 'mend'@'%'",
		"GRANT SELECT ON submitqueue.build TO 'mend'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON queue.queue_messages TO 'mend'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON queue.queue_offsets TO 'mend'@'%'",
	)
	_, port, _ := net.SplitHostPort(srv.Addr())
	addr := tlstest.ServerName + ":" + port
	dsn := func(user, pw, db string) string { return fmt.Sprintf("%s:%s@tcp(%s)/%s?tls=true", user, pw, addr, db) }
	ca, err := os.ReadFile(srv.PKI.CA)
	if err != nil {
		t.Fatal(err)
	}
	const mount = "/var/run/secrets/mend"
	tag := "mend-k8stest:" + strconv.Itoa(os.Getpid())
	nextTag := tag + "-next" // the same image, tagged again: the next release on the node
	release := imageTag(m.job.Spec.Template.Spec.Containers[0].Image)
	nextRelease := release + "-next"
	k := &kubelet{t: t, images: map[string]string{"mend:" + release: tag, "mend:" + nextRelease: nextTag},
		dir: t.TempDir(), hosts: []string{tlstest.ServerName + ":127.0.0.1"},
		secrets: map[string]map[string]string{
			"mend-db": {"dsn": dsn("mend", runPW, "mend"), "host-dsn": dsn("mend", runPW, "submitqueue"),
				"queue-dsn": dsn("mend", runPW, "queue"), "ca.pem": string(ca)},
			"mend-db-migrate": {"dsn": dsn("mend_ddl", ddlPW, "mend"), "ca.pem": string(ca)},
		},
		// The test server's CA is private: each DSN gets it as an operator
		// would add it (the shipped DSNs say tls=true, the image's roots).
		env: map[string]string{"MEND_DSN_TLS_CA": mount + "/ca.pem", "MEND_HOST_DSN_TLS_CA": mount + "/ca.pem",
			"MEND_QUEUE_DSN_TLS_CA": mount + "/ca.pem"},
	}
	if err := os.Chmod(k.dir, 0o755); err != nil {
		t.Fatal(err)
	}

	build := exec.CommandContext(ctx, "bash", filepath.Join("..", "..", "scripts", "image.sh"))
	build.Env = append(os.Environ(), "IMAGE="+tag, "VERSION=v0.0.0-k8stest")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = docker(context.Background(), "image", "rm", "-f", tag, nextTag) })
	if out, err := docker(ctx, "tag", tag, nextTag); err != nil {
		t.Fatalf("docker tag %s %s: %v\n%s", tag, nextTag, err, out)
	}
	prefix := fmt.Sprintf("mend-k8stest-%d-", os.Getpid())
	var started []string
	t.Cleanup(func() {
		for _, name := range started {
			_, _ = docker(context.Background(), "rm", "-f", name)
		}
	})
	// runToEnd runs a Job's container to its end (or ctx's) and returns
	// its exit code and output. The container is named after the pod, so a
	// second Job of the same name fails as the API server would refuse it.
	runToEnd := func(ctx context.Context, t *testing.T, k *kubelet, pod string, spec corev1.PodSpec, c corev1.Container, extra ...string) (int, string) {
		t.Helper()
		started = append(started, prefix+pod)
		out, err := docker(ctx, append([]string{"run"}, k.args(prefix+pod, spec, c, extra...)...)...)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("docker run %s: %v\n%s", pod, err, out)
		}
		return code, out
	}

	// 1. The migrate Job, to completion, before any replica.
	job := m.job.Spec.Template.Spec
	if code, out := runToEnd(ctx, t, k, m.job.Name, job, job.Containers[0]); code != 0 {
		t.Fatalf("migrate Job: exit %d\n%s", code, out)
	}
	srv.Admin(t, // step 3: the runtime user's grants on the tables the migration made
		"GRANT SELECT, INSERT, UPDATE, DELETE ON mend.mend_records TO 'mend'@'%'",
		"GRANT SELECT, INSERT, DELETE ON mend.mend_events TO 'mend'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON mend.mend_leases TO 'mend'@'%'",
		"GRANT SELECT, INSERT, UPDATE ON mend.mend_lease_history TO 'mend'@'%'",
		"GRANT SELECT ON mend.mend_schema_migrations TO 'mend'@'%'",
	)

	// The stuck queue of the original bug: batch 1 speculating, its
	// speculate message about to fail for good, batch 2 waiting.
	w := sqtest.World{App: app, Queue: queue}
	for _, seed := range []func() error{
		func() error { return w.SeedBatch(ctx, "q", "q/batch/1", "speculating", "q/1") },
		func() error { return w.SeedBatch(ctx, "q", "q/batch/2", "created", "q/2") },
		func() error {
			return w.Publish(ctx, "speculate", "q", "q/batch/1", []byte(`{"id":"q/batch/1","queue":"q"}`), nil)
		},
		func() error { return w.Join(ctx, "orchestrator", "speculate", "q") },
		// The same for queue r, whose dead letter comes after the rollout.
		func() error { return w.SeedBatch(ctx, "r", "r/batch/1", "speculating", "r/1") },
		func() error { return w.SeedBatch(ctx, "r", "r/batch/2", "created", "r/2") },
		func() error {
			return w.Publish(ctx, "speculate", "r", "r/batch/1", []byte(`{"id":"r/batch/1","queue":"r"}`), nil)
		},
		func() error { return w.Join(ctx, "orchestrator", "speculate", "r") },
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}

	// 2. The Deployment's replicas. On the host network both cannot listen
	// on :9464, so each gets its own loopback port after the manifest's
	// args (the last --metrics-addr wins); the probes follow it.
	d := m.deployment.Spec.Template.Spec
	if m.deployment.Spec.Replicas == nil {
		t.Fatal("deployment: no replicas")
	}
	logs := func(name string) string { out, _ := docker(context.Background(), "logs", name); return out }
	get := func(url string) int {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // the probe's timeoutSeconds
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// startReady starts a replica of spec as pod name and waits for its
	// readiness probe, then asks its liveness probe once.
	startReady := func(name string, spec corev1.PodSpec) {
		t.Helper()
		c := spec.Containers[0]
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		probe := l.Addr().String()
		_ = l.Close()
		started = append(started, name)
		if out, err := docker(ctx, append([]string{"run", "-d"}, k.args(name, spec, c, "--metrics-addr="+probe)...)...); err != nil {
			t.Fatalf("docker run replica %s: %v\n%s", name, err, out)
		}
		path := c.ReadinessProbe.HTTPGet.Path
		if !until(90*time.Second, time.Duration(c.ReadinessProbe.PeriodSeconds)*time.Second/5, func() bool { return get("http://"+probe+path) == http.StatusOK }) {
			t.Fatalf("replica %s never ready on %s:\n%s", name, path, logs(name))
		}
		if code := get("http://" + probe + c.LivenessProbe.HTTPGet.Path); code != http.StatusOK {
			t.Fatalf("replica %s: %s = %d", name, c.LivenessProbe.HTTPGet.Path, code)
		}
	}
	// stop is docker stop with the pod's grace period (SIGTERM, then
	// SIGKILL); the replica must exit 0.
	grace := strconv.FormatInt(*m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds, 10)
	stop := func(name string) {
		t.Helper()
		if out, err := docker(ctx, "stop", "-t", grace, name); err != nil {
			t.Fatalf("docker stop %s: %v\n%s", name, err, out)
		}
		code, err := docker(ctx, "inspect", "-f", "{{.State.ExitCode}}", name)
		if err != nil || strings.TrimSpace(code) != "0" {
			t.Fatalf("%s after SIGTERM: exit %s (%v)\n%s", name, strings.TrimSpace(code), err, logs(name))
		}
	}
	var replicas []string
	for i := 0; i < int(*m.deployment.Spec.Replicas); i++ {
		name := prefix + "mend-" + release + "-" + strconv.Itoa(i)
		startReady(name, d)
		replicas = append(replicas, name)
	}

	// 3. A dead letter on the queue database is recorded, repaired, and
	// the next batch woken.
	if err := w.MoveToDLQ(ctx, "speculate", "q", "q/batch/1", sqtest.Failure{Count: 3, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
	mendDB := tlsDB(t, srv, "mend")
	var state string
	if !until(3*time.Minute, 500*time.Millisecond, func() bool {
		_ = mendDB.QueryRowContext(ctx, "SELECT state FROM mend_records WHERE message_id = 'q/batch/1'").Scan(&state)
		return state == "done"
	}) {
		t.Fatalf("the dead letter's record is %q after 3 minutes; want done\n%s\n%s", state, logs(replicas[0]), logs(replicas[1]))
	}
	wakes, err := w.ConsumeSpeculate(ctx, "q", true)
	if err != nil || len(wakes) != 1 || wakes[0].Batch.ID != "q/batch/2" {
		t.Fatalf("speculate = %+v, %v; want one wake-up naming q/batch/2", wakes, err)
	}

	// 4. The CronJob's run --once, beside the replicas, subscribing.
	cj := m.cronJob.Spec.JobTemplate.Spec.Template.Spec
	if code, out := runToEnd(ctx, t, k, "once", cj, cj.Containers[0]); code != 0 || !strings.Contains(out, subscribingLine) {
		t.Fatalf("cronjob run --once: exit %d; want 0 with the subscription on (%q)\n%s", code, subscribingLine, out)
	}

	// 5. The next release, rendered as a release is made: its migrate Job
	// under its own name (the first one's template is immutable, and a
	// container of the same name would fail to start here) to exit 0, on
	// the next release's image.
	next := renderRelease(t, files, user, release, nextRelease)
	if next.job.Name == m.job.Name {
		t.Fatalf("the next release's migrate Job is named %s as the first one's", next.job.Name)
	}
	job = next.job.Spec.Template.Spec
	if code, out := runToEnd(ctx, t, k, next.job.Name, job, job.Containers[0]); code != 0 {
		t.Fatalf("migrate Job %s: exit %d\n%s", next.job.Name, code, out)
	}
	if img, err := docker(ctx, "inspect", "-f", "{{.Config.Image}}", prefix+next.job.Name); err != nil || strings.TrimSpace(img) != nextTag {
		t.Fatalf("migrate Job %s ran image %q (%v); want %s", next.job.Name, strings.TrimSpace(img), err, nextTag)
	}

	// 6. The rolling update, one replica at a time (maxUnavailable 1): the
	// old one stopped by SIGTERM with exit 0, then the new one ready.
	for i, old := range replicas {
		stop(old)
		replicas[i] = prefix + "mend-" + nextRelease + "-" + strconv.Itoa(i)
		startReady(replicas[i], next.deployment.Spec.Template.Spec)
	}

	// 7. The dead-letter path on the new release: queue r's dead letter is
	// recorded, repaired, and its next batch woken.
	if err := w.MoveToDLQ(ctx, "speculate", "r", "r/batch/1", sqtest.Failure{Count: 3, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
	state = ""
	if !until(3*time.Minute, 500*time.Millisecond, func() bool {
		_ = mendDB.QueryRowContext(ctx, "SELECT state FROM mend_records WHERE message_id = 'r/batch/1'").Scan(&state)
		return state == "done"
	}) {
		t.Fatalf("after the rollout, the dead letter's record is %q after 3 minutes; want done\n%s\n%s", state, logs(replicas[0]), logs(replicas[1]))
	}
	wakes, err = w.ConsumeSpeculate(ctx, "r", true)
	if err != nil || len(wakes) != 1 || wakes[0].Batch.ID != "r/batch/2" {
		t.Fatalf("after the rollout, speculate = %+v, %v; want one wake-up naming r/batch/2", wakes, err)
	}

	// 8. SIGTERM ends each new replica with exit 0.
	for _, name := range replicas {
		stop(name)
	}

	// The controls: the same steps fail on each of issue 45's blockers.
	t.Run("control: no fsGroup", func(t *testing.T) {
		broken := map[string][]byte{}
		for name, b := range files {
			broken[name] = fsGroupLine.ReplaceAll(b, nil)
		}
		bm, err := loadManifests(broken)
		if err != nil {
			t.Fatal(err)
		}
		if bm.job.Spec.Template.Spec.SecurityContext.FSGroup != nil || bm.deployment.Spec.Template.Spec.SecurityContext.FSGroup != nil {
			t.Fatal("the broken copy still sets fsGroup")
		}
		kc := *k
		kc.t = t
		job := bm.job.Spec.Template.Spec
		if code, out := runToEnd(ctx, t, &kc, "nofsgroup-migrate", job, job.Containers[0]); code == 0 || !strings.Contains(out, "permission denied") {
			t.Fatalf("migrate Job without fsGroup: exit %d; want a failure naming permission denied (the test would not catch it)\n%s", code, out)
		}
		// A replica exits at start the same way (it would run until the
		// context ends if it could read its files).
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		spec := bm.deployment.Spec.Template.Spec
		if code, out := runToEnd(rctx, t, &kc, "nofsgroup-mend", spec, spec.Containers[0], "--metrics-addr=127.0.0.1:0"); code == 0 || !strings.Contains(out, "permission denied") {
			t.Fatalf("replica without fsGroup: exit %d; want a failure at start naming permission denied\n%s", code, out)
		}
	})
	t.Run("control: MEND_QUEUE_DSN_FILE not counted as given", func(t *testing.T) {
		// The same image with a binary linked with issue 45's old flag
		// resolution planted (cli.go, plantFileTwinNotGiven).
		dir := t.TempDir()
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-X main.plantFileTwinNotGiven=1", "-o", filepath.Join(dir, "mend"), ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build (planted): %v\n%s", err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+tag+"\nCOPY mend /mend\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		planted := tag + "-planted"
		t.Cleanup(func() { _, _ = docker(context.Background(), "image", "rm", "-f", planted) })
		b := exec.CommandContext(ctx, "docker", "build", "-q", "-t", planted, dir)
		b.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
		if out, err := b.CombinedOutput(); err != nil {
			t.Fatalf("docker build (planted): %v\n%s", err, out)
		}
		kc := *k
		kc.t = t
		kc.images = map[string]string{"mend:" + release: planted}
		// It runs (exit 0: nothing failed, as the issue found) with the
		// subscription silently off: step 4's check fails on it.
		code, out := runToEnd(ctx, t, &kc, "planted-once", cj, cj.Containers[0])
		if code != 0 || !strings.Contains(out, "mend run starting") || strings.Contains(out, subscribingLine) {
			t.Fatalf("planted: run --once: exit %d; want 0, started, and no %q (else the control plants nothing)\n%s", code, subscribingLine, out)
		}
	})
}

// subscribingLine is what mend run logs when its subscription starts.
const subscribingLine = "subscribing to the host's dead-letter topics"

// fsGroupLine is the manifests' fsGroup line, indentation and all.
var fsGroupLine = regexp.MustCompile(`(?m)^[ \t]*fsGroup: 65532\n`)

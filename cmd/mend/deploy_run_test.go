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
	image   string
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
	a = append(a, k.image)
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
// the shipped configuration); the CronJob's run --once exits 0; SIGTERM
// stops each replica with exit 0. What it does not cover: docs/operations.md.
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
	k := &kubelet{t: t, image: tag, dir: t.TempDir(), hosts: []string{tlstest.ServerName + ":127.0.0.1"},
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
	t.Cleanup(func() { _, _ = docker(context.Background(), "image", "rm", "-f", tag) })
	prefix := fmt.Sprintf("mend-k8stest-%d-", os.Getpid())
	var started []string
	t.Cleanup(func() {
		for _, name := range started {
			_, _ = docker(context.Background(), "rm", "-f", name)
		}
	})
	// runToEnd runs a Job's container to its end and returns its exit code.
	runToEnd := func(pod string, spec corev1.PodSpec, c corev1.Container, env map[string]string) (int, string) {
		t.Helper()
		args := k.args(prefix+pod, spec, c)
		for name, v := range env {
			args = append([]string{"-e", name + "=" + v}, args...)
		}
		started = append(started, prefix+pod)
		out, err := docker(ctx, append([]string{"run"}, args...)...)
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
	if code, out := runToEnd("migrate", job, job.Containers[0], nil); code != 0 {
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
	} {
		if err := seed(); err != nil {
			t.Fatal(err)
		}
	}

	// 2. The Deployment's replicas. On the host network both cannot listen
	// on :9464, so each gets its own loopback port after the manifest's
	// args (the last --metrics-addr wins); the probes follow it.
	d := m.deployment.Spec.Template.Spec
	c := d.Containers[0]
	if m.deployment.Spec.Replicas == nil {
		t.Fatal("deployment: no replicas")
	}
	var replicas []string
	var probes []string
	for i := 0; i < int(*m.deployment.Spec.Replicas); i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		probeAddr := l.Addr().String()
		_ = l.Close()
		name := prefix + "mend-" + strconv.Itoa(i)
		started = append(started, name)
		if out, err := docker(ctx, append([]string{"run", "-d"}, k.args(name, d, c, "--metrics-addr="+probeAddr)...)...); err != nil {
			t.Fatalf("docker run replica %d: %v\n%s", i, err, out)
		}
		replicas = append(replicas, name)
		probes = append(probes, probeAddr)
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
	for i, p := range probes {
		path := c.ReadinessProbe.HTTPGet.Path
		if !until(90*time.Second, time.Duration(c.ReadinessProbe.PeriodSeconds)*time.Second/5, func() bool { return get("http://"+p+path) == http.StatusOK }) {
			t.Fatalf("replica %d never ready on %s:\n%s", i, path, logs(replicas[i]))
		}
		if code := get("http://" + p + c.LivenessProbe.HTTPGet.Path); code != http.StatusOK {
			t.Fatalf("replica %d: %s = %d", i, c.LivenessProbe.HTTPGet.Path, code)
		}
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

	// 4. The CronJob's run --once, beside the replicas.
	cj := m.cronJob.Spec.JobTemplate.Spec.Template.Spec
	if code, out := runToEnd("once", cj, cj.Containers[0], nil); code != 0 {
		t.Fatalf("cronjob run --once: exit %d\n%s", code, out)
	}

	// 5. SIGTERM (docker stop, the pod's grace period) ends each replica
	// with exit 0.
	grace := strconv.FormatInt(*m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds, 10)
	for _, name := range replicas {
		if out, err := docker(ctx, "stop", "-t", grace, name); err != nil {
			t.Fatalf("docker stop %s: %v\n%s", name, err, out)
		}
		code, err := docker(ctx, "inspect", "-f", "{{.State.ExitCode}}", name)
		if err != nil || strings.TrimSpace(code) != "0" {
			t.Fatalf("%s after SIGTERM: exit %s (%v)\n%s", name, strings.TrimSpace(code), err, logs(name))
		}
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mendq/mend/fence"
)

// manifestDir holds the Kubernetes manifests this test holds to the binary.
var manifestDir = filepath.Join("..", "..", "deploy", "kubernetes")

// manifests is deploy/kubernetes decoded strictly into the Kubernetes API
// types (an unknown or misspelt field is an error, as the API server's
// strict field validation makes it).
type manifests struct {
	deployment *appsv1.Deployment
	pdb        *policyv1.PodDisruptionBudget
	job        *batchv1.Job
	cronJob    *batchv1.CronJob
	secrets    map[string]*corev1.Secret // by name
	kustomized map[string]bool           // the files kustomization.yaml lists
	imageUser  string                    // the USER line of deploy/image/Dockerfile
}

func loadManifests(files map[string][]byte) (manifests, error) {
	m := manifests{secrets: map[string]*corev1.Secret{}, kustomized: map[string]bool{}}
	for name, raw := range files {
		var head struct{ Kind, APIVersion string }
		if err := yaml.Unmarshal(raw, &head); err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		var into any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			m.deployment = &appsv1.Deployment{}
			into = m.deployment
		case "policy/v1 PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			into = m.pdb
		case "batch/v1 Job":
			m.job = &batchv1.Job{}
			into = m.job
		case "batch/v1 CronJob":
			m.cronJob = &batchv1.CronJob{}
			into = m.cronJob
		case "v1 Secret":
			sec := &corev1.Secret{}
			if err := yaml.UnmarshalStrict(raw, sec); err != nil {
				return m, fmt.Errorf("%s: %w", name, err)
			}
			m.secrets[sec.Name] = sec
			continue
		case "kustomize.config.k8s.io/v1beta1 Kustomization":
			var k struct {
				APIVersion string   `json:"apiVersion"`
				Kind       string   `json:"kind"`
				Resources  []string `json:"resources"`
			}
			if err := yaml.UnmarshalStrict(raw, &k); err != nil {
				return m, fmt.Errorf("%s: %w", name, err)
			}
			for _, r := range k.Resources {
				if _, ok := files[r]; !ok {
					return m, fmt.Errorf("%s lists %s, which is not in %s", name, r, manifestDir)
				}
				m.kustomized[r] = true
			}
			continue
		default:
			return m, fmt.Errorf("%s: unexpected %s %s", name, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(raw, into); err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
	}
	if m.deployment == nil || m.pdb == nil || m.job == nil || m.cronJob == nil {
		return m, fmt.Errorf("deploy/kubernetes lacks one of Deployment, PodDisruptionBudget, Job, CronJob")
	}
	return m, nil
}

func readManifests(t *testing.T) (map[string][]byte, string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s (%v)", manifestDir, err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = b
	}
	df, err := os.ReadFile(filepath.Join("..", "..", "deploy", "image", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindSubmatch(df)
	if user == nil {
		t.Fatal("deploy/image/Dockerfile has no USER line")
	}
	return files, string(user[1])
}

// checkContainer holds one container to the binary: its args name a mend
// command and flags that command has, with values it accepts; its MEND_*
// variables are twins of that command's flags; every file a *_FILE or
// *_TLS_* variable names is under a read-only volume mount that is not a
// subPath (a subPath mount is never updated when the secret rotates). It
// returns the parsed flags.
func checkContainer(where string, c corev1.Container, problem func(string, ...any)) *flags {
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }, scrub: &scrubber{}, flagsOf: map[*cobra.Command]*flags{}}
	root := a.newRoot()
	cmd, rest, err := root.Find(c.Args)
	if err != nil || cmd == root {
		problem("%s: args %v name no mend command (%v)", where, c.Args, err)
		return nil
	}
	f := a.flagsOf[cmd]
	if err := cmd.Flags().Parse(rest); err != nil {
		problem("%s: args %v: %v", where, c.Args, err)
		return nil
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		problem("%s: args %v: %v", where, c.Args, err)
	}
	twins := map[string]string{}
	for _, name := range flagNames(cmd) {
		twins[envName(name)] = name
	}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, envPrefix) {
			continue
		}
		name, ok := twins[e.Name]
		if !ok {
			problem("%s: env %s is the twin of no flag of mend %s", where, e.Name, cmd.Name())
			continue
		}
		if e.Value != "" {
			if err := cmd.Flags().Set(name, e.Value); err != nil {
				problem("%s: env %s=%q: %v", where, e.Name, e.Value, err)
			}
		}
		if strings.HasSuffix(name, "-file") || strings.Contains(name, "-tls-") {
			mounted := false
			for _, vm := range c.VolumeMounts {
				if strings.HasPrefix(e.Value, strings.TrimSuffix(vm.MountPath, "/")+"/") {
					mounted = vm.ReadOnly && vm.SubPath == ""
				}
			}
			if !mounted {
				problem("%s: %s=%s is not under a read-only, non-subPath volume mount", where, e.Name, e.Value)
			}
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) == 0 {
		problem("%s: securityContext must set readOnlyRootFilesystem, allowPrivilegeEscalation false and drop capabilities", where)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		problem("%s: no memory request or limit", where)
	}
	return f
}

// flagNames are the flags of cmd that have an environment twin.
func flagNames(cmd *cobra.Command) []string {
	var names []string
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if hasEnvTwin(fl) {
			names = append(names, fl.Name)
		}
	})
	return names
}

func checkPod(where string, spec corev1.PodSpec, imageUser string, problem func(string, ...any)) {
	sc := spec.SecurityContext
	uid := strings.SplitN(imageUser, ":", 2)[0]
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != uid {
		problem("%s: the pod must run as non-root user %s, the image's USER", where, uid)
	}
	for _, v := range spec.Volumes {
		if v.Secret == nil {
			continue
		}
		// The kubelet projects a Secret's files owned by root, group root
		// or, with fsGroup, group fsGroup (and then at least 0440); the
		// files' mode is defaultMode (0644 if unset).
		mode := int32(0o644)
		if v.Secret.DefaultMode != nil {
			mode = *v.Secret.DefaultMode
		}
		if (sc == nil || sc.FSGroup == nil) && mode&0o004 == 0 {
			problem("%s: user %s cannot read the files of secret volume %s: they are root:root %#o; set the pod's fsGroup (or a world-readable defaultMode)", where, uid, v.Name, mode)
		}
	}
}

// imageTag is the tag of a container image reference, "" when it has none.
func imageTag(image string) string {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}

// checkRelease holds the manifests to one release: every container runs
// the same tagged image (never latest, which IfNotPresent leaves stale on
// nodes), the migrate Job's name carries that tag (a Job's template is
// immutable and a finished Job never runs again, so each release needs
// its own), the Job is applied before the kustomization (whose Deployment
// must not start before it completes), and it migrates with a Secret of
// its own (the DDL user), not the runtime pods' one.
func checkRelease(m manifests, problem func(string, ...any)) {
	tags := map[string]bool{}
	for where, spec := range map[string]corev1.PodSpec{"deployment": m.deployment.Spec.Template.Spec, "job": m.job.Spec.Template.Spec,
		"cronjob": m.cronJob.Spec.JobTemplate.Spec.Template.Spec} {
		for _, c := range spec.Containers {
			tag := imageTag(c.Image)
			if tag == "" || tag == "latest" {
				problem("%s: image %q: give the release's tag, not latest (IfNotPresent keeps an old latest on nodes)", where, c.Image)
			}
			tags[tag] = true
		}
	}
	if len(tags) != 1 {
		problem("the workloads run different image tags %v; one release, one tag", sortedKeys(tags))
	}
	for tag := range tags {
		if want := "mend-migrate-" + tag; len(tags) == 1 && m.job.Name != want {
			problem("job: named %q; want %q: each release needs its own migrate Job", m.job.Name, want)
		}
	}
	if m.kustomized["migrate-job.yaml"] {
		problem("kustomization: lists migrate-job.yaml, so the Deployment is applied with it and starts before the migration completes")
	}
	secretOf := func(spec corev1.PodSpec) string {
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				return v.Secret.SecretName
			}
		}
		return ""
	}
	if js, ds := secretOf(m.job.Spec.Template.Spec), secretOf(m.deployment.Spec.Template.Spec); js == "" || js == ds {
		problem("job: migrates with secret %q, the runtime pods' %q: give the DDL user a Secret of its own", js, ds)
	}
}

// checkManifests returns every way m disagrees with the binary.
func checkManifests(m manifests) []string {
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	d := m.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		problem("deployment: want 2 replicas")
	}
	checkPod("deployment", d.Spec.Template.Spec, m.imageUser, problem)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		problem("deployment: want one container")
		return problems
	}
	c := d.Spec.Template.Spec.Containers[0]
	if f := checkContainer("deployment", c, problem); f != nil {
		if f.cmd.Name() != "run" || f.given("once") {
			problem("deployment: must run mend run (without --once), not %v", c.Args)
		}
		ttl, _ := f.GetDuration("lease-ttl")
		addr, _ := f.GetString("metrics-addr")
		_, portStr, err := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(portStr)
		if err != nil || port == 0 {
			problem("deployment: --metrics-addr %q has no port; the probes need it", addr)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for name, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name {
				problem("deployment: want an HTTP probe on %s", name)
				continue
			}
			got := probe.HTTPGet.Port.IntVal
			if probe.HTTPGet.Port.StrVal != "" {
				got = ports[probe.HTTPGet.Port.StrVal]
			}
			if int(got) != port {
				problem("deployment: probe %s is on port %d, --metrics-addr on %d", name, got, port)
			}
		}
		var preStop int64
		if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil {
			problem("deployment: want a preStop sleep")
		} else {
			preStop = l.PreStop.Sleep.Seconds
		}
		grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
		want := time.Duration(preStop)*time.Second + ttl
		if grace == nil || time.Duration(*grace)*time.Second < want || time.Duration(*grace)*time.Second > want+time.Minute {
			problem("deployment: terminationGracePeriodSeconds %v must be at least preStop %ds + --lease-ttl %s (and not a minute beyond)", grace, preStop, ttl)
		}
	}
	pdbSel := m.pdb.Spec.Selector
	for k, v := range pdbSel.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			problem("pdb: selector %s=%s does not match the deployment's pods", k, v)
		}
	}
	if m.pdb.Spec.MinAvailable == nil || d.Spec.Replicas == nil || int32(m.pdb.Spec.MinAvailable.IntValue()) >= *d.Spec.Replicas {
		problem("pdb: minAvailable must be below the replicas, or no node could ever be drained")
	}

	checkRelease(m, problem)
	checkPod("job", m.job.Spec.Template.Spec, m.imageUser, problem)
	for _, jc := range m.job.Spec.Template.Spec.Containers {
		if f := checkContainer("job", jc, problem); f != nil && (f.cmd.Name() != "migrate" || f.Arg(0) != "up") {
			problem("job: must run mend migrate up, not %v", jc.Args)
		}
	}
	cj := m.cronJob.Spec.JobTemplate.Spec.Template.Spec
	checkPod("cronjob", cj, m.imageUser, problem)
	for _, cc := range cj.Containers {
		if f := checkContainer("cronjob", cc, problem); f != nil && (f.cmd.Name() != "run" || !f.given("once")) {
			problem("cronjob: must run mend run --once, not %v", cc.Args)
		}
	}
	return problems
}

// TestManifests holds deploy/kubernetes to the binary: flags and their
// environment twins exist (and take the values given), the probes are on
// --metrics-addr's port at paths the handler serves, the grace period
// covers preStop plus --lease-ttl, the pods run as the image's non-root
// user with a read-only root file system. No cluster is available here:
// the manifests are decoded strictly into the Kubernetes API types
// (k8s.io/api), which is the schema the API server validates against.
// The negative controls are broken copies of the same manifests, each of
// which must be caught.
func TestManifests(t *testing.T) {
	t.Parallel()
	files, user := readManifests(t)
	m, err := loadManifests(files)
	if err != nil {
		t.Fatal(err)
	}
	m.imageUser = user
	if problems := checkManifests(m); len(problems) > 0 {
		t.Fatalf("deploy/kubernetes disagrees with the binary:\n%s", strings.Join(problems, "\n"))
	}

	// The probe paths are the handler's.
	h := newHTTPHandler(newMetrics(), func(context.Context) error { return nil }, &scrubber{})
	for _, path := range []string{"/healthz", "/readyz", "/nothing-here"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if want := path != "/nothing-here"; (rec.Code == http.StatusOK) != want {
			t.Errorf("GET %s = %d", path, rec.Code)
		}
	}
	if fence.TTLDefault > 15*time.Second {
		t.Logf("fence.TTLDefault is %s: the manifests name --lease-ttl explicitly, so they are not affected", fence.TTLDefault)
	}

	for _, tt := range []struct {
		name, file, from, to, want string
	}{
		{"unknown flag", "deployment.yaml", "--lease-ttl=15s", "--lease-tt=15s", "unknown flag"},
		{"bad flag value", "deployment.yaml", "--lease-ttl=15s", "--lease-ttl=soon", "invalid argument"},
		{"grace below the TTL", "deployment.yaml", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 10", "terminationGracePeriodSeconds"},
		{"TTL raised alone", "deployment.yaml", "--lease-ttl=15s", "--lease-ttl=60s", "terminationGracePeriodSeconds"},
		{"probe port", "deployment.yaml", "--metrics-addr=:9464", "--metrics-addr=:9465", "--metrics-addr on 9465"},
		{"env twin of nothing", "deployment.yaml", "MEND_HOST_DSN_FILE", "MEND_HOST_DSN_PATH", "twin of no flag"},
		{"subPath mount", "deployment.yaml", "mountPath: /var/run/secrets/mend\n", "mountPath: /var/run/secrets/mend\n              subPath: dsn\n", "non-subPath"},
		{"root", "deployment.yaml", "runAsUser: 65532", "runAsUser: 0", "non-root"},
		{"writable root", "deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem"},
		{"misspelt field", "deployment.yaml", "terminationGracePeriodSeconds: 30", "terminationGracePeriod: 30", "unknown field"},
		{"cronjob without --once", "cronjob.yaml", "args: [run, --once,", "args: [run,", "run --once"},
		{"job flag", "migrate-job.yaml", "args: [migrate, up, --require-tls]", "args: [migrate, up, --require-tlss]", "unknown flag"},
		{"pdb blocks drains", "pdb.yaml", "minAvailable: 1", "minAvailable: 2", "minAvailable"},
		{"no fsGroup", "deployment.yaml", "fsGroup: 65532", "", "cannot read the files of secret volume"},
		{"no fsGroup in the job", "migrate-job.yaml", "fsGroup: 65532", "", "job: user 65532 cannot read"},
		{"latest", "deployment.yaml", "image: mend:v0.1.0", "image: mend:latest", "not latest"},
		{"one tag", "cronjob.yaml", "image: mend:v0.1.0", "image: mend:v0.0.9", "different image tags"},
		{"job name", "migrate-job.yaml", "name: mend-migrate-v0.1.0", "name: mend-migrate", "each release needs its own"},
		{"job kustomized", "kustomization.yaml", "resources:\n", "resources:\n  - migrate-job.yaml\n", "starts before the migration"},
		{"job with the runtime secret", "migrate-job.yaml", "secretName: mend-db-migrate", "secretName: mend-db", "a Secret of its own"},
	} {
		t.Run("control/"+tt.name, func(t *testing.T) {
			t.Parallel()
			broken := map[string][]byte{}
			for k, v := range files {
				broken[k] = v
			}
			if !bytes.Contains(files[tt.file], []byte(tt.from)) {
				t.Fatalf("%s no longer contains %q: update this control", tt.file, tt.from)
			}
			broken[tt.file] = bytes.Replace(files[tt.file], []byte(tt.from), []byte(tt.to), 1)
			var problems []string
			if m, err := loadManifests(broken); err != nil {
				problems = append(problems, err.Error())
			} else {
				m.imageUser = user
				problems = checkManifests(m)
			}
			if !strings.Contains(strings.Join(problems, "\n"), tt.want) {
				t.Fatalf("broken %s (%q -> %q) not caught as %q; problems: %v", tt.file, tt.from, tt.to, tt.want, problems)
			}
		})
	}
}

// renderRelease is the manifests for the release whose image tag is to,
// made from files (the shipped release, tag from) as docs/operations.md
// says a release is made: the image tag changed in the three workload files
// and the migrate Job's name with it. They must pass TestManifests' checks.
func renderRelease(t *testing.T, files map[string][]byte, user, from, to string) manifests {
	t.Helper()
	next := map[string][]byte{}
	for name, b := range files {
		b = bytes.ReplaceAll(b, []byte("image: mend:"+from), []byte("image: mend:"+to))
		next[name] = bytes.ReplaceAll(b, []byte("name: mend-migrate-"+from), []byte("name: mend-migrate-"+to))
	}
	m, err := loadManifests(next)
	if err != nil {
		t.Fatal(err)
	}
	m.imageUser = user
	if problems := checkManifests(m); len(problems) > 0 {
		t.Fatalf("release %s: %s", to, strings.Join(problems, "; "))
	}
	return m
}

// TestManifestsNextRelease renders the next release as docs/operations.md
// says a release is made and holds it to TestManifests' checks: one tag in
// every workload, the migrate Job named after it, so a different Job than
// the shipped release's (a Job's template is immutable). TestManifestsRun
// runs it with Docker.
func TestManifestsNextRelease(t *testing.T) {
	t.Parallel()
	files, user := readManifests(t)
	m, err := loadManifests(files)
	if err != nil {
		t.Fatal(err)
	}
	release := imageTag(m.job.Spec.Template.Spec.Containers[0].Image)
	next := renderRelease(t, files, user, release, "v9.9.9")
	if got, want := next.job.Name, "mend-migrate-v9.9.9"; got != want || got == m.job.Name {
		t.Fatalf("the next release's migrate Job is %q; want %q, not the shipped %q", got, want, m.job.Name)
	}
	for where, spec := range map[string]corev1.PodSpec{"deployment": next.deployment.Spec.Template.Spec, "job": next.job.Spec.Template.Spec,
		"cronjob": next.cronJob.Spec.JobTemplate.Spec.Template.Spec} {
		if got := spec.Containers[0].Image; got != "mend:v9.9.9" {
			t.Errorf("%s: image %q; want mend:v9.9.9", where, got)
		}
	}
}

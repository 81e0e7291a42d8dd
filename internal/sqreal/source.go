package sqreal

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Commit is the snapshot of uber/submitqueue the suite runs (the tarball's name says it).
const Commit = "cfeea0d9"

// Environment variables the package reads.
const (
	// EnvSource names an unpacked tree of the queue's source to use instead of the tarball.
	EnvSource = "SQ_SOURCE"
	// EnvCache overrides the root of the binary cache (default ~/.cache/mend).
	EnvCache = "MEND_SQ_CACHE"
	// EnvCI makes a missing source a failure instead of a skip.
	EnvCI = "CI"
)

// tarball is where a clone finds the snapshot, relative to the module root.
var tarball = filepath.Join("..", "shared", "submitqueue-src", "submitqueue-"+Commit+".tar.gz")

// The packages the suite builds, by binary name.
var packages = map[string]string{
	"gateway":      "./service/submitqueue/gateway/server",
	"orchestrator": "./service/submitqueue/orchestrator/server",
	"runway":       "./service/runway/server",
	"land":         "./service/submitqueue/gateway/client",
}

// Tree is an unpacked copy of the queue's source in a test's temporary directory.
type Tree struct {
	// Dir is the tree's root (it holds go.mod).
	Dir string
	// fromDir is true when it was copied from SQ_SOURCE rather than unpacked from the tarball.
	fromDir bool
	// patches are the SHA-256 of the patches applied, in order.
	patches []string
}

// Source returns a fresh copy of the queue's source in t's temporary directory. Without a source it skips
// t, saying how to get one, or fails it when CI=true.
func Source(t testing.TB) *Tree {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "submitqueue")
	if dir := os.Getenv(EnvSource); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			t.Fatalf("sqreal: %s=%s is not an unpacked submitqueue tree: %v", EnvSource, dir, err)
		}
		if err := copyTree(dir, dst); err != nil {
			t.Fatalf("sqreal: copy %s: %v", dir, err)
		}
		return &Tree{Dir: dst, fromDir: true}
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("sqreal: %v", err)
	}
	path, err := findTarball(root)
	if err != nil {
		msg := fmt.Sprintf("sqreal: the real submit queue's source is not here (%v); set %s=<dir> to an unpacked "+
			"uber/submitqueue tree at %s, or put its tarball at %s (a fresh clone needs a copy of shared/ beside it)",
			err, EnvSource, Commit, filepath.Join(root, tarball))
		if os.Getenv(EnvCI) == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if err := untar(path, filepath.Dir(dst)); err != nil {
		t.Fatalf("sqreal: unpack %s: %v", path, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "go.mod")); err != nil {
		t.Fatalf("sqreal: %s did not unpack to submitqueue/: %v", path, err)
	}
	return &Tree{Dir: dst}
}

// Apply applies a unified diff (patch -p1) to the tree; the binaries Build makes afterwards are cached
// apart from the unpatched ones.
func (tr *Tree) Apply(t testing.TB, patchFile string) {
	t.Helper()
	patchFile, err := filepath.Abs(patchFile)
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(patchFile)
	if err != nil {
		t.Fatalf("sqreal: read patch: %v", err)
	}
	cmd := exec.Command("patch", "-p1", "--batch", "--forward", "-i", patchFile)
	cmd.Dir = tr.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sqreal: apply %s: %v\n%s", patchFile, err, out)
	}
	sum := sha256.Sum256(body)
	tr.patches = append(tr.patches, hex.EncodeToString(sum[:]))
}

// Replace rewrites a go.mod requirement of the tree to a local directory (a replace directive), as an
// adopting team's patch linking mend in would do with a released version.
func (tr *Tree) Replace(t testing.TB, module, dir string) {
	t.Helper()
	args := []string{"mod", "edit", "-require=" + module + "@v0.0.0", "-replace=" + module + "=" + dir}
	cmd := exec.Command("go", args...)
	cmd.Dir = tr.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sqreal: go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Bins are the paths of the built binaries, by name (gateway, orchestrator, runway, land).
type Bins map[string]string

// buildMu serialises builds within one test binary; the lock file serialises them across binaries.
var buildMu sync.Mutex

// Build returns the tree's binaries, from the cache when they are there, else built into it (under the
// cache's lock). extraKey is mixed into the cache key (e.g. the hash of a module a patch links in, which
// changes without the patch changing); names selects the binaries (all when empty).
func (tr *Tree) Build(t testing.TB, extraKey string, names ...string) Bins {
	t.Helper()
	if len(names) == 0 {
		names = []string{"gateway", "orchestrator", "runway", "land"}
	}
	cacheRoot := os.Getenv(EnvCache)
	if cacheRoot == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("sqreal: no home directory for the cache (set %s): %v", EnvCache, err)
		}
		cacheRoot = filepath.Join(home, ".cache", "mend")
	}
	dir := filepath.Join(cacheRoot, "submitqueue-"+Commit)
	bin := "bin"
	if key := strings.Join(append(append([]string{}, tr.patches...), extraKey), "+"); key != "" {
		sum := sha256.Sum256([]byte(key))
		bin += "-" + hex.EncodeToString(sum[:6])
	}
	if tr.fromDir {
		// SQ_SOURCE may change between runs: build every time, into a directory of its own.
		sum := sha256.Sum256([]byte(os.Getenv(EnvSource)))
		bin += "-src-" + hex.EncodeToString(sum[:6])
	}
	binDir := filepath.Join(dir, bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("sqreal: %v", err)
	}

	buildMu.Lock()
	defer buildMu.Unlock()
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("sqreal: open lock: %v", err)
	}
	defer lock.Close()
	waited := time.Now()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("sqreal: lock %s: %v", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file releases it too
	if d := time.Since(waited); d > time.Second {
		t.Logf("sqreal: waited %v for another build of the queue", d.Round(time.Second))
	}

	bins := Bins{}
	var missing []string
	for _, name := range names {
		bins[name] = filepath.Join(binDir, name)
		if _, err := os.Stat(bins[name]); err != nil || tr.fromDir {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return bins
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatalf("sqreal: %v", err)
	}
	began := time.Now()
	for _, name := range missing {
		pkg, ok := packages[name]
		if !ok {
			t.Fatalf("sqreal: no package for binary %q", name)
		}
		tmp := bins[name] + ".tmp"
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, pkg)
		cmd.Dir = tr.Dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("sqreal: go build %s (in %s): %v\n%s", pkg, tr.Dir, err, out)
		}
		if err := os.Rename(tmp, bins[name]); err != nil {
			t.Fatalf("sqreal: %v", err)
		}
	}
	t.Logf("sqreal: built %s into %s in %v", strings.Join(missing, ", "), binDir, time.Since(began).Round(100*time.Millisecond))
	return bins
}

// moduleRoot returns the nearest directory at or above the working directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// findTarball looks for the snapshot beside the module root, then beside each directory above it (a git
// worktree under <repo>/../wt/<branch> finds the <repo>/../shared the clone has).
func findTarball(root string) (string, error) {
	var tried []string
	for dir := root; ; dir = filepath.Dir(dir) {
		path := filepath.Join(dir, tarball)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		tried = append(tried, path)
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no %s at %s", filepath.Base(tarball), strings.Join(tried, ", "))
		}
	}
}

// ModuleRoot returns mend's module root (for building cmd/mend and linking mend into a patched queue).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("sqreal: %v", err)
	}
	return root
}

// untar unpacks a .tar.gz into dir, refusing entries that would leave it.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if name == "." || strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			return fmt.Errorf("entry %q leaves the directory", h.Name)
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		}
	}
}

// copyTree copies the regular files, directories and symlinks of src to dst, leaving out .git and
// Bazel's output links.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || strings.HasPrefix(d.Name(), "bazel-")) && rel != "." {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			in, err := os.Open(path)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.Create(target)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
		return nil
	})
}

// SourceHash hashes the Go sources and module files under root (test files, .git and testdata left out):
// the cache key of a binary that links that module in.
func SourceHash(t testing.TB, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == ".git" || name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")) && name != "go.mod" && name != "go.sum" && !strings.HasSuffix(name, ".sql") {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(h, "%s %d\n", rel, len(body))
		h.Write(body)
		return nil
	})
	if err != nil {
		t.Fatalf("sqreal: hash %s: %v", root, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

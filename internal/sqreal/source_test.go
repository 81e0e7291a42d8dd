package sqreal

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTarball writes a .tar.gz holding one regular file per name.
func writeTarball(t *testing.T, path string, names ...string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUntar(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tar.gz")
	writeTarball(t, good, "submitqueue/go.mod", "submitqueue/a/b.sql")
	out := filepath.Join(dir, "out")
	if err := untar(good, out); err != nil {
		t.Fatalf("untar: %v", err)
	}
	for _, p := range []string{"submitqueue/go.mod", "submitqueue/a/b.sql"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("%s not unpacked: %v", p, err)
		}
	}

	// An entry that would land outside the directory is refused, and nothing is written there.
	evil := filepath.Join(dir, "evil.tar.gz")
	writeTarball(t, evil, "../escaped")
	if err := untar(evil, filepath.Join(dir, "out2")); err == nil || !strings.Contains(err.Error(), "leaves the directory") {
		t.Fatalf("untar of ../escaped: err = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escaped")); !os.IsNotExist(err) {
		t.Fatalf("../escaped was written: %v", err)
	}
}

func TestFindTarball(t *testing.T) {
	t.Parallel()
	// A worktree two levels below the clone's parent finds <parent>/shared, as /work/wt/<branch> finds /work/shared.
	base := t.TempDir()
	root := filepath.Join(base, "wt", "branch")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := findTarball(root); err == nil {
		t.Fatal("findTarball found a tarball in an empty tree")
	}
	want := filepath.Join(base, "shared", "submitqueue-src", "submitqueue-"+Commit+".tar.gz")
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTarball(t, want, "submitqueue/go.mod")
	got, err := findTarball(root)
	if err != nil || got != want {
		t.Fatalf("findTarball = %q, %v; want %q", got, err, want)
	}
}

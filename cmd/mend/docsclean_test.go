package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Issue 57: the docs removed the trial container with "docker rm -f
// mend-try", which leaves the test image's data volume (it declares
// VOLUME) behind. Every "docker rm" in the docs of a container run from
// an image with a VOLUME removes its anonymous volumes too (-v).
func TestDocsDockerRmRemovesVolumes(t *testing.T) {
	t.Parallel()
	df, err := os.ReadFile("../../scripts/test-image/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "\nVOLUME ") {
		t.Skip("the test image declares no VOLUME: nothing to leave behind")
	}
	rm := regexp.MustCompile(`docker rm ((?:-[a-z]+ )*)mend-try`)
	for _, f := range []string{"../../docs/operations.md", "../../README.md", "../../docs/integration.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rm.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(m[1], "-v ") && !strings.Contains(m[1], "v ") {
				t.Errorf("%s: %q leaves the test image's data volume behind; use docker rm -f -v", f, m[0])
			}
		}
	}
}

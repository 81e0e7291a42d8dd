package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the release, set at build time with
// -ldflags "-X main.version=v1.2.3"; otherwise the module version the Go
// tool recorded, or "devel".
var version = ""

// buildInfo is what `mend version` prints and mend_build_info labels.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
}

func readBuildInfo() buildInfo {
	bi := buildInfo{Version: version, Revision: "unknown", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Revision = s.Value
			case "vcs.modified":
				bi.Modified = s.Value == "true"
			}
		}
	}
	if bi.Version == "" {
		bi.Version = "devel"
	}
	return bi
}

// line is the version as one line: mend v1.2.3, revision abc, go1.26.
func (bi buildInfo) line() string {
	mod := ""
	if bi.Modified {
		mod = " (modified)"
	}
	return fmt.Sprintf("mend %s, revision %s%s, %s", bi.Version, bi.Revision, mod, bi.GoVersion)
}

func newVersionCmd(a *app) *cobra.Command {
	f := a.newCommand("version", "print the binary's version (also: mend -v, mend --version)",
		"Print the binary's version, VCS revision and Go version.", withJSON)
	return f.run(func(context.Context, []string) error {
		bi := readBuildInfo()
		if f.json {
			return writeJSON(a.stdout, bi)
		}
		fmt.Fprintln(a.stdout, bi.line())
		return nil
	})
}

package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
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

func runVersion(_ context.Context, a *app, args []string) error {
	f := a.newFlags("version", "", "Print the binary's version, VCS revision and Go version.", true)
	if err := f.parseNoArgs(args); err != nil {
		return err
	}
	bi := readBuildInfo()
	if f.json {
		return writeJSON(a.stdout, bi)
	}
	mod := ""
	if bi.Modified {
		mod = " (modified)"
	}
	fmt.Fprintf(a.stdout, "mend %s, revision %s%s, %s\n", bi.Version, bi.Revision, mod, bi.GoVersion)
	return nil
}

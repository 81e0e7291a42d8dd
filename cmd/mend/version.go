package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/mendq/mend/doctor"
)

// version is the release, set at build time with
// -ldflags "-X main.version=v1.2.3"; otherwise the module version the Go
// tool recorded, or "devel".
var version = ""

// revision is the VCS revision, set at build time with
// -ldflags "-X main.revision=<commit>" (make build and scripts/image.sh do,
// for builds with -buildvcs=false or outside a checkout, where the Go tool
// records none); otherwise the vcs.revision the Go tool recorded, or
// "unknown".
var revision = ""

// buildInfo is what `mend version` prints and mend_build_info labels.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	// The schema versions the binary runs on (schemarange.go); newer
	// schemas made by expand migrations only too.
	SchemaOldest uint `json:"schema_oldest"`
	SchemaNewest uint `json:"schema_newest"`
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
				if revision == "" {
					bi.Revision = s.Value
				}
			case "vcs.modified":
				bi.Modified = s.Value == "true"
			}
		}
	}
	if revision != "" {
		bi.Revision = revision
	}
	if bi.Version == "" {
		bi.Version = "devel"
	}
	if r, err := doctor.SchemaRange(); err == nil {
		bi.SchemaOldest, bi.SchemaNewest = r.Oldest, r.Newest
	}
	return bi
}

// line is the version as one line: mend v1.2.3, revision abc, go1.26,
// schema 13 to 14.
func (bi buildInfo) line() string {
	mod := ""
	if bi.Modified {
		mod = " (modified)"
	}
	return fmt.Sprintf("mend %s, revision %s%s, %s, schema %d to %d", bi.Version, bi.Revision, mod, bi.GoVersion, bi.SchemaOldest, bi.SchemaNewest)
}

func newVersionCmd(a *app) *cobra.Command {
	f := a.newCommand("version", "print the binary's version (also: mend -v, mend --version)",
		"Print the binary's version, VCS revision and Go version, and the schema versions it runs on: from the oldest\n"+
			"its statements need to the latest migration it embeds (and newer ones made by expand migrations only;\n"+
			"docs/operations.md, 'Upgrading').", withJSON)
	return f.run(func(context.Context, []string) error {
		bi := readBuildInfo()
		if f.json {
			return writeJSON(a.stdout, bi)
		}
		fmt.Fprintln(a.stdout, bi.line())
		fmt.Fprintf(a.stdout, "runs on mend schema %d to %d, and on newer schemas whose newer migrations are expand-only\n", bi.SchemaOldest, bi.SchemaNewest)
		return nil
	})
}

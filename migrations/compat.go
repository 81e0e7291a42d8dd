package migrations

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// manifestJSON is the shape of mend's schema at the latest embedded
// migration: each of mend's base tables and its columns. TestManifest
// keeps it equal to what the migrations build on both engines
// (go test ./migrations -run TestManifest -update rewrites it).
//
//go:embed manifest.json
var manifestJSON []byte

// Manifest maps each of mend's base tables (not golang-migrate's
// bookkeeping table) to its columns, sorted.
type Manifest map[string][]string

// SchemaManifest returns the shape of the schema at the latest embedded
// migration.
func SchemaManifest() Manifest {
	var m Manifest
	if err := json.Unmarshal(manifestJSON, &m); err != nil {
		panic("migrations: manifest.json: " + err.Error()) // embedded; TestManifest reads it
	}
	return m
}

// Column is one column of a table in mend's database as the server reports
// it. Required means NOT NULL with no default and not generated: an INSERT
// that does not name it fails.
type Column struct {
	Table, Name string
	Required    bool
}

// Range is the schema versions a binary runs on: Oldest is the first
// schema holding everything its statements use, Newest the latest
// migration it embeds (the newest it was tested on). On a schema newer
// than Newest it runs as long as the newer migrations were expand-only.
type Range struct {
	Oldest, Newest uint
}

func (r Range) String() string { return fmt.Sprintf("%d to %d", r.Oldest, r.Newest) }

// Verdict is what a binary with a Range makes of a database's schema.
type Verdict struct {
	Version uint
	Dirty   bool
	// OK: the binary can run on this schema.
	OK bool
	// Newer: OK, but the schema is past Newest by expand migrations only.
	Newer bool
	// Detail says what was found, Fix what to do (empty when nothing).
	Detail, Fix string
}

// changelog is where an operator finds which release knows which schema.
const changelog = "CHANGELOG.md lists the schema each release needs; `mend version` prints a binary's range"

// Judge decides whether a binary with range r runs on a schema at version
// (dirty as golang-migrate recorded it) whose columns are cols. cols is
// only consulted above r.Newest, where the binary knows no migration and
// tells expand from contract by shape: everything it knows must still be
// there, and every column it does not know must take a default.
//
// A dirty version is a migration running now (golang-migrate marks its
// version dirty until it ends) or one that failed half way; the binary
// cannot tell which. It keeps working through it where what it uses is
// certainly there: above r.Newest if the shape still holds everything it
// knows (as for a newer clean schema), and at or below r.Newest if that
// migration is one of its own expand steps and the version before it is
// in range. Otherwise every replica would turn not ready for as long as
// another release's `mend migrate up` builds an index (issue 33's took a
// second on a test table; on a production table, minutes).
func (r Range) Judge(version uint, dirty bool, cols []Column) Verdict {
	v := Verdict{Version: version, Dirty: dirty}
	const dirtyFix = "if no `mend migrate up` or `down` is running, repair the schema by hand to match a version, then run: mend migrate force <that version> (docs/operations.md, 'Dirty schema')"
	switch {
	case dirty && version > r.Newest:
		if gone := contracted(SchemaManifest(), cols); len(gone) > 0 {
			v.Detail = fmt.Sprintf("mend's schema version %d is DIRTY (a migration newer than this binary, %s, is running or failed half way) and it changed what this binary uses: %s",
				version, r, strings.Join(gone, "; "))
			v.Fix = fmt.Sprintf("run a mend binary that knows schema %d (%s); %s", version, changelog, dirtyFix)
			return v
		}
		v.OK, v.Newer = true, true
		v.Detail = fmt.Sprintf("mend's schema version %d is DIRTY: a migration newer than this binary (%s) is running, or failed half way; everything this binary uses is still there, so it keeps working", version, r)
		v.Fix = dirtyFix
	case dirty && version > r.Oldest && version <= r.Newest && embeddedKind(version) == Expand:
		v.OK = true
		v.Detail = fmt.Sprintf("mend's schema version %d is DIRTY: migration %d is running, or failed half way; it is an expand step and this binary runs on %d, so it keeps working", version, version, version-1)
		v.Fix = dirtyFix
	case dirty:
		v.Detail = fmt.Sprintf("mend's schema version %d is DIRTY: a migration failed half way", version)
		v.Fix = "repair the schema by hand to match a version, then run: mend migrate force <that version> (docs/operations.md, 'Dirty schema')"
	case version == 0:
		v.Detail = "no mend schema in this database"
		v.Fix = "run: mend migrate up"
	case version < r.Oldest:
		v.Detail = fmt.Sprintf("mend's schema is at version %d; this binary runs on schema %s", version, r)
		v.Fix = fmt.Sprintf("run `mend migrate up` with this binary (it applies up to %d; the migrations are expand-only, so binaries already running keep working)", r.Newest)
	case version <= r.Newest:
		v.OK = true
		v.Detail = fmt.Sprintf("version %d, clean; this binary runs on %s", version, r)
	default:
		if gone := contracted(SchemaManifest(), cols); len(gone) > 0 {
			v.Detail = fmt.Sprintf("mend's schema is at version %d, newer than this binary (%s), and a contract migration after %d changed what it uses: %s",
				version, r, r.Newest, strings.Join(gone, "; "))
			v.Fix = fmt.Sprintf("run a mend binary that knows schema %d (%s)", version, changelog)
			return v
		}
		v.OK, v.Newer = true, true
		v.Detail = fmt.Sprintf("mend's schema is at version %d, newer than this binary (%s); the migrations after %d are expand-only, so this binary keeps working", version, r, r.Newest)
		v.Fix = fmt.Sprintf("upgrade this binary to one that knows schema %d (%s)", version, changelog)
	}
	return v
}

// embeddedKind is the kind of this binary's migration version, or "" if it
// embeds none of that number.
func embeddedKind(version uint) Kind {
	list, err := Mend.List()
	if err != nil {
		return ""
	}
	for _, m := range list {
		if m.Version == version {
			return Declared(m.Up)
		}
	}
	return ""
}

// contracted lists what of m is missing from cols, and the columns of m's
// tables that cols requires but m does not know.
func contracted(m Manifest, cols []Column) []string {
	have := map[string]map[string]Column{}
	for _, c := range cols {
		if have[c.Table] == nil {
			have[c.Table] = map[string]Column{}
		}
		have[c.Table][c.Name] = c
	}
	var out []string
	tables := make([]string, 0, len(m))
	for t := range m {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	for _, t := range tables {
		got, ok := have[t]
		if !ok {
			out = append(out, fmt.Sprintf("table %s is gone", t))
			continue
		}
		for _, c := range m[t] {
			if _, ok := got[c]; !ok {
				out = append(out, fmt.Sprintf("column %s.%s is gone", t, c))
			}
		}
		var extra []string
		for name, c := range got {
			if c.Required && !slices.Contains(m[t], name) {
				extra = append(extra, name)
			}
		}
		slices.Sort(extra)
		for _, name := range extra {
			out = append(out, fmt.Sprintf("new column %s.%s is NOT NULL without a default, so this binary's inserts would fail", t, name))
		}
	}
	return out
}

package doctor

import (
	"context"
	"database/sql"
	"maps"
	"slices"

	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// SchemaRange is the schema versions this module runs on: from the oldest
// its statements need (storage.SchemaOldest) to the latest migration it
// embeds, and on newer schemas whose newer migrations were expand-only
// (see migrations.Range.Judge and docs/operations.md, "Upgrading").
func SchemaRange() (migrations.Range, error) {
	latest, err := migrations.Mend.Latest()
	if err != nil {
		return migrations.Range{}, err
	}
	return migrations.Range{Oldest: storage.SchemaOldest, Newest: latest}, nil
}

// JudgeSchema reads mend's schema version (and, past this module's newest,
// the shape of its tables) without creating golang-migrate's bookkeeping
// table, and says whether this module runs on it.
func JudgeSchema(ctx context.Context, db *sql.DB) (migrations.Verdict, error) {
	r, err := SchemaRange()
	if err != nil {
		return migrations.Verdict{}, err
	}
	v, dirty, err := storage.ReadSchemaVersion(ctx, db)
	if err != nil {
		return migrations.Verdict{}, err
	}
	var cols []migrations.Column
	if v > r.Newest {
		sc, err := storage.ReadSchemaColumns(ctx, db, slices.Sorted(maps.Keys(migrations.SchemaManifest()))...)
		if err != nil {
			return migrations.Verdict{}, err
		}
		for _, c := range sc {
			cols = append(cols, migrations.Column{Table: c.Table, Name: c.Name, Required: c.Required})
		}
	}
	return r.Judge(v, dirty, cols), nil
}

package vitessdb

import (
	"fmt"

	"github.com/mendq/mend/migrations"
)

// MendSchema returns the statements that put mend's schema, at the latest migration, on each
// shard: every up migration in order, then golang-migrate's bookkeeping table recording that
// version, so migrations.Up through vtgate finds nothing to do.
func MendSchema() ([]string, error) {
	list, err := migrations.Mend.List()
	if err != nil {
		return nil, err
	}
	latest, err := migrations.Mend.Latest()
	if err != nil {
		return nil, err
	}
	stmts := make([]string, 0, len(list)+2)
	for _, m := range list {
		stmts = append(stmts, m.Up)
	}
	table := migrations.Mend.Table
	stmts = append(stmts,
		"CREATE TABLE `"+table+"` (version bigint not null primary key, dirty boolean not null)",
		fmt.Sprintf("INSERT INTO `%s` (version, dirty) VALUES (%d, 0)", table, latest))
	return stmts, nil
}

package mysqltest

import (
	"context"
	"database/sql"

	"github.com/mendq/mend/internal/mysqlx"
)

// errCannotConvert is MySQL's ER_CANNOT_CONVERT_STRING.
const errCannotConvert = 3854

// CountProcesslist runs query, a SELECT COUNT(*) over
// information_schema.processlist, and returns the count. MySQL gives the
// processlist's info as utf8mb3 and builds every row before any WHERE
// applies, so while any session of the shared server runs a statement
// holding bytes utf8mb3 cannot (a binary ID interpolated into it) the read
// fails with error 3854, whatever the query filters on. That statement ends
// in milliseconds: the read is asked again, up to 100 times.
func CountProcesslist(ctx context.Context, db *sql.DB, query string, args ...any) (int, error) {
	for attempt := 1; ; attempt++ {
		var n int
		err := db.QueryRowContext(ctx, query, args...).Scan(&n)
		if err == nil || mysqlx.ErrNumber(err) != errCannotConvert || attempt == 100 || ctx.Err() != nil {
			return n, err
		}
	}
}

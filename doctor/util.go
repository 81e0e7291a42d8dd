package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The small text helpers below are cmd/mend's, which prints the same
// words elsewhere; the checks keep their own so the package stands alone.

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "; ")
}

func fmtAge(d time.Duration) string { return FormatAge(d) }

// FormatAge prints a duration for people as doctor and mend's other
// commands print ages: "-" for zero or less, else rounded to its scale.
func FormatAge(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mysqlErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// accountQuery names the database and account a session works as.
const accountQuery = `-- name: DoctorAccount
SELECT DATABASE(), CURRENT_USER()`

// Account returns the database a session of db works in and its account,
// quoted for a GRANT ('user'@'host'): the advice of a denied statement
// names them.
func Account(ctx context.Context, db *sql.DB) (schema, grantee string, err error) {
	var user string
	if err := db.QueryRowContext(ctx, accountQuery).Scan(&schema, &user); err != nil {
		return "", "", fmt.Errorf("read the account: %w", err)
	}
	return schema, quoteAccount(user), nil
}

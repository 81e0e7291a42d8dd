package migrations

import (
	"fmt"
	"regexp"
	"strings"
)

// The compatibility rule. Every migration is one of two kinds:
//
//   - expand: it only adds what binaries built before it do not see: a
//     table, a view, a non-unique index, a column that is nullable or has a
//     default (so an older binary's INSERT, which does not name it, still
//     succeeds), or a view replaced with another (mend's binaries never
//     read views; they are for people). A binary keeps running on a schema
//     that is newer than it by expand migrations only.
//   - contract: it removes, renames or narrows something an older binary
//     may use (DROP, RENAME, MODIFY, CHANGE, a NOT NULL column without a
//     default, a unique key). It says so on its first line with
//     ContractMarker, and ships one release after the code stopped using
//     what it removes, so that every binary that still needs it is gone
//     before it runs. Binaries detect a contract that removed what they use
//     by the schema's shape (see Manifest) and refuse to run on it.
//
// A change of meaning without a change of shape (a new value in a column
// older binaries read, say) cannot be detected by older binaries and is
// not a migration: add a column or a table instead. TestMigrationRule holds
// the embedded files to the rule.

// ContractMarker is the first line of a contract migration's up file.
const ContractMarker = "-- mend: contract"

// OnlineMarker starts a line explaining why a migration cannot run
// online (ALGORITHM=INSTANT or INPLACE with LOCK=NONE) on some engine; the
// online-DDL test accepts a copying ALTER only with it.
const OnlineMarker = "-- mend: not online:"

// Kind is a migration's kind under the compatibility rule.
type Kind string

// The two kinds.
const (
	Expand   Kind = "expand"
	Contract Kind = "contract"
)

// Declared reports the kind a migration's up script declares: Contract
// when its first line is ContractMarker, else Expand.
func Declared(up string) Kind {
	first, _, _ := strings.Cut(strings.TrimLeft(up, " \t\r\n"), "\n")
	if strings.TrimSpace(first) == ContractMarker {
		return Contract
	}
	return Expand
}

var (
	sqlComment  = regexp.MustCompile(`(?m)--[^\n]*$`)
	spaces      = regexp.MustCompile(`\s+`)
	quotedText  = regexp.MustCompile(`'(?:[^'\\]|\\.|'')*'`)
	addColumn   = regexp.MustCompile(`^ADD (?:COLUMN )?` + "`?" + `(\w+)` + "`?" + ` (.*)$`)
	nonUniqueIx = regexp.MustCompile(`^ADD (?:INDEX|KEY|FULLTEXT|SPATIAL)\b`)
	createView  = regexp.MustCompile(`^CREATE (OR REPLACE )?(ALGORITHM=\w+ )?(DEFINER=\S+ )?(SQL SECURITY \w+ )?VIEW `)
)

// Breaks returns what in an up script breaks the expand rule, one reason
// per statement or clause, empty for a purely additive script. It reads the
// narrow DDL dialect mend's migrations use (one statement per file, clauses
// separated by top-level commas); anything it does not recognise counts as
// breaking, so a new form of statement must be taught here or declared.
func Breaks(up string) []string {
	text := sqlComment.ReplaceAllString(up, "")
	text = strings.TrimSpace(spaces.ReplaceAllString(text, " "))
	var out []string
	for _, stmt := range strings.Split(text, ";") {
		stmt = strings.TrimSpace(stmt)
		if stmt == "" {
			continue
		}
		if r := breaks(stmt); r != "" {
			out = append(out, r)
		}
	}
	return out
}

func breaks(stmt string) string {
	upper := strings.ToUpper(stmt)
	switch {
	case strings.HasPrefix(upper, "CREATE TABLE "), strings.HasPrefix(upper, "CREATE TABLE IF NOT EXISTS "):
		return ""
	case strings.HasPrefix(upper, "CREATE INDEX "):
		return ""
	case strings.HasPrefix(upper, "CREATE UNIQUE INDEX "):
		return "a new unique index can refuse an older binary's writes"
	case createView.MatchString(upper):
		return "" // binaries read no view
	case strings.HasPrefix(upper, "DROP VIEW "):
		return "" // binaries read no view
	case strings.HasPrefix(upper, "ALTER TABLE "):
		return alterBreaks(stmt)
	}
	return fmt.Sprintf("statement %q is not one the rule knows as additive", head(stmt))
}

// alterBreaks judges each top-level clause of an ALTER TABLE.
func alterBreaks(stmt string) string {
	rest := stmt[len("ALTER TABLE "):]
	_, clauses, _ := strings.Cut(rest, " ") // drop the table name
	var why []string
	for _, c := range splitTop(clauses) {
		c = strings.TrimSpace(c)
		u := strings.ToUpper(c)
		switch {
		case strings.HasPrefix(u, "ALGORITHM"), strings.HasPrefix(u, "LOCK"):
		case nonUniqueIx.MatchString(u):
		case strings.HasPrefix(u, "ADD UNIQUE"), strings.HasPrefix(u, "ADD PRIMARY"), strings.HasPrefix(u, "ADD CONSTRAINT"):
			why = append(why, fmt.Sprintf("%q can refuse an older binary's writes", head(c)))
		case strings.HasPrefix(u, "ADD "):
			m := addColumn.FindStringSubmatch(u)
			if m == nil {
				why = append(why, fmt.Sprintf("%q is not a column the rule can read", head(c)))
				continue
			}
			def := quotedText.ReplaceAllString(m[2], "''")
			notNull := strings.Contains(def, "NOT NULL")
			hasDefault := strings.Contains(def, " DEFAULT ") || strings.HasPrefix(def, "DEFAULT ")
			generated := strings.Contains(def, " AS (") || strings.Contains(def, "GENERATED ALWAYS") || strings.Contains(def, "AUTO_INCREMENT")
			if notNull && !hasDefault && !generated {
				why = append(why, fmt.Sprintf("column %s is NOT NULL without a default: an older binary's INSERT, which does not name it, fails", strings.ToLower(m[1])))
			}
		default:
			why = append(why, fmt.Sprintf("%q removes or changes what an older binary may use", head(c)))
		}
	}
	return strings.Join(why, "; ")
}

// splitTop splits s at commas outside parentheses and quotes.
func splitTop(s string) []string {
	var out []string
	depth, start, quote := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			quote = !quote
		case quote:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func head(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqlStatement is a string that begins like a statement mend would send:
// a keyword that opens one, then what follows it in SQL (SELECT then a
// select list, INSERT INTO, SET a variable, ...), optionally behind a
// "-- name:" comment. Words in prose ("SELECT command denied") begin no
// statement the pattern knows, and neither does lower case: mend writes
// its SQL keywords in capitals.
var sqlStatement = regexp.MustCompile(`(?s)^\s*(--[^\n]*\n\s*)*(` +
	`SELECT\s+(\*|@@|COUNT\(|DISTINCT\s|[A-Za-z_]+(\.[A-Za-z_]+)?\s*(,|\s+FROM\s|\s+AS\s|\()|VERSION\(|DATABASE\(|CURRENT_USER\(|NOW\(|1\b|GET_LOCK\()|` +
	`INSERT\s+(IGNORE\s+)?INTO\s|REPLACE\s+INTO\s|UPDATE\s+[A-Za-z_` + "`" + `]+\s+SET\s|DELETE\s+FROM\s|` +
	`SHOW\s+(GLOBAL\s+|SESSION\s+)?(VARIABLES|STATUS|GRANTS|CREATE|TABLES|DATABASES|PROCESSLIST|ENGINE)|` +
	`SET\s+(@@|SESSION\s|GLOBAL\s|PERSIST\s|NAMES\s|TRANSACTION\s|[A-Za-z_]+\s*=)|` +
	`(CREATE|DROP|ALTER|TRUNCATE)\s+(TEMPORARY\s+)?(TABLE|DATABASE|SCHEMA|VIEW|INDEX|USER)\b|` +
	`GRANT\s+[A-Z ,]+\s+ON\s|REVOKE\s|KILL\s|EXPLAIN\s|LOCK\s+TABLES|START\s+TRANSACTION|BEGIN\b|COMMIT\b|ROLLBACK\b)`)

// TestNoSQLInCmdMend: cmd/mend is wiring (flags, config, output, signals);
// every statement lives in storage/, host/, subscribe/ or doctor/, named
// for the processlist (issue 48). It scans every string literal of the
// package's non-test files, and the pieces of a concatenation together, so
// "CREATE DATABASE "+name counts.
func TestNoSQLInCmdMend(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sqlLiterals(f) {
			if sqlStatement.MatchString(s.text) {
				t.Errorf("%s: SQL in cmd/mend: %q; move it to the package it belongs to (storage/, host/, subscribe/, doctor/) as a named const", fset.Position(s.pos), firstLine(s.text))
			}
		}
	}
}

type literal struct {
	pos  token.Pos
	text string
}

// sqlLiterals returns each string literal of f, and each chain of
// literals joined by + (with whatever else between them) as one text.
func sqlLiterals(f *ast.File) []literal {
	var out []literal
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op == token.ADD {
				if s, ok := joined(n); ok {
					out = append(out, literal{n.Pos(), s})
					return false // the chain is one text; its parts are not reported again
				}
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				if s, err := strconv.Unquote(n.Value); err == nil {
					out = append(out, literal{n.Pos(), s})
				}
			}
		}
		return true
	})
	return out
}

// joined is a + chain's literals with a space for each operand that is
// not one; ok is false when it starts with no literal.
func joined(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			l, ok := joined(e.X)
			if !ok {
				return "", false
			}
			r, _ := joined(e.Y)
			if r == "" {
				r = " x "
			}
			return l + r, true
		}
	}
	return "", false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// TestNoSQLInCmdMendControl: the scan finds what it should, and passes
// over the prose cmd/mend prints.
func TestNoSQLInCmdMendControl(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"SELECT CURRENT_USER()", "SELECT @@version", "SELECT COUNT(*) FROM t", "SELECT a, b FROM t",
		"-- name: X\nSELECT x FROM t", "INSERT INTO t (a) VALUES (?)", "UPDATE mend_leases SET epoch = 0",
		"DELETE FROM t", "SHOW GRANTS", "SET SESSION x = 1", "CREATE DATABASE x", "DROP DATABASE IF EXISTS x",
		"CREATE TABLE IF NOT EXISTS t (a INT)", "EXPLAIN SELECT 1", "GRANT SELECT ON x.y TO z",
	} {
		if !sqlStatement.MatchString(s) {
			t.Errorf("%q is not found", s)
		}
	}
	for _, s := range []string{
		"SELECT command denied to user", "select a record to retry", "update the schema: run mend migrate up",
		"set --dsn", "show the lag per topic", "delete the group's rows", "create-if-absent", "drop any sql_mode parameter",
		"grant it to a separate user", "begin with", "explain why", "create database %s: %w",
	} {
		if sqlStatement.MatchString(s) {
			t.Errorf("%q is found, but is prose", s)
		}
	}
}

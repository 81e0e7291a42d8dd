package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mendq/mend"
)

var funcs = template.FuncMap{
	"dur":   dur,
	"ts":    ts,
	"clip":  clip,
	"count": func(c map[mend.State]int64, s string) int64 { return c[mend.State(s)] },
	// recordedN sums a queue's records of topics recorded for the audit or
	// handled by their host (mend.TopicKind.Recorded), shown apart.
	"recordedN": func(r map[mend.TopicKind]int64) int64 { return r[mend.TopicAudit] + r[mend.TopicHost] },
	"ident":     viewIdent,
	"quote":     func(s string) string { return quoteUnprintable([]byte(s)) },
	"add":       func(a, b int) int { return a + b },
	"isState":   func(r mend.Record, s string) bool { return string(r.State) == s },
	"noRetry":   noTarget,
	"stuck":     stuckWake,
	"sh":        shellQuote,
	"neg":       func(d time.Duration) time.Duration { return -d },
}

// shellQuote quotes s as one word for a POSIX shell, so a command line
// the page prints can be pasted as it is, whatever the bytes: bare when
// it holds only safe characters, in single quotes when printable (a quote
// written '\”), and in bash's $'...' with \xNN escapes when it holds a
// control byte or invalid UTF-8 (which single quotes would paste raw).
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:@%+=,-", r)))
	}) < 0 {
		return s
	}
	if printable([]byte(s)) && !strings.ContainsAny(s, "\n\t") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// dur prints a duration rounded for people: 850ms, 12.3s, 4m05s, 3h20m.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000000Z")
}

// clip shortens s to n runes for a table cell, marking the cut.
func clip(s string, n int) string {
	s = quoteUnprintable([]byte(s))
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// printable reports whether b is valid UTF-8 without control characters
// other than newline and tab.
func printable(b []byte) bool {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if (r == utf8.RuneError && size <= 1) || (!unicode.IsPrint(r) && r != '\n' && r != '\t' && r != ' ') {
			return false
		}
		b = b[size:]
	}
	return true
}

// quoteUnprintable is b as text, byte for byte: printable characters as
// they are, and each invalid byte or control character as \xNN (a
// backslash itself as \\ when any escape is needed, so the form stays
// unambiguous). The result is plain text; templates escape it for HTML.
func quoteUnprintable(b []byte) string {
	if printable(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&sb, `\x%02x`, b[0])
		case r == '\\':
			sb.WriteString(`\\`)
		case r == '\n' || r == '\t' || r == ' ' || unicode.IsPrint(r):
			sb.WriteRune(r)
		default:
			for _, c := range b[:size] {
				fmt.Fprintf(&sb, `\x%02x`, c)
			}
		}
		b = b[size:]
	}
	return sb.String()
}

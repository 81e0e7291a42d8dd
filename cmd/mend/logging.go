package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// redacted replaces a secret wherever it would be printed.
const redacted = "*****"

// scrubber removes known secrets (DSN passwords, whole DSNs) from text. Every
// log line and every error line the binary prints passes through it, so a
// password that ends up inside a driver error or a library's message is
// still never printed.
type scrubber struct {
	mu      sync.RWMutex
	secrets []string
}

// addDSN registers dsn's password, and the DSN itself, as secrets.
func (s *scrubber) addDSN(dsn string) {
	// --host-dsn=same is a word, not a DSN: as a "secret" it turned the
	// hint "mend doctor with the same flags" into "the ***** flags".
	if dsn == "" || dsn == hostDSNSame {
		return
	}
	cfg, err := mysql.ParseDSN(dsn)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && cfg.Passwd != "" {
		s.secrets = append(s.secrets, cfg.Passwd)
		if esc := strings.ReplaceAll(cfg.Passwd, `"`, `\"`); esc != cfg.Passwd {
			s.secrets = append(s.secrets, esc) // as %q would print it
		}
	}
	if err != nil || cfg.Passwd != "" {
		// An unparsable DSN may still hold a password somewhere in it.
		s.secrets = append(s.secrets, dsn)
	}
	// Longest first, so a DSN is replaced whole before its password.
	for i := 1; i < len(s.secrets); i++ {
		for j := i; j > 0 && len(s.secrets[j]) > len(s.secrets[j-1]); j-- {
			s.secrets[j], s.secrets[j-1] = s.secrets[j-1], s.secrets[j]
		}
	}
}

// clean returns text with every secret replaced.
func (s *scrubber) clean(text string) string {
	if s == nil {
		return text
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sec := range s.secrets {
		if sec != "" && strings.Contains(text, sec) {
			text = strings.ReplaceAll(text, sec, redacted)
		}
	}
	return text
}

// redactDSN returns dsn for display, with its password replaced. An
// unparsable DSN is not shown at all.
func redactDSN(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = redacted
	}
	return cfg.FormatDSN()
}

func parseLevel(s string) (slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level must be debug, info, warn or error, not %q", s)
	}
	return lvl, nil
}

// newLogger returns a text or JSON logger on w whose every attribute,
// message included, passes through the scrubber.
func newLogger(w io.Writer, format string, level slog.Level, scrub *scrubber) *slog.Logger {
	opts := &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Value.Kind() {
			case slog.KindDuration:
				// One unit per format: a duration reads "15s" in text and
				// JSON alike, never as nanoseconds beside a "15s".
				a.Value = slog.StringValue(a.Value.Duration().String())
			case slog.KindString:
				if c := scrub.clean(a.Value.String()); c != a.Value.String() {
					a.Value = slog.StringValue(c)
				}
			case slog.KindAny:
				switch v := a.Value.Any().(type) {
				case error:
					a.Value = slog.StringValue(scrub.clean(v.Error()))
				case fmt.Stringer:
					a.Value = slog.StringValue(scrub.clean(v.String()))
				}
			}
			return a
		},
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// driverLogger is where the MySQL driver's own messages go (packet errors,
// bad connections): the command's logger once its flags are parsed, so
// they are text or JSON like every other line. main installs driverLog as
// the driver's logger once, before any connection; the driver has no
// per-connection logger, and replacing its global later would race.
var driverLogger atomic.Pointer[slog.Logger]

// driverLog adapts the driver's Print-style logger to driverLogger, rate
// limited: after a server restart the driver logged 105 "packets.go:58
// unexpected EOF" lines, one per pooled connection it found dead.
type driverLog struct{ fallback io.Writer }

func (d driverLog) Print(v ...any) {
	msg := strings.TrimSpace(fmt.Sprint(v...))
	ok, suppressed := driverLimit.allow(time.Now())
	if !ok {
		return
	}
	if log := driverLogger.Load(); log != nil {
		if suppressed > 0 {
			log.Warn(msg, "suppressed_before", suppressed)
			return
		}
		log.Warn(msg)
		return
	}
	fmt.Fprintln(d.fallback, "mysql:", msg)
}

// Driver lines allowed per window; the rest are counted and the count is
// attached to the next line let through.
const (
	driverBurst  = 5
	driverWindow = 10 * time.Second
)

var driverLimit = &lineLimiter{burst: driverBurst, window: driverWindow}

// lineLimiter lets burst lines through per window.
type lineLimiter struct {
	burst      int
	window     time.Duration
	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

// reset starts a fresh window.
func (l *lineLimiter) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start, l.n, l.suppressed = time.Time{}, 0, 0
}

// allow reports whether a line at now may be printed, and how many were
// suppressed since the last one printed.
func (l *lineLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= l.window {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		return false, 0
	}
	l.n++
	s := l.suppressed
	l.suppressed = 0
	return true, s
}

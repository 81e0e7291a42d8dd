package console

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

//go:embed web/*.html web/static/*
var webFS embed.FS

// PageSizeDefault is how many rows a page lists when Config.PageSize is 0.
const PageSizeDefault = 50

// RefreshDefault is how often the pages' script reloads a page.
const RefreshDefault = 15 * time.Second

// Config configures a console. The zero value of every optional field is
// documented; Store is required.
type Config struct {
	// Store is mend's database (a *storage.DB). Required.
	Store Store
	// Lag, when set, reads the subscription's lag per dead-letter topic for
	// the overview (mend console --queue-dsn). Nil: no subscription section.
	Lag func(ctx context.Context) ([]TopicLag, error)
	// AllowActions turns on retry, resolve and lease release. Off, every
	// action is refused by the server (403), whatever a request carries.
	AllowActions bool
	// Auth authenticates every request when set; it is required with
	// AllowActions (an action records the person as its actor).
	Auth Authenticator
	// PageSize is the rows per page; 0 means PageSizeDefault.
	PageSize int
	// Refresh is the pages' reload interval; 0 means RefreshDefault,
	// negative turns the reload off.
	Refresh time.Duration
	// Redact, when set, removes secrets (a DSN's password) from every error
	// message before a page shows it; nil shows messages as they are.
	Redact func(string) string
	// Logger receives one line per action and per failed page; nil
	// discards.
	Logger *slog.Logger
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("console: a Store is required")
	case c.AllowActions && c.Auth == nil:
		return errors.New("console: actions need authentication (an auth file or a proxy's header): an action records who took it")
	case c.PageSize < 0 || c.PageSize > 1000:
		return fmt.Errorf("console: page size %d is out of 1..1000", c.PageSize)
	}
	return nil
}

// Server is the console's HTTP handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	tmpl    *template.Template
	mux     *http.ServeMux
	csrfKey []byte

	// Test hooks for the negative controls: a server that forgets a check
	// must be caught by the tests that check it. Never set outside tests.
	skipCSRF     bool
	skipReadOnly bool
}

// New returns a console serving cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.PageSize = cmp.Or(cfg.PageSize, PageSizeDefault)
	cfg.Refresh = cmp.Or(cfg.Refresh, RefreshDefault)
	s := &Server{cfg: cfg, log: cfg.Logger, csrfKey: make([]byte, 32)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "console")
	if _, err := rand.Read(s.csrfKey); err != nil {
		return nil, fmt.Errorf("console: csrf key: %w", err)
	}
	t, err := template.New("").Funcs(funcs).ParseFS(webFS, "web/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	s.tmpl = t
	static, err := fs.Sub(webFS, "web/static")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", s.page(s.overview))
	m.HandleFunc("GET /queue", s.page(s.queue))
	m.HandleFunc("GET /record/{id}", s.page(s.record))
	m.HandleFunc("GET /parked", s.page(s.parked))
	m.HandleFunc("GET /record/{id}/{action}", s.page(s.confirmRecord))
	m.HandleFunc("POST /record/{id}/{action}", s.action(s.doRecord))
	m.HandleFunc("GET /lease/release", s.page(s.confirmLease))
	m.HandleFunc("POST /lease/release", s.action(s.doLease))
	s.mux = m
	return s, nil
}

// ServeHTTP authenticates the request (when configured), sets the security
// headers and serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	user := ""
	if s.cfg.Auth != nil {
		u, ok := s.cfg.Auth.User(r)
		if !ok {
			s.cfg.Auth.Challenge(w)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		user = u
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
}

type userKey struct{}

func userOf(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// ---- CSRF ----

// csrfTTL is how long a confirmation page's token stays good.
const csrfTTL = 2 * time.Hour

// csrfToken is "<unix seconds>.<hex HMAC(key, user, seconds)>": tied to
// the authenticated person and this process (the key is random per start),
// and expiring after csrfTTL. There is no session cookie to steal: basic
// auth or the proxy authenticates every request, and the token proves the
// form came from a page this console served to that person.
func (s *Server) csrfToken(user string, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return ts + "." + s.csrfMAC(user, ts)
}

func (s *Server) csrfMAC(user, ts string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("mend-console-csrf\x00" + user + "\x00" + ts))
	return hex.EncodeToString(m.Sum(nil))
}

// csrfCheck reports why a form's token is refused, or nil.
func (s *Server) csrfCheck(r *http.Request, now time.Time) error {
	if s.skipCSRF {
		return nil
	}
	// A browser says where a request came from; refuse what another site
	// sent even before the token (defence in depth).
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("the request came from another site (%s)", site)
	}
	tok := r.PostFormValue("csrf")
	ts, mac, ok := strings.Cut(tok, ".")
	if tok == "" || !ok {
		return errors.New("the form carries no CSRF token: reload the confirmation page and submit it again")
	}
	if !hmac.Equal([]byte(mac), []byte(s.csrfMAC(userOf(r), ts))) {
		return errors.New("the form's CSRF token is not valid for you: reload the confirmation page")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)) > csrfTTL {
		return errors.New("the confirmation page is too old: reload it")
	}
	return nil
}

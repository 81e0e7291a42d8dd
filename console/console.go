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
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mendq/mend/doctor"
)

//go:embed web/*.html web/static/*
var webFS embed.FS

// PageSizeDefault is how many rows a page lists when Config.PageSize is 0.
const PageSizeDefault = 50

// RefreshDefault is how often the pages' script reloads a page.
const RefreshDefault = 15 * time.Second

// HealthEveryDefault is how often at most the overview runs Config.Health:
// the checks open their own connections, and a page reloads every
// RefreshDefault in every open tab.
const HealthEveryDefault = time.Minute

// Config configures a console. The zero value of every optional field is
// documented; Store is required.
type Config struct {
	// Store is mend's database (a *storage.DB). Required.
	Store Store
	// Lag, when set, reads the subscription's lag per dead-letter topic for
	// the overview (mend console --queue-dsn). Nil: no subscription section.
	Lag func(ctx context.Context) ([]TopicLag, error)
	// Binlog, when set, reads binlog mode's readers (their saved positions
	// and leases) for the overview. Nil, or none read: no binlog section.
	Binlog func(ctx context.Context) ([]BinlogReader, error)
	// Health, when set, runs mend doctor's checks (package doctor) of what
	// the console reads, for the overview's health line: the same checks,
	// with the same advice, as mend doctor and mend run's start-up. The
	// overview runs it at most once per HealthEvery and shows the last
	// result with its age. Nil: no health line.
	Health func(ctx context.Context) []doctor.Check
	// HealthEvery is how stale the health line may get; 0 means
	// HealthEveryDefault.
	HealthEvery time.Duration
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
	// Hosts are the Host header values the console answers (host or
	// host:port, compared without case): the listen address and the names
	// it is reached by through a proxy. A request naming another host is
	// refused with 421 before anything else, so a page whose DNS name is
	// rebound to the console's address cannot read it. Empty: loopback
	// names only (localhost, 127.0.0.0/8, ::1), any port.
	Hosts []string
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
	for _, h := range c.Hosts {
		if h == "" || strings.ContainsAny(h, "/ \t@") {
			return fmt.Errorf("console: host %q: want a host or host:port", h)
		}
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
	health  healthCache

	// Test hooks for the negative controls: a server that forgets a check
	// must be caught by the tests that check it. Never set outside tests.
	skipCSRF     bool
	skipReadOnly bool
	skipHost     bool // no Host check
	skipOrigin   bool // no Origin / Sec-Fetch-Site check
	csrfLoose    bool // a token bound to the person and time only, as before issue 46
	// The planted slips of a record action: versionUnguarded acts on the
	// record at whatever version it is; versionCheckOnly compares the
	// version the page confirmed but does not make the write depend on it
	// (check-then-act, as before); parkedUnchecked skips the console's own
	// "only parked" check (the store's remains).
	versionUnguarded, versionCheckOnly, parkedUnchecked bool
	// beforeWrite runs between an action's checks and its write.
	beforeWrite func()
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
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" with the console's own form posts, and the Origin
	// check (sameOrigin) could not tell them from another site's. Nothing
	// is sent to another origin either way.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !s.skipHost && !s.hostAllowed(r.Host) {
		s.log.Warn("refused: unknown Host", "host", r.Host, "path", r.URL.Path)
		http.Error(w, "this console does not answer for that host name (start it with --external-name to add one)", http.StatusMisdirectedRequest)
		return
	}
	user := ""
	if s.cfg.Auth != nil {
		var (
			u    string
			ok   bool
			wait time.Duration
		)
		if l, isL := s.cfg.Auth.(limiter); isL {
			u, ok, wait = l.authenticate(r)
		} else {
			u, ok = s.cfg.Auth.User(r)
		}
		if wait > 0 {
			s.log.Warn("refused: too many failed guesses", "addr", clientAddr(r))
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)+1))
			http.Error(w, "too many failed sign-ins from this name or address: wait and try again", http.StatusTooManyRequests)
			return
		}
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

// hostAllowed reports whether a request's Host names this console.
func (s *Server) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSpace(host))
	if host == "" {
		return false
	}
	if len(s.cfg.Hosts) == 0 {
		return loopbackHost(host)
	}
	for _, h := range s.cfg.Hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// loopbackHost says host[:port] names this machine's loopback: localhost,
// 127.0.0.0/8 or ::1. A rebound DNS name is none of these.
func loopbackHost(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return false // a bare IPv6 address without brackets is not a Host
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if name == "localhost" {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports why a state-changing request did not come from this
// console's own pages, or nil. A browser sends Origin on a POST, and
// Sec-Fetch-Site; when sent they must name this console (the Host is
// checked already). Tools that send neither (curl) rely on the token.
func (s *Server) sameOrigin(r *http.Request) error {
	if s.skipOrigin {
		return nil
	}
	if o := r.Header.Values("Origin"); len(o) > 0 {
		u, err := url.Parse(o[0])
		if len(o) > 1 || err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, r.Host) ||
			u.Path != "" || u.User != nil {
			return fmt.Errorf("the request came from another origin (%.100q), not this console's page", strings.Join(o, ", "))
		}
	}
	if site := r.Header.Values("Sec-Fetch-Site"); len(site) > 0 && (len(site) > 1 || site[0] != "same-origin") {
		return fmt.Errorf("the request came from another site (Sec-Fetch-Site %.40q)", strings.Join(site, ", "))
	}
	return nil
}

// ---- CSRF ----

// csrfTTL is how long a confirmation page's token stays good: long enough
// to read the page and type a reason, short enough that a token left in a
// tab or a log is soon worthless.
const csrfTTL = 10 * time.Minute

// csrfToken is "<unix seconds>.<hex HMAC(key, user, action, target,
// seconds)>": tied to the authenticated person, this process (the key is
// random per start), one action and one target at one version (a record's
// ID and version, a queue's lease epoch), expiring after csrfTTL. There is
// no session cookie to steal: basic auth or the proxy authenticates every
// request, and the token proves the form came from the confirmation page
// this console served to that person for that change.
func (s *Server) csrfToken(user, action, target string, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return ts + "." + s.csrfMAC(user, action, target, ts)
}

func (s *Server) csrfMAC(user, action, target, ts string) string {
	if s.csrfLoose {
		action, target = "", ""
	}
	m := hmac.New(sha256.New, s.csrfKey)
	// Each field is length-prefixed: no two (user, action, target) tuples
	// hash the same bytes.
	for _, f := range []string{"mend-console-csrf/2", user, action, target, ts} {
		m.Write([]byte(strconv.Itoa(len(f)) + ":" + f))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// recordTarget and leaseTarget name what a token allows changing.
func recordTarget(id string, version int64) string {
	return "record " + id + " version " + strconv.FormatInt(version, 10)
}
func leaseTarget(queue string, epoch int64) string {
	return "lease " + strconv.Quote(queue) + " epoch " + strconv.FormatInt(epoch, 10)
}

// csrfCheck reports why a form's token is refused for action on target,
// or nil.
func (s *Server) csrfCheck(r *http.Request, action, target string, now time.Time) error {
	if s.skipCSRF {
		return nil
	}
	tok := r.PostFormValue("csrf")
	ts, mac, ok := strings.Cut(tok, ".")
	if tok == "" || !ok {
		return errors.New("the form carries no CSRF token: reload the confirmation page and submit it again")
	}
	if !hmac.Equal([]byte(mac), []byte(s.csrfMAC(userOf(r), action, target, ts))) {
		return errors.New("the form's CSRF token is not valid for you and this change: reload the confirmation page")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)) > csrfTTL || time.Unix(sec, 0).Sub(now) > time.Minute {
		return fmt.Errorf("the confirmation page is older than %s: reload it", csrfTTL)
	}
	return nil
}

package console

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Authenticator says who is asking. User returns the person's name and
// true, or false to refuse the request; Challenge adds what a refused
// browser needs to ask for credentials.
type Authenticator interface {
	User(r *http.Request) (string, bool)
	Challenge(w http.ResponseWriter)
}

// limiter is implemented by an Authenticator that refuses for a while
// after too many failed guesses: the console answers 429 then.
type limiter interface {
	authenticate(r *http.Request) (user string, ok bool, retryAfter time.Duration)
}

// Failed guesses BasicAuth allows in a window, per user name (known or
// not: the limit must not tell them apart) and per client address, before
// it refuses that name or address without checking until the window ends.
const (
	GuessesPerUser    = 10
	GuessesPerAddress = 30
	GuessWindow       = 15 * time.Minute
	// guessKeysMax bounds each table of counted names or addresses; when
	// one is full of live entries, a new name or address is refused
	// (fail closed) until entries expire.
	guessKeysMax = 10_000
)

// BasicAuth checks HTTP basic credentials against bcrypt hashes, as an
// htpasswd file written with `htpasswd -B` holds them.
//
// It leaks nothing about which names exist: an unknown name costs a bcrypt
// comparison against a decoy hash of the file's highest cost, as a wrong
// password does, and counts against the same limits. Failed guesses are
// limited per name and per client address (GuessesPerUser,
// GuessesPerAddress in GuessWindow). Verified credentials are cached by
// the name and the password together, so bcrypt runs once per person and
// password, and a wrong password is never let in by an earlier right one.
type BasicAuth struct {
	hashes map[string][]byte
	decoy  []byte // bcrypt hash of a random password: unknown names are checked against it

	perUser, perAddr int
	window           time.Duration
	now              func() time.Time
	compare          func(hash, pass []byte) error

	mu     sync.Mutex
	ok     map[[32]byte]bool // credentials already verified: bcrypt costs ~50 ms a check
	byUser map[string]*guesses
	byAddr map[string]*guesses

	cacheByUserOnly bool // test hook: the planted slip of a cache keyed by the name alone
	noDecoy         bool // test hook: answer an unknown name at once
}

type guesses struct {
	n     int
	until time.Time // the window's end
}

// LoadBasicAuth reads an htpasswd file of "user:$2y$..." lines (bcrypt
// only; blank lines and # comments are skipped).
func LoadBasicAuth(path string) (*BasicAuth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("console: auth file: %w", err)
	}
	return ParseBasicAuth(b)
}

// ParseBasicAuth parses the contents of an htpasswd file (bcrypt only).
func ParseBasicAuth(b []byte) (*BasicAuth, error) {
	a := &BasicAuth{hashes: map[string][]byte{}, ok: map[[32]byte]bool{}, byUser: map[string]*guesses{}, byAddr: map[string]*guesses{},
		perUser: GuessesPerUser, perAddr: GuessesPerAddress, window: GuessWindow, now: time.Now, compare: bcrypt.CompareHashAndPassword}
	sc := bufio.NewScanner(bytes.NewReader(b))
	cost := bcrypt.MinCost
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("console: auth file line %d: want user:bcrypt-hash", n)
		}
		c, err := bcrypt.Cost([]byte(hash))
		if err != nil {
			return nil, fmt.Errorf("console: auth file line %d (user %q): not a bcrypt hash (htpasswd -B makes one): %w", n, user, err)
		}
		cost = max(cost, c)
		a.hashes[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("console: auth file: %w", err)
	}
	if len(a.hashes) == 0 {
		return nil, errors.New("console: auth file names no user")
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("console: decoy password: %w", err)
	}
	decoy, err := bcrypt.GenerateFromPassword([]byte(fmt.Sprintf("%x", secret)), cost)
	if err != nil {
		return nil, fmt.Errorf("console: decoy hash: %w", err)
	}
	a.decoy = decoy
	return a, nil
}

// User implements Authenticator.
func (a *BasicAuth) User(r *http.Request) (string, bool) {
	u, ok, _ := a.authenticate(r)
	return u, ok
}

func (a *BasicAuth) authenticate(r *http.Request) (string, bool, time.Duration) {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return "", false, 0
	}
	addr := clientAddr(r)
	now := a.now()
	key := sha256.Sum256([]byte(user + "\x00" + pass))
	if a.cacheByUserOnly {
		key = sha256.Sum256([]byte(user))
	}
	a.mu.Lock()
	if wait := a.limited(now, user, addr); wait > 0 {
		a.mu.Unlock()
		return "", false, wait
	}
	seen := a.ok[key]
	a.mu.Unlock()
	if seen {
		return user, true, 0
	}
	hash, known := a.hashes[user]
	if !known {
		if a.noDecoy {
			a.failed(now, user, addr)
			return "", false, 0
		}
		hash = a.decoy // the same work as a wrong password: names are not told apart by time
	}
	if a.compare(hash, []byte(pass)) != nil || !known {
		a.failed(now, user, addr)
		return "", false, 0
	}
	a.mu.Lock()
	if len(a.ok) >= guessKeysMax {
		clear(a.ok)
	}
	a.ok[key] = true
	delete(a.byUser, user)
	a.mu.Unlock()
	return user, true, 0
}

// limited says how long user or addr is still refused, or 0. Held: a.mu.
func (a *BasicAuth) limited(now time.Time, user, addr string) time.Duration {
	var wait time.Duration
	for _, c := range []struct {
		m     map[string]*guesses
		k     string
		limit int
	}{{a.byUser, user, a.perUser}, {a.byAddr, addr, a.perAddr}} {
		g := c.m[c.k]
		if g == nil {
			if len(c.m) >= guessKeysMax && !purge(c.m, now) {
				wait = max(wait, a.window) // full of live entries: fail closed
			}
			continue
		}
		if !now.Before(g.until) {
			delete(c.m, c.k)
			continue
		}
		if g.n >= c.limit {
			wait = max(wait, g.until.Sub(now))
		}
	}
	return wait
}

// failed counts a failed guess against user and addr.
func (a *BasicAuth) failed(now time.Time, user, addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range []struct {
		m map[string]*guesses
		k string
	}{{a.byUser, user}, {a.byAddr, addr}} {
		g := c.m[c.k]
		if g == nil || !now.Before(g.until) {
			if len(c.m) >= guessKeysMax && !purge(c.m, now) {
				continue
			}
			g = &guesses{until: now.Add(a.window)}
			c.m[c.k] = g
		}
		g.n++
	}
}

// purge drops the expired entries of m and says whether room was made.
func purge(m map[string]*guesses, now time.Time) bool {
	for k, g := range m {
		if !now.Before(g.until) {
			delete(m, k)
		}
	}
	return len(m) < guessKeysMax
}

// clientAddr is the request's peer address without the port.
func clientAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// Challenge implements Authenticator.
func (a *BasicAuth) Challenge(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="mend console", charset="UTF-8"`)
}

// ProxySecretHeaderDefault is the header that carries the shared secret
// an authenticating proxy adds to every request it forwards.
const ProxySecretHeaderDefault = "X-Mend-Proxy-Secret"

// ProxyHeader trusts a header an authenticating proxy in front sets (such
// as oauth2-proxy's X-Forwarded-User), but only on a request that also
// carries the shared Secret in SecretHeader: any process on the machine
// (and any web page whose name is rebound to loopback) reaches a loopback
// port and can set a header, but does not know the secret. mend console
// refuses it on a non-loopback address too.
//
// The header must come exactly once, one value (no comma): a proxy that
// appends its value to one the client sent would otherwise let the client
// name itself. An empty Secret refuses every request.
type ProxyHeader struct {
	Name         string
	SecretHeader string // ProxySecretHeaderDefault when empty
	Secret       string
}

// User implements Authenticator.
func (p ProxyHeader) User(r *http.Request) (string, bool) {
	sh := p.SecretHeader
	if sh == "" {
		sh = ProxySecretHeaderDefault
	}
	sec := r.Header.Values(sh)
	if p.Secret == "" || len(sec) != 1 || subtle.ConstantTimeCompare([]byte(sec[0]), []byte(p.Secret)) != 1 {
		return "", false
	}
	vs := r.Header.Values(p.Name)
	if len(vs) != 1 {
		return "", false
	}
	u := strings.TrimSpace(vs[0])
	if u == "" || len(u) > 200 || strings.ContainsAny(u, ",\x00\r\n") {
		return "", false
	}
	return u, true
}

// Challenge implements Authenticator; the proxy does the asking.
func (ProxyHeader) Challenge(http.ResponseWriter) {}

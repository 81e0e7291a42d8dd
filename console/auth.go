package console

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// Authenticator says who is asking. User returns the person's name and
// true, or false to refuse the request; Challenge adds what a refused
// browser needs to ask for credentials.
type Authenticator interface {
	User(r *http.Request) (string, bool)
	Challenge(w http.ResponseWriter)
}

// BasicAuth checks HTTP basic credentials against bcrypt hashes, as an
// htpasswd file written with `htpasswd -B` holds them.
type BasicAuth struct {
	hashes map[string][]byte

	mu sync.Mutex
	ok map[[32]byte]bool // credentials already verified: bcrypt costs ~50 ms a check
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
	a := &BasicAuth{hashes: map[string][]byte{}, ok: map[[32]byte]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("console: auth file line %d: want user:bcrypt-hash", n)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("console: auth file line %d (user %q): not a bcrypt hash (htpasswd -B makes one): %w", n, user, err)
		}
		a.hashes[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("console: auth file: %w", err)
	}
	if len(a.hashes) == 0 {
		return nil, errors.New("console: auth file names no user")
	}
	return a, nil
}

// User implements Authenticator.
func (a *BasicAuth) User(r *http.Request) (string, bool) {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return "", false
	}
	hash, known := a.hashes[user]
	if !known {
		return "", false
	}
	key := sha256.Sum256([]byte(user + "\x00" + pass))
	a.mu.Lock()
	seen := a.ok[key]
	a.mu.Unlock()
	if seen {
		return user, true
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(pass)) != nil {
		return "", false
	}
	a.mu.Lock()
	a.ok[key] = true
	a.mu.Unlock()
	return user, true
}

// Challenge implements Authenticator.
func (a *BasicAuth) Challenge(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="mend console", charset="UTF-8"`)
}

// ProxyHeader trusts a header an authenticating proxy in front sets (such
// as oauth2-proxy's X-Forwarded-User). Only safe when nothing but the proxy
// can reach the console: mend console refuses it on a non-loopback address.
type ProxyHeader struct {
	Name string
}

// User implements Authenticator.
func (p ProxyHeader) User(r *http.Request) (string, bool) {
	u := strings.TrimSpace(r.Header.Get(p.Name))
	if u == "" || len(u) > 200 {
		return "", false
	}
	return u, true
}

// Challenge implements Authenticator; the proxy does the asking.
func (ProxyHeader) Challenge(http.ResponseWriter) {}

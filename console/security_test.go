package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/mendq/mend"
)

// The security tests of issue 46. Each has a negative control: a server
// without the check (a test hook) must fail the same check.

const proxySecret = "s3cret-from-the-proxy"

// proxyAuth is the --auth-header authenticator with its shared secret.
func proxyAuth() Authenticator {
	return ProxyHeader{Name: "X-Forwarded-User", Secret: proxySecret}
}

// send serves req on s in process and returns the status and body.
func send(s *Server, req *http.Request) (int, string) {
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

// request is a request to s at the loopback address the tests serve on,
// with the proxy's headers (user and secret) when user is set.
func request(method, path, user string, form url.Values) *http.Request {
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, "http://127.0.0.1:8089"+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, "http://127.0.0.1:8089"+path, nil)
	}
	if user != "" {
		req.Header.Set("X-Forwarded-User", user)
		req.Header.Set(ProxySecretHeaderDefault, proxySecret)
	}
	return req
}

// version is a record's version as SQL reads it.
func (b *bundle) version(t *testing.T, id mend.RecordID) int64 {
	t.Helper()
	var v int64
	if err := b.sql.QueryRow(`SELECT version FROM mend_records WHERE record_id = ?`, id[:]).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// proxyConsole is a console with actions behind the authenticating proxy,
// as `mend console --allow-actions --auth-header X-Forwarded-User
// --auth-secret-file F` serves it on 127.0.0.1:8089.
func (b *bundle) proxyConsole(t *testing.T, hook func(*Server)) *Server {
	t.Helper()
	s, err := New(Config{Store: b.store, AllowActions: true, Auth: proxyAuth(), Hosts: []string{"127.0.0.1:8089", "localhost:8089"}})
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(s)
	}
	return s
}

// rebindAttack is the attack: a page at evil.example, its name
// rebound to 127.0.0.1, reads a confirmation page and posts it as its own
// origin would (same-origin to the browser), naming itself in the proxy's
// header. It reports an error if the record changed or a read succeeded.
func (b *bundle) rebindAttack(t *testing.T, s *Server, rec mend.Record) error {
	t.Helper()
	const host = "evil.example:8089"
	get := request(http.MethodGet, "/record/"+rec.ID.String()+"/resolve", "", nil)
	get.Host = host
	get.Header.Set("X-Forwarded-User", "mallory")
	if code, body := send(s, get); code == http.StatusOK {
		return fmt.Errorf("GET with Host %s: 200, the page is readable: %.100s", host, body)
	}
	// Had it read a token (a planted one, from a broken server), the post:
	tok := s.csrfToken("mallory", "resolve", recordTarget(rec.ID.String(), rec.Version), time.Now())
	post := request(http.MethodPost, "/record/"+rec.ID.String()+"/resolve", "", url.Values{"csrf": {tok}, "reason": {"pwned"}, "version": {fmt.Sprint(rec.Version)}})
	post.Host = host
	post.Header.Set("X-Forwarded-User", "mallory")
	post.Header.Set("Origin", "http://"+host)
	post.Header.Set("Sec-Fetch-Site", "same-origin")
	code, body := send(s, post)
	if v := b.version(t, rec.ID); v != rec.Version || code == http.StatusOK {
		return fmt.Errorf("POST with Host %s: %d, version %d -> %d: %.200s", host, code, rec.Version, v, body)
	}
	return nil
}

func TestConsoleHostAndOrigin(t *testing.T) {
	b := setup(t)
	t.Run("rebinding is refused", func(t *testing.T) {
		s := b.proxyConsole(t, nil)
		if err := b.rebindAttack(t, s, b.other); err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"evil.example", "evil.example:8089", "127.0.0.1.evil.example:8089", "127.0.0.1:9999", ""} {
			req := request(http.MethodGet, "/", "alice", nil)
			req.Host = host
			if code, _ := send(s, req); code != http.StatusMisdirectedRequest {
				t.Errorf("Host %q: %d, want 421", host, code)
			}
		}
		for _, host := range []string{"127.0.0.1:8089", "LOCALHOST:8089"} {
			req := request(http.MethodGet, "/static/style.css", "alice", nil)
			req.Host = host
			if code, _ := send(s, req); code != http.StatusOK {
				t.Errorf("Host %q (configured): %d, want 200", host, code)
			}
		}
	})
	t.Run("rebinding negative control", func(t *testing.T) {
		// Today's console: any Host, the proxy's header alone.
		s := b.proxyConsole(t, func(s *Server) {
			s.skipHost = true
			s.cfg.Auth = headerOnly{}
		})
		if err := b.rebindAttack(t, s, b.other); err == nil {
			t.Fatal("a server without the Host check and the proxy's secret passed the rebinding check")
		}
	})
	t.Run("default hosts are loopback names", func(t *testing.T) {
		s, err := New(Config{Store: b.store})
		if err != nil {
			t.Fatal(err)
		}
		for host, want := range map[string]int{"127.0.0.1:8089": 200, "localhost:1": 200, "[::1]:8089": 200, "127.0.0.2": 200,
			"evil.example:8089": 421, "localhost.evil.example": 421, "0.0.0.0:8089": 421, "::1": 421} {
			req := request(http.MethodGet, "/static/style.css", "", nil)
			req.Host = host
			if code, _ := send(s, req); code != want {
				t.Errorf("Host %q: %d, want %d", host, code, want)
			}
		}
	})
	t.Run("the proxy's secret", func(t *testing.T) {
		s := b.proxyConsole(t, nil)
		for name, set := range map[string]func(h http.Header){
			"no secret":     func(h http.Header) { h.Del(ProxySecretHeaderDefault) },
			"wrong secret":  func(h http.Header) { h.Set(ProxySecretHeaderDefault, proxySecret+"x") },
			"two secrets":   func(h http.Header) { h.Add(ProxySecretHeaderDefault, "other") },
			"two users":     func(h http.Header) { h.Add("X-Forwarded-User", "mallory") },
			"appended user": func(h http.Header) { h.Set("X-Forwarded-User", "mallory, alice") },
			"no user":       func(h http.Header) { h.Del("X-Forwarded-User") },
		} {
			req := request(http.MethodGet, "/static/style.css", "alice", nil)
			set(req.Header)
			if code, _ := send(s, req); code != http.StatusUnauthorized {
				t.Errorf("%s: %d, want 401", name, code)
			}
		}
		if code, _ := send(s, request(http.MethodGet, "/static/style.css", "alice", nil)); code != http.StatusOK {
			t.Errorf("the proxy's request: %d, want 200", code)
		}
		if _, ok := (ProxyHeader{Name: "X-Forwarded-User"}).User(request(http.MethodGet, "/", "alice", nil)); ok {
			t.Error("a ProxyHeader without a secret let a request in")
		}
		if _, ok := (headerOnly{}).User(request(http.MethodGet, "/", "", nil)); ok {
			t.Error("negative control: headerOnly let a request without the header in")
		}
	})
	crossSite := func(t *testing.T, s *Server, rec mend.Record) []string {
		t.Helper()
		tok := s.csrfToken("alice", "resolve", recordTarget(rec.ID.String(), rec.Version), time.Now())
		var accepted []string
		for name, h := range map[string]map[string]string{
			"Origin evil, no Sec-Fetch-Site": {"Origin": "https://evil.example"},
			"Origin null":                    {"Origin": "null"},
			"Origin other port":              {"Origin": "http://127.0.0.1:9999"},
			"Sec-Fetch-Site cross-site":      {"Sec-Fetch-Site": "cross-site"},
			"Sec-Fetch-Site same-site":       {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8089"},
			"Sec-Fetch-Site none":            {"Sec-Fetch-Site": "none"},
		} {
			req := request(http.MethodPost, "/record/"+rec.ID.String()+"/resolve", "alice", url.Values{"csrf": {tok}, "reason": {"x"}, "version": {fmt.Sprint(rec.Version)}})
			for k, v := range h {
				req.Header.Set(k, v)
			}
			code, _ := send(s, req)
			if code != http.StatusForbidden || b.version(t, rec.ID) != rec.Version {
				accepted = append(accepted, fmt.Sprintf("%s: %d", name, code))
			}
		}
		sort.Strings(accepted)
		return accepted
	}
	t.Run("cross-site posts", func(t *testing.T) {
		s := b.proxyConsole(t, nil)
		if acc := crossSite(t, s, b.other); len(acc) > 0 {
			t.Errorf("cross-site posts not refused: %s", strings.Join(acc, "; "))
		}
		// The same post from the console's own page goes through.
		tok := s.csrfToken("alice", "resolve", recordTarget(b.other.ID.String(), b.other.Version), time.Now())
		req := request(http.MethodPost, "/record/"+b.other.ID.String()+"/resolve", "alice", url.Values{"csrf": {tok}, "reason": {"x"}, "version": {fmt.Sprint(b.other.Version)}})
		req.Header.Set("Origin", "http://127.0.0.1:8089")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if code, body := send(s, req); code != http.StatusOK {
			t.Errorf("same-origin post: %d %.300s", code, body)
		}
	})
	t.Run("cross-site negative control", func(t *testing.T) {
		s := b.proxyConsole(t, func(s *Server) { s.skipOrigin = true })
		if acc := crossSite(t, s, b.parked); len(acc) == 0 {
			t.Fatal("a server without the Origin check refused every cross-site post")
		}
	})
}

// headerOnly is today's --auth-header: the header's first value, no secret.
type headerOnly struct{}

func (headerOnly) User(r *http.Request) (string, bool) {
	u := r.Header.Get("X-Forwarded-User")
	return u, u != ""
}
func (headerOnly) Challenge(http.ResponseWriter) {}

func TestConsoleTokens(t *testing.T) {
	b := setup(t)
	// misuse posts each token where it was not issued and lists what was
	// accepted.
	misuse := func(t *testing.T, s *Server) []string {
		t.Helper()
		now := time.Now()
		rt := func(rec mend.Record) string { return recordTarget(rec.ID.String(), rec.Version) }
		var accepted []string
		for _, c := range []struct {
			name, tok string
			rec       mend.Record
			action    string
		}{
			{"a lease release's token on a resolve", s.csrfToken("alice", "release", leaseTarget(queueName, 1), now), b.parked, "resolve"},
			{"a retry's token on a resolve", s.csrfToken("alice", "retry", rt(b.parked), now), b.parked, "resolve"},
			{"another record's token", s.csrfToken("alice", "resolve", rt(b.other), now), b.parked, "resolve"},
			{"bob's token", s.csrfToken("bob", "resolve", rt(b.parked), now), b.parked, "resolve"},
			{"an 11-minute-old token", s.csrfToken("alice", "resolve", rt(b.parked), now.Add(-11*time.Minute)), b.parked, "resolve"},
		} {
			req := request(http.MethodPost, "/record/"+c.rec.ID.String()+"/"+c.action, "alice",
				url.Values{"csrf": {c.tok}, "reason": {"x"}, "version": {fmt.Sprint(c.rec.Version)}})
			code, _ := send(s, req)
			if code != http.StatusForbidden || b.version(t, c.rec.ID) != c.rec.Version {
				accepted = append(accepted, fmt.Sprintf("%s: %d", c.name, code))
			}
		}
		// A record's token on the lease.
		req := request(http.MethodPost, "/lease/release", "alice", url.Values{"csrf": {s.csrfToken("alice", "resolve", rt(b.parked), now)}, "queue": {queueName}, "epoch": {"1"}})
		if code, _ := send(s, req); code != http.StatusForbidden {
			accepted = append(accepted, fmt.Sprintf("a record's token on a lease release: %d", code))
		}
		return accepted
	}
	t.Run("a token is for one action on one target", func(t *testing.T) {
		s := b.proxyConsole(t, nil)
		if acc := misuse(t, s); len(acc) > 0 {
			t.Errorf("tokens accepted where they were not issued: %s", strings.Join(acc, "; "))
		}
		// The right token at the right version goes through.
		tok := s.csrfToken("alice", "resolve", recordTarget(b.parked.ID.String(), b.parked.Version), time.Now().Add(-9*time.Minute))
		if code, body := send(s, request(http.MethodPost, "/record/"+b.parked.ID.String()+"/resolve", "alice",
			url.Values{"csrf": {tok}, "reason": {"x"}, "version": {fmt.Sprint(b.parked.Version)}})); code != http.StatusOK {
			t.Errorf("the right token: %d %.300s", code, body)
		}
	})
	t.Run("negative control: a token for anything, for two hours", func(t *testing.T) {
		b := setup(t)
		s := b.proxyConsole(t, func(s *Server) { s.csrfLoose = true })
		acc := misuse(t, s)
		if len(acc) < 3 {
			t.Fatalf("a server with loose tokens was caught only %v", acc)
		}
	})
}

// authFile is an htpasswd file with alice and bob at cost, and its auth.
func authFile(t *testing.T, cost int) *BasicAuth {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseBasicAuth([]byte("alice:" + string(hash) + "\nbob:" + string(hash) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func basic(user, pass, addr string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8089/", nil)
	req.SetBasicAuth(user, pass)
	req.RemoteAddr = addr + ":5555"
	return req
}

func TestConsoleBasicAuth(t *testing.T) {
	t.Run("the right password once, then a wrong one: refused", func(t *testing.T) {
		a := authFile(t, bcrypt.MinCost)
		if _, ok := a.User(basic("alice", password, "10.0.0.1")); !ok {
			t.Fatal("the right password was refused")
		}
		if _, ok := a.User(basic("alice", "wrong", "10.0.0.1")); ok {
			t.Fatal("a wrong password was let in after the right one")
		}
		a = authFile(t, bcrypt.MinCost)
		a.cacheByUserOnly = true // negative control: a cache keyed on the name alone
		a.User(basic("alice", password, "10.0.0.1"))
		if _, ok := a.User(basic("alice", "wrong", "10.0.0.1")); !ok {
			t.Fatal("negative control: the cache keyed on the name alone was not caught")
		}
	})
	t.Run("an unknown name costs what a wrong password costs", func(t *testing.T) {
		// Counted, not timed: each refusal runs exactly one bcrypt
		// comparison against a hash of the file's cost.
		check := func(a *BasicAuth) (unknown, wrong []int) {
			var costs *[]int
			a.compare = func(hash, pass []byte) error {
				c, _ := bcrypt.Cost(hash)
				*costs = append(*costs, c)
				return bcrypt.CompareHashAndPassword(hash, pass)
			}
			costs = &unknown
			a.User(basic("mallory", "guess", "10.0.0.2"))
			costs = &wrong
			a.User(basic("alice", "guess", "10.0.0.2"))
			return unknown, wrong
		}
		u, w := check(authFile(t, bcrypt.MinCost+2))
		if fmt.Sprint(u) != fmt.Sprint(w) || len(w) != 1 {
			t.Errorf("bcrypt comparisons: unknown name %v, wrong password %v: want the same one", u, w)
		}
		a := authFile(t, bcrypt.MinCost+2)
		a.noDecoy = true
		if u, w := check(a); fmt.Sprint(u) == fmt.Sprint(w) {
			t.Error("negative control: a server answering unknown names at once was not caught")
		}
		// And timed, coarsely: the unknown name takes at least a third of
		// the wrong password's time (today's console: a microsecond against
		// bcrypt's milliseconds).
		a = authFile(t, 8)
		best := func(user string) time.Duration {
			d := time.Hour
			for range 5 {
				t0 := time.Now()
				a.User(basic(user, "guess", "10.0.0."+fmt.Sprint(len(user))))
				d = min(d, time.Since(t0))
			}
			return d
		}
		if du, dw := best("nobody-here"), best("alice"); du < dw/3 {
			t.Errorf("unknown name answered in %s, a wrong password in %s", du, dw)
		}
	})
	t.Run("failed guesses are limited per name and per address", func(t *testing.T) {
		a := authFile(t, bcrypt.MinCost)
		now := time.Unix(1_700_000_000, 0)
		a.now = func() time.Time { return now }
		for i := range GuessesPerUser {
			a.User(basic("alice", "guess", fmt.Sprintf("10.1.0.%d", i)))
		}
		if _, ok, wait := a.authenticate(basic("alice", password, "10.1.1.1")); ok || wait <= 0 {
			t.Errorf("after %d failed guesses from many addresses, alice's right password: ok %v wait %s, want refused for a while", GuessesPerUser, ok, wait)
		}
		if _, ok := a.User(basic("bob", password, "10.1.1.1")); !ok {
			t.Error("bob is refused for alice's failed guesses")
		}
		now = now.Add(GuessWindow)
		if _, ok := a.User(basic("alice", password, "10.1.1.1")); !ok {
			t.Error("alice is still refused after the window")
		}
		// Per address: many names (unknown ones too) from one address.
		for i := range GuessesPerAddress {
			a.User(basic(fmt.Sprintf("user%d", i), "guess", "10.2.0.1"))
		}
		if _, ok, wait := a.authenticate(basic("bob", password, "10.2.0.1")); ok || wait <= 0 {
			t.Errorf("after %d failed guesses from one address: ok %v wait %s, want refused", GuessesPerAddress, ok, wait)
		}
		if _, ok := a.User(basic("bob", password, "10.2.0.2")); !ok {
			t.Error("another address is refused")
		}
	})
	// Issue 57: a limit keyed with the port (RemoteAddr whole) gives a
	// client fresh guesses on every new connection, since each comes from
	// another ephemeral port. The other subtests send one port throughout,
	// so they pass with that slip.
	t.Run("a client that reconnects gets no fresh guesses", func(t *testing.T) {
		for _, host := range []string{"10.4.0.1", "[2001:db8::7]"} {
			a := authFile(t, bcrypt.MinCost)
			now := time.Unix(1_700_000_000, 0)
			a.now = func() time.Time { return now }
			for i := range GuessesPerAddress {
				req := basic(fmt.Sprintf("user%d", i), "guess", host)
				req.RemoteAddr = fmt.Sprintf("%s:%d", host, 40000+i) // a new connection each time
				a.User(req)
			}
			req := basic("bob", password, host)
			req.RemoteAddr = host + ":50000"
			if _, ok, wait := a.authenticate(req); ok || wait <= 0 {
				t.Errorf("%s: after %d failed guesses over as many connections: ok %v wait %s, want the address refused", host, GuessesPerAddress, ok, wait)
			}
		}
	})
	t.Run("429 through the server", func(t *testing.T) {
		a := authFile(t, bcrypt.MinCost)
		s, err := New(Config{Store: noStore{}, Auth: a})
		if err != nil {
			t.Fatal(err)
		}
		for range GuessesPerUser {
			send(s, basic("alice", "guess", "10.3.0.1"))
		}
		req := basic("alice", password, "10.3.0.2")
		req.URL.Path = "/static/style.css"
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("limited: %d Retry-After %q, want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
		}
	})
}

// noStore is a Store for tests that reach no page reading it.
type noStore struct{ Store }

// A real browser on another site's page posts a form to the console with
// a valid token (leaked, say): the browser's Origin and Sec-Fetch-Site
// give it away and the console refuses it. Basic auth credentials ride
// along, as a browser that has signed in sends them.
func TestConsoleCrossSiteBrowser(t *testing.T) {
	b := setup(t)
	attempt := func(t *testing.T, hook func(*Server)) (changed bool, shown string) {
		t.Helper()
		s, base := b.serve(t, func(_ *Config, s *Server) {
			if s != nil && hook != nil {
				hook(s)
			}
		})
		rec := b.other
		tok := s.csrfToken("alice", "resolve", recordTarget(rec.ID.String(), b.version(t, rec.ID)), time.Now())
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<form id="f" method="post" action="%s/record/%s/resolve"><input name="csrf" value="%s"><input name="reason" value="pwned"><input name="version" value="%d"></form><script>document.getElementById("f").submit()</script>`,
				base, rec.ID, tok, b.version(t, rec.ID))
		}))
		defer evil.Close()
		ctx := browser(t)
		// The evil page is at localhost:<port>, the console at 127.0.0.1:<port>: another site.
		u := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)
		if err := chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
			t.Fatal(err)
		}
		msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("error-message") || {}).textContent || document.body.textContent`))
		return b.version(t, rec.ID) != rec.Version, msg
	}
	t.Run("refused", func(t *testing.T) {
		if changed, shown := attempt(t, nil); changed || !strings.Contains(shown, "another") {
			t.Errorf("cross-site form post: record changed %v, page %q", changed, shown)
		}
	})
	t.Run("negative control: no Origin check", func(t *testing.T) {
		if changed, shown := attempt(t, func(s *Server) { s.skipOrigin = true }); !changed {
			t.Errorf("a server without the Origin check refused the cross-site post: %q", shown)
		}
	})
}

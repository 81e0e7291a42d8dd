package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/mendq/mend/storage"
)

// The console reads with nothing but SELECT on mend's tables: every page
// answers for a read-only database user, as docs/console.md says to run it.
func TestConsoleReadOnlyUser(t *testing.T) {
	b := setup(t)
	dsn := b.db.User(t, "SELECT ON %s.*")
	store, err := storage.Open(context.Background(), dsn, storage.Options{})
	if err != nil {
		t.Fatalf("open as a SELECT-only user: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s, err := New(Config{Store: store, Hosts: []string{"example.com"}}) // httptest.NewRequest's Host
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/queue?name=" + url.QueryEscape(queueName), "/record/" + b.parked.ID.String(), "/parked", "/static/style.css"} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			t.Errorf("GET %s as a SELECT-only user: %d %s", path, w.Code, w.Body.String())
		}
	}
}

package console

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mendq/mend/doctor"
)

// The overview's health line shows mend doctor's checks (issue 48: one
// definition of each check, the console among their users): the counts,
// and every check that is not OK with its detail and fix, escaped (a
// detail can quote a server's error). The checks run at most once per
// HealthEvery, whatever the number of page loads.
func TestConsoleHealthLine(t *testing.T) {
	b := setup(t)
	var runs atomic.Int32
	checks := []doctor.Check{
		{Name: "server", Status: doctor.OK, Detail: "mysql 9.7"},
		{Name: "schema", Status: doctor.OK, Detail: "version 18"},
		{Name: "time zone", Status: doctor.Warn, Detail: "the server's time zone is <i>SYSTEM</i>", Fix: "set time_zone"},
		{Name: "grants", Status: doctor.Fail, Detail: "denied: <script>alert(1)</script>", Fix: "GRANT SELECT ON `mend`.* TO 'mend'@'%'"},
	}
	s, err := New(Config{Store: b.store, Health: func(context.Context) []doctor.Check {
		runs.Add(1)
		return checks
	}})
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for range 3 {
		code, got := send(s, request(http.MethodGet, "/", "", nil))
		if code != http.StatusOK {
			t.Fatalf("GET /: %d %.300s", code, got)
		}
		body = got
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("three overviews ran the checks %d times; want once within HealthEvery", n)
	}
	mustContain(t, "the overview", body, `id="health-line"`, "2 ok · 1 warning(s) · <b>1 failing</b>",
		"time zone", "&lt;i&gt;SYSTEM&lt;/i&gt;", "grants", "denied: &lt;script&gt;alert(1)&lt;/script&gt;", "GRANT SELECT ON `mend`.* TO &#39;mend&#39;@&#39;%&#39;")
	if strings.Contains(body, "<script>alert(1)") || strings.Contains(body, "<i>SYSTEM") {
		t.Errorf("a check's detail is not escaped")
	}
	if strings.Contains(body, "mysql 9.7") {
		t.Errorf("an OK check is listed; the line counts them")
	}

	// Without Health, no health line.
	plain, err := New(Config{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	if _, got := send(plain, request(http.MethodGet, "/", "", nil)); strings.Contains(got, `id="health-line"`) {
		t.Errorf("a console without Health shows a health line")
	}
}

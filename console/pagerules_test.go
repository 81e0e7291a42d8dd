package console

import (
	"context"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

const rulesFile = "../deploy/prometheus/mend-alerts.yml"

// pageRulesOf returns the alerts of a Prometheus rule file whose severity
// is page, in the file's order.
func pageRulesOf(t *testing.T, file []byte) []string {
	t.Helper()
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `json:"alert"`
				Labels map[string]string `json:"labels"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(file, &rf); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && r.Labels["severity"] == "page" {
				out = append(out, r.Alert)
			}
		}
	}
	return out
}

// uncovered says what is wrong between the page rules of a rule file and
// a table of what the overview shows of them: a page rule without an
// entry, an entry naming no page rule, an entry that says neither what
// the overview checks, nor whose row shows it, nor why it cannot see it.
func uncovered(pages []string, table []pageRule) []string {
	var bad []string
	byName := map[string]pageRule{}
	for _, r := range table {
		byName[r.Rule] = r
		n := 0
		for _, s := range []string{r.Checked, r.Via, r.Unseen} {
			if s != "" {
				n++
			}
		}
		switch {
		case !slices.Contains(pages, r.Rule):
			bad = append(bad, r.Rule+": an entry for no page rule of the rule file")
		case n != 1:
			bad = append(bad, r.Rule+": give one of Checked, Via or Unseen")
		}
	}
	for _, p := range pages {
		r, ok := byName[p]
		switch {
		case !ok:
			bad = append(bad, p+": a page rule the console does not cover (add it to pageRules: what the overview checks and its row, whose row shows it, or why only Prometheus sees it)")
		case r.Via != "" && byName[r.Via].Checked == "":
			bad = append(bad, p+": shown through "+r.Via+", which the overview does not check")
		}
	}
	return bad
}

// Every severity: page rule of the shipped rule file is covered by the
// overview's "What would page" (issue 55: it said "Nothing would page"
// while MendRepairsFailing fired). The negative control: a new page rule
// appended to the file is reported as uncovered.
func TestPageRulesCovered(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	pages := pageRulesOf(t, file)
	if len(pages) < 5 {
		t.Fatalf("the rule file has %d page rules: %v", len(pages), pages)
	}
	for _, bad := range uncovered(pages, pageRules) {
		t.Error(bad)
	}
	grown := string(file) + "\n  - alert: MendSomethingNew\n    expr: vector(1)\n    labels: {severity: page}\n"
	got := uncovered(pageRulesOf(t, []byte(grown)), pageRules)
	if len(got) != 1 || !strings.HasPrefix(got[0], "MendSomethingNew: a page rule the console does not cover") {
		t.Errorf("a new page rule: uncovered = %q; want it reported", got)
	}
	if got := uncovered(pages, pageRules[1:]); len(got) != 1 || !strings.HasPrefix(got[0], pageRules[0].Rule) {
		t.Errorf("a table without %s: uncovered = %q; want it reported", pageRules[0].Rule, got)
	}
}

// overviewBody is the overview's HTML as alice sees it.
func overviewBody(t *testing.T, base string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("alice", password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("overview: %d\n%s", resp.StatusCode, body)
	}
	return string(body)
}

// section is the HTML of the overview's section id.
func section(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `<section id="`+id+`">`)
	if i < 0 {
		t.Fatalf("no section %q", id)
	}
	j := strings.Index(page[i:], "</section>")
	return page[i : i+j]
}

// Each page rule the overview checks shows a row named after it when its
// condition holds: one case per rule with Checked in pageRules, so an
// entry whose row the overview never shows fails here.
func TestConsoleWouldPage(t *testing.T) {
	t.Parallel()
	notReading := BinlogReader{Source: "queue<b>db</b>", Role: "no reader", Position: "mariadb-bin.000003:4", Saved: 20 * time.Minute,
		NoReader: 40 * time.Second, FailedTerms: 7, NotReading: true, Pages: true}
	cases := map[string]func(t *testing.T, b *bundle, c *Config){
		"MendRepairStuck": func(t *testing.T, b *bundle, _ *Config) {
			recs, err := b.store.ConsoleQueueRecords(t.Context(), otherQueue, mend.StatePending, storage.RecordCursor{}, 10)
			if err != nil || len(recs) != 1 {
				t.Fatalf("pending records of %s: %v %v", otherQueue, recs, err)
			}
			if _, err := b.sql.Exec(`UPDATE mend_records SET next_attempt_at = NOW(6) - INTERVAL 20 MINUTE WHERE record_id = ?`, recs[0].ID[:]); err != nil {
				t.Fatal(err)
			}
		},
		"MendRepairsFailing": func(t *testing.T, b *bundle, _ *Config) {
			recs, err := b.store.ConsoleQueueRecords(t.Context(), otherQueue, mend.StatePending, storage.RecordCursor{}, 10)
			if err != nil || len(recs) != 1 {
				t.Fatalf("pending records of %s: %v %v", otherQueue, recs, err)
			}
			b.failing(t, recs[0], 4, "host: Error 1142 (42000): UPDATE command denied")
			if _, err := b.sql.Exec(`UPDATE mend_records SET state_since = NOW(6) - INTERVAL 2 MINUTE WHERE record_id = ?`, recs[0].ID[:]); err != nil {
				t.Fatal(err)
			}
		},
		"MendRepairSLO": func(t *testing.T, b *bundle, _ *Config) {
			if _, err := b.sql.Exec(`UPDATE mend_records SET failed_at = NOW(6) - INTERVAL 20 MINUTE WHERE record_id = ?`, b.done.ID[:]); err != nil {
				t.Fatal(err)
			}
		},
		"MendSubscriptionLagging": func(_ *testing.T, _ *bundle, c *Config) {
			c.Lag = func(context.Context) ([]TopicLag, error) {
				return []TopicLag{{Topic: "speculate_dlq", Rows: 3, Age: 20 * time.Minute}}, nil
			}
		},
		"MendBinlogNotReading": func(_ *testing.T, _ *bundle, c *Config) {
			c.Binlog = func(context.Context) ([]BinlogReader, error) { return []BinlogReader{notReading}, nil }
		},
		"MendBinlogPositionPurged": func(_ *testing.T, _ *bundle, c *Config) {
			c.Binlog = func(context.Context) ([]BinlogReader, error) {
				return []BinlogReader{{Source: "queue", Role: "reading", Holder: "replica-1", Epoch: 4, Term: time.Hour, Position: "mariadb-bin.000009:4",
					Saved: time.Second, Reset: "2026-12-07T03:00:00Z the saved position was purged: the server no longer has mariadb-bin.000001", Purged: true}}, nil
			}
		},
	}
	for _, r := range pageRules {
		if r.Checked == "" {
			continue
		}
		fire, ok := cases[r.Rule]
		if !ok {
			t.Errorf("no case makes %s fire: add one that shows its row", r.Rule)
			continue
		}
		t.Run(r.Rule, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			before := section(t, overviewBody(t, func() string { _, base := b.serve(t, nil); return base }()), "alerts")
			if strings.Contains(before, "<td>"+r.Rule) {
				t.Fatalf("a row of %s before its condition holds:\n%s", r.Rule, before)
			}
			var cfg Config
			fire(t, b, &cfg)
			_, base := b.serve(t, func(c *Config, _ *Server) {
				if cfg.Lag != nil {
					c.Lag = cfg.Lag
				}
				if cfg.Binlog != nil {
					c.Binlog = cfg.Binlog
				}
			})
			alerts := section(t, overviewBody(t, base), "alerts")
			if !strings.Contains(alerts, `<tr class="page"><td>`+r.Rule+"</td>") {
				t.Errorf("no paging row of %s:\n%s", r.Rule, alerts)
			}
		})
	}
	t.Run("escaped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, base := b.serve(t, func(c *Config, _ *Server) {
			c.Binlog = func(context.Context) ([]BinlogReader, error) { return []BinlogReader{notReading}, nil }
		})
		page := overviewBody(t, base)
		mustContain(t, "alerts", section(t, page, "alerts"), "binlog source queue&lt;b&gt;db&lt;/b&gt;: not read for 20m", "7 failed term(s)")
		mustContain(t, "binlog", section(t, page, "binlog"), "failing: 7 failed term(s) in 10m", "no reader</span> for 40s", `<tr class="page">`)
		if strings.Contains(page, "<b>db") {
			t.Error("markup of a source reached the page as elements")
		}
	})
}

// With nothing paging, the overview says what it checked, every rule it
// checks in this configuration, and names the page rules only Prometheus
// sees.
func TestConsoleNothingPages(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, migrations.Up)
	store, err := storage.Open(t.Context(), db.DSN, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	b := &bundle{db: db, sql: db.SQL(t), store: store}
	_, base := b.serve(t, func(c *Config, _ *Server) {
		c.Binlog = func(context.Context) ([]BinlogReader, error) {
			return []BinlogReader{{Source: "queue", Role: "reading", Holder: "replica-1", Epoch: 2, Term: time.Hour, Saved: time.Second}}, nil
		}
	})
	alerts := section(t, overviewBody(t, base), "alerts")
	mustContain(t, "nothing pages", alerts, `id="nothing-pages"`, "no record overdue past 10m0s", "no repair failing for over 30s",
		"every binlog source read", "no binlog position purged", "no slow repair in the last 15 minutes", "nothing parked",
		"Prometheus alone sees MendNotReady", "MendAbsent", "MendCannotReadDatabase")
	if strings.Contains(alerts, "held back") {
		t.Errorf("the overview says it checked the subscription's lag, which it does not read without --queue-dsn:\n%s", alerts)
	}
}

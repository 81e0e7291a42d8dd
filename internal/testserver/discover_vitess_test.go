package testserver

import (
	"strings"
	"testing"

	"github.com/mendq/mend/internal/vitessdb"
)

func TestDiscoverVitess(t *testing.T) {
	t.Parallel()
	built := func() (string, error) { return "/cache/vitess", nil }
	missing := func() (string, error) { return "", vitessdb.ErrNoBinaries }
	tests := []struct {
		name      string
		env       map[string]string
		find      func() (string, error)
		want      Backend
		fatal     bool
		reasonHas string
	}{
		{name: "built: the vitess backend, over a DSN", env: map[string]string{EnvEngine: "vitess", EnvDSN: "root@tcp(127.0.0.1:3306)/"}, find: built, want: BackendVitess},
		{name: "case and spaces", env: map[string]string{EnvEngine: " Vitess "}, find: built, want: BackendVitess},
		{name: "not built: skip, saying how", env: map[string]string{EnvEngine: "vitess"}, find: missing, reasonHas: "scripts/vitess.sh"},
		{name: "not built under CI: fail", env: map[string]string{EnvEngine: "vitess", EnvCI: "true"}, find: missing, fatal: true, reasonHas: "make test-vitess"},
		{name: "other engines never ask", env: map[string]string{EnvEngine: "mariadb", EnvDSN: "x@tcp(127.0.0.1:1)/"}, want: BackendDSN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &machine{env: tt.env}
			p := m.probes()
			p.FindVitess = tt.find
			if tt.find == nil {
				p.FindVitess = func() (string, error) { t.Fatal("FindVitess called for another engine"); return "", nil }
			}
			for name, c := range map[string]Choice{"Discover": Discover(p), "DiscoverPrivate": DiscoverPrivate(p)} {
				if name == "DiscoverPrivate" && tt.want == BackendDSN {
					continue // never a DSN
				}
				if c.Backend != tt.want || c.Fatal != tt.fatal || !strings.Contains(c.Reason, tt.reasonHas) {
					t.Errorf("%s = %+v; want backend %q fatal %v reason containing %q", name, c, tt.want, tt.fatal, tt.reasonHas)
				}
				if tt.want == BackendVitess && (c.Binary != "/cache/vitess" || c.Engine != EngineVitess) {
					t.Errorf("%s = %+v; want Binary /cache/vitess, Engine vitess", name, c)
				}
			}
		})
	}
}

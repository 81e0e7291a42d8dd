package migrations_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mendq/mend/migrations"
)

// TestWriteScript: mend migrate sql prints every up migration in order,
// then records the latest version as golang-migrate would.
func TestWriteScript(t *testing.T) {
	t.Parallel()
	list, err := migrations.Mend.List()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := migrations.Mend.WriteScript(&b, list); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	last := -1
	for _, m := range list {
		i := strings.Index(got, fmt.Sprintf("\n-- %04d_%s.up.sql\n", m.Version, m.Name))
		if i <= last {
			t.Fatalf("migration %d missing or out of order", m.Version)
		}
		last = i
	}
	want := fmt.Sprintf("DELETE FROM mend_schema_migrations;\nINSERT INTO mend_schema_migrations (version, dirty) VALUES (%d, 0);\n", list[len(list)-1].Version)
	if !strings.HasSuffix(got, want) {
		t.Errorf("the script ends %q; want %q", got[max(0, len(got)-200):], want)
	}
}

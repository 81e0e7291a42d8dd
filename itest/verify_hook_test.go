package itest

import (
	"context"
	"fmt"
	"strings"

	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/storage"
)

// envVerifyOnDrop, when set, makes every test database the suites leave
// behind pass mend verify before it is dropped (CI:
// MEND_VERIFY_ON_DROP=1 go test ./itest/...).
const envVerifyOnDrop = "MEND_VERIFY_ON_DROP"

// verifyBeforeDrop is mysqltest.BeforeDrop for itest: it re-folds every
// record's events in db and fails the owning test on any divergence. A
// database without mend's event projection columns (no migrations, or a
// test that migrated down) has nothing to verify.
func verifyBeforeDrop(ctx context.Context, db *mysqltest.DB) error {
	s, err := storage.Open(ctx, db.DSN, storage.Options{})
	if err != nil {
		return fmt.Errorf("verify: open: %w", err)
	}
	defer s.Close()
	var n int
	if err := s.SQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'mend_events' AND column_name = 'next_attempt_at'`).Scan(&n); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if n == 0 {
		return nil
	}
	var divs []string
	st, err := s.Verify(ctx, storage.VerifyParams{}, func(d storage.Divergence) error {
		if len(divs) < 20 {
			divs = append(divs, d.String())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if st.Divergent > 0 {
		return fmt.Errorf("mend verify: %d of %d records diverge from their events:\n  %s", st.Divergent, st.Records, strings.Join(divs, "\n  "))
	}
	return nil
}

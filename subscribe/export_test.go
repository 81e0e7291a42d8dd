package subscribe

import "time"

// SetSettle overrides the settle window, including to zero, which Config
// cannot express: the negative control of the out-of-order test.
func SetSettle(s *Subscriber, d time.Duration) { s.cfg.Settle, s.horizons.settle = d, d }

// SQLLag is the lag query, for the plan test.
const SQLLag = sqlLag

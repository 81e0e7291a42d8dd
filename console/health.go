package console

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/mendq/mend/doctor"
)

// healthTimeout bounds one run of Config.Health from a page: a database
// that does not answer turns the health line into failed checks, not a
// page that never loads.
const healthTimeout = 10 * time.Second

// healthCache keeps the last run of Config.Health, so that the overview
// runs the checks at most once per HealthEvery whatever the number of
// open tabs.
type healthCache struct {
	mu     sync.Mutex
	at     time.Time // when the kept checks ran; zero before the first run
	checks []doctor.Check
}

// healthLine is the overview's health line: mend doctor's checks, counted,
// with every check that is not OK listed (its detail and fix are shown
// escaped like everything else: they can quote a server's error).
type healthLine struct {
	Age      time.Duration
	OK, Warn int
	Fail     int
	Problems []doctor.Check
}

// healthNow returns the health line, running the checks first when the
// kept result is older than HealthEvery. Concurrent pages wait for one run.
func (s *Server) healthNow(ctx context.Context) *healthLine {
	if s.cfg.Health == nil {
		return nil
	}
	every := cmp.Or(s.cfg.HealthEvery, HealthEveryDefault)
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	if s.health.at.IsZero() || time.Since(s.health.at) >= every {
		runCtx, cancel := context.WithTimeout(ctx, healthTimeout)
		s.health.checks = s.cfg.Health(runCtx)
		cancel()
		s.health.at = time.Now()
	}
	h := &healthLine{Age: time.Since(s.health.at)}
	for _, c := range s.health.checks {
		switch c.Status {
		case doctor.OK:
			h.OK++
			continue
		case doctor.Warn:
			h.Warn++
		default:
			h.Fail++
		}
		h.Problems = append(h.Problems, c)
	}
	return h
}

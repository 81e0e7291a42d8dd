package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mendq/mend/storage"
)

// mend run --verify-every D (issue 46): beside the reconciler, every D,
// the same verify as `mend verify` over every record, recorded in
// mend_verify_runs like a manual run, so mend console's overview shows its
// result and age and mend_verify_divergent_records (verifymetric.go)
// reports what it found. Off by default: a verify reads every record and
// its events, which on a large database is a long scan. Each replica given
// the flag runs its own; give it to one.

// verifyEveryMin is the shortest period --verify-every takes.
const verifyEveryMin = time.Second

func addVerifyEveryFlag(f *flags, every *time.Duration) {
	f.DurationVar(every, "verify-every", 0, "run mend verify over every record this often and record the run in mend_verify_runs\n(mend console's overview, mend_verify_divergent_records); 0: off. Each replica given it runs its own")
}

func checkVerifyEvery(d time.Duration) error {
	if d < 0 || (d > 0 && d < verifyEveryMin) {
		return usagef("--verify-every must be 0 (off) or at least %s, got %s", verifyEveryMin, d)
	}
	return nil
}

// startVerifyEvery runs a verify every c.VerifyEvery until ctx ends (the
// first one period after the start); the returned func waits for it to
// stop. A run in progress when ctx ends stops there and is recorded as
// interrupted. Divergences are logged as warnings, one line each.
func startVerifyEvery(ctx context.Context, c runConfig, store *storage.DB, log *slog.Logger) func() {
	if c.Once || c.VerifyEvery == 0 {
		return func() {}
	}
	vlog := log.With("component", "verify")
	vlog.Info("verifying every record periodically", "every", c.VerifyEvery.String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(c.VerifyEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			w := &logLines{log: vlog}
			err := runVerify(ctx, store, verifyConfig{PageSize: storage.VerifyPageDefault}, w)
			w.flush()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				vlog.Warn("periodic verify", "err", err)
			}
			t.Reset(c.VerifyEvery)
		}
	}()
	return func() { <-done }
}

// logLines is an io.Writer that logs each line written to it: verify's
// report (a divergence a line, then the summary) as log records.
type logLines struct {
	log *slog.Logger
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadBytes('\n')
		if err != nil { // no newline yet: keep the rest
			l.buf.Reset()
			l.buf.Write(line)
			return len(p), nil
		}
		l.emit(string(bytes.TrimRight(line, "\n")))
	}
}

func (l *logLines) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 0 {
		l.emit(l.buf.String())
		l.buf.Reset()
	}
}

// emit logs a line: the summary at info, anything else (a divergence, a
// failure to record the run) as a warning.
func (l *logLines) emit(line string) {
	if strings.HasPrefix(line, "verified ") {
		l.log.Info("periodic verify: " + line)
		return
	}
	l.log.Warn("periodic verify: " + line)
}

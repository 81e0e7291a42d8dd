package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mendq/mend/internal/mysqltest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// The demo's scenario, on a database of the test server: it must end with
// batch 2 woken by a message the strict speculate consumer accepts.
func TestDemoScenarioRepairsTheQueue(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	var out bytes.Buffer
	d := &demo{out: &out, log: slog.New(slog.DiscardHandler), start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	if err := d.run(ctx, db.DSN, "the test server"); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		`payload {"id":"monorepo/main/batch/1","queue":"monorepo/main"}`,  // the dead letter, in the real format
		"FAILED (the demo's injected fault",                               // the refused first publish
		`payload  {"id":"monorepo/main/batch/2","queue":"monorepo/main"}`, // the wake-up names the live batch
		`metadata {"mend.epoch":"`,                                        // string-map metadata
		"failed_at 0, failure_count 0",
		"monorepo/main/batch/1 is failed at version 2",
		`id "monorepo/main/1/error": status error`,
		"OK: monorepo/main/batch/2 was woken",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("timeline lacks %q:\n%s", want, out.String())
		}
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/storage"
)

// mend run --verify-every runs mend verify periodically beside the
// reconciler and records each run in mend_verify_runs, as a manual verify
// does: here a parked record (which the reconciler leaves alone) whose
// projection diverges from its events is found, recorded and logged.
func TestRunVerifiesEvery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, store, rec := verifyWorld(t)
	ap := storage.AppendTo(rec)
	ap.Kind, ap.Actor, ap.OpID, ap.State, ap.LastError = mend.EventParked, "test", mend.NewOpID(), mend.StateParked, "gave up"
	if _, err := store.RecordAppend(ctx, ap); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL(t).ExecContext(ctx, "UPDATE mend_records SET attempts = 5 WHERE record_id = ?", rec.ID[:]); err != nil {
		t.Fatal(err)
	}
	appDB := mysqltest.NewDB(t, onDSN(sqtest.CreateApp))
	queueDB := mysqltest.NewDB(t, onDSN(sqtest.CreateQueue))
	if _, ok, err := store.VerifyRunLast(ctx); err != nil || ok {
		t.Fatalf("a verify run is recorded before mend run started (%v)", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan int, 1)
	var errOut syncBuffer
	go func() {
		var out bytes.Buffer
		done <- Main(runCtx, []string{"run", "--dsn", db.DSN, "--host-dsn", appDB.DSN, "--queue-dsn", queueDB.DSN, "--subscribe=false",
			"--wake-topic-unjoined", "--interval", "100ms", "--stuck-every", "0", "--verify-every", "1s"}, &out, &errOut, func(string) string { return "" })
	}()
	var run storage.VerifyRun
	deadline := time.Now().Add(60 * time.Second)
	for ok := false; !ok; {
		var err error
		if run, ok, err = store.VerifyRunLast(ctx); err != nil {
			t.Fatal(err)
		}
		if !ok && time.Now().After(deadline) {
			t.Fatalf("no verify run recorded within 60s\n%s", errOut.String())
		}
		select {
		case code := <-done:
			t.Fatalf("mend run exited %d\n%s", code, errOut.String())
		case <-time.After(100 * time.Millisecond): // poll interval, not synchronisation
		}
	}
	stop()
	if code := <-done; code != exitOK {
		t.Fatalf("mend run exit %d\n%s", code, errOut.String())
	}
	if run.Records != 1 || run.Divergent != 1 || run.Queue != "" || run.Since != 0 || run.Host == "" {
		t.Errorf("recorded run = %+v; want every record (1), 1 divergent, this host", run)
	}
	log := errOut.String()
	for _, want := range []string{"verifying every record periodically", "periodic verify: verified 1 records", rec.ID.String()} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
}

// --verify-every is off by default and takes 0 or a period of 1s or more.
func TestRunVerifyEveryFlag(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"10ms", "-1s"} {
		code, _, errOut := mendMain(t, "run", "--dsn", "u:p@tcp(127.0.0.1:1)/m", "--host-dsn", "u:p@tcp(127.0.0.1:1)/h", "--verify-every", bad)
		if code != exitUsage || !strings.Contains(errOut, "--verify-every must be 0 (off) or at least 1s") {
			t.Errorf("--verify-every %s: exit %d, %s; want a usage error", bad, code, errOut)
		}
	}
	if code, out, errOut := mendMain(t, "run", "--help"); code != exitOK || !strings.Contains(out+errOut, "--verify-every duration") || strings.Contains(out+errOut, "(default 0s)") {
		t.Errorf("mend run --help: exit %d, does not list --verify-every without a default:\n%s%s", code, out, errOut)
	}
}

// syncBuffer is a bytes.Buffer that mend run's logger writes while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

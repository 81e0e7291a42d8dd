package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
)

// TestIOTimeout: the zero Options bound every read and write (a hung host
// must not hold a planner past its lease), negative keeps the DSN's setting,
// and the bound really returns a call sent into a connection that never
// answers.
func TestIOTimeout(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t, sqtest.Apply)

	t.Run("zero options get the default", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			set, want time.Duration
		}{{0, max(2*LeaseTTLDefault, IOTimeoutFloor)}, {-1, 0}, {2 * time.Second, 2 * time.Second}} {
			h, err := Open(t.Context(), db.DSN, "", Options{IOTimeout: tt.set})
			if err != nil {
				t.Fatal(err)
			}
			if h.ioTimeout != tt.want {
				t.Errorf("IOTimeout %v: applied %v; want %v", tt.set, h.ioTimeout, tt.want)
			}
			_ = h.Close()
		}
	})

	t.Run("a hung connection returns within the bound", func(t *testing.T) {
		t.Parallel()
		px := mysqltest.NewProxy(t, db.Server.Addr())
		h, err := Open(t.Context(), db.DSNVia(px.Addr()), "", Options{IOTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		// The timeout toxic passes no data and never closes: a half-open peer.
		if err := px.AddToxic("hang", "timeout", "downstream", 1, map[string]any{"timeout": 0}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // far above the bound
		defer cancel()
		begin := time.Now()
		_, err = h.BatchGet(ctx, "q", "q/batch/1")
		if err == nil || errors.Is(err, mend.ErrNotFound) || ctx.Err() != nil {
			t.Fatalf("BatchGet through a hung connection = %v after %v (ctx %v); want a driver timeout well before the context's", err, time.Since(begin), ctx.Err())
		}
	})
}

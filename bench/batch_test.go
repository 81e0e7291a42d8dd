package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
)

// batchSize is the storm intake's batch: a page of mend import, or what a
// DLQ consumer drains at once in a storm.
const batchSize = 500

// BenchmarkRecordMany: a storm of dead letters recorded through
// dlq.Intake.RecordMany, batches of batchSize new deliveries, one worker
// per connection. An op is one batch; records/s is the figure to hold
// against the target (10,000 records/s at 4 connections).
func BenchmarkRecordMany(b *testing.B) {
	for _, conns := range []int{1, 4} {
		b.Run("conns="+strconv.Itoa(conns)+"/batch="+strconv.Itoa(batchSize), func(b *testing.B) {
			ctx := context.Background()
			db := mysqltest.NewDB(b, migrations.Up)
			printServer(b, db)
			tp := newTap(conns, 1)
			intakes := make([]*dlq.Intake, conns)
			for w := range conns {
				in, err := dlq.New(openStore(b, tp.DSN(b, db.DSN, w, 0)), dlq.Config{})
				if err != nil {
					b.Fatal(err)
				}
				intakes[w] = in
			}
			clone := cloneDB(b, db)
			// Built before the clock starts: the benchmark measures the
			// intake, not the test's string formatting.
			batches := make([][][]dlq.Delivery, conns)
			for w := range conns {
				for i := range share(b.N, conns, w) {
					ds := make([]dlq.Delivery, batchSize)
					for j := range ds {
						queue := fmt.Sprintf("q%d", (w*7+j)%50)
						batch := fmt.Sprintf("%s/batch/%d-%d-%d", queue, w, i, j)
						ds[j] = dlq.Delivery{Source: src(queue, batch), Payload: []byte(`{"id":"` + batch + `","queue":"` + queue + `"}`),
							FailureCount: 3, LastError: "boom"}
					}
					batches[w] = append(batches[w], ds)
				}
			}
			errs := make([]error, conns)
			b.ResetTimer()
			tp.on.Store(true)
			lib := measure(conns, func(w int) {
				for _, ds := range batches[w] {
					res, err := intakes[w].RecordMany(ctx, ds)
					if err != nil {
						errs[w] = err
						return
					}
					for _, r := range res {
						if r.Err != nil || !r.Created {
							errs[w] = fmt.Errorf("delivery not created: %+v", r)
							return
						}
					}
				}
			})
			tp.on.Store(false)
			b.StopTimer()
			failOn(b, errs)
			if b.N >= 4 {
				b.Logf("mend-bench: mix %s (%d batches): %s", b.Name(), b.N, tp.Mix())
			}
			raw := tp.replay(b, clone.DSN)
			records := float64(b.N * batchSize)
			b.ReportMetric(records/lib.Seconds(), "records/s")
			b.ReportMetric(records/raw.took.Seconds(), "raw-records/s")
			b.ReportMetric(raw.took.Seconds()/lib.Seconds(), "lib/raw")
			b.ReportMetric(float64(tp.Statements())/float64(b.N), "stmts/op")
		})
	}
}

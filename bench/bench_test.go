package bench

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mendq/mend"
	"github.com/mendq/mend/dlq"
	"github.com/mendq/mend/host"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/internal/sqtest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/planner"
	"github.com/mendq/mend/storage"
)

// connCounts are the concurrency levels of the throughput benchmarks: one
// goroutine per connection.
var connCounts = []int{1, 4, 16}

// share splits n operations among workers; worker w gets share(n, workers, w).
func share(n, workers, w int) int {
	q, r := n/workers, n%workers
	if w < r {
		return q + 1
	}
	return q
}

// openStore opens a store on dsn with a single connection, so a worker's
// statements run in order on one connection the tap can follow.
func openStore(b *testing.B, dsn string) *storage.DB {
	b.Helper()
	s, err := storage.Open(context.Background(), dsn, storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s.SQL().SetMaxOpenConns(1)
	s.SQL().SetMaxIdleConns(1)
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func openHost(b *testing.B, dsn string) *host.DB {
	b.Helper()
	h, err := host.Open(context.Background(), dsn, "", host.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	return h
}

// world is the submit queue's side of db (both of its databases in one),
// for seeding the real tables and reading what mend published.
func world(b *testing.B, db *mysqltest.DB) sqtest.World {
	b.Helper()
	conn := db.SQL(b)
	return sqtest.World{App: conn, Queue: conn}
}

// batchID and requestID give the host's real ID shapes, <queue>/batch/<n>
// and <queue>/<n>.
func batchID(queue, n string) string   { return queue + "/batch/" + n }
func requestID(queue, n string) string { return queue + "/" + n }

func src(queue, msg string) mend.SourceID {
	return mend.SourceID{Queue: queue, Topic: "speculate_dlq", Partition: queue, MessageID: msg}
}

// BenchmarkIntake: a dead letter recorded through dlq.Intake (decode and
// create-if-absent: INSERT ... ON DUPLICATE KEY UPDATE, created event, read
// back, in one transaction), every delivery new.
func BenchmarkIntake(b *testing.B) {
	for _, conns := range connCounts {
		b.Run("conns="+strconv.Itoa(conns), func(b *testing.B) {
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
			clone, limitDB := cloneDB(b, db), cloneDB(b, db)
			// A real BatchID payload, as the speculate topic carries it.
			payload := []byte(`{"id":"q/batch/1","queue":"q"}`)
			errs := make([]error, conns)
			b.ResetTimer()
			tp.on.Store(true)
			lib := measure(conns, func(w int) {
				for i := range share(b.N, conns, w) {
					_, err := intakes[w].Record(ctx, dlq.Delivery{Source: src("q", fmt.Sprintf("w%d-%d", w, i)), Payload: payload, FailureCount: 3, LastError: "boom"})
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
			tp.on.Store(false)
			b.StopTimer()
			failOn(b, errs)
			printMix(b, tp, b.N)
			libRun := measured{took: lib, rts: tp.rts.Load()}
			raw := tp.replay(b, clone.DSN)
			lw := newWire()
			pool := openLimitPool(b, limitDB.DSN, lw)
			lconns := make([]*sql.Conn, conns)
			for w := range conns {
				lconns[w] = limitConn(b, pool)
			}
			lw.on.Store(true)
			limit := measure(conns, func(w int) {
				for i := range share(b.N, conns, w) {
					_, _, err := limitIntake(ctx, lconns[w], "bench", limitDelivery{topic: "speculate_dlq", partition: "q", messageID: fmt.Sprintf("w%d-%d", w, i),
						payload: payload, failureCount: 3, lastError: "boom"})
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
			lw.on.Store(false)
			failOn(b, errs)
			report(b, b.N, libRun, raw, measured{took: limit, rts: lw.rts.Load()}, tp.Statements())
		})
	}
}

// BenchmarkAppend: a CAS append (event insert and projection update in one
// transaction), each worker on its own record, unfenced and fenced (the
// lease row read LOCK IN SHARE MODE first, in the same transaction).
func BenchmarkAppend(b *testing.B) {
	for _, fenced := range []bool{false, true} {
		for _, conns := range connCounts {
			name := fmt.Sprintf("fenced=%v/conns=%d", fenced, conns)
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				db := mysqltest.NewDB(b, migrations.Up)
				setup := openStore(b, db.DSN)
				tp := newTap(conns, 1)
				stores := make([]*storage.DB, conns)
				recs := make([]mend.Record, conns)
				terms := make([]*mend.Term, conns)
				for w := range conns {
					stores[w] = openStore(b, tp.DSN(b, db.DSN, w, 0))
					queue := "q" + strconv.Itoa(w)
					rec, _, err := setup.RecordCreate(ctx, mend.CreateParams{Source: src(queue, "m"), OpID: mend.NewOpID(), Actor: "bench",
						Target: mend.Target{BatchID: "b", Desired: mend.OutcomeFailed}})
					if err != nil {
						b.Fatal(err)
					}
					recs[w] = rec
					if fenced {
						term, err := setup.LeaseAcquire(ctx, queue, "bench-"+strconv.Itoa(w), 10*time.Minute)
						if err != nil {
							b.Fatal(err)
						}
						terms[w] = &term
					}
				}
				clone, limitDB := cloneDB(b, db), cloneDB(b, db)
				errs := make([]error, conns)
				b.ResetTimer()
				tp.on.Store(true)
				lib := measure(conns, func(w int) {
					p := storage.AppendTo(recs[w])
					p.Kind, p.State, p.Actor, p.Fence, p.RetryIn = mend.EventAttemptFailed, mend.StatePending, "bench", terms[w], time.Second
					for range share(b.N, conns, w) {
						p.OpID = mend.NewOpID()
						p.Attempts++
						v, err := stores[w].RecordAppend(ctx, p)
						if err != nil {
							errs[w] = err
							return
						}
						p.Version = v
					}
				})
				tp.on.Store(false)
				b.StopTimer()
				failOn(b, errs)
				printMix(b, tp, b.N)
				libRun := measured{took: lib, rts: tp.rts.Load()}
				raw := tp.replay(b, clone.DSN)
				// The limit makes the same changes to the same records (the
				// clone keeps their IDs, versions and lease terms).
				lw := newWire()
				pool := openLimitPool(b, limitDB.DSN, lw)
				lconns := make([]*sql.Conn, conns)
				for w := range conns {
					lconns[w] = limitConn(b, pool)
				}
				lw.on.Store(true)
				limit := measure(conns, func(w int) {
					a := limitAppendArgs{queue: recs[w].Source.Queue, id: recs[w].ID, version: recs[w].Version,
						prevState: string(mend.StatePending), state: string(mend.StatePending), due: true, retryIn: time.Second,
						term: terms[w], actor: "bench", events: []limitEvent{{kind: string(mend.EventAttemptFailed), data: "{}"}}}
					for range share(b.N, conns, w) {
						a.attempts++
						v, err := limitAppend(ctx, lconns[w], a)
						if err != nil {
							errs[w] = err
							return
						}
						a.version = v
					}
				})
				lw.on.Store(false)
				failOn(b, errs)
				report(b, b.N, libRun, raw, measured{took: limit, rts: lw.rts.Load()}, tp.Statements())
			})
		}
	}
}

// BenchmarkLeaseAcquire: a lease taken over after its previous term
// expired, the reconciler's everyday acquire (a queue's lease row exists
// from earlier passes): the row made sure of, locked, the expired term
// closed in history, the epoch bumped, the new term opened in history.
// Each operation takes a different queue, seeded with an expired term.
func BenchmarkLeaseAcquire(b *testing.B) {
	for _, conns := range connCounts {
		b.Run("conns="+strconv.Itoa(conns), func(b *testing.B) {
			ctx := context.Background()
			db := mysqltest.NewDB(b, migrations.Up)
			queues := make([][]string, conns)
			var all []string
			for w := range conns {
				for i := range share(b.N, conns, w) {
					queues[w] = append(queues[w], fmt.Sprintf("a%d-%06d", w, i))
				}
				all = append(all, queues[w]...)
			}
			seedExpiredLeases(b, db.SQL(b), all)
			tp := newTap(conns, 1)
			stores := make([]*storage.DB, conns)
			for w := range conns {
				stores[w] = openStore(b, tp.DSN(b, db.DSN, w, 0))
			}
			clone, limitDB := cloneDB(b, db), cloneDB(b, db)
			errs := make([]error, conns)
			const ttl = 10 * time.Minute
			b.ResetTimer()
			tp.on.Store(true)
			lib := measure(conns, func(w int) {
				for _, q := range queues[w] {
					term, err := stores[w].LeaseAcquire(ctx, q, "bench-"+strconv.Itoa(w), ttl)
					if err == nil && term.Epoch != 2 {
						err = fmt.Errorf("acquired %s at epoch %d; want 2", q, term.Epoch)
					}
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
			tp.on.Store(false)
			b.StopTimer()
			failOn(b, errs)
			printMix(b, tp, b.N)
			libRun := measured{took: lib, rts: tp.rts.Load()}
			raw := tp.replay(b, clone.DSN)
			lw := newWire()
			pool := openLimitPool(b, limitDB.DSN, lw)
			lconns := make([]*sql.Conn, conns)
			for w := range conns {
				lconns[w] = limitConn(b, pool)
			}
			lw.on.Store(true)
			limit := measure(conns, func(w int) {
				for _, q := range queues[w] {
					term, err := limitAcquire(ctx, lconns[w], q, "bench-"+strconv.Itoa(w), ttl)
					if err == nil && term.Epoch != 2 {
						err = fmt.Errorf("limit acquired %s at epoch %d; want 2", q, term.Epoch)
					}
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
			lw.on.Store(false)
			failOn(b, errs)
			report(b, b.N, libRun, raw, measured{took: limit, rts: lw.rts.Load()}, tp.Statements())
		})
	}
}

// seedExpiredLeases gives each queue a lease row whose term (epoch 1)
// expired half an hour ago, with that term open in history, as a holder
// that died leaves it.
func seedExpiredLeases(tb testing.TB, db *sql.DB, queues []string) {
	tb.Helper()
	ctx := context.Background()
	for chunk := range slices.Chunk(queues, 500) {
		rows := strings.TrimSuffix(strings.Repeat("(?, 'old', 1, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 1 HOUR, NOW(6) - INTERVAL 30 MINUTE, 1), ", len(chunk)), ", ")
		hist := strings.TrimSuffix(strings.Repeat("(?, 1, 'old', NOW(6) - INTERVAL 1 HOUR), ", len(chunk)), ", ")
		args := make([]any, len(chunk))
		for i, q := range chunk {
			args[i] = q
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO mend_leases (queue, holder, epoch, acquired_at, renewed_at, expires_at, transitions) VALUES "+rows, args...); err != nil {
			tb.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO mend_lease_history (queue, epoch, holder, acquired_at) VALUES "+hist, args...); err != nil {
			tb.Fatal(err)
		}
	}
}

// planLease is a lease term that never ends during the benchmark.
type planLease struct{ term mend.Term }

func (l planLease) Term() mend.Term       { return l.term }
func (l planLease) Done() <-chan struct{} { return nil }

// BenchmarkPlannerRepair: one record repaired end to end by planner.Run
// under a fenced lease, on the submit queue's real tables: read due records,
// read the batch (speculating), fail it with the three-step transition (CAS,
// new membership row, old one deleted), fan out to its two requests (re-create
// the membership row, then per request a read, a CAS and a RequestLog publish to
// topic log), settle, list live batches (membership rows, then the batches
// hydrated), publish the wake-up, finish. Each worker repairs its own queue.
func BenchmarkPlannerRepair(b *testing.B) {
	for _, conns := range connCounts {
		b.Run("conns="+strconv.Itoa(conns), func(b *testing.B) {
			ctx := context.Background()
			db := mysqltest.NewDB(b, migrations.Up, sqtest.Apply)
			setupStore := openStore(b, db.DSN)
			w0 := world(b, db)
			tp := newTap(conns, 2)
			planners := make([]*planner.Planner, conns)
			leases := make([]planLease, conns)
			seed := make([]error, conns)
			measure(conns, func(w int) {
				leases[w], seed[w] = seedRepairQueue(ctx, w0, setupStore, "q"+strconv.Itoa(w), w, share(b.N, conns, w))
			})
			failOn(b, seed)
			for w := range conns {
				h := openHost(b, tp.DSN(b, db.DSN, w, 1))
				p, err := planner.New(planner.Config{Store: openStore(b, tp.DSN(b, db.DSN, w, 0)), Batches: h, Waker: h, Actor: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				planners[w] = p
			}
			clone, limitDB := cloneDB(b, db), cloneDB(b, db)
			errs := make([]error, conns)
			stats := make([]planner.Stats, conns)
			b.ResetTimer()
			tp.on.Store(true)
			lib := measure(conns, func(w int) {
				stats[w], errs[w] = runUntilDrained(ctx, planners[w], leases[w])
			})
			tp.on.Store(false)
			b.StopTimer()
			failOn(b, errs)
			woken := 0
			for _, st := range stats {
				woken += st.Woken
			}
			if woken != b.N {
				b.Fatalf("planner woke %d records; want %d", woken, b.N)
			}
			printMix(b, tp, b.N)
			libRun := measured{took: lib, rts: tp.rts.Load()}
			raw := tp.replay(b, clone.DSN)
			// The limit planner repairs the same queues under the same terms
			// (the clone holds the lease rows), one connection per database.
			coll, err := hostCollation(ctx, limitDB.SQL(b))
			if err != nil {
				b.Fatal(err)
			}
			lw := newWire()
			pool := openLimitPool(b, limitDB.DSN, lw)
			lps := make([]*limitPlanner, conns)
			for w := range conns {
				lps[w] = newLimitPlanner(limitConn(b, pool), limitConn(b, pool), limitConn(b, pool), coll, "bench")
			}
			lwoken := make([]int, conns)
			lw.on.Store(true)
			limit := measure(conns, func(w int) {
				lwoken[w], errs[w] = lps[w].run(ctx, leases[w].term)
			})
			lw.on.Store(false)
			failOn(b, errs)
			if n := sum(lwoken); n != b.N {
				b.Fatalf("limit planner woke %d records; want %d", n, b.N)
			}
			report(b, b.N, libRun, raw, measured{took: limit, rts: lw.rts.Load()}, tp.Statements())
		})
	}
}

// runUntilDrained runs the planner on the lease's queue until a run ends without
// Stats.More: a run takes at most planner.Config.RunLimit records, so one
// run repairs only part of a queue holding more. Between runs a reconciler
// would serve other queues; here each worker has its queue to itself, so
// the runs follow each other at once and the benchmark measures the
// repairs, plus one due-records read per RunLimit records.
func runUntilDrained(ctx context.Context, p *planner.Planner, l planner.Lease) (planner.Stats, error) {
	var total planner.Stats
	for {
		st, err := p.Run(ctx, l)
		total = addStats(total, st)
		if err != nil || !st.More {
			return total, err
		}
	}
}

func addStats(a, b planner.Stats) planner.Stats {
	a.Settled += b.Settled
	a.Woken += b.Woken
	a.WakeFailed += b.WakeFailed
	a.Done += b.Done
	a.Waiting += b.Waiting
	a.Parked += b.Parked
	a.Failed += b.Failed
	a.Conflicts += b.Conflicts
	return a
}

var serverOnce sync.Once

// printServer prints the server's version once, for cmd/benchreport.
func printServer(b *testing.B, db *mysqltest.DB) {
	serverOnce.Do(func() {
		var v string
		if err := db.SQL(b).QueryRowContext(context.Background(), "SELECT VERSION()").Scan(&v); err != nil {
			b.Fatal(err)
		}
		b.Logf("mend-bench: server %s (%s, innodb_flush_log_at_trx_commit=2 on the harness's private server)", v, db.Server)
	})
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func failOn(b *testing.B, errs []error) {
	b.Helper()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// seedRepairQueue gives worker w's queue a live batch to wake (so every
// repair publishes) and n dead letters, each a speculating batch of two
// requests with its record, and takes the queue's lease for the worker.
func seedRepairQueue(ctx context.Context, w0 sqtest.World, store *storage.DB, queue string, w, n int) (planLease, error) {
	if err := w0.SeedBatch(ctx, queue, batchID(queue, "z-live"), string(mend.BatchCreated), requestID(queue, "live")); err != nil {
		return planLease{}, err
	}
	for i := range n {
		id := fmt.Sprintf("b%06d", i)
		batch := batchID(queue, id)
		if err := w0.SeedBatch(ctx, queue, batch, string(mend.BatchSpeculating), requestID(queue, id+"-r1"), requestID(queue, id+"-r2")); err != nil {
			return planLease{}, err
		}
		if _, _, err := store.RecordCreate(ctx, mend.CreateParams{Source: src(queue, batch), OpID: mend.NewOpID(), Actor: "bench",
			Target: mend.Target{BatchID: batch, Desired: mend.OutcomeFailed}}); err != nil {
			return planLease{}, err
		}
	}
	term, err := store.LeaseAcquire(ctx, queue, "bench-"+strconv.Itoa(w), 10*time.Minute)
	if err != nil {
		return planLease{}, err
	}
	return planLease{term}, nil
}

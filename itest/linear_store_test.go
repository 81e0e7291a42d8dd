package itest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/go-sql-driver/mysql"

	"github.com/mendq/mend"
	"github.com/mendq/mend/internal/mysqltest"
	"github.com/mendq/mend/migrations"
	"github.com/mendq/mend/storage"
)

// This file checks that the record store is linearizable: histories of
// concurrent create-if-absent, compare-and-set appends and reads on a few hot
// records, taken against the real server through faulty networks, must be
// explained by a sequential model of one record. A deliberately naive
// read-then-write store, driven by the same workload, must be rejected.

// linKind is the operation a client invoked.
type linKind uint8

const (
	linCreate linKind = iota // create-if-absent of the key's source identity
	linAppend                // CAS append at an expected version
	linRead                  // read the record by source identity
)

// linResult is a definite outcome.
type linResult uint8

const (
	resOK       linResult = iota
	resConflict           // append: version moved
	resNotFound           // append or read: no such record
	resStale              // append: the source is recorded under another ID
)

func (r linResult) String() string {
	return [...]string{"ok", "conflict", "notfound", "stale"}[r]
}

// linInput is an operation's input. Key partitions the history: each key
// is one record's source identity.
type linInput struct {
	Kind     linKind
	Key      int
	ID       mend.RecordID // append: the record the client names
	Expected int64         // append: the version the client read
}

// linOutput is what the client saw. Unknown means the outcome is ambiguous:
// the operation then never returns (its Return is +inf) and may have taken
// effect at any point after its call, or never.
type linOutput struct {
	Unknown bool
	Result  linResult
	ID      mend.RecordID // create, read: the record's ID
	Created bool          // create: this call created it
	Version int64         // create, read: the version read back
}

// linState is the model's state of one record. IDKnown is false after a
// create whose outcome is unknown took effect: some ID exists, and the first
// observation binds it.
type linState struct {
	Exists  bool
	IDKnown bool
	ID      mend.RecordID
	Version int64
}

// sameID reports whether the record may have ID id, and the state with the
// ID bound.
func (s linState) sameID(id mend.RecordID) (bool, linState) {
	if !s.IDKnown {
		s.IDKnown, s.ID = true, id
		return true, s
	}
	return s.ID == id, s
}

// linStep is the sequential specification of one record; it returns every
// state the operation may leave (none: the output is impossible).
func linStep(state, input, output any) []any {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	switch in.Kind {
	case linCreate:
		switch {
		case out.Unknown && !s.Exists:
			return []any{s, linState{Exists: true, Version: 1}}
		case out.Unknown:
			return []any{s}
		case out.Created:
			if s.Exists || out.Version != 1 {
				return nil
			}
			return []any{linState{Exists: true, IDKnown: true, ID: out.ID, Version: 1}}
		default:
			if !s.Exists || out.Version != s.Version {
				return nil
			}
			if ok, b := s.sameID(out.ID); ok {
				return []any{b}
			}
			return nil
		}
	case linAppend:
		if out.Unknown {
			if ok, b := s.sameID(in.ID); s.Exists && ok && s.Version == in.Expected {
				b.Version++
				return []any{s, b}
			}
			return []any{s}
		}
		switch out.Result {
		case resNotFound:
			if s.Exists {
				return nil
			}
			return []any{s}
		case resStale:
			if !s.Exists || (s.IDKnown && s.ID == in.ID) {
				return nil
			}
			return []any{s}
		case resOK, resConflict:
			ok, b := s.sameID(in.ID)
			if !s.Exists || !ok || (s.Version == in.Expected) != (out.Result == resOK) {
				return nil
			}
			if out.Result == resOK {
				b.Version++
			}
			return []any{b}
		}
	case linRead:
		if out.Result == resNotFound {
			if s.Exists {
				return nil
			}
			return []any{s}
		}
		if ok, b := s.sameID(out.ID); s.Exists && ok && s.Version == out.Version {
			return []any{b}
		}
		return nil
	}
	return nil
}

// linModel is the record store's model, partitioned by record.
var linModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		var keys []int
		for _, op := range h {
			k := op.Input.(linInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Ints(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: linStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		var res string
		switch {
		case out.Unknown:
			res = "unknown"
		case in.Kind == linCreate:
			res = fmt.Sprintf("%s created=%v v%d", short(out.ID), out.Created, out.Version)
		case in.Kind == linRead && out.Result == resOK:
			res = fmt.Sprintf("%s v%d", short(out.ID), out.Version)
		default:
			res = out.Result.String()
		}
		switch in.Kind {
		case linCreate:
			return fmt.Sprintf("create(k%d) -> %s", in.Key, res)
		case linAppend:
			return fmt.Sprintf("append(k%d, %s, v%d) -> %s", in.Key, short(in.ID), in.Expected, res)
		default:
			return fmt.Sprintf("read(k%d) -> %s", in.Key, res)
		}
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		switch {
		case !s.Exists:
			return "absent"
		case !s.IDKnown:
			return fmt.Sprintf("? v%d", s.Version)
		default:
			return fmt.Sprintf("%s v%d", short(s.ID), s.Version)
		}
	},
}

func short(id mend.RecordID) string { return id.String()[:6] }

// recordStore is the store under test, as the workload drives it. An error
// matching mend.ErrAmbiguous means the outcome is unknown; other errors
// besides the definite outcomes (ErrConflict, ErrNotFound, ErrStaleRecord)
// claim that nothing was written, and the operation is left out of the
// history: if it did take effect, later reads cannot be explained and the
// checker fails.
type recordStore interface {
	Create(ctx context.Context, src mend.SourceID) (id mend.RecordID, created bool, version int64, err error)
	Append(ctx context.Context, src mend.SourceID, id mend.RecordID, expected int64) (opID string, err error)
	Read(ctx context.Context, src mend.SourceID) (id mend.RecordID, version int64, err error)
}

// realStore is storage.DB.
type realStore struct{ db *storage.DB }

func (s realStore) Create(ctx context.Context, src mend.SourceID) (mend.RecordID, bool, int64, error) {
	rec, created, err := s.db.RecordCreate(ctx, mend.CreateParams{
		Source: src, Snapshot: mend.Snapshot{Payload: []byte(`{"id":"b","queue":"q"}`)},
		Target: mend.Target{BatchID: "b", Desired: mend.OutcomeFailed}, OpID: mend.NewOpID(), Actor: "lin",
	})
	return rec.ID, created, rec.Version, err
}

func (s realStore) Append(ctx context.Context, src mend.SourceID, id mend.RecordID, expected int64) (string, error) {
	op := mend.NewOpID()
	_, err := s.db.RecordAppend(ctx, mend.AppendParams{
		Source: src, RecordID: id, Version: expected, Kind: mend.EventAttemptFailed, Actor: "lin", OpID: op,
		State: mend.StatePending, Attempts: int(expected),
	})
	return op, err
}

func (s realStore) Read(ctx context.Context, src mend.SourceID) (mend.RecordID, int64, error) {
	rec, err := s.db.RecordGet(ctx, src)
	return rec.ID, rec.Version, err
}

// naiveStore is the negative control: the obvious read-then-write code
// without create-if-absent or a version check in the write. It keeps its own
// table, without a unique key on the source, like a store designed that way.
type naiveStore struct{ db *sql.DB }

const naiveSchema = `CREATE TABLE IF NOT EXISTS naive_records (
	pk BIGINT AUTO_INCREMENT PRIMARY KEY,
	queue VARBINARY(1020) NOT NULL,
	source_key BINARY(32) NOT NULL,
	record_id BINARY(16) NOT NULL,
	version BIGINT NOT NULL,
	KEY (queue, source_key),
	KEY (record_id)
) ENGINE=InnoDB`

// naiveErr maps a driver error: a server error means the statement failed;
// a broken connection during a write leaves its outcome unknown.
func naiveErr(err error, write bool) error {
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &me) || !write:
		return fmt.Errorf("%w: %w", mend.ErrUnavailable, err)
	default:
		return &mend.AmbiguousError{OpID: "naive", Err: err}
	}
}

func (s naiveStore) find(ctx context.Context, src mend.SourceID) (mend.RecordID, int64, error) {
	key := src.Key()
	var id mend.RecordID
	var raw []byte
	var v int64
	err := s.db.QueryRowContext(ctx, `SELECT record_id, version FROM naive_records WHERE queue = ? AND source_key = ? ORDER BY pk LIMIT 1`,
		src.Queue, key[:]).Scan(&raw, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return id, 0, mend.ErrNotFound
	}
	if err != nil {
		return id, 0, naiveErr(err, false)
	}
	copy(id[:], raw)
	return id, v, nil
}

func (s naiveStore) Create(ctx context.Context, src mend.SourceID) (mend.RecordID, bool, int64, error) {
	id, v, err := s.find(ctx, src)
	if err == nil || !errors.Is(err, mend.ErrNotFound) {
		return id, false, v, err
	}
	id = mend.NewRecordID()
	key := src.Key()
	_, err = s.db.ExecContext(ctx, `INSERT INTO naive_records (queue, source_key, record_id, version) VALUES (?, ?, ?, 1)`,
		src.Queue, key[:], id[:])
	return id, true, 1, naiveErr(err, true)
}

func (s naiveStore) Append(ctx context.Context, _ mend.SourceID, id mend.RecordID, expected int64) (string, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, `SELECT version FROM naive_records WHERE record_id = ?`, id[:]).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", mend.ErrNotFound
	case err != nil:
		return "", naiveErr(err, false)
	case v != expected:
		return "", mend.ErrConflict
	}
	_, err = s.db.ExecContext(ctx, `UPDATE naive_records SET version = ? WHERE record_id = ?`, expected+1, id[:])
	return "", naiveErr(err, true)
}

func (s naiveStore) Read(ctx context.Context, src mend.SourceID) (mend.RecordID, int64, error) {
	return s.find(ctx, src)
}

// linRoute is one way a client reaches the server.
type linRoute struct {
	name  string
	store recordStore
}

// linRun is one workload run and what it recorded.
type linRun struct {
	start     time.Time // the history's time origin
	history   []porcupine.Operation
	ambiguous []linAmbiguous // ambiguous appends, with their op IDs
	refused   atomic.Int64   // operations that failed with nothing written
	reused    atomic.Int64   // operations refused for an op ID they never used before: a store bug
	byKind    [3]atomic.Int64
}

type linAmbiguous struct {
	Key int    `json:"key"`
	Op  string `json:"op_id"`
}

// linSource is the source identity of key's record.
func linSource(queue string, key int) mend.SourceID {
	return mend.SourceID{Queue: queue, Topic: "lin_dlq", Partition: queue, MessageID: fmt.Sprintf("k%d", key)}
}

// linEvents reads the event log of the records keys 0..n-1 name, for a
// failure's evidence.
func linEvents(t *testing.T, s *storage.DB, queue string, n int) map[string][]mend.Event {
	t.Helper()
	out := map[string][]mend.Event{}
	for key := range n {
		src := linSource(queue, key)
		rec, err := s.RecordGet(t.Context(), src)
		if err != nil {
			continue // never created
		}
		evs, err := s.RecordHistory(t.Context(), queue, rec.ID)
		if err != nil {
			t.Logf("evidence: events of %v: %v", src, err)
		}
		out[fmt.Sprintf("k%d/%s", key, rec.ID)] = evs
	}
	return out
}

// linWorkload drives clients (one per route entry) over keys hot records
// per round, rounds after one another: each client reads a record and
// appends at the version it read, creates it when absent, and now and then
// creates it anyway (the loser path) or reads only.
func linWorkload(routes []linRoute, queue string, keysPerRound, opsPerRound, totalOps int) *linRun {
	run := &linRun{start: time.Now()}
	var (
		mu    sync.Mutex
		next  atomic.Int64
		wg    sync.WaitGroup
		start = run.start
	)
	src := func(key int) mend.SourceID { return linSource(queue, key) }
	record := func(client int, in linInput, call time.Time, out linOutput, err error) {
		ret := int64(time.Since(start))
		switch {
		case err == nil:
		case errors.Is(err, mend.ErrConflict):
			out.Result = resConflict
		case errors.Is(err, mend.ErrNotFound):
			out.Result = resNotFound
		case errors.Is(err, mend.ErrStaleRecord):
			out.Result = resStale
		case errors.Is(err, mend.ErrAmbiguous):
			out = linOutput{Unknown: true}
			ret = math.MaxInt64
		case isOpIDReuse(err):
			// Every well-formed operation carries a fresh op ID, so "already
			// used" means the store mistook another write for this one: a bug,
			// never a clean refusal (a CAS without its version check shows up here).
			run.reused.Add(1)
			return
		default:
			run.refused.Add(1)
			return
		}
		run.byKind[in.Kind].Add(1)
		mu.Lock()
		run.history = append(run.history, porcupine.Operation{ClientId: client, Input: in, Call: int64(call.Sub(start)), Output: out, Return: ret})
		mu.Unlock()
	}
	for c, route := range routes {
		wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= totalOps {
					return
				}
				key := (n/opsPerRound)*keysPerRound + rand.IntN(keysPerRound)
				s := src(key)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				call := time.Now()
				if rand.IntN(8) == 0 {
					id, created, v, err := route.store.Create(ctx, s)
					record(c, linInput{Kind: linCreate, Key: key}, call, linOutput{ID: id, Created: created, Version: v}, err)
					cancel()
					continue
				}
				id, v, err := route.store.Read(ctx, s)
				record(c, linInput{Kind: linRead, Key: key}, call, linOutput{ID: id, Version: v}, err)
				switch {
				case errors.Is(err, mend.ErrNotFound):
					call = time.Now()
					id, created, v, err := route.store.Create(ctx, s)
					record(c, linInput{Kind: linCreate, Key: key}, call, linOutput{ID: id, Created: created, Version: v}, err)
				case err == nil && rand.IntN(6) != 0:
					in := linInput{Kind: linAppend, Key: key, ID: id, Expected: v}
					call = time.Now()
					op, err := route.store.Append(ctx, s, id, v)
					record(c, in, call, linOutput{}, err)
					if errors.Is(err, mend.ErrAmbiguous) && op != "" {
						mu.Lock()
						run.ambiguous = append(run.ambiguous, linAmbiguous{Key: key, Op: op})
						mu.Unlock()
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return run
}

// linCheck runs the checker.
func linCheck(h []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo, time.Duration) {
	begin := time.Now()
	res, info := porcupine.CheckOperationsVerbose(linModel.ToModel(), h, timeout)
	return res, info, time.Since(begin)
}

// linVisualise writes porcupine's visualisation of info into dir and
// returns its path.
func linVisualise(t *testing.T, info porcupine.LinearizationInfo, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "linearizability.html")
	if err := porcupine.VisualizePath(linModel.ToModel(), info, path); err != nil {
		t.Logf("write visualisation: %v", err)
		return ""
	}
	return path
}

// linRoutes builds the clients: some direct, some through a toxiproxy under
// chaos (latency, resets, timeouts), some through a driver network that cuts
// connections at COMMIT. open makes a store from a DSN.
type linFaults struct {
	chaos  *chaos
	cutter *commitCutter
	routes []string // client -> route, for a failure's evidence
}

func linRoutes(t *testing.T, db *mysqltest.DB, clients int, open func(dsn string) recordStore) ([]linRoute, *linFaults) {
	t.Helper()
	proxy := mysqltest.NewProxy(t, db.Server.Addr())
	cutter := newCommitCutter(0.05)
	direct := open(db.DSN)
	viaProxy := open(db.DSNVia(proxy.Addr()))
	viaCutter := open(cutter.DSN(t, db.DSN))
	routes := make([]linRoute, clients)
	for i := range routes {
		switch i % 3 {
		case 0:
			routes[i] = linRoute{"direct", direct}
		case 1:
			routes[i] = linRoute{"toxiproxy", viaProxy}
		default:
			routes[i] = linRoute{"commit-cut", viaCutter}
		}
	}
	names := make([]string, len(routes))
	for i, r := range routes {
		names[i] = fmt.Sprintf("client %d: %s", i, r.name)
	}
	return routes, &linFaults{chaos: startChaos(t, proxy), cutter: cutter, routes: names}
}

func (f *linFaults) describe(t *testing.T) string {
	t.Helper()
	f.chaos.Stop()
	counts, err := f.chaos.Faults()
	if err != nil {
		t.Errorf("fault schedule: %v", err)
	}
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	req, reply := f.cutter.Cuts()
	parts = append(parts, fmt.Sprintf("commit-cut/request-lost=%d", req), fmt.Sprintf("commit-cut/reply-lost=%d", reply))
	return strings.Join(parts, " ")
}

func openRealStore(t *testing.T) func(string) recordStore {
	return func(dsn string) recordStore {
		db, err := storage.Open(t.Context(), dsn, storage.Options{})
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return realStore{db}
	}
}

// TestLinearizableRecordStore: the real store's histories are linearizable,
// under concurrency and network faults, with ambiguous outcomes left open.
func TestLinearizableRecordStore(t *testing.T) {
	t.Parallel()
	clients := sized(9, 12)
	keys := sized(3, 4)
	opsPerRound := sized(400, 600)
	total := sized(4000, 30000)

	quietDriver()
	db := mysqltest.NewDB(t, migrations.Up)
	routes, faults := linRoutes(t, db, clients, openRealStore(t))
	run := linWorkload(routes, "lin", keys, opsPerRound, total)
	faultText := faults.describe(t)
	if n := run.reused.Load(); n > 0 {
		t.Errorf("%d well-formed operations were refused as reusing an op ID: the store took another write for theirs", n)
	}

	// The ambiguous appends are resolved through their op IDs after the run,
	// only to report what happened: the checker saw them as unknown.
	checker := openRealStore(t)(db.DSN).(realStore)
	applied := 0
	for _, a := range run.ambiguous {
		if _, err := checker.db.OpLookup(t.Context(), "lin", a.Op); err == nil {
			applied++
		} else if !errors.Is(err, mend.ErrNotFound) {
			t.Fatalf("op lookup: %v", err)
		}
	}
	unknown := 0
	for _, op := range run.history {
		if op.Output.(linOutput).Unknown {
			unknown++
		}
	}
	res, info, took := linCheck(run.history, 2*time.Minute)
	summary := fmt.Sprintf("%d operations checked (%d create, %d append, %d read) from %d clients on %d records; %d ambiguous (of which %d ambiguous appends, %d found committed by op_id); %d refused with nothing written; faults: %s; checker %s in %s",
		len(run.history), run.byKind[linCreate].Load(), run.byKind[linAppend].Load(), run.byKind[linRead].Load(),
		clients, total/opsPerRound*keys, unknown, len(run.ambiguous), applied, run.refused.Load(), faultText, res, took.Round(time.Millisecond))
	prooff(t, "%s", summary)
	if res != porcupine.Ok {
		dir := keepEvidence(t, proofEvidence{
			Model: linModel.ToModel(), Info: info, History: run.history, Result: res, Summary: summary,
			JSON: map[string]any{
				"mend_events.json": linEvents(t, checker.db, "lin", total/opsPerRound*keys),
				"ambiguous.json":   run.ambiguous,
				"faults.json":      faultLog(run.start, faults.chaos, faults.cutter),
				"routes.json":      faults.routes,
			},
		})
		if res == porcupine.Illegal {
			t.Fatalf("the record store's history is not linearizable; evidence (history, faults, event log, visualisation) kept in %s", dir)
		}
		t.Fatalf("the checker could not decide within its timeout (%s); evidence kept in %s", res, dir)
	}
	if unknown == 0 {
		t.Errorf("no operation was ambiguous: the faults did not exercise unknown outcomes")
	}
}

// TestLinearizabilityCatchesNaiveStore is the negative control: the same
// workload against a read-then-write store must be rejected. A store that
// gets through this check would show that the checker proves nothing.
func TestLinearizabilityCatchesNaiveStore(t *testing.T) {
	mysqltest.SkipVitess(t, "the naive store's own table is not in the sharded keyspace's vschema, so vtgate refuses its statements and the run records no operations; the checker's negative control runs on mysql and mariadb")
	t.Parallel()
	quietDriver()
	db := mysqltest.NewDB(t)
	if _, err := db.SQL(t).ExecContext(t.Context(), naiveSchema); err != nil {
		t.Fatalf("create naive table: %v", err)
	}
	open := func(dsn string) recordStore {
		sqlDB, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = sqlDB.Close() })
		return naiveStore{sqlDB}
	}
	clients := sized(9, 12)
	routes, faults := linRoutes(t, db, clients, open)
	// Races in the naive code show up within the first run in practice.
	linMustCatch(t, routes, faults, "naive", 300, 600, "naive read-then-write store", "the checker cannot be trusted")
}

// linMustCatch is a negative control's loop: up to five short runs of the
// workload, each on fresh records named prefix<i>, must end in an Illegal
// history; the first one ends the test. what names the store under test in
// the report, and otherwise says what a pass would mean.
func linMustCatch(t *testing.T, routes []linRoute, faults *linFaults, prefix string, opsPerRound, total int, what, otherwise string) {
	t.Helper()
	const maxRuns = 5
	checked := 0
	for i := range maxRuns {
		run := linWorkload(routes, fmt.Sprintf("%s%d", prefix, i), 3, opsPerRound, total)
		checked += len(run.history)
		res, info, took := linCheck(run.history, time.Minute)
		if res == porcupine.Illegal {
			viz := linVisualise(t, info, t.TempDir())
			prooff(t, "%s rejected as %s after %d runs, %d operations checked (checker %s); faults: %s; visualisation: %s",
				what, res, i+1, checked, took.Round(time.Millisecond), faults.describe(t), viz)
			return
		}
		t.Logf("run %d: %s not caught (%s) in %d operations", i, what, res, len(run.history))
	}
	t.Fatalf("%s accepted in %d runs (%d operations): %s", what, maxRuns, checked, otherwise)
}

// TestLinearModel pins the model on small hand-written histories, so a
// model that accepts everything cannot pass the checks above.
func TestLinearModel(t *testing.T) {
	t.Parallel()
	a, b := mend.RecordID{1}, mend.RecordID{2}
	op := func(client int, call, ret int64, in linInput, out linOutput) porcupine.Operation {
		if out.Unknown {
			ret = math.MaxInt64
		}
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	create := linInput{Kind: linCreate}
	read := linInput{Kind: linRead}
	appendAt := func(id mend.RecordID, v int64) linInput { return linInput{Kind: linAppend, ID: id, Expected: v} }
	cases := []struct {
		name string
		h    []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"create then read", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(1, 2, 3, read, linOutput{ID: a, Version: 1}),
		}, porcupine.Ok},
		{"two creators both win", []porcupine.Operation{
			op(0, 0, 2, create, linOutput{ID: a, Created: true, Version: 1}),
			op(1, 1, 3, create, linOutput{ID: b, Created: true, Version: 1}),
		}, porcupine.Illegal},
		{"loser sees the winner", []porcupine.Operation{
			op(0, 0, 2, create, linOutput{ID: a, Created: true, Version: 1}),
			op(1, 1, 3, create, linOutput{ID: a, Version: 1}),
		}, porcupine.Ok},
		{"two appends at one version both succeed", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(0, 2, 4, appendAt(a, 1), linOutput{}),
			op(1, 3, 5, appendAt(a, 1), linOutput{}),
		}, porcupine.Illegal},
		{"second append conflicts", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(0, 2, 4, appendAt(a, 1), linOutput{}),
			op(1, 3, 5, appendAt(a, 1), linOutput{Result: resConflict}),
			op(1, 6, 7, read, linOutput{ID: a, Version: 2}),
		}, porcupine.Ok},
		{"a refused append took effect", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(1, 6, 7, read, linOutput{ID: a, Version: 2}),
		}, porcupine.Illegal},
		{"an ambiguous append took effect", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(0, 2, 0, appendAt(a, 1), linOutput{Unknown: true}),
			op(1, 6, 7, read, linOutput{ID: a, Version: 2}),
		}, porcupine.Ok},
		{"an ambiguous append did not", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(0, 2, 0, appendAt(a, 1), linOutput{Unknown: true}),
			op(1, 6, 7, read, linOutput{ID: a, Version: 1}),
			op(1, 8, 9, read, linOutput{ID: a, Version: 2}),
		}, porcupine.Ok},
		{"an ambiguous append applied twice", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(0, 2, 0, appendAt(a, 1), linOutput{Unknown: true}),
			op(1, 6, 7, read, linOutput{ID: a, Version: 3}),
		}, porcupine.Illegal},
		{"an ambiguous create binds the id read later", []porcupine.Operation{
			op(0, 0, 0, create, linOutput{Unknown: true}),
			op(1, 2, 3, read, linOutput{ID: b, Version: 1}),
			op(1, 4, 5, read, linOutput{ID: a, Version: 1}),
		}, porcupine.Illegal},
		{"a read goes back in time", []porcupine.Operation{
			op(0, 0, 1, create, linOutput{ID: a, Created: true, Version: 1}),
			op(0, 2, 3, appendAt(a, 1), linOutput{}),
			op(1, 4, 5, read, linOutput{ID: a, Version: 1}),
		}, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := porcupine.CheckOperationsTimeout(linModel.ToModel(), tc.h, 10*time.Second); got != tc.want {
				t.Fatalf("check = %s; want %s", got, tc.want)
			}
		})
	}
}

// isOpIDReuse reports the store's refusal of an op ID it has seen before.
func isOpIDReuse(err error) bool {
	var ve *mend.ValidationError
	return errors.As(err, &ve) && ve.Field == "op_id"
}

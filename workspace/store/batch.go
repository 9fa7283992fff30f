package store

// Group execution of the store's one-row statements.
//
// Every reconcile step and observation issues one or two tiny statements (a
// claim, "executed", an observation, a completion, a row read). Run one by
// one, a fleet of 10,000 workspaces walking PENDING → RUNNING costs about
// 170,000 round trips, and the database, not the 10 ms provider calls, sets
// the pace. So the store queues statements from concurrent callers and a few
// loops run whatever is queued as one unit:
//
//   - writes on SQLite: one BEGIN IMMEDIATE … COMMIT per batch on the single
//     writer (SQLite has one writer anyway; a commit costs far more than a
//     row update), with every statement prepared once;
//   - writes on Postgres: one pipelined pgx batch (one round trip, one
//     implicit transaction), its statements sorted by row id so two batches
//     (of this replica or another) always lock rows in the same order and
//     never deadlock. Only statements that write one row by id
//     (`… WHERE id = ? …`) join a batch; any other runs alone;
//   - reads by id (Get): one SELECT … WHERE id IN (…) per batch.
//
// Each statement keeps its own WHERE (the compare-and-set) and reports its
// own rows affected, exactly as if it had run alone at the moment its batch
// ran. A batch starts after every request in it was made, so a read sees
// every write its caller finished before asking. A loop never waits for
// more requests than are already queued: a lone statement runs at once (no
// added latency), and batches grow only while the database is busy.
//
// Statements issued under an Urgent context (work a user asked for) never
// wait behind bulk work: a read runs at once in its caller; a write on
// Postgres runs alone at once; a write on SQLite is handed to the single
// writer on a channel of its own, which the writer drains first, even
// between two statements of a bulk batch (runSQLiteTx).

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// errStoreClosed is returned by a statement issued after Close.
var errStoreClosed = errors.New("workspace: store closed")

const (
	maxWriteBatch = 512
	maxReadBatch  = 256
	// batchTimeout bounds one batch on Postgres (callers' contexts are
	// checked when the batch starts). SQLite batches run without a
	// deadline (batchCtx).
	batchTimeout = 30 * time.Second
	// maxCachedStmts bounds the SQLite writer's prepared statements (the
	// store has a dozen distinct writes).
	maxCachedStmts = 64
	// lingerAfter and lingerFor: see linger.
	lingerAfter = 16
	lingerFor   = 500 * time.Microsecond
)

// readBuckets are the IN-list sizes of batched reads: a batch is padded up
// to the next size (repeating an id), so a handful of prepared statements
// serve every batch.
var readBuckets = []int{1, 4, 16, 64, maxReadBatch}

type writeReq struct {
	ctx  context.Context
	key  string // the row id the statement writes (Postgres batches sort by it)
	q    string
	args []any
	res  chan writeRes // buffered 1: the loop never blocks answering
}

type writeRes struct {
	n   int64
	err error
}

type readReq struct {
	id  string
	res chan readRes // buffered 1
}

type readRes struct {
	w     workspace.Workspace
	found bool
	err   error
}

// batcher runs the store's queued statements. Requests are handed over on
// unbuffered channels, so a loop that drains them takes exactly the callers
// waiting at that moment, and no request is ever left in a buffer at Close.
type batcher struct {
	s      *Store
	gate   Gate // nil: bulk batches never wait for urgent work (urgent.go)
	writes chan *writeReq
	reads  chan *readReq
	// urgentWrites carries the SQLite writes made under an Urgent
	// context; the writer drains it first, even in the midst of a batch.
	urgentWrites chan *writeReq
	quit         chan struct{}
	wg           sync.WaitGroup

	// prepared is the SQLite writer's statement cache; only the writer
	// goroutine touches it.
	prepared map[string]*sql.Stmt

	// mu protects readStmts.
	mu        sync.Mutex
	readStmts map[int]*sql.Stmt

	pgText   sync.Map // statement text → its Postgres spelling ($n placeholders)
	pgShapes sync.Map // statement text → its pgShape (pgmany.go)

	// Counters for benchmarks (atomic, any goroutine).
	writeStmts, writeBatches, readRows, readBatches atomic.Int64

	// beforeBulk, set only by tests (SetBeforeBulk), runs before each bulk
	// statement on SQLite and each bulk batch on Postgres.
	beforeBulk atomic.Pointer[func()]

	loops int // write loops, and as many read loops (newBatcher)
}

// bulkHook runs the test hook, if any, unless r is urgent.
func (b *batcher) bulkHook(r *writeReq) {
	if f := b.beforeBulk.Load(); f != nil && !urgency.Is(r.ctx) {
		(*f)()
	}
}

// BatchStats is what the benchmark reports: statements and the round
// trips (batches) they took.
type BatchStats struct {
	WriteStmts, WriteBatches, ReadRows, ReadBatches int64
}

func newBatcher(s *Store, gate Gate) *batcher {
	b := &batcher{s: s, gate: gate, writes: make(chan *writeReq), reads: make(chan *readReq),
		urgentWrites: make(chan *writeReq), quit: make(chan struct{}),
		prepared: map[string]*sql.Stmt{}, readStmts: map[int]*sql.Stmt{}}
	// SQLite: one writer, as the file allows, and one reader (in-process
	// reads cost CPU, not waiting: a second loop only halves the batches).
	// Postgres: two of each, so one batch travels while the next is built.
	run := b.runSQLite
	b.loops = 1
	if s.dialect == Postgres {
		run, b.loops = b.runPostgres, 2
	}
	for range b.loops {
		b.wg.Add(1)
		go b.writeLoop(run)
	}
	for range b.loops {
		b.wg.Add(1)
		go b.readLoop()
	}
	return b
}

func (b *batcher) stats() BatchStats {
	return BatchStats{b.writeStmts.Load(), b.writeBatches.Load(), b.readRows.Load(), b.readBatches.Load()}
}

// close stops the loops (each finishes the batch in hand) and releases
// the prepared statements.
func (b *batcher) close() {
	close(b.quit)
	b.wg.Wait()
	for _, st := range b.prepared {
		st.Close()
	}
	b.mu.Lock()
	for _, st := range b.readStmts {
		st.Close()
	}
	b.mu.Unlock()
}

// rowKey returns the id a statement writes when it writes one row by id:
// its WHERE begins with `id = ?` (every row write of the store is spelled
// `… WHERE id = ? AND …`).
func rowKey(q string, args []any) (string, bool) {
	i := strings.Index(q, "WHERE id = ?")
	if i < 0 {
		return "", false
	}
	n := strings.Count(q[:i], "?")
	if n >= len(args) {
		return "", false
	}
	id, ok := args[n].(string)
	return id, ok
}

// exec runs one write through a batch (SQLite: every write; Postgres: a
// one-row write) or, on Postgres, alone.
func (b *batcher) exec(ctx context.Context, q string, args []any) (int64, error) {
	key, oneRow := rowKey(q, args)
	if b.s.dialect == Postgres && (!oneRow || urgency.Is(ctx)) {
		// Alone: a statement that is not a one-row write, or an urgent one,
		// which runs at once on its own connection (one row: it cannot
		// deadlock with a batch) instead of waiting for a batch.
		return b.s.execDirect(ctx, q, args)
	}
	r := &writeReq{ctx: ctx, key: key, q: q, args: args, res: make(chan writeRes, 1)}
	ch := b.writes
	if urgency.Is(ctx) {
		ch = b.urgentWrites
	}
	select {
	case ch <- r:
	case <-b.quit:
		return 0, errStoreClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	res := <-r.res // always answered: the outcome is known once the batch ends
	return res.n, res.err
}

// execDirect runs one statement on its own.
func (s *Store) execDirect(ctx context.Context, q string, args []any) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.rebind(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// next waits for a request, urgent first; isUrgent reports its kind.
func next[T any](urgent, plain <-chan T, quit <-chan struct{}) (r T, isUrgent, ok bool) {
	select {
	case r := <-urgent:
		return r, true, true
	default:
	}
	select {
	case r = <-urgent:
		return r, true, true
	case r = <-plain:
		return r, false, true
	case <-quit:
		return r, false, false
	}
}

// gather is a batch of first and the requests already waiting, at most
// limit: it never waits for more. Urgent requests come first, and a batch
// with one (hasUrgent) carries no plain request beyond first.
func gather[T any](first T, firstUrgent bool, urgent, plain <-chan T, limit int) (batch []T, hasUrgent bool) {
	batch = drain(append(make([]T, 0, 64), first), urgent, limit)
	if firstUrgent || len(batch) > 1 {
		return batch, true
	}
	return drain(batch, plain, limit), false
}

// drain appends the requests waiting on ch to batch, up to limit.
func drain[T any](batch []T, ch <-chan T, limit int) []T {
	for len(batch) < limit {
		select {
		case r := <-ch:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

func (b *batcher) writeLoop(run func([]*writeReq)) {
	defer b.wg.Done()
	prev := 0 // size of the previous batch
	for {
		first, urgent, ok := next(b.urgentWrites, b.writes, b.quit)
		if !ok {
			return
		}
		batch, urgent := gather(first, urgent, b.urgentWrites, b.writes, maxWriteBatch)
		if !urgent {
			if b.yieldToUrgent(b.urgentWrites, run) {
				batch = drain(batch, b.writes, maxWriteBatch) // grown meanwhile
			} else if prev >= lingerAfter && len(batch) < prev {
				batch = b.linger(batch, prev)
			}
			prev = len(batch)
		}
		b.writeBatches.Add(1)
		b.writeStmts.Add(int64(len(batch)))
		run(batch)
	}
}

// yieldToUrgent waits, before a bulk batch starts, while urgent work is in
// flight (b.gate), at most its MaxYield; the urgent writes that arrive
// meanwhile on urgent (nil: none come this way) run at once, alone. It
// reports whether it waited.
func (b *batcher) yieldToUrgent(urgent <-chan *writeReq, run func([]*writeReq)) bool {
	if b.gate == nil {
		return false
	}
	idle := b.gate.Idle()
	select {
	case <-idle:
		return false
	default:
	}
	t := time.NewTimer(b.gate.MaxYield())
	defer t.Stop()
	for {
		select {
		case <-idle:
			return true
		case <-t.C:
			return true
		case <-b.quit:
			return true
		case r := <-urgent:
			b.writeBatches.Add(1)
			b.writeStmts.Add(1)
			run([]*writeReq{r})
		}
	}
}

// linger waits up to lingerFor for batch to grow to want. It runs only
// while writes stream in (the previous batch had ≥ lingerAfter): then one
// commit carries more of them, at the cost of well under a millisecond of
// latency; a lone write after a quiet spell never waits.
func (b *batcher) linger(batch []*writeReq, want int) []*writeReq {
	t := time.NewTimer(lingerFor)
	defer t.Stop()
	for len(batch) < min(want, maxWriteBatch) {
		select {
		case r := <-b.urgentWrites:
			return append(batch, r) // no lingering with a user waiting
		case r := <-b.writes:
			batch = append(batch, r)
		case <-t.C:
			return batch
		case <-b.quit:
			return batch
		}
	}
	return batch
}

// batchCtx is the context a batch runs under. On Postgres it bounds the
// batch by batchTimeout. On SQLite it has no deadline: a statement there
// waits on nothing but the file's lock, which busy_timeout bounds, and a
// statement is never interrupted halfway (that would roll back the whole
// batch); a context that can end also costs the driver a watcher
// goroutine per statement (modernc.org/sqlite interruptOnDone, and
// database/sql's per-Rows one), a million of them converging 100,000
// workspaces.
func (b *batcher) batchCtx() (context.Context, context.CancelFunc) {
	if b.s.dialect == SQLite {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), batchTimeout)
}

// live answers the requests whose caller gave up and returns the others.
func live(batch []*writeReq) []*writeReq {
	out := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.res <- writeRes{err: err}
			continue
		}
		out = append(out, r)
	}
	return out
}

// runSQLite runs batch in write transactions: one, unless urgent
// statements arrive meanwhile (runSQLiteTx).
func (b *batcher) runSQLite(batch []*writeReq) {
	for batch = live(batch); len(batch) > 0; {
		batch = b.runSQLiteTx(batch)
	}
}

// runSQLiteTx runs batch in one write transaction, unless an urgent
// statement arrives while it runs: then that statement runs next in the
// same transaction, which commits at once, and the statements not yet run
// are returned for the next one. A user's write on SQLite's single writer
// so waits for one statement and a commit, not for a bulk batch.
func (b *batcher) runSQLiteTx(batch []*writeReq) (rest []*writeReq) {
	ctx, cancel := b.batchCtx()
	defer cancel()
	release, _ := b.s.takeTurn(context.Background()) // the background's wait cannot end early
	defer release()
	tx, err := b.s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		for _, r := range batch {
			r.res <- writeRes{err: err}
		}
		return nil
	}
	inTx := map[string]*sql.Stmt{}
	ran := make([]*writeReq, 0, len(batch))
	results := make([]writeRes, 0, len(batch))
	for i, r := range batch {
		b.bulkHook(r)
		ran, results = append(ran, r), append(results, b.execInTx(ctx, tx, inTx, r))
		if urgent := live(drain(nil, b.urgentWrites, maxWriteBatch)); len(urgent) > 0 {
			for _, u := range urgent {
				ran, results = append(ran, u), append(results, b.execInTx(ctx, tx, inTx, u))
			}
			rest = batch[i+1:]
			break
		}
	}
	if err := tx.Commit(); err != nil {
		for i := range results {
			results[i] = writeRes{err: err}
		}
	}
	for i, r := range ran {
		r.res <- results[i]
	}
	if rest != nil {
		// The urgent callers just answered wait in this P's run-next slot
		// while the writer would go on with the rest of the bulk batch:
		// let them run first.
		runtime.Gosched()
	}
	return rest
}

// execInTx runs r's statement in tx.
func (b *batcher) execInTx(ctx context.Context, tx *sql.Tx, inTx map[string]*sql.Stmt, r *writeReq) writeRes {
	var res sql.Result
	var err error
	if st := b.txStmt(ctx, tx, inTx, r.q); st != nil {
		res, err = st.ExecContext(ctx, r.args...)
	} else {
		res, err = tx.ExecContext(ctx, r.q, r.args...)
	}
	if err != nil {
		return writeRes{err: err}
	}
	n, err := res.RowsAffected()
	return writeRes{n: n, err: err}
}

// txStmt returns q prepared (once per store, re-bound to tx once per
// batch), or nil to run it unprepared.
func (b *batcher) txStmt(ctx context.Context, tx *sql.Tx, inTx map[string]*sql.Stmt, q string) *sql.Stmt {
	if st, ok := inTx[q]; ok {
		return st
	}
	st, ok := b.prepared[q]
	if !ok {
		if len(b.prepared) >= maxCachedStmts {
			return nil
		}
		var err error
		if st, err = b.s.db.PrepareContext(ctx, q); err != nil {
			return nil // the unprepared run reports the error to its caller
		}
		b.prepared[q] = st
	}
	ts := tx.StmtContext(ctx, st)
	inTx[q] = ts
	return ts
}

// runPostgres runs batch as one pipeline. If a statement fails on the
// server the implicit transaction rolled every statement of the batch
// back, so each runs again alone and only the failing one reports it.
func (b *batcher) runPostgres(batch []*writeReq) {
	b.bulkHook(batch[0])
	batch = live(batch)
	if len(batch) == 1 {
		r := batch[0]
		n, err := b.s.execDirect(r.ctx, r.q, r.args)
		r.res <- writeRes{n: n, err: err}
		return
	}
	if len(batch) == 0 {
		return
	}
	sort.SliceStable(batch, func(i, j int) bool { return batch[i].key < batch[j].key })
	results, err := b.pipeline(batch)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		for _, r := range batch {
			n, err := b.s.execDirect(r.ctx, r.q, r.args)
			r.res <- writeRes{n: n, err: err}
		}
		return
	}
	for i, r := range batch {
		if err != nil {
			results[i] = writeRes{err: err} // connection trouble: as a lone statement would report it
		}
		r.res <- results[i]
	}
}

// pipeline sends reqs (sorted by key) in one pgx batch on one pooled
// connection, each shape of two or more requests as one statement
// (pgmany.go).
func (b *batcher) pipeline(reqs []*writeReq) ([]writeRes, error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	conn, err := b.s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	out := make([]writeRes, len(reqs))
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		plan := planMany(reqs, func(q string) pgShape { return b.shapeOf(ctx, pc, q) })
		var pb pgx.Batch
		locked := len(plan) < len(reqs) // some statement writes several rows
		if locked {
			pb.Queue(lockRowsSQL, lockKeys(reqs))
		}
		for _, st := range plan {
			if st.many {
				group := pick(reqs, st.reqs)
				sh := b.shapeOf(ctx, pc, group[0].q)
				pb.Queue(sh.sql, manyArgs(group, sh.params)...)
			} else {
				r := reqs[st.reqs[0]]
				pb.Queue(b.pgSQL(r.q), r.args...)
			}
		}
		br := pc.SendBatch(ctx, &pb)
		first := readPipeline(br, locked, plan, out)
		if err := br.Close(); err != nil && first == nil {
			first = err
		}
		return first
	})
	return out, err
}

// readPipeline reads the results of plan's statements (after the lock
// statement, if locked) into out; it returns the first error.
func readPipeline(br pgx.BatchResults, locked bool, plan []pgStmt, out []writeRes) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if locked {
		_, err := br.Exec()
		keep(err)
	}
	for _, st := range plan {
		if !st.many {
			tag, err := br.Exec()
			keep(err)
			out[st.reqs[0]].n = tag.RowsAffected()
			continue
		}
		rows, err := br.Query()
		keep(err)
		if err != nil {
			continue
		}
		for rows.Next() {
			var ord int32
			if err := rows.Scan(&ord); err != nil {
				keep(err)
				break
			}
			if int(ord) >= 0 && int(ord) < len(st.reqs) {
				out[st.reqs[ord]].n = 1
			}
		}
		rows.Close()
		keep(rows.Err())
	}
	return first
}

// pick is reqs[idx...].
func pick(reqs []*writeReq, idx []int) []*writeReq {
	out := make([]*writeReq, len(idx))
	for i, j := range idx {
		out[i] = reqs[j]
	}
	return out
}

// pgSQL is s.rebind(q), remembered: the store has a dozen statements.
func (b *batcher) pgSQL(q string) string {
	if v, ok := b.pgText.Load(q); ok {
		return v.(string)
	}
	pq := b.s.rebind(q)
	b.pgText.Store(q, pq)
	return pq
}

// get reads one row by id through a batch.
func (b *batcher) get(ctx context.Context, id string) (workspace.Workspace, bool, error) {
	if urgency.Is(ctx) {
		// At once, in the caller: reads never wait for one another, so an
		// urgent one need not wait for the read loop's batch in flight.
		rows, err := b.readRowsByID([]string{id})
		w, ok := rows[id]
		return w, ok, err
	}
	r := &readReq{id: id, res: make(chan readRes, 1)}
	select {
	case b.reads <- r:
	case <-b.quit:
		return workspace.Workspace{}, false, errStoreClosed
	case <-ctx.Done():
		return workspace.Workspace{}, false, ctx.Err()
	}
	select {
	case res := <-r.res:
		return res.w, res.found, res.err
	case <-ctx.Done():
		return workspace.Workspace{}, false, ctx.Err()
	}
}

func (b *batcher) readLoop() {
	defer b.wg.Done()
	for {
		var first *readReq
		select {
		case first = <-b.reads:
		case <-b.quit:
			return
		}
		batch := drain(append(make([]*readReq, 0, 64), first), b.reads, maxReadBatch)
		if b.yieldToUrgent(nil, nil) { // urgent reads run in their callers
			batch = drain(batch, b.reads, maxReadBatch)
		}
		b.runReads(batch)
	}
}

// runReads answers batch with one query per IN-list bucket.
func (b *batcher) runReads(batch []*readReq) {
	var ids []string
	seen := map[string]bool{}
	for _, r := range batch {
		if !seen[r.id] {
			seen[r.id] = true
			ids = append(ids, r.id)
		}
	}
	rows, err := b.readRowsByID(ids)
	for _, r := range batch {
		w, ok := rows[r.id]
		r.res <- readRes{w: w, found: ok, err: err}
	}
}

func (b *batcher) readRowsByID(ids []string) (map[string]workspace.Workspace, error) {
	ctx, cancel := b.batchCtx()
	defer cancel()
	out := make(map[string]workspace.Workspace, len(ids))
	if b.s.dialect == Postgres {
		return out, b.readRowsByIDArray(ctx, ids, out)
	}
	for len(ids) > 0 {
		size := readBuckets[len(readBuckets)-1]
		for _, n := range readBuckets {
			if n >= len(ids) {
				size = n
				break
			}
		}
		chunk := ids[:min(size, len(ids))]
		ids = ids[len(chunk):]
		args := make([]any, size)
		for i := range args {
			args[i] = chunk[min(i, len(chunk)-1)]
		}
		st, err := b.readStmt(ctx, size)
		if err != nil {
			return nil, err
		}
		b.readBatches.Add(1)
		if err := scanInto(ctx, st, args, out); err != nil {
			return nil, err
		}
		b.readRows.Add(int64(len(chunk)))
	}
	return out, nil
}

// readRowsByIDArray is readRowsByID on Postgres: one statement for every
// batch size, the ids as one array parameter, run as an unnamed statement
// (pgx.QueryExecModeExec), which Postgres plans for its arguments at each
// call. A prepared statement is planned once for all its calls (a generic
// plan) from the statistics of that moment: prepared while the table was
// small, the IN-list reads of 16 ids kept a sequential scan after it held
// 100,000 rows, 7 ms a call instead of 0.03, half of the server's time
// converging them. (Planning every statement so, writes too, slowed a
// 10,000-workspace run from 2.95 to 3.7 s; a read plans in microseconds.)
func (b *batcher) readRowsByIDArray(ctx context.Context, ids []string, out map[string]workspace.Workspace) error {
	const q = `SELECT ` + cols + ` FROM workspaces WHERE id = ANY($1::text[])`
	for len(ids) > 0 {
		chunk := ids[:min(maxReadBatch, len(ids))]
		ids = ids[len(chunk):]
		b.readBatches.Add(1)
		rows, err := b.s.db.QueryContext(ctx, q, pgx.QueryExecModeExec, chunk)
		if err != nil {
			return err
		}
		if err := scanRows(rows, out); err != nil {
			return err
		}
		b.readRows.Add(int64(len(chunk)))
	}
	return nil
}

func scanInto(ctx context.Context, st *sql.Stmt, args []any, out map[string]workspace.Workspace) error {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	return scanRows(rows, out)
}

// scanRows scans rows into out by id and closes them.
func scanRows(rows *sql.Rows, out map[string]workspace.Workspace) error {
	defer rows.Close()
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return err
		}
		out[w.ID] = w
	}
	return rows.Err()
}

// readStmt returns the prepared read of n ids.
func (b *batcher) readStmt(ctx context.Context, n int) (*sql.Stmt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st, ok := b.readStmts[n]; ok {
		return st, nil
	}
	q := `SELECT ` + cols + ` FROM workspaces WHERE id IN (?` + strings.Repeat(", ?", n-1) + `)`
	st, err := b.s.db.PrepareContext(ctx, b.s.rebind(q))
	if err != nil {
		return nil, err
	}
	b.readStmts[n] = st
	return st, nil
}

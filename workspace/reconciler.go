package workspace

import (
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"

	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/sched"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Config configures a Reconciler. Zero values are the seed's defaults.
type Config struct {
	Interval     time.Duration // RECONCILER_INTERVAL, 0 = 10 s
	MaxRetries   int           // RECONCILER_MAX_RETRIES, 0 = 3 (retries after the first attempt; <0 = none)
	RetryBackoff time.Duration // RECONCILER_RETRY_BACKOFF: first retry delay, 0 = 30 s; doubles per retry
	// RetryBackoffMax caps the exponential backoff; 0 = 32 × RetryBackoff.
	RetryBackoffMax time.Duration
	// CrashWindow: a workspace whose command ends within this long of its
	// previous end is in a crash loop, and each end counts as one more
	// failed attempt (backoff doubling, ERROR after MaxRetries); one that
	// ran longer starts counting again. 0 = 10 min (Kubernetes resets its
	// crash-loop backoff after 10 minutes of running too).
	CrashWindow time.Duration
	// Timeouts per operation (RECONCILER_{STARTING,STOPPING,ARCHIVING,
	// RESTORING}_TIMEOUT); missing = 300 s for start/stop, 1800 s for
	// archive/restore/provision/delete.
	Timeouts map[Operation]time.Duration
	// Lease is how long a claim survives its replica without renewal
	// before another replica takes the operation over; 0 = 15 s.
	Lease time.Duration
	// Concurrency bounds provider calls in flight; 0 = 256 (512 converged
	// 100,000 workspaces no faster, and a user's change waited behind its
	// runnable goroutines: p99 97–166 ms against 40–43 ms on Postgres).
	Concurrency int
	// Workers is the number of sched workers; 0 = GOMAXPROCS.
	Workers int
	// Owner names this replica in op_owner; "" = hostname-pid-random.
	Owner  string
	Logger *slog.Logger
	// Clock times claims, leases, retries, deadlines and ticks; nil = the
	// wall clock.
	Clock clock.Clock

	// Metrics records operations at their source; nil = none (NewMetrics).
	Metrics *Metrics
}

// ConfigFromEnv reads the seed's environment variables (seconds).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	secs := func(name string) (time.Duration, error) {
		v := getenv(name)
		if v == "" {
			return 0, nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) { // !(f > 0): NaN too
			return 0, fmt.Errorf("%w: %s=%q, want a positive number of seconds", ErrBadInput, name, v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	var err error
	if c.Interval, err = secs("RECONCILER_INTERVAL"); err != nil {
		return c, err
	}
	if c.RetryBackoff, err = secs("RECONCILER_RETRY_BACKOFF"); err != nil {
		return c, err
	}
	if v := getenv("RECONCILER_MAX_RETRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%w: RECONCILER_MAX_RETRIES=%q, want an integer >= 0", ErrBadInput, v)
		}
		c.MaxRetries = n
		if n == 0 {
			c.MaxRetries = -1
		}
	}
	c.Timeouts = map[Operation]time.Duration{}
	for _, op := range []Operation{OpStarting, OpStopping, OpArchiving, OpRestoring} {
		d, err := secs("RECONCILER_" + string(op) + "_TIMEOUT")
		if err != nil {
			return c, err
		}
		if d > 0 {
			c.Timeouts[op] = d
		}
	}
	return c, nil
}

func (c *Config) validate() error {
	if c.Interval < 0 || c.RetryBackoff < 0 || c.Lease < 0 || c.Concurrency < 0 || c.Workers < 0 {
		return fmt.Errorf("%w: negative reconciler setting", ErrBadInput)
	}
	if c.MaxRetries < 0 {
		c.MaxRetries = -1 // "no retries"; stays -1, so validating twice keeps it
	}
	setDefault(&c.Interval, 10*time.Second)
	setDefault(&c.MaxRetries, 3)
	setDefault(&c.RetryBackoff, 30*time.Second)
	setDefault(&c.RetryBackoffMax, 32*c.RetryBackoff)
	setDefault(&c.CrashWindow, 10*time.Minute)
	t := map[Operation]time.Duration{
		OpStarting: 300 * time.Second, OpStopping: 300 * time.Second,
		OpArchiving: 1800 * time.Second, OpRestoring: 1800 * time.Second,
		OpProvisioning: 1800 * time.Second, OpDeleting: 1800 * time.Second,
	}
	for op, d := range c.Timeouts {
		t[op] = d
	}
	c.Timeouts = t
	setDefault(&c.Lease, 15*time.Second)
	setDefault(&c.Concurrency, 256)
	if c.Owner == "" {
		h, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), uuid.NewString()[:8])
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// setDefault sets *p to d if *p is the zero value.
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// retryPolicy is the wait before each retry of a failed provider call:
// RetryBackoff, doubling per retry, capped at RetryBackoffMax, without
// jitter (one workspace's retries are its own; replicas never share one).
func (c *Config) retryPolicy() backoff.Policy {
	return backoff.Policy{Initial: c.RetryBackoff, Max: c.RetryBackoffMax, Multiplier: 2, Jitter: -1}
}

// ReconcilerStore is what the reconciler reads and writes: every write is
// a compare-and-set on the operation it owns (store.Store; memstore in
// tests).
type ReconcilerStore interface {
	Get(ctx context.Context, id string) (Workspace, error)
	ListActionable(ctx context.Context) ([]Workspace, error)
	ListActionableIDs(ctx context.Context) ([]string, error)
	Claim(ctx context.Context, w Workspace, op Operation, opID, owner string, now, leaseUntil time.Time) (bool, error)
	Acquire(ctx context.Context, id, opID string, errorCount int, owner string, now, leaseUntil time.Time) (bool, error)
	Renew(ctx context.Context, id, opID, owner string, leaseUntil time.Time) (bool, error)
	Executed(ctx context.Context, id, opID string, now time.Time) error
	SetArchiveKey(ctx context.Context, id, opID, key string, now time.Time) error
	Failed(ctx context.Context, id, opID string, count int, info *ErrorInfo, now time.Time, next *time.Time) error
	Crashed(ctx context.Context, id, opID string, count int, info *ErrorInfo, now time.Time, next *time.Time) error
	Terminal(ctx context.Context, id, opID string, info *ErrorInfo, now time.Time) error
	Complete(ctx context.Context, w Workspace, now time.Time) (bool, error)
	CompleteAndClaim(ctx context.Context, w Workspace, op Operation, opID, owner string, now, leaseUntil time.Time) (bool, error)
	CompleteRestart(ctx context.Context, w Workspace, now time.Time) (bool, error)
	Abandon(ctx context.Context, w Workspace, owner string, now time.Time) (bool, error)
	DeleteRow(ctx context.Context, id, opID string) error
}

var _ ReconcilerStore = (*store.Store)(nil)

// rowHandoff is the optional part of a store through which the reconciler
// and the monitor of one process leave each other the row a hint is about
// to announce, so that its receiver need not read it (store/handoff.go).
// A handed row may be stale: it only ever leads to a compare-and-set write
// that checks what was decided from it, or to a read.
type rowHandoff interface {
	Hand(box store.Box, w Workspace)
	Take(box store.Box, id string) (Workspace, bool)
	Drop(box store.Box, id string)
}

var _ rowHandoff = (*store.Store)(nil)

// Reconciler is seed 001's StateReconciler: it reads only the database and
// runs each workspace as one sched process, so one workspace never has two
// reconcile steps at once in a replica while thousands proceed together;
// across replicas the CAS claim and the lease keep one executor per
// operation.
type Reconciler struct {
	cfg       Config
	store     ReconcilerStore
	handed    rowHandoff // nil: the store hands no rows (store/handoff.go)
	container provider.Container
	storage   provider.Storage
	hints     Hints
	steps     *stepQueue // steps waiting for one of the provider-call slots (urgent.go); set by Run

	wake  *wakeups // pokeAt's one timer
	opIDs opIDs

	// mu protects procs, ids, held and sch.
	// Invariant: ids is the inverse of procs (OnExit finds the id at once).
	mu    sync.Mutex
	procs map[string]sched.PID
	ids   map[sched.PID]string
	held  map[string]*heldUrgent // users' changes holding the bulk back (holdUrgent)
	sch   *sched.Scheduler
	// urgentHold is the const (tests change it before Run); holdSeq
	// numbers the holds (holdUrgent).
	urgentHold time.Duration
	holdSeq    atomic.Uint64
	// draining (under mu) is set before Run waits for calls: a step
	// dispatched after it is not started, so calls.Add never races
	// calls.Wait (a WaitGroup rule the race detector enforces).
	draining bool

	calls sync.WaitGroup // provider calls in flight

	// alt, if set (by tests, before Run), replaces the sched processes:
	// the benchmark's baseline dispatcher.
	alt dispatcher
}

// dispatcher runs steps instead of the sched processes (pool_test.go).
type dispatcher interface {
	poke(id string, w *Workspace)
	run(ctx context.Context) error
}

// NewReconciler validates cfg.
func NewReconciler(cfg Config, st ReconcilerStore, c provider.Container, s provider.Storage, h Hints) (*Reconciler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if h == nil {
		h = hints.Drop{}
	}
	hr, _ := st.(rowHandoff)
	return &Reconciler{cfg: cfg, store: st, handed: hr, container: c, storage: s, hints: urgentHints{h},
		procs: map[string]sched.PID{}, ids: map[sched.PID]string{}, held: map[string]*heldUrgent{}, urgentHold: urgentHold, wake: newWakeups(cfg.Clock)}, nil
}

// Config returns the effective configuration.
func (r *Reconciler) Config() Config { return r.cfg }

const cmdReconcile sched.CommandType = 1001

// reconcileCmd asks for one reconcile step of a workspace; w nil = re-read
// (or take the row handed for it, store/handoff.go).
type reconcileCmd struct {
	id     string
	w      *Workspace
	hinted bool // w is a possibly stale row (store/handoff.go)
	urgent bool // a user asked for it (urgent.go)
}

// urgentHint is the message of a ChanWorkspaceUrgent hint: re-read, and
// treat the workspace as urgent until it is settled.
type urgentHint struct{}

// tickHint is the tick's message to a workspace's process: re-read, unless
// a step is in flight or due (it reads, or is handed, a newer row).
type tickHint struct{}

func (reconcileCmd) CommandType() sched.CommandType { return cmdReconcile }

// stepResult is a reconcile step's outcome.
type stepResult struct {
	again bool // the row changed in a way that may allow the next step now
	gone  bool // the workspace was deleted
	// next, with again, is the row as this step left it: the follow-up
	// plans from it without a read (its claim's CAS catches any change
	// made meanwhile). nil = re-read.
	next *Workspace
	// hinted: next is a possibly stale row (the step acted on one,
	// store/handoff.go).
	hinted bool
	// exact: next is the row as the step's last compare-and-set write
	// left it, whatever the row the step began from.
	exact bool
	// acted: the step claimed or acquired the operation and ran it; a step
	// on a possibly stale row that did not act looks again at the row
	// read (store/handoff.go).
	acted bool
	// settled: nothing is left to do (converged, or ERROR); an urgent
	// workspace is no longer urgent.
	settled bool
	// finish, if set, is the rest of the step after its provider call:
	// recording "executed" and announcing it. It needs no provider-call
	// slot, so runStep runs it off the slot, and the step (the process's
	// yield) ends when it returns.
	finish func()
}

// wsProc is one workspace's process. Messages are row snapshots (the
// tick's, for a process it spawns), tickHint, nil (hints, timers) or
// urgentHint; the yield is one reconcile step. While
// a step is in flight newer messages are coalesced into one follow-up.
// Invariant: urgent is set from an urgentHint until a step that started
// after it finds the workspace settled; every step yielded meanwhile is
// urgent, and so is a bulk step still queued when it arrives (promote).
type wsProc struct {
	id      string
	busy    bool
	pending bool
	urgent  bool
	latest  *Workspace
	hinted  bool // latest is a possibly stale row (store/handoff.go)
	tag     uint64
	// stepUrgent: the step in flight (busy) runs urgent. promote moves a
	// bulk step of this workspace still waiting for a slot to the urgent
	// queue (stepQueue.promote); nil = none.
	stepUrgent bool
	promote    func(id string) bool
}

func (p *wsProc) Init(context.Context, string, []any) error { return nil }
func (p *wsProc) Close()                                    {}

func (p *wsProc) Step(events []sched.Event, out *sched.StepOutput) error {
	out.Status = sched.StatusWaitMessages
	for _, ev := range events {
		switch ev.Type {
		case sched.EventCancel:
			out.Status = sched.StatusDone
			return nil
		case sched.EventMessage:
			p.message(ev.Data)
		case sched.EventYieldComplete:
			p.busy = false
			if res, ok := ev.Data.(stepResult); ok && !p.stepped(res) {
				out.Status = sched.StatusDone
				return nil
			}
		}
	}
	if p.pending && !p.busy {
		p.tag++
		out.Yield(p.tag, reconcileCmd{id: p.id, w: p.latest, hinted: p.hinted, urgent: p.urgent})
		p.busy, p.pending, p.latest, p.hinted, p.stepUrgent = true, false, nil, false, p.urgent
	}
	return nil
}

// message takes a snapshot, a tickHint, a hint, a timer or an urgentHint.
func (p *wsProc) message(data any) {
	w, _ := data.(*Workspace)
	switch data.(type) {
	case urgentHint:
		p.urgent = true
		// A plain hint that came first (the seed channel's copy of this
		// one, a TTL change) may have queued a bulk step behind 100,000:
		// the user's change must not wait for it.
		if p.busy && !p.stepUrgent && p.promote != nil && p.promote(p.id) {
			p.stepUrgent = true
		}
	case tickHint:
		if p.busy || p.pending {
			return // as a snapshot below
		}
	}
	if w != nil && (p.busy || p.pending && p.latest == nil) {
		// A tick's snapshot while a step is in flight or due adds nothing:
		// that step reads (or is handed) a newer row, or leaves a follow-up
		// or a wake-up, and a change whose hint went missing meanwhile is
		// seen by the next tick. Re-reading instead cost 100,000 reads per
		// tick while 100,000 workspaces converged.
		return
	}
	p.pending, p.latest, p.hinted = true, w, false
}

// stepped takes a step's result; false when the workspace is gone.
func (p *wsProc) stepped(res stepResult) bool {
	if res.gone {
		return false
	}
	if res.settled && !p.pending { // a message during the step may be a newer urgent change
		p.urgent = false
	}
	if res.again {
		if !p.pending { // a message during the step: the row may have moved, re-read
			p.latest, p.hinted = res.next, res.hinted
		}
		p.pending = true
	}
	return true
}

// poke sends w (nil = re-read) to id's process, spawning it if needed.
func (r *Reconciler) poke(id string, w *Workspace) {
	if r.alt != nil {
		r.alt.poke(id, w)
		return
	}
	r.send(id, w)
}

// pokeUrgent makes id's process urgent and re-read (a user's change).
func (r *Reconciler) pokeUrgent(id string) {
	if r.alt != nil {
		r.alt.poke(id, nil)
		return
	}
	r.send(id, urgentHint{})
}

// send sends msg to id's process, spawning it if needed.
func (r *Reconciler) send(id string, msg any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sch == nil {
		return
	}
	pid, ok := r.procs[id]
	if ok {
		if err := r.sch.Send(pid, msg); err == nil {
			return
		}
	}
	proc := &wsProc{id: id}
	if q := r.steps; q != nil {
		proc.promote = q.promote
	}
	pid, err := r.sch.Spawn(proc, "reconcile", nil)
	if err != nil {
		return
	}
	r.procs[id], r.ids[pid] = pid, id
	r.sch.Send(pid, msg)
}

// pokeAt pokes id after d (retry backoff, lease expiry, timeout).
// At most one wake-up per workspace is pending: the earliest wins.
func (r *Reconciler) pokeAt(id string, d time.Duration) { r.wake.at(id, d) }

// Tick hands every actionable workspace to its process: a tickHint to each
// process there is (nothing for one whose step is in flight or due), and
// the row, read in one more query, to a new process for each other one (at
// start, all of them). Reading every row instead cost 1.2 CPU-seconds per
// tick while 100,000 workspaces converged, nearly all of them in hand.
func (r *Reconciler) Tick(ctx context.Context) error {
	defer r.cfg.Metrics.observeTick(time.Now())
	if r.alt != nil {
		return r.tickRows(ctx, nil)
	}
	ids, err := r.store.ListActionableIDs(ctx)
	if err != nil {
		return err
	}
	var unknown map[string]bool // ids without a process
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1024)] // a user's hint waits for one chunk, not 100,000 sends
		ids = ids[len(chunk):]
		r.mu.Lock()
		for _, id := range chunk {
			if pid, ok := r.procs[id]; ok && r.sch != nil && r.sch.Send(pid, tickHint{}) == nil {
				continue
			}
			if unknown == nil {
				unknown = map[string]bool{}
			}
			unknown[id] = true
		}
		r.mu.Unlock()
	}
	if unknown == nil {
		return nil
	}
	return r.tickRows(ctx, unknown)
}

// tickRows reads the actionable rows in one query and pokes each whose id
// is in only (nil = every one) with its row.
func (r *Reconciler) tickRows(ctx context.Context, only map[string]bool) error {
	ws, err := r.store.ListActionable(ctx)
	if err != nil {
		return err
	}
	for i := range ws {
		if only == nil || only[ws[i].ID] {
			r.poke(ws[i].ID, &ws[i])
		}
	}
	return nil
}

// Run ticks every Interval and on ChanWorkspace hints until ctx ends (and
// on ChanWorkspaceUrgent ones, served apart: urgent.go), then stops the
// processes and waits for provider calls in flight.
func (r *Reconciler) Run(ctx context.Context) error {
	wakeCtx, stopWake := context.WithCancel(ctx)
	var wakeDone sync.WaitGroup
	wakeDone.Add(1)
	go func() {
		defer wakeDone.Done()
		r.wake.run(wakeCtx, func(id string) {
			if ctx.Err() == nil { // no new steps once Run is stopping the scheduler
				r.poke(id, nil)
			}
		})
	}()
	defer func() { stopWake(); wakeDone.Wait() }()
	if r.alt != nil {
		return r.alt.run(ctx)
	}
	handler := &stepHandler{r: r}
	defer r.startSteps(ctx)()
	sch, err := sched.New(sched.Config{
		Workers:  r.cfg.Workers,
		Logger:   r.cfg.Logger,
		Handlers: map[sched.CommandType]sched.Handler{cmdReconcile: handler},
		OnExit: func(pid sched.PID, _ error) {
			r.mu.Lock()
			if id, ok := r.ids[pid]; ok {
				delete(r.ids, pid)
				if r.procs[id] == pid {
					delete(r.procs, id)
				}
			}
			r.mu.Unlock()
		},
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.sch = sch
	r.mu.Unlock()
	hints, cancel := r.hints.Subscribe(ChanWorkspace)
	defer cancel()
	urgent, cancelUrgent := r.hints.Subscribe(ChanWorkspaceUrgent)
	defer cancelUrgent()
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	var ticks sync.WaitGroup
	tick := oneAtATime(&ticks, func() {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("workspace: tick", "err", err)
		}
	})
	tick()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C():
			tick()
		case id := <-urgent:
			r.holdUrgent(id)
			r.pokeUrgent(id)
		case id := <-hints:
			r.poke(id, nil)
		}
	}
	ticks.Wait()
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	r.calls.Wait()
	r.mu.Lock()
	r.sch = nil
	r.mu.Unlock()
	stopCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	sch.Stop(stopCtx)
	return nil
}

// oneAtATime returns start, which runs fn in its own goroutine, counted in
// wg, unless the previous run is still going (then start does nothing): a
// periodic pass over 100,000 rows (the reconciler's tick, the monitor's
// pass) runs beside the hint loop instead of blocking it, and an interval
// that ends during a long pass is skipped.
func oneAtATime(wg *sync.WaitGroup, fn func()) (start func()) {
	running := make(chan struct{}, 1)
	return func() {
		select {
		case running <- struct{}{}:
		default:
			return
		}
		wg.Go(func() {
			defer func() { <-running }()
			fn()
		})
	}
}

// step is one reconcile of one workspace (seed: reconcile(ws)) on w, or
// on the row read if w is nil.
func (r *Reconciler) step(ctx context.Context, id string, w *Workspace) stepResult {
	return r.stepHinted(ctx, id, w, false).finished()
}

// finished runs res's finish, if any, and returns res without it.
func (res stepResult) finished() stepResult {
	if res.finish != nil {
		res.finish()
		res.finish = nil
	}
	return res
}

// stepHinted is step; hinted marks w possibly stale. With w nil, a bulk
// step takes the row handed for the workspace (store/handoff.go) instead of
// reading it. A step on a possibly stale row only writes through a
// compare-and-set that checks what it decided from; if it did not act it
// steps again on the row read, so that "nothing to do" is never decided
// from a stale row.
func (r *Reconciler) stepHinted(ctx context.Context, id string, w *Workspace, hinted bool) stepResult {
	defer r.cfg.Metrics.observeStep(time.Now())
	switch {
	case r.handed == nil:
	case w != nil || store.IsUrgent(ctx):
		r.handed.Drop(store.ToReconciler, id)
	default:
		if got, ok := r.handed.Take(store.ToReconciler, id); ok {
			w, hinted = &got, true
		}
	}
	if w == nil {
		return r.readAndStep(ctx, id)
	}
	res := r.stepOn(ctx, w)
	if hinted && !res.acted && !res.again && !res.gone {
		return r.readAndStep(ctx, id)
	}
	res.hinted = hinted && res.next != nil && !res.exact
	return res
}

// readAndStep reads id's row and steps on it.
func (r *Reconciler) readAndStep(ctx context.Context, id string) stepResult {
	got, err := r.store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return stepResult{gone: true}
	}
	if err != nil {
		r.cfg.Logger.Warn("workspace: read", "id", id, "err", err)
		return stepResult{}
	}
	return r.stepOn(ctx, &got)
}

// stepOn is the reconcile of w.
func (r *Reconciler) stepOn(ctx context.Context, w *Workspace) stepResult {
	// 1. ERROR: skip (deleting needs no recovery).
	if w.ObservedStatus == Error && w.DesiredState != Deleted {
		return stepResult{settled: true}
	}
	// 2. An operation in flight: completion, timeout, retry or takeover.
	if w.Operation != OpNone {
		return r.inFlight(ctx, w)
	}
	// 3. Converged, or 4. plan.
	op := planNext(w)
	if op == OpNone {
		return stepResult{settled: true}
	}
	// 5. Claim (CAS with a fresh op_id), then execute.
	return r.claim(ctx, w, op, func(opID string, now, leaseUntil time.Time) (bool, error) {
		return r.store.Claim(ctx, *w, op, opID, r.cfg.Owner, now, leaseUntil)
	})
}

// planNext is the operation a step claims on w: none while one is in
// flight, when w is converged or in ERROR (unless deleting), else the plan.
func planNext(w *Workspace) Operation {
	switch {
	case w.Operation != OpNone, w.ObservedStatus == w.DesiredState,
		w.ObservedStatus == Error && w.DesiredState != Deleted:
		return OpNone
	}
	return Plan(w.ObservedStatus, w.DesiredState, w.ArchiveKey != "")
}

// claim claims op for w with a fresh op_id through write (a
// compare-and-set: Claim, or CompleteAndClaim), then executes it.
func (r *Reconciler) claim(ctx context.Context, w *Workspace, op Operation, write func(opID string, now, leaseUntil time.Time) (bool, error)) stepResult {
	opID, err := r.opIDs.next()
	if err != nil {
		return stepResult{}
	}
	now := r.cfg.Clock.Now()
	lease := now.Add(r.cfg.Lease)
	ok, err := write(opID, now, lease)
	// Claimed (or refused): a user's change no longer needs the CPUs
	// before its provider call, which may take seconds.
	r.releaseUrgentFor(ctx, w.ID)
	if err != nil {
		r.cfg.Logger.Warn("workspace: claim", "id", w.ID, "op", op, "err", err)
		return stepResult{}
	}
	if !ok {
		// The row moved since the snapshot: plan again from a fresh read
		// (another replica's claim then shows as an operation in flight).
		return stepResult{again: true}
	}
	w.Operation, w.OpID, w.OpStartedAt, w.OpOwner, w.OpLeaseUntil, w.OpExecuted = op, opID, &now, r.cfg.Owner, &lease, false
	r.cfg.Metrics.opStarted(op)
	r.cfg.Logger.Debug("workspace: claimed", "id", w.ID, "op", op, "op_id", w.OpID)
	return r.execute(ctx, w)
}

// opIDs makes operation ids: UUIDv7 (time-ordered) whose random bits
// come from crypto/rand read 4 KiB at a time, not one system call per id
// (a fifth of a core converging 100,000 workspaces).
type opIDs struct {
	mu  sync.Mutex
	rnd *bufio.Reader // nil until first use
}

func (g *opIDs) next() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rnd == nil {
		g.rnd = bufio.NewReaderSize(rand.Reader, 4096)
	}
	id, err := uuid.NewV7FromReader(g.rnd)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// completed is w as Store.Complete leaves it.
func completed(w Workspace) *Workspace {
	w.Operation, w.OpOwner, w.OpLeaseUntil, w.OpExecuted = OpNone, "", nil, false
	w.ErrorCount, w.ErrorInfo, w.NextRetryAt = 0, nil, nil
	return &w
}

// complete reports whether w's operation is over: observed at its target.
func (r *Reconciler) complete(w *Workspace) bool {
	if w.Operation == OpStarting && w.ErrorInfo != nil && w.ErrorInfo.Reason == ReasonExited && w.NextRetryAt != nil &&
		r.cfg.Clock.Now().Before(w.NextRetryAt.Add(CrashGrace)) {
		return false // restarted after its command ended: it must stay up a while to count as started
	}
	return atTarget(w, w.ObservedStatus)
}

// atTarget reports whether status st is w's operation's target (an
// archive: PENDING with the archive its operation wrote).
func atTarget(w *Workspace, st Status) bool {
	if w.Operation == OpArchiving {
		return st == Pending && w.ArchiveKey == provider.ArchiveKey(w.ID, w.OpID)
	}
	return st == w.Operation.Target()
}

// observationEnds reports whether observing st ends w's operation in the
// observation's own write (HealthMonitor, Store.SetObservedComplete):
// the provider call was executed, st is its target, and nothing asks for
// the reconciler's judgement: no error info (a crash loop's restart, a
// failed observation, a terminal error) and not DELETING, which ends by
// removing the row. It is the completion the reconciler's next step would
// write, one write and one step sooner.
func observationEnds(w *Workspace, st Status) bool {
	return w.OpExecuted && w.ErrorInfo == nil && w.Operation != OpNone && w.Operation != OpDeleting && atTarget(w, st)
}

// crashLooping reports whether w is a start after its command ended (a
// restart in a crash loop): its completion keeps the error count and the
// last exit, which the next end within CrashWindow counts on from.
func crashLooping(w *Workspace) bool {
	return w.Operation == OpStarting && w.ErrorInfo != nil && w.ErrorInfo.Reason == ReasonExited && !w.ErrorInfo.IsTerminal
}

// CrashGrace is how long a command restarted after it ended must stay up
// before its start counts as done; ending sooner is another failed attempt.
const CrashGrace = 2 * time.Second

// inFlight advances w's operation in flight: it gives it up for a desired
// state that makes it pointless (supersede.go), completes it, times it
// out, waits (for the monitor, a retry or another replica's lease), or
// acquires it and calls the provider.
func (r *Reconciler) inFlight(ctx context.Context, w *Workspace) stepResult {
	now := r.cfg.Clock.Now()
	if r.superseded(w, now) {
		return r.abandon(ctx, w, now)
	}
	if res, done := r.endInFlight(ctx, w, now); done {
		return res
	}
	if r.waitInFlight(ctx, w, now) {
		return stepResult{}
	}
	// error_count too: a retry decided from a row that predates the last
	// failure (a tick's snapshot) would be one call more than the policy.
	ok, err := r.store.Acquire(ctx, w.ID, w.OpID, w.ErrorCount, r.cfg.Owner, now, now.Add(r.cfg.Lease))
	if err != nil || !ok {
		return stepResult{}
	}
	if w.OpOwner != r.cfg.Owner {
		r.cfg.Logger.Info("workspace: took over operation", "id", w.ID, "op", w.Operation, "from", w.OpOwner)
	}
	w.OpOwner = r.cfg.Owner
	return r.execute(ctx, w)
}

// opStarted is when w's operation was claimed (zero if unknown).
func opStarted(w *Workspace) time.Time {
	if w.OpStartedAt != nil {
		return *w.OpStartedAt
	}
	return time.Time{}
}

// endInFlight ends w's operation if it is over: terminal error info (the
// monitor flips it to ERROR), observed at its target (complete), or past
// its timeout (terminal Timeout). done reports whether the step is over.
func (r *Reconciler) endInFlight(ctx context.Context, w *Workspace, now time.Time) (res stepResult, done bool) {
	if w.ErrorInfo != nil && w.ErrorInfo.IsTerminal && w.Operation != OpDeleting {
		r.hints.Publish(ctx, ChanMonitor, w.ID) // let the monitor flip it to ERROR
		return stepResult{}, true
	}
	if w.Operation != OpDeleting && r.complete(w) {
		return r.completeOp(ctx, w, now), true
	}
	if elapsed := now.Sub(opStarted(w)); elapsed > r.cfg.Timeouts[w.Operation] {
		info := &ErrorInfo{Reason: ReasonTimeout, Operation: w.Operation, IsTerminal: true, ErrorCount: w.ErrorCount,
			Elapsed: elapsed.Seconds(), OccurredAt: now.UTC()}
		if err := r.store.Terminal(ctx, w.ID, w.OpID, info, now); err == nil {
			r.cfg.Logger.Error("workspace: operation timed out", "id", w.ID, "op", w.Operation, "elapsed", elapsed)
			r.cfg.Metrics.opEnded(w.Operation, resultTimeout, w.OpStartedAt, now)
			r.hints.Publish(ctx, ChanMonitor, w.ID)
		}
		return stepResult{}, true
	}
	return stepResult{}, false
}

// completeOp ends w's operation, which has reached its target. When the
// row as completed plans a next operation (PROVISIONING done, STARTING
// next), one write completes this one and claims that one
// (CompleteAndClaim), and the step goes on to execute it.
func (r *Reconciler) completeOp(ctx context.Context, w *Workspace, now time.Time) stepResult {
	next, restart := completed(*w), crashLooping(w)
	if op := planNext(next); op != OpNone && !restart {
		return r.claim(ctx, next, op, func(opID string, claimed, leaseUntil time.Time) (bool, error) {
			ok, err := r.store.CompleteAndClaim(ctx, *w, op, opID, r.cfg.Owner, claimed, leaseUntil)
			if ok {
				r.completedOp(ctx, w, now)
			}
			return ok, err
		})
	}
	complete := r.store.Complete
	if restart {
		complete = r.store.CompleteRestart // the count goes on: the crash loop is not over
	}
	ok, err := complete(ctx, *w, now)
	switch {
	case err != nil:
		return stepResult{}
	case !ok:
		// The row moved since w (or another replica completed it):
		// decide again from a fresh read.
		return stepResult{again: true}
	}
	// The hint completedOp publishes comes back to this workspace's
	// process too, most often during this step: its next step then takes
	// this row instead of reading it.
	r.hand(store.ToReconciler, *next)
	r.completedOp(ctx, w, now)
	// next is exact, even from a hinted w: Complete wrote only on the
	// planning inputs w shows.
	return stepResult{again: true, next: next, exact: true}
}

// completedOp logs, counts and announces the end of w's operation (the
// row changed: the live page shows it).
func (r *Reconciler) completedOp(ctx context.Context, w *Workspace, now time.Time) {
	r.cfg.Logger.Info("workspace: operation completed", "id", w.ID, "op", w.Operation)
	r.cfg.Metrics.opEnded(w.Operation, resultOK, w.OpStartedAt, now)
	r.hints.Publish(ctx, ChanWorkspace, w.ID)
}

// waitInFlight reports whether w's operation must wait, and arranges the
// wake-up: for the monitor (executed: no retry here, the seed's defect 2),
// for its retry time, for another replica's live lease, or for an
// observation newer than a dead owner's lease.
func (r *Reconciler) waitInFlight(ctx context.Context, w *Workspace, now time.Time) bool {
	switch {
	case w.OpExecuted && w.Operation == OpStarting && r.exitedSinceStart(ctx, w, now):
	case w.OpExecuted:
		r.pokeAt(w.ID, min(opStarted(w).Add(r.cfg.Timeouts[w.Operation]).Sub(now), r.exitPoll(w, now)))
	case w.NextRetryAt != nil && now.Before(*w.NextRetryAt):
		r.pokeAt(w.ID, w.NextRetryAt.Sub(now))
	case w.OpOwner == r.cfg.Owner || w.OpLeaseUntil == nil:
		return false
	case now.Before(*w.OpLeaseUntil):
		r.pokeAt(w.ID, w.OpLeaseUntil.Sub(now))
	case w.ObservedAt == nil || !w.ObservedAt.After(*w.OpLeaseUntil):
		// The dead owner's call may have taken effect before it could
		// record it: take over only after an observation made since its
		// lease lapsed (which completes the operation if it did).
		r.hints.Publish(ctx, ChanMonitor, w.ID)
		r.pokeAt(w.ID, min(r.cfg.Interval, 250*time.Millisecond))
	default:
		return false
	}
	return true
}

// execute calls the provider for w's claimed operation, renewing the lease
// meanwhile, and records the outcome.
func (r *Reconciler) execute(ctx context.Context, w *Workspace) stepResult {
	deadline := opStarted(w).Add(r.cfg.Timeouts[w.Operation])
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	stopRenew := r.renewLease(ctx, w)
	t0 := time.Now()
	err := r.call(callCtx, w)
	callTime := time.Since(t0)
	stopRenew()
	cancel()
	now := r.cfg.Clock.Now()
	if ctx.Err() != nil {
		return stepResult{acted: true} // shutting down: the lease lapses, a restart takes over
	}
	r.cfg.Metrics.providerCall(w.Operation, err, callTime)
	if err != nil {
		r.recordFailure(ctx, w, err, now, deadline)
		return stepResult{acted: true}
	}
	if w.Operation == OpDeleting {
		if err := r.store.DeleteRow(ctx, w.ID, w.OpID); err != nil {
			r.cfg.Logger.Warn("workspace: delete row", "id", w.ID, "err", err)
			return stepResult{acted: true}
		}
		r.cfg.Metrics.opEnded(OpDeleting, resultOK, w.OpStartedAt, now)
		r.hints.Publish(ctx, ChanWorkspace, w.ID)
		return stepResult{gone: true}
	}
	x := *w
	return stepResult{acted: true, finish: func() { r.executed(ctx, &x, now, deadline) }}
}

// executed records that w's provider call returned at now and hints the
// monitor, which observes it next (the step's finish: the process's next
// step waits for it, so it never sees the row as not executed).
func (r *Reconciler) executed(ctx context.Context, w *Workspace, now, deadline time.Time) {
	if err := r.store.Executed(ctx, w.ID, w.OpID, now); err != nil {
		r.cfg.Logger.Warn("workspace: record executed", "id", w.ID, "err", err)
	} else {
		// The monitor observes it next: leave it the row as executed.
		w.OpExecuted, w.OpLeaseUntil, w.UpdatedAt = true, nil, now.UTC().Truncate(time.Millisecond)
		r.hand(store.ToMonitor, *w)
	}
	r.hints.Publish(ctx, ChanMonitor, w.ID)
	r.pokeAt(w.ID, deadline.Sub(now))
}

// hand leaves w in box for the hint about to be published (store/handoff.go).
func (r *Reconciler) hand(box store.Box, w Workspace) {
	if r.handed != nil {
		r.handed.Hand(box, w)
	}
}

// renewLease renews this replica's lease on w's operation every Lease/3
// until the returned stop is called.
func (r *Reconciler) renewLease(ctx context.Context, w *Workspace) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := r.cfg.Clock.NewTicker(r.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C():
				r.store.Renew(ctx, w.ID, w.OpID, r.cfg.Owner, r.cfg.Clock.Now().Add(r.cfg.Lease))
			}
		}
	}()
	return func() { close(done) }
}

// recordFailure records a failed provider call: terminal (a permanent
// error, the deadline, retries exhausted) or retried after the backoff.
func (r *Reconciler) recordFailure(ctx context.Context, w *Workspace, err error, now, deadline time.Time) {
	info, next := r.failureInfo(w, err, now, deadline)
	r.cfg.Logger.Warn("workspace: execute failed", "id", w.ID, "op", w.Operation, "error_count", info.ErrorCount, "reason", info.Reason, "err", err)
	if err := r.store.Failed(ctx, w.ID, w.OpID, info.ErrorCount, info, now, next); err != nil {
		r.cfg.Logger.Warn("workspace: record failure", "id", w.ID, "err", err)
	}
	r.afterFailure(ctx, w, info, now, next)
}

// afterFailure counts a terminal failure and lets the monitor flip it to
// ERROR, or wakes the workspace for its retry.
func (r *Reconciler) afterFailure(ctx context.Context, w *Workspace, info *ErrorInfo, now time.Time, next *time.Time) {
	if info.IsTerminal {
		r.cfg.Metrics.opEnded(w.Operation, terminalResult(info), w.OpStartedAt, now)
		r.hints.Publish(ctx, ChanMonitor, w.ID)
	} else {
		r.pokeAt(w.ID, next.Sub(now))
	}
}

// failureInfo is the error info of a failed attempt and, unless terminal,
// when to try again.
func (r *Reconciler) failureInfo(w *Workspace, err error, now, deadline time.Time) (*ErrorInfo, *time.Time) {
	count := w.ErrorCount + 1
	var ee *provider.ExitError
	isExit := errors.As(err, &ee)
	if isExit && w.ErrorInfo != nil && w.ErrorInfo.Reason == ReasonExited && ee.Exit.At.Sub(w.ErrorInfo.ExitedAt) > r.cfg.CrashWindow {
		count = 1 // it ran longer than the crash window since its last end: a new count
	}
	info := &ErrorInfo{Reason: failureReason(err), Operation: w.Operation, ErrorCount: count, LastError: err.Error(), OccurredAt: now.UTC()}
	if isExit {
		info.ExitStatus, info.Output, info.ExitedAt = ee.Exit.Status, ee.Exit.Output, ee.Exit.At.UTC()
	}
	var next *time.Time
	var pe *provider.PermanentError
	switch {
	case errors.As(err, &pe):
		info.Reason, info.IsTerminal = pe.Reason, true
	case errors.Is(err, context.DeadlineExceeded) && !now.Before(deadline):
		info.Reason, info.IsTerminal = ReasonTimeout, true
		info.Elapsed = now.Sub(opStarted(w)).Seconds()
	case count > r.cfg.MaxRetries:
		info.Reason, info.IsTerminal = ReasonRetryExceeded, true
	default:
		// Rounded up to the store's millisecond: stored rounded down, the
		// retry could come up to 1 ms before the policy's delay had passed.
		t := ceilMillis(now.Add(r.cfg.retryPolicy().Delay(count - 1)))
		next = &t
	}
	return info, next
}

// uncountedExit is how the workspace's command ended, if it ended at or
// after since (and was not stopped) and that end is not counted in its
// error info yet. A start that follows such an end is a restart after a
// crash, which counts as a failed attempt first.
func (r *Reconciler) uncountedExit(ctx context.Context, w *Workspace, since time.Time) *provider.Exit {
	er, ok := r.container.(provider.ExitReporter)
	if !ok {
		return nil
	}
	e, err := er.Exited(ctx, w.ID, since)
	if err != nil || e == nil || w.ErrorInfo != nil && !e.At.After(w.ErrorInfo.ExitedAt) {
		return nil // no end, or one already counted
	}
	return e
}

// exitPoll is how soon an executed start is checked again for a command
// that ended (the monitor sees no change: the workspace was not running
// before either), when the container can tell: a second after the start,
// then after as long again as the start has waited so far, at most
// maxExitPoll. A start normally completes at the monitor's next
// observation, milliseconds later; while 100,000 starts wait for theirs,
// a check every second each (each a read) slowed the monitor they wait
// for, and a run on Postgres took 36 s instead of 22.
func (r *Reconciler) exitPoll(w *Workspace, now time.Time) time.Duration {
	if _, ok := r.container.(provider.ExitReporter); ok && w.Operation == OpStarting {
		return min(max(time.Second, now.Sub(opStarted(w))), maxExitPoll)
	}
	return time.Duration(1<<63 - 1)
}

// maxExitPoll bounds exitPoll.
const maxExitPoll = 30 * time.Second

// exitedSinceStart records, if w's command ended after its start was
// executed, a failed attempt (reason Exited, with its status and last
// output) and reports true; the start runs again after the backoff.
func (r *Reconciler) exitedSinceStart(ctx context.Context, w *Workspace, now time.Time) bool {
	if w.ObservedStatus == Running {
		return false
	}
	e := r.uncountedExit(ctx, w, opStarted(w))
	if e == nil {
		return false
	}
	info, next := r.failureInfo(w, &provider.ExitError{Exit: *e}, now, opStarted(w).Add(r.cfg.Timeouts[w.Operation]))
	r.cfg.Logger.Warn("workspace: command ended while starting", "id", w.ID, "status", e.Status, "error_count", info.ErrorCount, "terminal", info.IsTerminal)
	if err := r.store.Crashed(ctx, w.ID, w.OpID, info.ErrorCount, info, now, next); err != nil {
		r.cfg.Logger.Warn("workspace: record exit", "id", w.ID, "err", err)
		return false
	}
	r.hints.Publish(ctx, ChanWorkspace, w.ID)
	r.afterFailure(ctx, w, info, now, next)
	return true
}

// call is the provider side of each operation.
func (r *Reconciler) call(ctx context.Context, w *Workspace) error {
	switch w.Operation {
	case OpProvisioning:
		return r.storage.Provision(ctx, w.ID)
	case OpRestoring:
		return r.storage.Restore(ctx, w.ID, w.ArchiveKey)
	case OpStarting:
		if e := r.uncountedExit(ctx, w, time.Time{}); e != nil {
			return &provider.ExitError{Exit: *e} // it was running and its command ended: a failed attempt, then a restart
		}
		return r.container.Start(ctx, provider.Spec{ID: w.ID, Name: w.Name, Owner: w.Owner, Image: w.Image, Command: w.Command,
			VolumeDir: r.storage.VolumePath(w.ID), Env: w.Env, Limits: provider.Limits{CPUs: w.CPUs, Memory: w.Memory, Pids: w.Pids}, HTTP: w.HTTP})
	case OpStopping:
		return r.container.Stop(ctx, w.ID)
	case OpArchiving:
		// Order is the invariant: archive committed, key recorded, then
		// the volume removed. A crash anywhere repeats only what is left:
		// a takeover that finds this op_id's key recorded only removes the
		// volume.
		if key := provider.ArchiveKey(w.ID, w.OpID); w.ArchiveKey != key {
			if err := r.archive(ctx, w); err != nil {
				return err
			}
		}
		return r.storage.DeleteVolume(ctx, w.ID)
	case OpDeleting:
		if err := r.container.Stop(ctx, w.ID); err != nil {
			return err
		}
		if err := r.storage.DeleteVolume(ctx, w.ID); err != nil {
			return err
		}
		if as, ok := r.storage.(provider.ArchiveStore); ok {
			// The archive GC removes its archives once the retention has
			// passed since this moment.
			return as.Tombstone(ctx, w.ID, r.cfg.Clock.Now())
		}
		return nil
	}
	return fmt.Errorf("workspace: unknown operation %q", w.Operation)
}

// archive writes w's archive and records its key. The key is recorded
// even if ctx ends (shutdown) once the archive is committed: otherwise the
// replica taking the operation over would write the archive again.
func (r *Reconciler) archive(ctx context.Context, w *Workspace) error {
	key, err := r.storage.Archive(ctx, w.ID, w.OpID)
	if err != nil {
		return err
	}
	rec, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.store.SetArchiveKey(rec, w.ID, w.OpID, key, r.cfg.Clock.Now()); err != nil {
		return err
	}
	w.ArchiveKey = key
	return nil
}

// stepHandler queues a reconcile step for the reconciler's step workers
// (stepQueue: one per provider-call slot, urgent steps first), which run
// it off the sched worker and complete the yield with its result.
type stepHandler struct{ r *Reconciler }

func (h *stepHandler) Handle(_ context.Context, cmd sched.Command, tag uint64, c sched.Completer) error {
	r := h.r
	r.mu.Lock()
	if r.draining {
		r.mu.Unlock()
		return context.Canceled // becomes the yield's completion
	}
	r.calls.Add(1)
	r.mu.Unlock()
	if !r.steps.push(queuedStep{cmd: cmd.(reconcileCmd), tag: tag, c: c}) {
		r.calls.Done()
		return context.Canceled // Run is stopping
	}
	return nil
}

// startSteps starts the step workers (before the scheduler: its handler
// pushes to r.steps). When ctx ends, the steps still queued complete with
// its error; stop ends the workers once their steps are done.
func (r *Reconciler) startSteps(ctx context.Context) (stop func()) {
	q := newStepQueue() // the closures keep this Run's queue
	r.steps = q
	var workers sync.WaitGroup
	q.run(r.cfg.Concurrency, &workers, func(s queuedStep) { r.runStep(ctx, s) })
	unhook := context.AfterFunc(ctx, func() {
		for _, s := range q.close() {
			s.c.CompleteYield(s.tag, stepResult{}, ctx.Err())
			r.calls.Done()
		}
	})
	return func() {
		unhook()
		q.close()
		workers.Wait()
	}
}

// runStep runs a queued step (an urgent one with its context marked, a
// bulk one once no user's change is in flight, or after a bounded wait) and
// completes its yield: at once, or once the step's finish, run off the
// slot, has returned.
func (r *Reconciler) runStep(ctx context.Context, s queuedStep) {
	rc := s.cmd
	if rc.urgent {
		ctx = context.WithValue(store.Urgent(ctx), holdSeqKey{}, r.holdSeq.Load())
	} else if u, ok := r.store.(urgentWork); ok {
		// A user's change in flight goes first (urgent.go). With one
		// worker (no urgent share) an urgent step may wait behind this
		// wait: at most the bound.
		u.AwaitNoUrgent()
	}
	res := r.stepHinted(ctx, rc.id, rc.w, rc.hinted)
	r.releaseUrgentFor(ctx, rc.id)
	if res.finish == nil {
		s.c.CompleteYield(s.tag, res, nil)
		r.calls.Done()
		return
	}
	// The rest of the step is a write and its hints: it waits for the
	// database, not for a provider, so this slot takes the next step now.
	// (Waiting for "executed" on the slot held each slot idle for a
	// batch's commit after every call.)
	go func() {
		defer r.calls.Done()
		s.c.CompleteYield(s.tag, res.finished(), nil)
	}()
}

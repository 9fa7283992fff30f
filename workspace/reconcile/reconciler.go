package reconcile

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/sched"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// ReconcilerStore is what the reconciler reads and writes: every write is
// a compare-and-set on the operation it owns (store.Store; memstore in
// tests).
type ReconcilerStore interface {
	Get(ctx context.Context, id string) (workspace.Workspace, error)
	ListActionable(ctx context.Context) ([]workspace.Workspace, error)
	ListActionableIDs(ctx context.Context) ([]string, error)
	Claim(ctx context.Context, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error)
	Acquire(ctx context.Context, id, opID string, errorCount int, owner string, now, leaseUntil time.Time) (bool, error)
	Renew(ctx context.Context, id, opID, owner string, leaseUntil time.Time) (bool, error)
	Executed(ctx context.Context, id, opID string, now time.Time) error
	SetArchiveKey(ctx context.Context, id, opID, key string, now time.Time) error
	Failed(ctx context.Context, id, opID string, count int, info *workspace.ErrorInfo, now time.Time, next *time.Time) error
	Crashed(ctx context.Context, id, opID string, count int, info *workspace.ErrorInfo, now time.Time, next *time.Time) error
	Terminal(ctx context.Context, id, opID string, info *workspace.ErrorInfo, now time.Time) error
	Complete(ctx context.Context, w workspace.Workspace, now time.Time) (bool, error)
	CompleteAndClaim(ctx context.Context, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error)
	CompleteRestart(ctx context.Context, w workspace.Workspace, now time.Time) (bool, error)
	Abandon(ctx context.Context, w workspace.Workspace, owner string, now time.Time) (bool, error)
	DeleteRow(ctx context.Context, id, opID string) error
}

var _ ReconcilerStore = (*store.Store)(nil)

// Reconciler is seed 001's StateReconciler: it reads only the database and
// runs each workspace as one sched process, so one workspace never has two
// reconcile steps at once in a replica while thousands proceed together;
// across replicas the CAS claim and the lease keep one executor per
// operation.
type Reconciler struct {
	cfg       Config
	store     ReconcilerStore
	handed    *handoff.Mailbox // cfg.Handoff; nil: no rows handed
	gate      *urgency.Gate    // cfg.Gate; nil: nothing holds the bulk back for urgent work
	container provider.Container
	storage   provider.Storage
	hints     hints.Bus
	// steps: the steps waiting for one of the provider-call slots
	// (urgent.go). Run sets it before it sets sch under mu, and it is read
	// only once sch is set (send, under mu; the scheduler's handler).
	steps *stepQueue

	wake  *wakeups // pokeAt's one timer; its own lock
	opIDs opIDs    // its own lock

	// mu protects procs, ids, held, sch and draining.
	// Invariant: ids is the inverse of procs (OnExit finds the id at once).
	mu    sync.Mutex
	procs map[string]sched.PID
	ids   map[sched.PID]string
	held  map[string]*heldUrgent // users' changes holding the bulk back (holdUrgent)
	sch   *sched.Scheduler       // set while Run runs its scheduler, else nil
	// draining is set before Run waits for calls: a step dispatched after
	// it is not started, so calls.Add never races calls.Wait (a WaitGroup
	// rule the race detector enforces).
	draining bool

	// urgentHold is the const (tests change it before Run); holdSeq
	// numbers the holds (holdUrgent), atomically.
	urgentHold time.Duration
	holdSeq    atomic.Uint64

	calls sync.WaitGroup // provider calls in flight

	// alt, if set (by tests, before Run), replaces the sched processes:
	// the benchmark's baseline dispatcher.
	alt dispatcher
}

// dispatcher runs steps instead of the sched processes (pool_test.go).
type dispatcher interface {
	poke(id string, w *workspace.Workspace)
	run(ctx context.Context) error
}

// NewReconciler validates cfg.
func NewReconciler(cfg Config, st ReconcilerStore, c provider.Container, s provider.Storage, h hints.Bus) (*Reconciler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if h == nil {
		h = hints.Drop{}
	}
	return &Reconciler{cfg: cfg, store: st, handed: cfg.Handoff, gate: cfg.Gate, container: c, storage: s, hints: urgency.Hints{Bus: h},
		procs: map[string]sched.PID{}, ids: map[sched.PID]string{}, held: map[string]*heldUrgent{}, urgentHold: urgentHold, wake: newWakeups(cfg.Clock)}, nil
}

// Config returns the effective configuration. Any goroutine.
func (r *Reconciler) Config() Config { return r.cfg }

// Tick hands every actionable workspace to its process: a tickHint to each
// process there is (nothing for one whose step is in flight or due), and
// the row, read in one more query, to a new process for each other one (at
// start, all of them). Reading every row instead cost 1.2 CPU-seconds per
// tick while 100,000 workspaces converged, nearly all of them in hand.
// Any goroutine (Run's ticks run one at a time).
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

// Run ticks every Interval and on hints.ChanWorkspace hints until ctx ends (and
// on hints.ChanWorkspaceUrgent ones, served apart: urgent.go), then stops the
// processes and waits for provider calls in flight. One Run at a time.
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
	plain, cancel := r.hints.Subscribe(hints.ChanWorkspace)
	defer cancel()
	urgent, cancelUrgent := r.hints.Subscribe(hints.ChanWorkspaceUrgent)
	defer cancelUrgent()
	t := r.cfg.Clock.NewTicker(r.cfg.Interval)
	defer t.Stop()
	var ticks sync.WaitGroup
	tick := par.OneAtATime(&ticks, func() {
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
		case id := <-plain:
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

// step is one reconcile of one workspace (seed: reconcile(ws)) on w, or
// on the row read if w is nil. Any goroutine, one step of a workspace at a
// time (its process yields one at a time); so are stepHinted and the
// step's methods below.
func (r *Reconciler) step(ctx context.Context, id string, w *workspace.Workspace) stepResult {
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
// step takes the row handed for the workspace (package handoff) instead of
// reading it. A step on a possibly stale row only writes through a
// compare-and-set that checks what it decided from; if it did not act it
// steps again on the row read, so that "nothing to do" is never decided
// from a stale row.
func (r *Reconciler) stepHinted(ctx context.Context, id string, w *workspace.Workspace, hinted bool) stepResult {
	defer r.cfg.Metrics.observeStep(time.Now())
	switch {
	case r.handed == nil:
	case w != nil || urgency.Is(ctx):
		r.handed.Drop(handoff.ToReconciler, id)
	default:
		if got, ok := r.handed.Take(handoff.ToReconciler, id); ok {
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
	if errors.Is(err, workspace.ErrNotFound) {
		return stepResult{gone: true}
	}
	if err != nil {
		r.cfg.Logger.Warn("workspace: read", "id", id, "err", err)
		return stepResult{}
	}
	return r.stepOn(ctx, &got)
}

// stepOn is the reconcile of w: judge it (workspace.Decide), then apply
// the decision. The step's goroutine only, as the step's methods below.
func (r *Reconciler) stepOn(ctx context.Context, w *workspace.Workspace) stepResult {
	now := r.cfg.Clock.Now()
	obs := r.observation(w)
	return r.apply(ctx, w, &obs, r.decide(ctx, w, &obs, now), now)
}

// observation is what a step knows of w beyond the row: whether its
// archive is its operation's own, and whether the container can tell
// when a command ended.
func (r *Reconciler) observation(w *workspace.Workspace) workspace.Observation {
	_, reports := r.container.(provider.ExitReporter)
	committed := w.Operation == workspace.OpArchiving && w.ArchiveKey == provider.ArchiveKey(w.ID, w.OpID)
	return workspace.Observation{ArchiveCommitted: committed, ExitReports: reports}
}

// decide is judge; when Decide asks for the end of w's command
// (ActAskExit), it asks the container and decides again with the answer.
func (r *Reconciler) decide(ctx context.Context, w *workspace.Workspace, obs *workspace.Observation, now time.Time) workspace.Decision {
	d := r.judge(w, *obs, now)
	if d.Action != workspace.ActAskExit {
		return d
	}
	obs.ExitAsked, obs.Exit = true, r.exited(ctx, w.ID, d.ExitSince)
	return r.judge(w, *obs, now)
}

// judge is workspace.Decide on w and obs at now, by the config's policy.
func (r *Reconciler) judge(w *workspace.Workspace, obs workspace.Observation, now time.Time) workspace.Decision {
	return workspace.Decide(*w, obs, now, r.cfg.policy())
}

// apply carries out d, decided at now on w and obs: the store's write, the
// provider's call, the hints and the wake-up it asks for.
func (r *Reconciler) apply(ctx context.Context, w *workspace.Workspace, obs *workspace.Observation, d workspace.Decision, now time.Time) stepResult {
	switch d.Action {
	case workspace.ActSettled:
		return stepResult{settled: true}
	case workspace.ActAbandon:
		return r.abandon(ctx, w, now)
	case workspace.ActComplete, workspace.ActCompleteRestart:
		return r.completeOp(ctx, w, d, now)
	case workspace.ActClaim, workspace.ActCompleteAndClaim:
		return r.claim(ctx, w, d, now)
	case workspace.ActAcquire, workspace.ActTakeover:
		return r.acquire(ctx, w, d, now)
	case workspace.ActTimeOut:
		r.timeOut(ctx, w, d, now)
	case workspace.ActCrashed:
		if !r.crashed(ctx, w, d, now) {
			// Not recorded: wait as if no end were reported (the next
			// exit poll asks again).
			obs.Exit = nil
			return r.apply(ctx, w, obs, r.judge(w, *obs, now), now)
		}
	case workspace.ActWait:
		r.announce(ctx, w.ID, d, now)
	}
	return stepResult{}
}

// announce publishes the monitor's hint and arranges the wake-up d asks
// for.
func (r *Reconciler) announce(ctx context.Context, id string, d workspace.Decision, now time.Time) {
	if d.HintMonitor {
		r.hints.Publish(ctx, hints.ChanMonitor, id)
	}
	if !d.Wake.IsZero() {
		r.pokeAt(id, d.Wake.Sub(now))
	}
}

// claim claims d.Op for w with a fresh op_id in a compare-and-set write
// (Claim; CompleteAndClaim also completes w's operation, at its target),
// then executes it.
func (r *Reconciler) claim(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) stepResult {
	opID, err := r.opIDs.next()
	if err != nil {
		return stepResult{}
	}
	var ok bool
	if d.Action == workspace.ActCompleteAndClaim {
		ok, err = r.store.CompleteAndClaim(ctx, *w, d.Op, opID, r.cfg.Owner, now, d.LeaseUntil)
		if ok {
			r.completedOp(ctx, w, now)
			w = workspace.Completed(*w)
		}
	} else {
		ok, err = r.store.Claim(ctx, *w, d.Op, opID, r.cfg.Owner, now, d.LeaseUntil)
	}
	// Claimed (or refused): a user's change no longer needs the CPUs
	// before its provider call, which may take seconds.
	r.releaseUrgentFor(ctx, w.ID)
	if err != nil {
		r.cfg.Logger.Warn("workspace: claim", "id", w.ID, "op", d.Op, "err", err)
		return stepResult{}
	}
	if !ok {
		// The row moved since the snapshot: plan again from a fresh read
		// (another replica's claim then shows as an operation in flight).
		return stepResult{again: true}
	}
	lease := d.LeaseUntil
	w.Operation, w.OpID, w.OpStartedAt, w.OpOwner, w.OpLeaseUntil, w.OpExecuted = d.Op, opID, &now, r.cfg.Owner, &lease, false
	w.RestartPending = false // the claim's write cleared it
	r.cfg.Metrics.opStarted(d.Op)
	r.cfg.Logger.Debug("workspace: claimed", "id", w.ID, "op", d.Op, "op_id", w.OpID)
	return r.execute(ctx, w, d)
}

// acquire takes w's operation in flight (a retry, a call a crash cut
// short, or another replica's operation whose lease lapsed) and executes
// it again. The write checks error_count too: a retry decided from a row
// that predates the last failure (a tick's snapshot) would be one call
// more than the policy.
func (r *Reconciler) acquire(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) stepResult {
	ok, err := r.store.Acquire(ctx, w.ID, w.OpID, w.ErrorCount, r.cfg.Owner, now, d.LeaseUntil)
	if err != nil || !ok {
		return stepResult{}
	}
	if d.Action == workspace.ActTakeover {
		r.cfg.Logger.Info("workspace: took over operation", "id", w.ID, "op", w.Operation, "from", w.OpOwner)
	}
	w.OpOwner = r.cfg.Owner
	return r.execute(ctx, w, d)
}

// opIDs makes operation ids: UUIDv7 (time-ordered) whose random bits
// come from crypto/rand read 4 KiB at a time, not one system call per id
// (a fifth of a core converging 100,000 workspaces). next: any goroutine.
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

// opStarted is when w's operation was claimed (zero if unknown).
func opStarted(w *workspace.Workspace) time.Time {
	if w.OpStartedAt != nil {
		return *w.OpStartedAt
	}
	return time.Time{}
}

// timeOut ends w's operation, past its timeout, with d's terminal error
// info; the monitor flips it to ERROR.
func (r *Reconciler) timeOut(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) {
	if err := r.store.Terminal(ctx, w.ID, w.OpID, d.Info, now); err == nil {
		r.cfg.Logger.Error("workspace: operation timed out", "id", w.ID, "op", w.Operation, "elapsed", now.Sub(opStarted(w)))
		r.cfg.Metrics.opEnded(w.Operation, resultTimeout, w.OpStartedAt, now)
		r.announce(ctx, w.ID, d, now)
	}
}

// completeOp ends w's operation, which has reached its target (Complete;
// CompleteRestart for a restart in a crash loop, whose count goes on), and
// leaves the step to plan the next one from the row as completed. (When
// that row plans one, Decide claims it in the same write instead:
// ActCompleteAndClaim, claim.)
func (r *Reconciler) completeOp(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) stepResult {
	next, complete := workspace.Completed(*w), r.store.Complete
	if d.Action == workspace.ActCompleteRestart {
		complete = r.store.CompleteRestart
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
	r.hand(handoff.ToReconciler, *next)
	r.completedOp(ctx, w, now)
	// next is exact, even from a hinted w: Complete wrote only on the
	// planning inputs w shows.
	return stepResult{again: true, next: next, exact: true}
}

// completedOp logs, counts and announces the end of w's operation (the
// row changed: the live page shows it).
func (r *Reconciler) completedOp(ctx context.Context, w *workspace.Workspace, now time.Time) {
	r.cfg.Logger.Info("workspace: operation completed", "id", w.ID, "op", w.Operation)
	r.cfg.Metrics.opEnded(w.Operation, resultOK, w.OpStartedAt, now)
	r.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
}

// execute calls the provider for w's claimed operation (d claimed or
// acquired it), renewing the lease meanwhile, and applies what Decide
// makes of the outcome.
func (r *Reconciler) execute(ctx context.Context, w *workspace.Workspace, d workspace.Decision) stepResult {
	callCtx, cancel := context.WithDeadline(ctx, d.Deadline)
	stopRenew := r.renewLease(ctx, w)
	t0 := time.Now()
	err := r.call(callCtx, w, d.Exit)
	callTime := time.Since(t0)
	stopRenew()
	cancel()
	now := r.cfg.Clock.Now()
	if ctx.Err() != nil {
		return stepResult{acted: true} // shutting down: the lease lapses, a restart takes over
	}
	r.cfg.Metrics.providerCall(w.Operation, err, callTime)
	res := callResult(err)
	d = r.judge(w, workspace.Observation{Call: &res}, now)
	switch d.Action {
	case workspace.ActFail:
		r.cfg.Logger.Warn("workspace: execute failed", "id", w.ID, "op", w.Operation, "error_count", d.Info.ErrorCount, "reason", d.Info.Reason, "err", err)
		r.failed(ctx, w, d, now)
		return stepResult{acted: true}
	case workspace.ActDeleteRow:
		return r.deleteRow(ctx, w, now)
	}
	x := *w
	return stepResult{acted: true, finish: func() { r.executed(ctx, &x, d, now) }}
}

// deleteRow removes w's row: its DELETING call returned.
func (r *Reconciler) deleteRow(ctx context.Context, w *workspace.Workspace, now time.Time) stepResult {
	if err := r.store.DeleteRow(ctx, w.ID, w.OpID); err != nil {
		r.cfg.Logger.Warn("workspace: delete row", "id", w.ID, "err", err)
		return stepResult{acted: true}
	}
	r.cfg.Metrics.opEnded(workspace.OpDeleting, resultOK, w.OpStartedAt, now)
	r.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
	return stepResult{gone: true}
}

// executed records that w's provider call returned at now, hints the
// monitor, which observes it next, and wakes the workspace at its
// deadline (d, ActExecuted). It is the step's finish, on a goroutine of
// its own: the process's next step waits for it, so it never sees the row
// as not executed. That goroutine only.
func (r *Reconciler) executed(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) {
	if err := r.store.Executed(ctx, w.ID, w.OpID, now); err != nil {
		r.cfg.Logger.Warn("workspace: record executed", "id", w.ID, "err", err)
	} else {
		// The monitor observes it next: leave it the row as executed.
		w.OpExecuted, w.OpLeaseUntil, w.UpdatedAt = true, nil, now.UTC().Truncate(time.Millisecond)
		r.hand(handoff.ToMonitor, *w)
	}
	r.announce(ctx, w.ID, d, now)
}

// hand leaves w in box for the hint about to be published (package handoff).
// Any goroutine (a step's, its finish's).
func (r *Reconciler) hand(box handoff.Box, w workspace.Workspace) {
	if r.handed != nil {
		r.handed.Hand(box, w)
	}
}

// renewLease renews this replica's lease on w's operation every Lease/3,
// on a goroutine of its own, until the returned stop is called. The step's
// goroutine only.
func (r *Reconciler) renewLease(ctx context.Context, w *workspace.Workspace) (stop func()) {
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

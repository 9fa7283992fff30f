package sched

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Scheduler runs processes on a fixed set of worker goroutines. Create it
// with New; every method is safe for concurrent use.
type Scheduler struct {
	cfg      Config
	log      *slog.Logger
	handlers map[CommandType]Handler // frozen copy of cfg.Handlers; read-only
	workers  []*worker

	global globalQueue
	procs  pidMap
	nodes  nodeArena // every process's inbox nodes

	// ext counts spawns and completions made off the workers (Spawn from
	// other goroutines, Stop's force-close); each worker has its own
	// shard, so the hot paths never share a counter line. Live processes
	// = Σ spawned − Σ completed. With stopping it forms publish-then-check
	// pair #4: complete adds to completed then loads stopping; Stop stores
	// stopping then sums, so the last completion during a stop is always
	// noticed by one of them.
	ext      counts
	stopping atomic.Bool // set once by Stop; loaded by anyone
	exit     atomic.Bool // set once by Stop after draining; workers return
	drained  chan struct{}
	drainMu  sync.Once // closes drained

	// nspin counts workers searching for work (spinning). A producer that
	// sees nspin > 0 does not wake anyone: a searcher will find its work.
	// CAS/Add by any goroutine, seq-cst.
	nspin atomic.Int32
	// nparked counts workers in idle. Changed only under idleMu, loaded
	// without it (seq-cst). Publish-then-check pair #2: a producer queues
	// work then loads nparked; a parking worker adds itself to nparked
	// then re-checks every queue (hasWork) before waiting.
	nparked atomic.Int32

	idleMu sync.Mutex
	// idleMu protects idle and every worker's parked/token fields, and is
	// the lock of every worker's cond.
	idle []*worker

	// running counts worker goroutines that have not returned; the last
	// one to return closes workersDone (Stop waits on it with its ctx).
	running     atomic.Int32
	workersDone chan struct{}
	stopOnce    sync.Once
	stopErr     error

	// Counters for Stats (Add by any goroutine).
	failed, undeliverable, wakeups, dropped, droppedCompletions, onExitPanics, abandoned atomic.Uint64
}

// counts is one shard of the spawned/completed counters, alone on its cache
// lines.
type counts struct {
	_         [64]byte
	spawned   atomic.Uint64
	completed atomic.Uint64
	_         [48]byte
}

// New starts a scheduler with cfg's workers. Stop it with Stop.
func New(cfg Config) (*Scheduler, error) {
	s, err := newScheduler(cfg)
	if err != nil {
		return nil, err
	}
	s.startWorkers()
	return s, nil
}

// newScheduler builds a scheduler without starting its workers, so tests can
// drive one worker's search by hand.
func newScheduler(cfg Config) (*Scheduler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Scheduler{
		cfg:         cfg,
		log:         cfg.Logger,
		handlers:    make(map[CommandType]Handler, len(cfg.Handlers)),
		drained:     make(chan struct{}),
		workersDone: make(chan struct{}),
	}
	for t, h := range cfg.Handlers {
		s.handlers[t] = h
	}
	s.workers = make([]*worker, cfg.Workers)
	s.procs.s = s
	s.global.init()
	for i := range s.workers {
		s.workers[i] = newWorker(s, i)
	}
	return s, nil
}

func (s *Scheduler) startWorkers() {
	s.running.Store(int32(len(s.workers)))
	for _, w := range s.workers {
		go w.loop()
	}
	s.log.Debug("sched: started", "workers", len(s.workers))
}

// Spawn initializes p with method and input (on the calling goroutine) and
// queues it on the global queue; its first Step gets nil events. It returns
// ErrStopped once Stop has begun, and Init's error (wrapped) if Init fails;
// in both cases p is not run and Close is not called for an Init failure.
// Inside a Step, use StepOutput.Spawn: it queues the child on the worker's
// own deque.
func (s *Scheduler) Spawn(p Process, method string, input []any) (PID, error) {
	return s.spawn(p, method, input, nil)
}

// spawn is Spawn; w is the worker whose step is spawning, or nil.
func (s *Scheduler) spawn(p Process, method string, input []any, w *worker) (PID, error) {
	if p == nil {
		return 0, fmt.Errorf("sched: spawn %q: nil Process", method)
	}
	if s.stopping.Load() {
		return 0, ErrStopped
	}
	pr, pid := s.procs.alloc(w)
	ctx := &procCtx{pid: pid, p: pr}
	pr.pid, pr.p = pid, p
	pr.started = false
	pr.ctx.Store(ctx)
	if err := safeInit(ctx, p, method, input); err != nil {
		ctx.cancel()
		pr.p = nil
		// Burn the generation: Init may have kept Self(ctx).
		pr.state.Store(uint64(pid>>32)<<32 | uint64(StateComplete))
		s.procs.release(pr, w)
		return 0, fmt.Errorf("sched: spawn %q: init: %w", method, err)
	}
	c := &s.ext
	if w != nil {
		c = &w.counts
	}
	c.spawned.Add(1)
	// Publish: from this store the PID reaches the record.
	pr.state.Store(uint64(pid>>32)<<32 | uint64(StateReady))
	// Check after publishing: Stop stores stopping before it snapshots
	// the map, so either Stop's snapshot has pr (and cancels it) or this
	// load sees stopping.
	if s.stopping.Load() {
		// Stop's force-close may have found pr in the table already;
		// forceClose lets exactly one of us close (and report) it.
		s.forceClose(pr, w, c)
		return 0, ErrStopped
	}
	if w != nil {
		w.pushSpawned(pr)
	} else {
		s.global.push(pr)
		s.wakeOne()
	}
	return pid, nil
}

// Send delivers msg to process to as an EventMessage with From = 0. Any
// goroutine. ErrNoProcess means the message was not queued: to is not a live
// process. nil means it was queued in the inbox of the live process: a step
// will see it unless the process completes first (a process may finish with
// messages still queued; those are counted in Stats.Dropped). Send cannot
// promise more without waiting for the receiver: when it returns, the
// receiver may be in the middle of its last step.
func (s *Scheduler) Send(to PID, msg any) error {
	p := s.procs.get(to)
	if p == nil || !p.deliver(uint32(to>>32), Event{Type: EventMessage, Data: msg}, nil) {
		return fmt.Errorf("sched: send to %v: %w", to, ErrNoProcess)
	}
	return nil
}

// Cancel asks process pid to finish: it cancels the process's context (see
// Process.Init) and delivers an EventCancel. Any goroutine. It returns
// ErrNoProcess if pid is not a live process.
func (s *Scheduler) Cancel(pid PID) error {
	p := s.procs.get(pid)
	if p == nil {
		return fmt.Errorf("sched: cancel %v: %w", pid, ErrNoProcess)
	}
	// Deliver first: cancelling the context can end a handler's wait, and
	// its completion can finish the process before our event is queued.
	ok := p.deliver(uint32(pid>>32), Event{Type: EventCancel}, nil)
	if c := p.ctx.Load(); c != nil && c.pid == pid {
		c.cancel()
	}
	if !ok {
		return fmt.Errorf("sched: cancel %v: %w", pid, ErrNoProcess)
	}
	return nil
}

// makeReady queues a process that the caller has just moved to Ready. From
// worker w (its own goroutine) it becomes w's runnext; from anywhere else it
// goes to the global queue, followed by a wake-up check.
func (s *Scheduler) makeReady(p *proc, w *worker) {
	if w != nil {
		w.readyNext(p)
		return
	}
	s.global.push(p)
	s.wakeOne()
}

// wakeOne wakes a parked worker if there is one and nobody is searching.
//
// It is the "check" half of publish-then-check pair #2 (the caller has just
// queued work). Taking the spinning token (nspin 0 → 1) on the woken worker's
// behalf keeps concurrent producers from waking a herd: until that worker has
// searched, nspin > 0 and they return at once.
func (s *Scheduler) wakeOne() {
	if s.nparked.Load() == 0 || s.nspin.Load() != 0 {
		return
	}
	if !s.nspin.CompareAndSwap(0, 1) {
		return
	}
	s.idleMu.Lock()
	if n := len(s.idle); n > 0 {
		w := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.nparked.Add(-1)
		w.parked = false
		w.token = true
		// Counted before the signal: whatever the woken worker then does
		// (a test reads Stats after it) happens after the count.
		s.wakeups.Add(1)
		w.cond.Signal()
		s.idleMu.Unlock()
		return
	}
	s.idleMu.Unlock()
	// The parked workers left on their own (their re-check found work),
	// so they are running and will come back to the queues.
	s.nspin.Add(-1)
}

// hasWork reports whether any queue holds a process. Any goroutine; used by
// parking workers as the "check" of pair #2.
func (s *Scheduler) hasWork() bool {
	if s.global.len() > 0 {
		return true
	}
	for _, w := range s.workers {
		if w.dq.Len() > 0 {
			return true
		}
	}
	return false
}

// complete finishes p, which the caller has Running: Complete state (taking
// what is left in the inbox), then finish. Called by the worker w that had p
// Running (c its shard).
func (s *Scheduler) complete(p *proc, err error, w *worker, c *counts) {
	for {
		old := p.state.Load()
		if p.state.CompareAndSwap(old, withTop(withState(old, StateComplete), 0)) {
			s.finish(p, wordTop(old), err, w, c)
			return
		}
	}
}

// finish is the rest of completing p once the caller has CASed it to
// Complete (from then on get and deliver miss it) and taken its inbox (top):
// context cancelled, leftover events counted, Close, report, and the record
// freed for reuse. w is the calling worker or nil.
func (s *Scheduler) finish(p *proc, top uint32, err error, w *worker, c *counts) {
	pid := p.pid
	if ctx := p.ctx.Load(); ctx != nil {
		ctx.cancel()
	}
	if p.pendingPID != 0 {
		p.dropPending()
	}
	// Events still queued were accepted (deliver returned true) and will
	// never be stepped: count the messages so Send's nil stays honest.
	for i := top; i != 0; {
		n := s.nodes.node(i)
		if n.ev[0].Type == EventMessage {
			s.dropped.Add(1)
		}
		next := n.next
		s.freeNode(i, w)
		i = next
	}
	clear(p.batch)
	p.batch = p.batch[:0]
	if cerr := safeClose(p.p); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		s.failed.Add(1)
		if err != ErrStopped {
			s.log.Error("sched: process failed", "pid", pid.String(), "err", err)
		}
	}
	// Counted before OnExit, so a Stats taken after OnExit sees it; Stop
	// still waits for this worker (workersDone) before it returns.
	c.completed.Add(1)
	// Nothing of this incarnation is read after this: the record may be
	// reused at once.
	p.p = nil
	s.procs.release(p, w)
	if s.cfg.OnExit != nil {
		s.onExit(pid, err)
	}
	if s.stopping.Load() && s.live() == 0 {
		s.drainMu.Do(func() { close(s.drained) })
	}
}

// onExit calls cfg.OnExit, recovering (and logging) a panic so that a bad
// callback costs a log line, not the worker and the program.
func (s *Scheduler) onExit(pid PID, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.onExitPanics.Add(1)
			s.log.Error("sched: OnExit panicked", "pid", pid.String(), "err", panicErr(r))
		}
	}()
	s.cfg.OnExit(pid, err)
}

// forceClose completes p with ErrStopped unless it is Running (its worker
// will) or already Complete. It returns whether it closed p. Any goroutine
// (w is the calling worker or nil);
// the CAS lets exactly one closer win.
func (s *Scheduler) forceClose(p *proc, w *worker, c *counts) bool {
	for {
		old := p.state.Load()
		switch wordState(old) {
		case StateRunning, StateComplete:
			return false
		}
		if p.state.CompareAndSwap(old, withTop(withState(old, StateComplete), 0)) {
			s.finish(p, wordTop(old), ErrStopped, w, c)
			return true
		}
	}
}

// live returns Σ spawned − Σ completed. Exact only when nothing changes
// concurrently; Stop relies on it only through pair #4 (see counts).
func (s *Scheduler) live() int64 {
	var sp, done uint64
	sp, done = s.ext.spawned.Load(), s.ext.completed.Load()
	for _, w := range s.workers {
		sp += w.counts.spawned.Load()
		done += w.counts.completed.Load()
	}
	return int64(sp - done)
}

// Stop cancels every process (its context, and an EventCancel), waits until
// all have completed or ctx ends, then stops the workers (each finishes the
// step it is running) and force-closes the processes that are left,
// reporting them with ErrStopped. Stop returns by ctx's deadline whatever a
// Step does: a worker still inside a step then is abandoned, reported in the
// log and in the error (ErrStuck), and counted in Stats.Abandoned; when its
// step returns, that worker completes the process with ErrStopped (or the
// step's error) and exits.
//
// Stop returns nil if every process finished on its own, or ctx's error
// (wrapped, together with ErrStuck if a worker was abandoned) if some had to
// be closed. Spawn fails with ErrStopped from the moment Stop begins. Stop is
// safe to call more than once and from several goroutines; later calls wait
// for the first and return its result. It must not be called from a Step, a
// handler or OnExit.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Scheduler) stop(ctx context.Context) error {
	s.stopping.Store(true)
	for _, p := range s.procs.all() {
		// Whichever incarnation is live now: Stop cancels them all.
		p.deliver(wordGen(p.state.Load()), Event{Type: EventCancel}, nil)
		if c := p.ctx.Load(); c != nil {
			c.cancel()
		}
	}
	if s.live() == 0 {
		s.drainMu.Do(func() { close(s.drained) })
	}
	var err error
	select {
	case <-s.drained:
	case <-ctx.Done():
		err = fmt.Errorf("sched: stop: %w", ctx.Err())
	}
	s.exit.Store(true)
	s.idleMu.Lock()
	for _, w := range s.workers {
		w.cond.Broadcast()
	}
	s.idleMu.Unlock()
	select {
	case <-s.workersDone:
	case <-ctx.Done():
		select {
		case <-s.workersDone:
		default:
			// Some worker is inside a step that does not return. Leave
			// it: it completes its process itself when the step ends.
			// (A worker that is only on its way out is not stuck.)
			var stuck []string
			for _, p := range s.procs.all() {
				if st := p.state.Load(); wordState(st) == StateRunning {
					stuck = append(stuck, PID(uint64(wordGen(st))<<32|uint64(p.idx)).String())
				}
			}
			if len(stuck) > 0 {
				s.abandoned.Add(uint64(len(stuck)))
				s.log.Error("sched: stop: abandoning workers stuck in a step", "workers", len(stuck), "running", stuck)
				err = fmt.Errorf("sched: stop: %w: %d worker(s), processes %v: %w", ErrStuck, len(stuck), stuck, ctx.Err())
			}
		}
	}
	// Whatever is not Running is Ready, Idle or Blocked: close it. A
	// process left in an abandoned worker's queues is closed here too; the
	// worker's stale entry then fails its CAS.
	s.global.drain()
	forced := 0
	for _, p := range s.procs.all() {
		if s.forceClose(p, nil, &s.ext) {
			forced++
		}
	}
	s.log.Debug("sched: stopped", "force_closed", forced)
	return err
}

// Stats is a snapshot of the scheduler's counters.
type Stats struct {
	Workers int
	// Processes by state, counted from the PID map at the snapshot.
	Ready, Running, Blocked, Idle int
	// Since New.
	Spawned, Completed, Failed uint64
	Steps                      uint64 // Step calls (each worker publishes its count every 64 steps and when it runs out of work)
	Steals                     uint64 // processes moved by steal-half
	StealOps                   uint64 // successful steal-half calls
	GlobalPops                 uint64 // processes taken from the global queue (batches included)
	Parks                      uint64 // times a worker went to sleep
	Wakeups                    uint64 // times a parked worker was woken for new work
	Undeliverable              uint64 // StepOutput.Send to a PID that was gone
	// Dropped counts messages accepted by Send or StepOutput.Send that no
	// step saw: the process completed with them still queued.
	Dropped uint64
	// DroppedCompletions counts CompleteYield calls after the yield was
	// already completed (or for a tag never yielded); they are not
	// delivered.
	DroppedCompletions uint64
	OnExitPanics       uint64 // OnExit calls that panicked (recovered, logged)
	Abandoned          uint64 // workers Stop left inside a step
	Parked             int    // workers asleep at the snapshot
}

// Stats returns a snapshot. It walks the PID map, so it costs O(processes).
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Workers:            len(s.workers),
		Spawned:            s.ext.spawned.Load(),
		Completed:          s.ext.completed.Load(),
		Failed:             s.failed.Load(),
		Wakeups:            s.wakeups.Load(),
		Undeliverable:      s.undeliverable.Load(),
		Dropped:            s.dropped.Load(),
		DroppedCompletions: s.droppedCompletions.Load(),
		OnExitPanics:       s.onExitPanics.Load(),
		Abandoned:          s.abandoned.Load(),
		Parked:             int(s.nparked.Load()),
	}
	for _, w := range s.workers {
		st.Spawned += w.counts.spawned.Load()
		st.Completed += w.counts.completed.Load()
		st.Steps += w.steps.Load()
		st.Steals += w.steals.Load()
		st.StealOps += w.stealOps.Load()
		st.GlobalPops += w.globalPops.Load()
		st.Parks += w.parks.Load()
	}
	for _, p := range s.procs.all() {
		switch p.loadState() {
		case StateReady:
			st.Ready++
		case StateRunning:
			st.Running++
		case StateBlocked:
			st.Blocked++
		case StateIdle:
			st.Idle++
		}
	}
	return st
}

func panicErr(r any) error { return &PanicError{Value: r, Stack: debug.Stack()} }

func safeInit(ctx context.Context, p Process, method string, input []any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicErr(r)
		}
	}()
	return p.Init(ctx, method, input)
}

func safeClose(p Process) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicErr(r)
		}
	}()
	p.Close()
	return nil
}

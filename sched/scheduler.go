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

	ctx    context.Context // given to Init and handlers; canceled when Stop ends
	cancel context.CancelFunc

	global globalQueue
	procs  pidMap

	// live counts processes spawned and not yet completed. Add by Spawn
	// and complete (seq-cst). With stopping it forms publish-then-check
	// pair #3: complete decrements live then loads stopping; stop stores
	// stopping then loads live, so the last completion during a stop is
	// always noticed by one of them.
	live     atomic.Int64
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

	wg       sync.WaitGroup // one per worker goroutine
	stopOnce sync.Once
	stopErr  error

	// Counters for Stats (Add by any goroutine).
	spawned, completed, failed, undeliverable, wakeups atomic.Uint64
}

// New starts a scheduler with cfg's workers. Stop it with Stop.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Scheduler{
		cfg:      cfg,
		log:      cfg.Logger,
		handlers: make(map[CommandType]Handler, len(cfg.Handlers)),
		drained:  make(chan struct{}),
	}
	for t, h := range cfg.Handlers {
		s.handlers[t] = h
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.workers = make([]*worker, cfg.Workers)
	for i := range s.workers {
		s.workers[i] = newWorker(s, i)
	}
	s.wg.Add(len(s.workers))
	for _, w := range s.workers {
		go w.loop()
	}
	s.log.Debug("sched: started", "workers", cfg.Workers)
	return s, nil
}

// Spawn initializes p with method and input (on the calling goroutine) and
// queues it; its first Step gets no events. It returns ErrStopped once Stop
// has begun, and Init's error (wrapped) if Init fails; in both cases p is not
// run and Close is not called for an Init failure.
func (s *Scheduler) Spawn(p Process, method string, input []any) (PID, error) {
	if p == nil {
		return 0, fmt.Errorf("sched: spawn %q: nil Process", method)
	}
	if s.stopping.Load() {
		return 0, ErrStopped
	}
	if err := safeInit(s.ctx, p, method, input); err != nil {
		return 0, fmt.Errorf("sched: spawn %q: init: %w", method, err)
	}
	pid, sl := s.procs.alloc()
	pr := &proc{pid: pid, s: s, p: p}
	pr.state.Store(uint32(StateReady))
	s.live.Add(1)
	s.procs.put(pr, sl)
	// Check after publishing in the PID map: Stop stores stopping before
	// it snapshots the map, so either Stop's snapshot has pr (and cancels
	// it) or this load sees stopping.
	if s.stopping.Load() {
		// Stop's force-close may have found pr in the table already; the
		// Swap lets exactly one of us close it.
		if State(pr.state.Swap(uint32(StateComplete))&stateMask) != StateComplete {
			s.procs.del(pr)
			safeClose(p)
			s.liveDone()
		}
		return 0, ErrStopped
	}
	s.spawned.Add(1)
	s.makeReady(pr, nil)
	return pr.pid, nil
}

// Send delivers msg to process to as an EventMessage with From = 0. Any
// goroutine. It returns ErrNoProcess if to is not a live process, or if the
// process completed before any step took the message; a nil error means a
// step has or will have it.
func (s *Scheduler) Send(to PID, msg any) error {
	p := s.procs.get(to)
	if p == nil || !p.deliver(Event{Type: EventMessage, Data: msg}, nil) {
		return fmt.Errorf("sched: send to %v: %w", to, ErrNoProcess)
	}
	return nil
}

// Cancel delivers an EventCancel to process pid. Any goroutine.
func (s *Scheduler) Cancel(pid PID) error {
	p := s.procs.get(pid)
	if p == nil || !p.deliver(Event{Type: EventCancel}, nil) {
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
		w.cond.Signal()
		s.idleMu.Unlock()
		s.wakeups.Add(1)
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

// complete finishes p: Complete state, out of the PID map, Close, report.
// Called by the worker that had p Running, or by Stop after the workers
// exited.
func (s *Scheduler) complete(p *proc, err error) {
	p.state.Store(uint32(StateComplete))
	s.procs.del(p)
	if cerr := safeClose(p.p); cerr != nil && err == nil {
		err = cerr
	}
	s.completed.Add(1)
	if err != nil {
		s.failed.Add(1)
		if err != ErrStopped {
			s.log.Error("sched: process failed", "pid", p.pid.String(), "err", err)
		}
	}
	if s.cfg.OnExit != nil {
		s.cfg.OnExit(p.pid, err)
	}
	s.liveDone()
}

func (s *Scheduler) liveDone() {
	if s.live.Add(-1) == 0 && s.stopping.Load() {
		s.drainMu.Do(func() { close(s.drained) })
	}
}

// Stop sends an EventCancel to every process, waits until all have completed
// or ctx ends, then stops the workers (each finishes the step it is running)
// and force-closes the processes that are left, reporting them with
// ErrStopped. It returns nil if every process finished on its own, or ctx's
// error (wrapped) if some had to be closed. Spawn fails with ErrStopped from
// the moment Stop begins. Stop is safe to call more than once and from
// several goroutines; later calls wait for the first and return its result.
// It must not be called from a Step, a handler or OnExit: it waits for the
// workers, and those run on them.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Scheduler) stop(ctx context.Context) error {
	s.stopping.Store(true)
	for _, p := range s.procs.all() {
		p.deliver(Event{Type: EventCancel}, nil)
	}
	if s.live.Load() == 0 {
		s.drainMu.Do(func() { close(s.drained) })
	}
	var err error
	select {
	case <-s.drained:
	case <-ctx.Done():
		err = fmt.Errorf("sched: stop: %w", ctx.Err())
	}
	s.cancel()
	s.exit.Store(true)
	s.idleMu.Lock()
	for _, w := range s.workers {
		w.cond.Broadcast()
	}
	s.idleMu.Unlock()
	s.wg.Wait()
	// No worker runs now; whatever is left is Ready, Idle or Blocked.
	s.global.drain()
	forced := 0
	for _, p := range s.procs.all() {
		if State(p.state.Swap(uint32(StateComplete))&stateMask) != StateComplete {
			forced++
			s.complete(p, ErrStopped)
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
	Steps                      uint64 // Step calls
	Steals                     uint64 // processes moved by steal-half
	StealOps                   uint64 // successful steal-half calls
	GlobalPops                 uint64 // processes taken from the global queue (batches included)
	Parks                      uint64 // times a worker went to sleep
	Wakeups                    uint64 // times a parked worker was woken for new work
	Undeliverable              uint64 // StepOutput.Send to a PID that was gone
	Parked                     int    // workers asleep at the snapshot
}

// Stats returns a snapshot. It walks the PID map, so it costs O(processes).
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Workers:       len(s.workers),
		Spawned:       s.spawned.Load(),
		Completed:     s.completed.Load(),
		Failed:        s.failed.Load(),
		Wakeups:       s.wakeups.Load(),
		Undeliverable: s.undeliverable.Load(),
		Parked:        int(s.nparked.Load()),
	}
	for _, w := range s.workers {
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

package sched

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gantryhq/gantry/sched/internal/deque"
)

// worker is one scheduling goroutine with its own deque.
type worker struct {
	s  *Scheduler
	id int
	dq *deque.Deque[proc] // Push/Pop: this worker only; StealHalfInto: any worker

	// counts is this worker's shard of the spawned/completed counters.
	counts counts

	// Fields below are touched only by this worker's goroutine.
	rng      *rand.Rand
	tick     uint32 // times tryFind ran; drives the fairness checks
	spinning bool   // counted in s.nspin
	last     *proc  // process run last, for the run-streak bound
	streak   int    // consecutive runs of last
	// runnext is the process most recently woken by a step on this worker
	// (out.Send, a handler completing at once): it runs next, without a
	// trip through the deque. Not stealable, so it holds at most the one
	// process this worker is about to run; the fairness ticks in tryFind
	// keep a pair of processes that wake each other from starving the rest.
	runnext *proc
	// nodes caches free event nodes (see inbox.go) for this worker's
	// sends and takes.
	nodes []uint32
	// free caches free process records (indices, see pidMap) for this
	// worker's spawns and completions.
	free []uint32
	// nsteps counts steps; published to steps every stepPublish steps
	// and whenever the worker searches in vain, so the hot path has no
	// atomic add.
	nsteps uint64

	// Guarded by s.idleMu.
	cond   *sync.Cond // L = &s.idleMu
	parked bool       // in s.idle, waiting on cond
	token  bool       // woken by wakeOne, which counted us in s.nspin

	// Counters for Stats: Add by this worker only, Load by anyone.
	steps, steals, stealOps, globalPops, parks atomic.Uint64
}

// stepPublish: a worker publishes its step count (Stats.Steps) every this
// many steps.
const stepPublish = 64

// countStep counts one step. Owner only.
func (w *worker) countStep() {
	w.nsteps++
	if w.nsteps%stepPublish == 0 {
		w.steps.Store(w.nsteps)
	}
}

func newWorker(s *Scheduler, id int) *worker {
	return &worker{
		s:    s,
		id:   id,
		dq:   deque.New[proc](256),
		rng:  rand.New(rand.NewPCG(uint64(id)+1, 0x9e3779b97f4a7c15)),
		cond: sync.NewCond(&s.idleMu),
	}
}

func (w *worker) loop() {
	defer w.exitLoop()
	for {
		p := w.findWork()
		if p == nil {
			return
		}
		w.run(p)
	}
}

// exitLoop runs when the worker returns (Stop set exit). Processes still in
// its runnext, its deque or the global queue can be there only if Stop gave
// up waiting or raced with this worker's last step; they are closed here or
// by Stop, whichever CASes first.
func (w *worker) exitLoop() {
	s := w.s
	if p := w.runnext; p != nil {
		w.runnext = nil
		s.forceClose(p, w, &w.counts)
	}
	for p := w.dq.Pop(); p != nil; p = w.dq.Pop() {
		s.forceClose(p, w, &w.counts)
	}
	for p := s.global.pop(); p != nil; p = s.global.pop() {
		s.forceClose(p, w, &w.counts)
	}
	if s.running.Add(-1) == 0 {
		close(s.workersDone)
	}
}

// The wake-up discipline (the Go runtime's wakep): whenever a process
// becomes Ready somewhere its owner cannot start it at once, and no worker is
// searching, one parked worker is woken (wakeOne: at most one spinner at a
// time). After a step the owner can start exactly one local process next
// (runnext, else the deque's bottom); during a step it can start none.
// So: a push that leaves two or more local processes, or any push made
// during a step, wakes; the first push after a step does not. That keeps a
// ping-pong on one worker (no futex per message) while a process queued
// behind a long step is stolen at once.

// pushLocal queues a Ready process on this worker's deque after a step.
// Owner only.
func (w *worker) pushLocal(p *proc) {
	w.dq.Push(p)
	if w.runnext != nil || w.dq.Len() >= 2 {
		w.s.wakeOne()
	}
}

// pushSpawned queues a child spawned by the step this worker is running.
// The step is not over, so the owner cannot start the child now. Owner only.
func (w *worker) pushSpawned(p *proc) {
	w.dq.Push(p)
	w.s.wakeOne()
}

// readyNext makes p, just woken by the step this worker ran, the next to
// run; a previous occupant of runnext moves to the deque. Owner only.
func (w *worker) readyNext(p *proc) {
	old := w.runnext
	w.runnext = p
	if old != nil {
		// runnext is taken by p, so old is surplus work: queue it where
		// thieves can reach it and make sure someone is looking.
		w.dq.Push(old)
		w.s.wakeOne()
		return
	}
	if w.dq.Len() > 0 {
		w.s.wakeOne()
	}
}

// spillRunnext moves runnext to the deque, where thieves can reach it,
// before the owner runs something else first (the fairness ticks).
func (w *worker) spillRunnext() {
	if p := w.runnext; p != nil {
		w.runnext = nil
		w.dq.Push(p)
		w.s.wakeOne()
	}
}

// findWork returns the next Ready process to run, spinning and parking while
// there is none; nil means the scheduler is exiting.
func (w *worker) findWork() *proc {
	s := w.s
	spins := 0
	for {
		if s.exit.Load() {
			w.stopSpinning(false)
			return nil
		}
		if p := w.tryFind(); p != nil {
			w.stopSpinning(true)
			return p
		}
		w.steps.Store(w.nsteps)
		if !w.spinning {
			w.spinning = true
			s.nspin.Add(1)
		}
		spins++
		if h := s.cfg.hooks; h != nil && h.spin != nil {
			h.spin(spins, spins >= spinTight && spins < spinYield)
		}
		switch {
		case spins < spinTight:
		case spins < spinYield:
			runtime.Gosched()
		default:
			if h := s.cfg.hooks; h != nil && h.beforeStopSpin != nil {
				h.beforeStopSpin()
			}
			w.stopSpinning(false)
			w.park()
			spins = 0
		}
	}
}

// tryFind looks once in every source, in priority order.
func (w *worker) tryFind() *proc {
	s := w.s
	w.tick++
	switch w.tick % globalCheckTicks {
	case 0:
		// Fairness: the global queue first, now and then, even when the
		// deque or runnext is never empty.
		if p := s.global.pop(); p != nil {
			w.globalPops.Add(1)
			w.spillRunnext()
			return p
		}
	case globalCheckTicks / 2:
		// Fairness inside the worker: the owner pops the newest item,
		// so processes that keep waking each other would starve the
		// oldest one; take it from the top (a steal from ourselves).
		if p := w.dq.Steal(); p != nil {
			w.spillRunnext()
			return p
		}
	}
	if p := w.runnext; p != nil {
		w.runnext = nil
		return p
	}
	if p := w.dq.Pop(); p != nil {
		return p
	}
	if p := s.global.popBatch(w); p != nil {
		w.globalPops.Add(uint64(1 + w.dq.Len()))
		if w.dq.Len() > 0 {
			s.wakeOne()
		}
		return p
	}
	return w.steal()
}

// steal takes half of a random victim's deque (trying every other worker
// once, from a random start) and returns one of the stolen processes.
func (w *worker) steal() *proc {
	ws := w.s.workers
	n := len(ws)
	if n < 2 {
		return nil
	}
	start := w.rng.IntN(n)
	for i := 0; i < n; i++ {
		v := ws[(start+i)%n]
		if v == w || v.dq.Len() == 0 {
			continue
		}
		if k := v.dq.StealHalfInto(w.dq, stealMax); k > 0 {
			w.steals.Add(uint64(k))
			w.stealOps.Add(1)
			return w.dq.Pop()
		}
	}
	return nil
}

// stopSpinning leaves the searching state. If this worker was the last
// searcher and found work, and more work is visible, it wakes another worker
// so the remaining work does not wait for this one (the Go runtime's
// resetspinning).
func (w *worker) stopSpinning(found bool) {
	if !w.spinning {
		return
	}
	w.spinning = false
	if w.s.nspin.Add(-1) == 0 && found && w.s.hasWork() {
		w.s.wakeOne()
	}
}

// park sleeps until wakeOne or Stop wakes this worker. Not spinning on entry.
//
// Check-then-park, the "check" half of pair #2: under idleMu we add
// ourselves to idle and nparked (publish), then re-check every queue; only if
// all are empty do we wait. A producer queues first and reads nparked second,
// so it either sees us (and wakeOne signals us: it needs idleMu, which cond.Wait
// releases only once we are waiting) or we see its work here.
func (w *worker) park() {
	s := w.s
	if h := s.cfg.hooks; h != nil && h.beforePark != nil {
		h.beforePark()
	}
	s.idleMu.Lock()
	s.idle = append(s.idle, w)
	w.parked = true
	s.nparked.Add(1)
	if s.hasWork() || s.exit.Load() {
		w.unparkLocked()
		s.idleMu.Unlock()
		return
	}
	w.parks.Add(1)
	for w.parked && !s.exit.Load() {
		w.cond.Wait()
	}
	if w.parked { // woken by Stop, not by wakeOne
		w.unparkLocked()
	}
	if w.token {
		w.token = false
		w.spinning = true // wakeOne counted us in nspin
	}
	s.idleMu.Unlock()
}

// unparkLocked takes w out of the idle list. Requires s.idleMu.
func (w *worker) unparkLocked() {
	s := w.s
	for i, x := range s.idle {
		if x == w {
			s.idle = append(s.idle[:i], s.idle[i+1:]...)
			break
		}
	}
	w.parked = false
	s.nparked.Add(-1)
}

package sched

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// State is a process's scheduling state.
//
// Transitions (who makes them, and how):
//
//	Ready    → Running   worker, CAS (only the worker that dequeued it)
//	Running  → Ready     worker, after StatusContinue or a wait with events pending
//	Running  → Idle      worker, CAS from Running with an empty inbox
//	Running  → Blocked   worker, CAS from Running with an empty inbox
//	Running  → Complete  worker, after StatusDone, an error or a panic
//	Idle     → Ready     event producer (the CAS that queues its event)
//	Blocked  → Ready     event producer (the CAS that queues its event)
//	any      → Complete  Stop, after every worker has exited (force-close)
//
// While Running, a producer does not change the state; it only queues its
// event in the word, and the worker's CAS out of Running sees it. Whoever
// moves a process to Ready queues it, and only that party: a process is in at
// most one run queue, exactly while Ready.
type State uint32

const (
	StateReady State = iota + 1
	StateRunning
	StateBlocked
	StateIdle
	StateComplete
)

func (s State) String() string {
	switch s {
	case StateReady:
		return "ready"
	case StateRunning:
		return "running"
	case StateBlocked:
		return "blocked"
	case StateIdle:
		return "idle"
	case StateComplete:
		return "complete"
	}
	return fmt.Sprintf("State(%d)", uint32(s))
}

// proc is the scheduler's record of one process.
type proc struct {
	// idx (the record's index in the pidMap), s and out.p are set when the
	// record's segment is made and never change; the record is reused by
	// later processes (see pidMap).
	idx uint32
	s   *Scheduler

	// pid and p are this incarnation's, written by the spawner before it
	// publishes the record and read only by whoever has it Running (or
	// completes it); a stale reference must use the word's generation.
	pid PID
	p   Process

	// state is the process's word: its State and its inbox (the index of
	// the newest queued event node; see inbox.go). Any goroutine loads and
	// CASes it (seq-cst); see State for who may make which transition.
	// Producers push events with a CAS; the worker takes them all with the
	// CAS that makes the process Running.
	state atomic.Uint64

	// ctx is this incarnation's context (Init, handlers,
	// StepOutput.Context) and the Completer its handlers get: cancelled by
	// Cancel, by Stop and when the process completes. One small object
	// per spawn, because a handler or a context may outlive the process
	// while the record is reused. Stored by the spawner; loaded by anyone.
	ctx atomic.Pointer[procCtx]

	// gnext links the record in the global queue (see globalQueue) while
	// it is queued there.
	gnext atomic.Pointer[proc]

	ymu sync.Mutex
	// ymu protects pending, the tags of yields dispatched and not yet
	// completed (a multiset; usually a handful), and pendingPID, the
	// incarnation they belong to (0 once it completed). A completion whose
	// PID and tag are not pending is a second or stale one and is dropped.
	pending    []uint64
	pendingPID PID

	// The fields below are touched only by the worker that has the
	// process Running (the Ready → Running CAS hands them over; the
	// transition out of Running hands them back).
	started bool       // the first Step has run
	held    uint32     // the event node lent to the current step as its events, or 0
	batch   []Event    // the events of the current step; reused
	out     StepOutput // reused every step
}

func (p *proc) loadState() State { return wordState(p.state.Load()) }

// deliver queues ev and makes sure the process will see it: an Idle or
// Blocked process is made Ready and queued (next on w when the caller is
// worker w after a step, otherwise on the global queue); a Running or Ready
// process will take it at its next transition. It returns false if the
// process had completed; true means the event was queued while the process
// was live, so either a step takes it or complete finds it and accounts for
// it (Stats.Dropped).
//
// Publish-then-check pair #1 is a single word here: the push and the wake
// are one CAS, and the worker's move to Idle/Blocked is a CAS that expects an
// empty inbox (worker.finishWait), so one of the two CASes comes first and
// the other sees it.
//
// gen is the generation of the PID the caller means: a record reused by a
// later process refuses an event meant for an earlier one.
func (p *proc) deliver(gen uint32, ev Event, w *worker) bool {
	s := p.s
	i := s.allocNode(w)
	n := s.nodes.node(i)
	n.ev[0] = ev
	for {
		old := p.state.Load()
		st := wordState(old)
		if wordGen(old) != gen || !live(st) {
			s.freeNode(i, w)
			return false
		}
		n.next = wordTop(old)
		nw := withTop(old, i)
		if st == StateIdle || st == StateBlocked {
			nw = withState(nw, StateReady)
		}
		if p.state.CompareAndSwap(old, nw) {
			if nw != withTop(old, i) {
				s.makeReady(p, w)
			}
			return true
		}
	}
}

// CompleteYield delivers the completion of the yield tagged tag. Any
// goroutine. Only the first completion of a dispatched yield is delivered;
// a second one, or one for a tag never yielded, is dropped and counted in
// Stats.DroppedCompletions, and one for a finished process is dropped.
func (c *procCtx) CompleteYield(tag uint64, data any, err error) {
	p := c.p
	if !p.takePending(c.pid, tag) {
		p.s.droppedCompletions.Add(1)
		return
	}
	p.deliver(uint32(c.pid>>32), Event{Type: EventYieldComplete, Tag: tag, Data: data, Error: err}, nil)
}

// addPending records a dispatched yield. Worker only (while Running).
func (p *proc) addPending(tag uint64) {
	p.ymu.Lock()
	p.pending = append(p.pending, tag)
	p.pendingPID = p.pid
	p.ymu.Unlock()
}

// takePending removes one pending yield of process pid with that tag; false
// if none.
func (p *proc) takePending(pid PID, tag uint64) bool {
	p.ymu.Lock()
	defer p.ymu.Unlock()
	if p.pendingPID != pid {
		return false
	}
	for i, t := range p.pending {
		if t == tag {
			last := len(p.pending) - 1
			p.pending[i] = p.pending[last]
			p.pending = p.pending[:last]
			return true
		}
	}
	return false
}

// dropPending forgets the pending yields of the incarnation that just
// completed, so its late completions are dropped. Whoever completes p.
func (p *proc) dropPending() {
	p.ymu.Lock()
	p.pending = p.pending[:0]
	p.pendingPID = 0
	p.ymu.Unlock()
}

// procCtx is one incarnation of a process: its context and the Completer
// its handlers get. It is the only allocation per spawn (the record is
// reused; this may be held by a handler long after) and creates its Done
// channel only when someone asks for it, so a process whose context nobody
// watches pays two atomics to cancel it.
type procCtx struct {
	pid PID   // immutable
	p   *proc // the record; check pid against it before acting
	// flags holds ctxCancelled and ctxClosed; set with CAS, loaded by
	// anyone.
	flags atomic.Uint32
	// done is the Done channel, created on first use. Publish-then-check:
	// Done CASes done in, then loads flags; cancel sets ctxCancelled, then
	// loads done; at least one of them sees the other and calls closeDone,
	// whose ctxClosed CAS lets exactly one close the channel.
	done atomic.Pointer[chan struct{}]
}

const (
	ctxCancelled = 1 << iota
	ctxClosed
)

type selfKey struct{}

var _ context.Context = (*procCtx)(nil)

func (c *procCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *procCtx) Done() <-chan struct{} {
	if d := c.done.Load(); d != nil {
		return *d
	}
	ch := make(chan struct{})
	if !c.done.CompareAndSwap(nil, &ch) {
		return *c.done.Load()
	}
	if c.flags.Load()&ctxCancelled != 0 {
		c.closeDone()
	}
	return ch
}

// Err returns context.Canceled once the process was cancelled or finished.
func (c *procCtx) Err() error {
	if c.flags.Load()&ctxCancelled != 0 {
		return context.Canceled
	}
	return nil
}

func (c *procCtx) Value(key any) any {
	if _, ok := key.(selfKey); ok {
		return c.pid
	}
	return nil
}

func (c *procCtx) String() string { return "sched.processContext(" + c.pid.String() + ")" }

func (c *procCtx) cancel() {
	if c.flags.Or(ctxCancelled)&ctxCancelled != 0 {
		return
	}
	if c.done.Load() != nil {
		c.closeDone()
	}
}

func (c *procCtx) closeDone() {
	for {
		f := c.flags.Load()
		if f&ctxClosed != 0 {
			return
		}
		if c.flags.CompareAndSwap(f, f|ctxClosed) {
			close(*c.done.Load())
			return
		}
	}
}

// Self returns the PID of the process whose context ctx is (or is derived
// from): the ctx given to Init and to handlers, or StepOutput.Context. It
// returns 0 for any other context.
func Self(ctx context.Context) PID {
	pid, _ := ctx.Value(selfKey{}).(PID)
	return pid
}

package sched

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/sched/internal/mpsc"
)

// State is a process's scheduling state.
//
// Transitions (who makes them, and how):
//
//	Ready    → Running   worker, CAS (only the worker that dequeued it)
//	Running  → Ready     worker, after StatusContinue or a wait with events pending
//	Running  → Idle      worker, CAS from exactly Running (no wake flag)
//	Running  → Blocked   worker, CAS from exactly Running (no wake flag)
//	Running  → Complete  worker, after StatusDone, an error or a panic
//	Idle     → Ready     event producer or the worker's re-check, CAS
//	Blocked  → Ready     event producer or the worker's re-check, CAS
//	any      → Complete  Stop, after every worker has exited (force-close)
//
// While Running, a producer does not change the state; it sets the wake flag
// (CAS Running → Running|wake) so the worker knows an event arrived after it
// drained the queue. Whoever moves a process to Ready queues it, and only
// that party: a process is in at most one run queue, exactly while Ready.
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

const (
	stateMask = 0x7
	wakeFlag  = 0x8 // only ever set together with StateRunning
)

// proc is the scheduler's record of one process.
type proc struct {
	pid PID
	s   *Scheduler
	p   Process

	// state holds a State in the low bits and wakeFlag. Any goroutine
	// loads and CASes it (seq-cst); see State for who may make which
	// transition.
	state atomic.Uint32

	// events is the inbox. Any goroutine pushes; only the worker that has
	// the process Running swaps it out; complete closes it.
	events mpsc.Queue[Event]

	// ctx is the process's context (Init, handlers, StepOutput.Context):
	// cancelled by Cancel, by Stop and when the process completes.
	ctx procCtx

	ymu sync.Mutex
	// ymu protects pending: the tags of yields dispatched and not yet
	// completed (a multiset; usually a handful). A completion whose tag is
	// not pending is a second completion and is dropped.
	pending []uint64

	// The fields below are touched only by the worker that has the
	// process Running (the Ready → Running CAS hands them over; the
	// transition out of Running hands them back).
	started bool       // the first Step has run
	batch   []Event    // the slice the previous Swap returned
	out     StepOutput // reused every step
}

func (p *proc) loadState() State { return State(p.state.Load() & stateMask) }

// deliver pushes ev and makes sure the process will see it: an Idle or
// Blocked process is made Ready and queued (next on w when the caller is
// worker w after a step, otherwise on the global queue); a Running process
// gets the wake flag; a Ready process will drain it when it runs. It returns
// false if the inbox was already closed (the process completed); true means
// the event was queued while the process was live, so either a step takes it
// or complete finds it in the inbox and accounts for it (Stats.Dropped).
//
// Publish-then-check pair #1 (with the worker's transition out of Running,
// see worker.finishWait): we push the event (publish), then load the state
// (check). The worker CASes the state to Idle/Blocked (publish), then checks
// the queue. Both are seq-cst, so at least one side sees the other: either we
// see Idle/Blocked and wake it, or the worker sees the event and requeues it.
// If both do, the Idle/Blocked → Ready CAS lets exactly one of them queue it.
func (p *proc) deliver(ev Event, w *worker) bool {
	if !p.events.Push(ev) {
		return false
	}
	for {
		s := p.state.Load()
		switch State(s & stateMask) {
		case StateIdle, StateBlocked:
			if p.state.CompareAndSwap(s, uint32(StateReady)) {
				p.s.makeReady(p, w)
				return true
			}
		case StateRunning:
			// Retry while still Running: the worker may have moved it
			// on between our load and CAS (the original runtime lost a
			// wake-up by giving up after one failed CAS here).
			if s&wakeFlag != 0 || p.state.CompareAndSwap(s, s|wakeFlag) {
				return true
			}
		default: // Ready, or Complete with the inbox not yet closed
			return true
		}
	}
}

// CompleteYield delivers the completion of the yield tagged tag. Any
// goroutine. Only the first completion of a dispatched yield is delivered;
// a second one, or one for a tag never yielded, is dropped and counted in
// Stats.DroppedCompletions, and one for a finished process is dropped.
func (p *proc) CompleteYield(tag uint64, data any, err error) {
	if !p.takePending(tag) {
		p.s.droppedCompletions.Add(1)
		return
	}
	p.deliver(Event{Type: EventYieldComplete, Tag: tag, Data: data, Error: err}, nil)
}

// addPending records a dispatched yield. Worker only (while Running).
func (p *proc) addPending(tag uint64) {
	p.ymu.Lock()
	p.pending = append(p.pending, tag)
	p.ymu.Unlock()
}

// takePending removes one pending yield with that tag; false if none.
func (p *proc) takePending(tag uint64) bool {
	p.ymu.Lock()
	defer p.ymu.Unlock()
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

// procCtx is a process's context. It is part of proc (no allocation per
// spawn) and creates its Done channel only when someone asks for it, so a
// process whose context nobody watches pays two atomics to cancel it.
type procCtx struct {
	pid PID
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

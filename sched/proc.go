package sched

import (
	"fmt"
	"sync/atomic"

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
	// the process Running swaps it out.
	events mpsc.Queue[Event]

	// The fields below are touched only by the worker that has the
	// process Running (the Ready → Running CAS hands them over; the
	// transition out of Running hands them back).
	batch []Event    // the slice the previous Swap returned
	out   StepOutput // reused every step
}

func (p *proc) loadState() State { return State(p.state.Load() & stateMask) }

// deliver pushes ev and makes sure the process will see it: an Idle or
// Blocked process is made Ready and queued (on w's deque when the caller is
// worker w, otherwise on the global queue); a Running process gets the wake
// flag; a Ready process will drain it when it runs. It returns false if the
// process completed without taking the event (the event is dropped with it);
// a process that took the event in a step and then completed counts as
// delivered.
//
// Publish-then-check pair #1 (with the worker's transition out of Running,
// see worker.finishWait): we push the event (publish), then load the state
// (check). The worker CASes the state to Idle/Blocked (publish), then checks
// the queue. Both are seq-cst, so at least one side sees the other: either we
// see Idle/Blocked and wake it, or the worker sees the event and requeues it.
// If both do, the Idle/Blocked → Ready CAS lets exactly one of them queue it.
func (p *proc) deliver(ev Event, w *worker) bool {
	seq := p.events.Push(ev)
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
		case StateReady:
			return true
		default: // StateComplete
			// A step may have taken the event between our push and
			// this load, and the process then finished: that is a
			// delivery. The Swap that took it stored Taken before the
			// step, hence before the Complete we just loaded.
			return p.events.Taken() >= seq
		}
	}
}

// CompleteYield delivers the completion of the yield tagged tag. Any
// goroutine; a completion for a finished process is dropped.
func (p *proc) CompleteYield(tag uint64, data any, err error) {
	p.deliver(Event{Type: EventYieldComplete, Tag: tag, Data: data, Error: err}, nil)
}

package sched

import "fmt"

// noEvents is what a step after the first gets when nothing arrived: empty
// but not nil, so nil events means "first step" and nothing else.
var noEvents = make([]Event, 0)

// run executes one step of p and moves it to its next state. Worker only.
func (w *worker) run(p *proc) {
	s := w.s
	if !p.state.CompareAndSwap(uint32(StateReady), uint32(StateRunning)) {
		// Invariant broken: only Ready processes are queued, once. Drop
		// the entry rather than run a process twice at once.
		s.log.Error("sched: dequeued a process that was not ready", "pid", p.pid.String(), "state", p.loadState())
		return
	}
	if p == w.last {
		w.streak++
	} else {
		w.last, w.streak = p, 1
	}

	// Drain after the CAS: an event pushed before this point is in the
	// batch; one pushed after it sees Running and sets the wake flag.
	// The first step gets nil and leaves the inbox alone (the contract in
	// Process.Step); finishWait requeues the process if it is not empty.
	var events []Event
	if !p.started {
		p.started = true
	} else if !p.events.Empty() {
		p.batch = p.events.Swap(p.batch)
		events = p.batch
	} else {
		events = noEvents
	}
	out := &p.out
	out.Status = 0
	out.w = w
	err := w.step(p, events, out)
	out.w = nil
	w.steps.Add(1)

	if s.exit.Load() {
		// Stop has given up on this step (or is about to stop the
		// workers): no sends, no yields, no requeue; the process ends
		// here and this worker exits.
		clear(out.sends)
		out.sends = out.sends[:0]
		clear(out.yields)
		out.yields = out.yields[:0]
		if err != nil {
			err = fmt.Errorf("sched: process %v: %w", p.pid, err)
		} else if out.Status != StatusDone {
			err = ErrStopped
		}
		s.complete(p, err, &w.counts)
		return
	}

	// Messages first, so a reply to them can never overtake them.
	for i := range out.sends {
		m := &out.sends[i]
		if to := s.procs.get(m.to); to == nil || !to.deliver(Event{Type: EventMessage, From: p.pid, Data: m.data}, w) {
			s.undeliverable.Add(1)
		}
	}
	clear(out.sends)
	out.sends = out.sends[:0]

	if err == nil {
		switch out.Status {
		case StatusContinue, StatusWaitMessages, StatusWaitYields, StatusDone:
		default:
			err = fmt.Errorf("%w (got %v)", ErrNoStatus, out.Status)
		}
	}
	if err != nil || out.Status == StatusDone {
		clear(out.yields)
		out.yields = out.yields[:0]
		if err != nil {
			err = fmt.Errorf("sched: process %v: %w", p.pid, err)
		}
		s.complete(p, err, &w.counts)
		return
	}

	// Dispatch while still Running, so a handler that completes at once
	// (or from a goroutine that is quick) only sets the wake flag. The tag
	// is pending before the handler runs, so whichever completion comes
	// first (the handler's, or its error or panic) is the only one.
	for i := range out.yields {
		y := &out.yields[i]
		p.addPending(y.Tag)
		if herr := w.dispatch(p, y); herr != nil {
			if p.takePending(y.Tag) {
				p.deliver(Event{Type: EventYieldComplete, Tag: y.Tag, Error: herr}, w)
			} else {
				s.droppedCompletions.Add(1)
				s.log.Warn("sched: handler failed after completing its yield; error dropped",
					"pid", p.pid.String(), "tag", y.Tag, "err", herr)
			}
		}
	}
	clear(out.yields)
	out.yields = out.yields[:0]

	switch out.Status {
	case StatusContinue:
		// Only the worker moves a process out of Running; producers only
		// CAS the wake flag, which fails after this store and then sees
		// Ready. So a plain store is enough.
		p.state.Store(uint32(StateReady))
		if w.streak >= maxRunStreak {
			// Fairness: let everything queued before it run first.
			w.last, w.streak = nil, 0
			s.global.push(p)
			s.wakeOne()
			return
		}
		w.pushLocal(p)
	case StatusWaitMessages:
		w.finishWait(p, StateIdle)
	case StatusWaitYields:
		w.finishWait(p, StateBlocked)
	}
}

// finishWait moves p from Running to wait (Idle or Blocked), or back to Ready
// if events arrived during the step. Worker only.
//
// This is the worker's half of publish-then-check pair #1 (see deliver): the
// CAS to wait publishes that producers must wake the process themselves; the
// re-check of the queue after it catches an event pushed just before.
func (w *worker) finishWait(p *proc, wait State) {
	for {
		s := p.state.Load()
		if s&wakeFlag != 0 {
			if !p.events.Empty() {
				// Producers leave a flagged state alone, so this
				// CAS cannot fail today; the loop keeps it correct
				// if that ever changes.
				if p.state.CompareAndSwap(s, uint32(StateReady)) {
					w.pushLocal(p)
					return
				}
				continue
			}
			// The flagged events were already in this step's batch.
			p.state.CompareAndSwap(s, uint32(StateRunning))
			continue
		}
		if h := w.s.cfg.hooks; h != nil && h.beforeWaitCAS != nil {
			h.beforeWaitCAS(p)
		}
		if p.state.CompareAndSwap(uint32(StateRunning), uint32(wait)) {
			if !p.events.Empty() && p.state.CompareAndSwap(uint32(wait), uint32(StateReady)) {
				w.pushLocal(p)
			}
			return
		}
		// A producer set the flag between the load and the CAS: retry
		// rather than give up (the original runtime's lost wake-up).
	}
}

// step calls p's Step, turning a panic into a *PanicError.
func (w *worker) step(p *proc, events []Event, out *StepOutput) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicErr(r)
		}
	}()
	return p.p.Step(events, out)
}

// dispatch hands one yielded command to its handler; the returned error, if
// any, becomes the yield's completion.
func (w *worker) dispatch(p *proc, y *Yielded) (err error) {
	if y.Command == nil {
		return fmt.Errorf("%w: nil command", ErrNoHandler)
	}
	h := w.s.handlers[y.Command.CommandType()]
	if h == nil {
		return fmt.Errorf("%w %d", ErrNoHandler, y.Command.CommandType())
	}
	defer func() {
		if r := recover(); r != nil {
			err = panicErr(r)
		}
	}()
	return h.Handle(&p.ctx, y.Command, y.Tag, p)
}

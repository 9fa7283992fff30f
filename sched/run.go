package sched

import "fmt"

// noEvents is what a step after the first gets when nothing arrived: empty
// but not nil, so nil events means "first step" and nothing else.
var noEvents = make([]Event, 0)

// run executes one step of p and moves it to its next state. Worker only.
//
// The common path (deliver the step's messages, dispatch its yields, then
// finishWait or requeue) stays in this function; the ends of a process
// (Stop giving up, an error, StatusDone) are calls off that path.
func (w *worker) run(p *proc) {
	s := w.s
	events, ok := w.begin(p)
	if !ok {
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
	out := &p.out
	out.Status = 0
	out.w = w
	err := w.step(p, events, out)
	out.w = nil
	if p.held != 0 {
		s.freeNode(p.held, w)
		p.held = 0
	}
	w.countStep()

	if s.exit.Load() {
		w.abandon(p, err, out)
		return
	}
	// Messages first, so a reply to them can never overtake them.
	for i := range out.sends {
		m := &out.sends[i]
		if to := s.procs.get(m.to); to == nil || !to.deliver(uint32(m.to>>32), Event{Type: EventMessage, From: p.pid, Data: m.data}, w) {
			s.undeliverable.Add(1)
		}
	}
	clear(out.sends)
	out.sends = out.sends[:0]
	if err == nil && !out.Status.valid() {
		err = fmt.Errorf("%w (got %v)", ErrNoStatus, out.Status)
	}
	if err != nil || out.Status == StatusDone {
		w.end(p, err, out)
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
			w.failYield(p, y.Tag, herr)
		}
	}
	clear(out.yields)
	out.yields = out.yields[:0]
	if out.Status == StatusContinue {
		w.requeue(p)
		return
	}
	w.finishWait(p, out.Status.waitState())
}

// valid reports whether a step may end with s.
func (s Status) valid() bool { return s >= StatusContinue && s <= StatusDone }

// abandon ends p after a step that Stop has given up on (or when Stop is
// about to stop the workers): no sends, no yields, no requeue; the process
// ends here and this worker exits. Worker only.
func (w *worker) abandon(p *proc, err error, out *StepOutput) {
	clear(out.sends)
	out.sends = out.sends[:0]
	clear(out.yields)
	out.yields = out.yields[:0]
	if err != nil {
		err = fmt.Errorf("sched: process %v: %w", p.pid, err)
	} else if out.Status != StatusDone {
		err = ErrStopped
	}
	w.s.complete(p, err, w, &w.counts)
}

// end completes p after a step that failed (err) or returned StatusDone;
// its yields are dropped. Worker only.
func (w *worker) end(p *proc, err error, out *StepOutput) {
	clear(out.yields)
	out.yields = out.yields[:0]
	if err != nil {
		err = fmt.Errorf("sched: process %v: %w", p.pid, err)
	}
	w.s.complete(p, err, w, &w.counts)
}

// failYield completes yield tag with the error its handler returned, unless
// the handler completed it first (then the error is counted and logged).
func (w *worker) failYield(p *proc, tag uint64, herr error) {
	if p.takePending(p.pid, tag) {
		p.deliver(uint32(p.pid>>32), Event{Type: EventYieldComplete, Tag: tag, Error: herr}, w)
		return
	}
	w.s.droppedCompletions.Add(1)
	w.s.log.Warn("sched: handler failed after completing its yield; error dropped",
		"pid", p.pid.String(), "tag", tag, "err", herr)
}

// waitState is the state a step that asked for s (StatusWaitMessages or
// StatusWaitYields) waits in.
func (s Status) waitState() State {
	if s == StatusWaitMessages {
		return StateIdle
	}
	return StateBlocked
}

// requeue makes p, still Running after a step that asked for
// StatusContinue, Ready again: on this worker's queue, or on the global
// queue once it has run maxRunStreak times in a row. Worker only.
func (w *worker) requeue(p *proc) {
	// Producers only push while Running (the state bits stay), so this CAS
	// fails only on a push and the retry sees it.
	for old := p.state.Load(); !p.state.CompareAndSwap(old, withState(old, StateReady)); old = p.state.Load() {
	}
	if w.streak >= maxRunStreak {
		// Fairness: let everything queued before it run first.
		w.last, w.streak = nil, 0
		w.s.global.push(p)
		w.s.wakeOne()
		return
	}
	w.pushLocal(p)
}

// begin moves p from Ready to Running and returns the events its step gets:
// nil on the first step (the inbox is left for the next one), otherwise
// every queued event in push order (noEvents if none; a single event is the
// node's own one-element array, lent until the step returns). ok is false if
// p was not Ready. Worker only.
//
// One CAS makes p Running and takes the whole inbox: an event pushed before
// it is in the batch, one pushed after it is in the word for finishWait.
func (w *worker) begin(p *proc) (events []Event, ok bool) {
	for {
		old := p.state.Load()
		if wordState(old) != StateReady {
			return nil, false
		}
		if !p.started {
			if p.state.CompareAndSwap(old, withState(old, StateRunning)) {
				p.started = true
				return nil, true
			}
			continue
		}
		if p.state.CompareAndSwap(old, withTop(withState(old, StateRunning), 0)) {
			top := wordTop(old)
			if top == 0 {
				return noEvents, true
			}
			if n := w.s.nodes.node(top); n.next == 0 {
				// One event (the usual case): lend the node itself
				// for this step; run frees it when the step returns.
				p.held = top
				return n.ev[:], true
			}
			prev := len(p.batch)
			p.batch = w.s.takeEvents(top, p.batch[:0], w)
			if n := len(p.batch); n < prev {
				clear(p.batch[n:prev]) // drop the references of the previous batch
			}
			return p.batch, true
		}
	}
}

// finishWait moves p from Running to wait (Idle or Blocked), or back to Ready
// if events arrived during the step. Worker only.
//
// This is the worker's half of pair #1 (see deliver): the CAS to wait
// expects an empty inbox, so an event pushed before it makes it fail (and
// the retry requeues p), and a producer pushing after it sees Idle/Blocked
// and wakes p itself.
func (w *worker) finishWait(p *proc, wait State) {
	for {
		old := p.state.Load()
		if wordTop(old) != 0 {
			if p.state.CompareAndSwap(old, withState(old, StateReady)) {
				w.pushLocal(p)
				return
			}
			continue
		}
		if h := w.s.cfg.hooks; h != nil && h.beforeWaitCAS != nil {
			h.beforeWaitCAS(p)
		}
		if p.state.CompareAndSwap(old, withState(old, wait)) {
			return
		}
		// A producer pushed between the load and the CAS: retry rather
		// than give up (the original runtime's lost wake-up).
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
	c := p.ctx.Load()
	return h.Handle(c, y.Command, y.Tag, c)
}

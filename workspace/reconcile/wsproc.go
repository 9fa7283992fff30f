package reconcile

import (
	"context"
	"sync"
	"time"

	"github.com/gantryhq/gantry/sched"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/urgency"
)

const cmdReconcile sched.CommandType = 1001

// reconcileCmd asks for one reconcile step of a workspace; w nil = re-read
// (or take the row handed for it, package handoff).
type reconcileCmd struct {
	id     string
	w      *workspace.Workspace
	hinted bool // w is a possibly stale row (package handoff)
	urgent bool // a user asked for it (urgent.go)
}

// urgentHint is the message of a hints.ChanWorkspaceUrgent hint: re-read, and
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
	next *workspace.Workspace
	// hinted: next is a possibly stale row (the step acted on one,
	// package handoff).
	hinted bool
	// exact: next is the row as the step's last compare-and-set write
	// left it, whatever the row the step began from.
	exact bool
	// acted: the step claimed or acquired the operation and ran it; a step
	// on a possibly stale row that did not act looks again at the row
	// read (package handoff).
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
// The scheduler calls its methods one at a time, from any of its workers.
type wsProc struct {
	id      string
	busy    bool
	pending bool
	urgent  bool
	latest  *workspace.Workspace
	hinted  bool // latest is a possibly stale row (package handoff)
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
	w, _ := data.(*workspace.Workspace)
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
// Any goroutine.
func (r *Reconciler) poke(id string, w *workspace.Workspace) {
	if r.alt != nil {
		r.alt.poke(id, w)
		return
	}
	r.send(id, w)
}

// pokeUrgent makes id's process urgent and re-read (a user's change).
// Run's goroutine only.
func (r *Reconciler) pokeUrgent(id string) {
	if r.alt != nil {
		r.alt.poke(id, nil)
		return
	}
	r.send(id, urgentHint{})
}

// send sends msg to id's process, spawning it if needed. Any goroutine.
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
// Any goroutine.
func (r *Reconciler) pokeAt(id string, d time.Duration) { r.wake.at(id, d) }

// stepHandler queues a reconcile step for the reconciler's step workers
// (stepQueue: one per provider-call slot, urgent steps first), which run
// it off the sched worker and complete the yield with its result. The
// scheduler calls Handle from any of its workers.
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
// its error; stop ends the workers once their steps are done. Run's
// goroutine only.
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
// slot, has returned. A step worker's goroutine (stepQueue.run).
func (r *Reconciler) runStep(ctx context.Context, s queuedStep) {
	rc := s.cmd
	if rc.urgent {
		ctx = context.WithValue(urgency.Mark(ctx), holdSeqKey{}, r.holdSeq.Load())
	} else if r.gate != nil {
		// A user's change in flight goes first (urgent.go). With one
		// worker (no urgent share) an urgent step may wait behind this
		// wait: at most the bound.
		r.gate.AwaitNone()
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

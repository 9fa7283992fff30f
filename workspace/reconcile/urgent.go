package reconcile

import (
	"context"
	"sync"
	"time"

	"github.com/gantryhq/gantry/sched"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// urgentHold bounds how long an urgent hint holds the bulk back waiting
// for a step of its workspace (holdUrgent): a hint for a workspace whose
// process has a step in flight waits for that step first, and a hint the
// change's own chain publishes while its provider call runs waits for the
// call.
const urgentHold = 100 * time.Millisecond

// heldUrgent is the hold of one workspace's urgent hint (holdUrgent); seq
// orders it among all holds (r.holdSeq).
type heldUrgent struct {
	end func()
	seq uint64
}

// holdSeqKey marks an urgent step's context with the last hold sequence
// number taken before the step started (runStep): the step ends only holds
// taken before it, so a hint that arrives during a step holds the bulk
// until a later step has claimed or run.
type holdSeqKey struct{}

// holdUrgent holds the bulk back from an urgent hint for id (a user's
// change, or the hints of the steps and observations that follow it) until
// a step of id that started after it has claimed or run (releaseUrgent), at
// most r.urgentHold. Run's goroutine only.
func (r *Reconciler) holdUrgent(id string) {
	if r.alt != nil {
		return // the benchmark's baseline dispatcher runs no urgent steps
	}
	h := &heldUrgent{end: r.gate.BeginUrgent(), seq: r.holdSeq.Add(1)}
	r.mu.Lock()
	prev := r.held[id]
	r.held[id] = h
	r.mu.Unlock()
	if prev != nil {
		prev.end()
	}
	time.AfterFunc(r.urgentHold, func() { r.releaseUrgent(id, h, 0) })
}

// releaseUrgent ends id's hold: h if given (its timer); else the hold there
// is if it was taken at or before seq (a step that started then has
// claimed or run). Any goroutine (a hold's timer, a step).
func (r *Reconciler) releaseUrgent(id string, h *heldUrgent, seq uint64) {
	r.mu.Lock()
	cur := r.held[id]
	if h == nil && cur != nil && cur.seq <= seq {
		h = cur
	}
	if h != nil && h == cur {
		delete(r.held, id)
	}
	r.mu.Unlock()
	if h != nil {
		h.end() // end is idempotent (urgency.Gate.BeginUrgent)
	}
}

// releaseUrgentFor is releaseUrgent for the urgent step whose context is
// ctx (marked by runStep). Any goroutine (a step's).
func (r *Reconciler) releaseUrgentFor(ctx context.Context, id string) {
	if seq, ok := ctx.Value(holdSeqKey{}).(uint64); ok {
		r.releaseUrgent(id, nil, seq)
	}
}

// stepQueue runs the reconciler's steps on a fixed set of goroutines, one
// per provider-call slot, with urgency.Lanes' split: an eighth of them run only
// urgent steps, the others an urgent step first, then bulk ones in the
// order they came. A step waiting for a slot is an entry in a slice, not a
// goroutine: while 100,000 workspaces converge nearly all their steps
// wait, and as goroutines parked on a slot each held a stack (most of the
// process's memory) that every garbage collection scanned. Its methods:
// any goroutine (mu).
type stepQueue struct {
	mu sync.Mutex
	// anyWork wakes a worker of either share (a push of either kind),
	// urgentWork one of the urgent share (an urgent push): a signal must
	// reach a worker that may take the step, or it is lost.
	anyWork, urgentWork *sync.Cond
	urgent, bulk        fifo[queuedStep]
	closed              bool
}

// queuedStep is a step dispatched by a workspace's process: run it and
// complete the process's yield (tag) through c.
type queuedStep struct {
	cmd  reconcileCmd
	tag  uint64
	c    sched.Completer
	hole bool // the place of a step promoted to the urgent queue
}

func newStepQueue() *stepQueue {
	q := &stepQueue{}
	q.anyWork, q.urgentWork = sync.NewCond(&q.mu), sync.NewCond(&q.mu)
	return q
}

// push queues s; false once the queue is closed (s was not queued).
func (q *stepQueue) push(s queuedStep) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	if s.cmd.urgent {
		q.urgent.push(s)
		q.urgentWork.Signal()
	} else {
		q.bulk.push(s)
	}
	q.anyWork.Signal()
	return true
}

// pop waits for a step: urgent first, bulk too unless urgentOnly. false
// once the queue is closed.
func (q *stepQueue) pop(urgentOnly bool) (queuedStep, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.closed {
		if s, ok := q.urgent.pop(); ok {
			return s, true
		}
		if !urgentOnly {
			if s, ok := q.bulk.pop(); ok {
				if s.hole {
					continue // promoted: it runs from the urgent queue
				}
				return s, true
			}
		}
		if urgentOnly {
			q.urgentWork.Wait()
		} else {
			q.anyWork.Wait()
		}
	}
	return queuedStep{}, false
}

// promote moves id's step waiting in the bulk queue, if there is one, to
// the urgent queue, to run as urgent work: its place in the bulk queue
// becomes a hole that pop skips. It reports whether it found one. It is
// called only when an urgent hint finds its workspace's bulk step
// dispatched (wsProc), most often queued a moment before by the plain copy
// of the same hint: so it scans from the newest step back. A scan of all
// 100,000 (the step already runs) took 2.4 ms on a loaded 2-core machine,
// under the queue's lock; it happens at most once per user's change.
func (q *stepQueue) promote(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.bulk.items[q.bulk.head:]
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].hole || items[i].cmd.id != id {
			continue
		}
		s := items[i]
		items[i] = queuedStep{hole: true}
		s.cmd.urgent = true
		q.urgent.push(s)
		q.urgentWork.Signal()
		q.anyWork.Signal()
		return true
	}
	return false
}

// close stops the workers (after the step each is running) and returns the
// steps still queued, which will not run.
func (q *stepQueue) close() []queuedStep {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.anyWork.Broadcast()
	q.urgentWork.Broadcast()
	left := q.urgent.drain()
	for _, s := range q.bulk.drain() {
		if !s.hole {
			left = append(left, s)
		}
	}
	return left
}

// run runs n workers (n slots, urgency.Lanes' urgent share among them) on exec
// until close; it returns at once, wg counting the workers. Run's
// goroutine only (startSteps).
func (q *stepQueue) run(n int, wg *sync.WaitGroup, exec func(queuedStep)) {
	reserved := urgency.Share(n)
	for i := range max(n, 1) {
		urgentOnly := i < reserved
		wg.Go(func() {
			for {
				s, ok := q.pop(urgentOnly)
				if !ok {
					return
				}
				exec(s)
			}
		})
	}
}

// fifo is a first-in, first-out queue on a slice that reuses its space.
type fifo[T any] struct {
	items []T
	head  int // items[:head] are taken
}

func (f *fifo[T]) push(v T) {
	if f.head > 0 && len(f.items) == cap(f.items) && f.head >= len(f.items)/2 {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	f.items = append(f.items, v)
}

func (f *fifo[T]) pop() (T, bool) {
	var zero T
	if f.head == len(f.items) {
		return zero, false
	}
	v := f.items[f.head]
	f.items[f.head] = zero
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	}
	return v, true
}

// drain takes every item left, in order.
func (f *fifo[T]) drain() []T {
	left := append([]T(nil), f.items[f.head:]...)
	clear(f.items)
	f.items, f.head = f.items[:0], 0
	return left
}

package workspace

import (
	"context"
	"sync"
	"time"

	"github.com/gantryhq/gantry/sched"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"
)

// Work a user asked for goes first.
//
// A TTL pass archiving a night's idle workspaces, or a replica's resync
// after a restart, can leave 100,000 workspaces to converge at once; a user
// who runs `ws up` meanwhile must not wait behind them. Urgency travels
// with the work, as a context mark (store.Urgent), from the API request to
// everything that follows from it:
//
//   - the API marks every request's context, so its writes and reads go
//     ahead of bulk statements in the store's batches (store/batch.go), and
//     its hints go out on the urgent channels (urgentHints);
//   - the reconciler serves ChanWorkspaceUrgent apart from ChanWorkspace; a
//     workspace so hinted stays urgent in its process until a step finds it
//     settled (wsProc), its steps run with a marked context and take a
//     reserved share of the provider-call slots (stepQueue);
//   - the monitor serves ChanMonitorUrgent apart from ChanMonitor, with its
//     own reserved share, and its observation hints back urgently;
//   - while a user's change is in flight (the API request, then the
//     reconcile step its hint causes, until it has claimed) the store's bulk
//     batches and the bulk steps about to start wait for it, a bounded time
//     (store/urgent.go, holdUrgent, runStep): the bulk saturates both CPUs,
//     and a change that skipped every queue still waited for the CPU at
//     each of its half-dozen statements.
//
// Bulk work never waits for urgent work beyond the share reserved for it
// and the bounded yields of its batches and of its steps about to start.

// urgentHints publishes each hint made under an urgent context on its
// channel's urgent twin first, so that the next component serves it first
// too, and then on the channel itself: the seed's channels
// (`workspace:{id}`, `monitor:trigger`) carry every change, a user's too,
// for whoever listens there (an SSE bridge). gantry's own subscribers take
// both: the plain copy comes behind any bulk hints and finds the work done
// (a re-read, an observation that changes nothing); if it comes first, the
// bulk step it queued is promoted when the urgent one arrives (wsProc,
// stepQueue.promote).
type urgentHints struct{ Hints }

func (h urgentHints) Publish(ctx context.Context, channel, id string) error {
	if twin := hints.UrgentTwin(channel); twin != channel && store.IsUrgent(ctx) {
		if err := h.Hints.Publish(ctx, twin, id); err != nil {
			return err
		}
	}
	return h.Hints.Publish(ctx, channel, id)
}

// urgentWork is the optional part of a store whose bulk batches wait
// while a user's work is in flight (store.Store.BeginUrgent), as bulk steps
// about to start do (AwaitNoUrgent).
type urgentWork interface {
	BeginUrgent() (end func())
	AwaitNoUrgent()
}

var _ urgentWork = (*store.Store)(nil)

// beginUrgent is st's BeginUrgent, or a no-op for a store without one.
func beginUrgent(st any) (end func()) {
	if u, ok := st.(urgentWork); ok {
		return u.BeginUrgent()
	}
	return func() {}
}

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
// most r.urgentHold.
func (r *Reconciler) holdUrgent(id string) {
	if r.alt != nil {
		return // the benchmark's baseline dispatcher runs no urgent steps
	}
	h := &heldUrgent{end: beginUrgent(r.store), seq: r.holdSeq.Add(1)}
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
// claimed or run).
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
		h.end() // end is idempotent (store.Store.BeginUrgent)
	}
}

// releaseUrgentFor is releaseUrgent for the urgent step whose context is
// ctx (marked by runStep).
func (r *Reconciler) releaseUrgentFor(ctx context.Context, id string) {
	if seq, ok := ctx.Value(holdSeqKey{}).(uint64); ok {
		r.releaseUrgent(id, nil, seq)
	}
}

// lanes bound concurrent work (provider calls, observations) to n slots, of
// which an eighth is reserved for urgent work: bulk work holds at most the
// rest, so urgent work finds a slot at once while bulk work queues.
type lanes struct{ bulk, urgent chan struct{} }

func newLanes(n int) lanes {
	u := urgentShare(n)
	if u == 0 {
		return lanes{bulk: make(chan struct{}, max(n, 1))} // nothing to reserve: urgent work shares the one slot
	}
	return lanes{bulk: make(chan struct{}, n-u), urgent: make(chan struct{}, u)}
}

// urgentShare is how many of n slots are reserved for urgent work: an
// eighth, at least one, none when there is only one slot.
func urgentShare(n int) int {
	if n < 2 {
		return 0
	}
	return max(1, n/8)
}

// acquire takes a slot: bulk work from the bulk share, urgent work from
// whichever share frees one first. It returns the slot's release, or nil
// if ctx ended first.
func (l lanes) acquire(ctx context.Context, urgent bool) (release func()) {
	var reserved chan struct{} // nil: never ready
	if urgent {
		reserved = l.urgent
	}
	select {
	case l.bulk <- struct{}{}:
		return func() { <-l.bulk }
	case reserved <- struct{}{}:
		return func() { <-reserved }
	case <-ctx.Done():
		return nil
	}
}

// stepQueue runs the reconciler's steps on a fixed set of goroutines, one
// per provider-call slot, with lanes' split: an eighth of them run only
// urgent steps, the others an urgent step first, then bulk ones in the
// order they came. A step waiting for a slot is an entry in a slice, not a
// goroutine: while 100,000 workspaces converge nearly all their steps
// wait, and as goroutines parked on a slot each held a stack (most of the
// process's memory) that every garbage collection scanned.
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

// run runs n workers (n slots, lanes' urgent share among them) on exec
// until close; it returns at once, wg counting the workers.
func (q *stepQueue) run(n int, wg *sync.WaitGroup, exec func(queuedStep)) {
	reserved := urgentShare(n)
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

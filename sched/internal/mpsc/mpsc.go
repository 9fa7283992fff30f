// Package mpsc is the per-process event queue: many producers push, one
// consumer takes everything at once by swapping buffers.
//
//	q.Push(ev)              // any goroutine
//	if !q.Empty() { … }     // any goroutine; a seq-cst snapshot
//	batch := q.Swap(spare)  // consumer only; spare is the previous batch
//
// Why a mutex and not a lock-free linked queue: the consumer always wants the
// whole queue (one Step gets every pending event), so a double buffer swapped
// under a short lock costs one uncontended lock per push and per drain and
// never allocates once the two buffers have grown, whereas an intrusive
// Vyukov queue needs a node per event (an allocation or a pool round trip)
// and a pointer chase per event on the consumer side. Empty is lock-free so
// the scheduler's publish-then-check protocol stays a pair of atomics.
package mpsc

import (
	"sync"
	"sync/atomic"
)

// Queue is an unbounded multi-producer single-consumer queue. The zero value
// is an empty queue.
type Queue[T any] struct {
	// n mirrors len(items). Stored (seq-cst) under mu by Push and Swap;
	// loaded without the lock by Empty and Len from any goroutine. The
	// store in Push is the "publish" half of the scheduler's
	// publish-then-check pairs.
	n atomic.Int64

	mu sync.Mutex
	// items and closed are guarded by mu; closed is set once by Close.
	items  []T
	closed bool
}

// Push appends v and reports true, or reports false and queues nothing once
// the queue is closed. Any goroutine.
func (q *Queue[T]) Push(v T) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, v)
	q.n.Store(int64(len(q.items)))
	q.mu.Unlock()
	return true
}

// Empty reports whether the queue held nothing at the moment of the load.
// Any goroutine.
func (q *Queue[T]) Empty() bool { return q.n.Load() == 0 }

// Len returns a snapshot of the length. Any goroutine.
func (q *Queue[T]) Len() int { return int(q.n.Load()) }

// Swap returns every queued item, in push order, and keeps spare (emptied,
// its elements zeroed so they can be collected) as the new buffer. Consumer
// only: pass back the slice the previous Swap returned once done with it, so
// the two buffers alternate and nothing is allocated in steady state.
func (q *Queue[T]) Swap(spare []T) []T {
	clear(spare)
	spare = spare[:0]
	q.mu.Lock()
	out := q.items
	q.items = spare
	q.n.Store(0)
	q.mu.Unlock()
	return out
}

// Close refuses every later Push and returns what was queued and never
// taken, so the consumer can account for it. Every Push either happened
// before Close (its item is in the result or was taken by a Swap) or returns
// false. Consumer only; call it once, after the last Swap.
func (q *Queue[T]) Close() []T {
	q.mu.Lock()
	out := q.items
	q.items = nil
	q.closed = true
	q.n.Store(0)
	q.mu.Unlock()
	return out
}

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

	// taken counts the items Swap has handed out since the queue was made.
	// Stored (seq-cst) under mu by Swap; loaded by anyone. With Push's
	// sequence number it tells a producer whether its item was consumed.
	taken atomic.Uint64

	mu sync.Mutex
	// items, pushed and closed are guarded by mu. pushed counts every Push
	// ever; closed is set once by Close.
	items  []T
	pushed uint64
	closed bool
}

// Push appends v and returns its sequence number (1 for the first push,
// then 2, …): v has been consumed once Taken() >= that number. It returns 0,
// and queues nothing, once the queue is closed. Any goroutine.
func (q *Queue[T]) Push(v T) uint64 {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0
	}
	q.items = append(q.items, v)
	q.pushed++
	seq := q.pushed
	q.n.Store(int64(len(q.items)))
	q.mu.Unlock()
	return seq
}

// Taken returns how many items Swap has handed out in all. Any goroutine.
func (q *Queue[T]) Taken() uint64 { return q.taken.Load() }

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
	q.taken.Add(uint64(len(out)))
	q.n.Store(0)
	q.mu.Unlock()
	return out
}

// Close refuses every later Push and returns what was queued and never
// taken, so the consumer can account for it. Every Push either happened
// before Close (its item is in the result or was taken by a Swap) or returns
// 0. Consumer only; call it once, after the last Swap.
func (q *Queue[T]) Close() []T {
	q.mu.Lock()
	out := q.items
	q.items = nil
	q.closed = true
	q.n.Store(0)
	q.mu.Unlock()
	return out
}

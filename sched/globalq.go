package sched

import (
	"sync"
	"sync/atomic"
)

// globalQueue is the FIFO for processes made Ready by goroutines that are not
// workers (Spawn, Scheduler.Send, CompleteYield from handler goroutines) and
// for processes that used up their run streak.
//
// Producers never lock: it is an intrusive multi-producer queue (Vyukov's
// MPSC node queue) linked through proc.gnext, so a push is one swap of the
// tail and one store of the old tail's link, and a spawner never waits for
// a worker that is taking a batch (with a mutex ring it did, and parked on
// the lock's semaphore under contention). Consumers (workers, Stop) take
// mu, so there is one consumer at a time. A record can be linked here only
// while it is Ready, and a Ready record is in one queue only, so one link
// field per record is enough.
//
// n counts pushed and not yet popped processes: added after the push is
// linked (its Add is the "publish" of the park/wake protocol, see README),
// subtracted by the consumer. A consumer can briefly find nothing while n > 0:
// a producer between its swap and its link; workers then simply search
// again (hasWork keeps them from parking), and the producer finishes in a
// few instructions.
type globalQueue struct {
	tail atomic.Pointer[proc] // the newest node (possibly &stub); any producer swaps it
	_    [56]byte
	n    atomic.Int64
	_    [56]byte

	mu sync.Mutex
	// head (guarded by mu) is the oldest node, possibly &stub, which keeps
	// the list non-empty so that producers never touch head.
	head *proc
	stub proc
}

func (q *globalQueue) init() {
	q.head = &q.stub
	q.tail.Store(&q.stub)
}

// push appends p. Any goroutine; p must be Ready and in no other queue, and
// its gnext nil (the consumer clears it on the way out).
func (q *globalQueue) push(p *proc) {
	q.link(p)
	q.n.Add(1)
}

func (q *globalQueue) link(p *proc) {
	prev := q.tail.Swap(p)
	prev.gnext.Store(p)
}

// popLocked removes the oldest process, or returns nil if there is none it
// can reach now. Requires mu.
func (q *globalQueue) popLocked() *proc {
	head := q.head
	next := head.gnext.Load()
	if head == &q.stub {
		if next == nil {
			return nil
		}
		q.stub.gnext.Store(nil)
		q.head, head = next, next
		next = head.gnext.Load()
	}
	if next == nil {
		if q.tail.Load() != head {
			return nil // a producer has swapped the tail but not linked yet
		}
		// head is the last node: queue the stub behind it so head can
		// be detached without leaving the list empty.
		q.link(&q.stub)
		if next = head.gnext.Load(); next == nil {
			return nil // a producer got in between; its link comes soon
		}
	}
	// head is no longer the tail, so no producer writes head.gnext again.
	q.head = next
	head.gnext.Store(nil)
	q.n.Add(-1)
	return head
}

// pop removes the oldest process, or returns nil.
func (q *globalQueue) pop() *proc {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	p := q.popLocked()
	q.mu.Unlock()
	return p
}

// popBatch removes the oldest process and moves up to globalBatch more into
// w's deque (owner only: w must be the calling worker). It returns nil if
// empty. The batch is copied out under the lock and pushed after it.
func (q *globalQueue) popBatch(w *worker) *proc {
	if q.n.Load() == 0 {
		return nil
	}
	var buf [globalBatch]*proc
	k := 0
	q.mu.Lock()
	p := q.popLocked()
	if p != nil {
		for k < globalBatch {
			x := q.popLocked()
			if x == nil {
				break
			}
			buf[k] = x
			k++
		}
	}
	q.mu.Unlock()
	for _, x := range buf[:k] {
		w.dq.Push(x)
	}
	return p
}

func (q *globalQueue) len() int { return int(q.n.Load()) }

// drain empties the queue and returns what it held (what it can reach:
// Stop calls it once no producer can push).
func (q *globalQueue) drain() []*proc {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*proc
	for p := q.popLocked(); p != nil; p = q.popLocked() {
		out = append(out, p)
	}
	return out
}

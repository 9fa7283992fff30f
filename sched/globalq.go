package sched

import (
	"sync"
	"sync/atomic"
)

// globalQueue is the FIFO for processes made Ready by goroutines that are not
// workers (Spawn, Scheduler.Send, CompleteYield from handler goroutines) and
// for processes that used up their run streak. It is a growable ring under a
// mutex; n lets workers check for emptiness without the lock.
type globalQueue struct {
	// n mirrors the number of queued processes. Stored (seq-cst) under mu;
	// loaded by any goroutine. Its store in push is the "publish" half of
	// the park/wake protocol (see README).
	n atomic.Int64

	mu sync.Mutex
	// mu protects the fields below.
	// Invariant: the queued items are buf[(head+i)&(len(buf)-1)] for i in
	// [0, n); len(buf) is a power of two.
	buf  []*proc
	head int
}

func (q *globalQueue) push(p *proc) {
	q.mu.Lock()
	n := int(q.n.Load())
	if n == len(q.buf) {
		q.growLocked()
	}
	q.buf[(q.head+n)&(len(q.buf)-1)] = p
	q.n.Store(int64(n + 1))
	q.mu.Unlock()
}

func (q *globalQueue) growLocked() {
	c := max(2*len(q.buf), 64)
	nb := make([]*proc, c)
	n := int(q.n.Load())
	for i := 0; i < n; i++ {
		nb[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = nb, 0
}

// popLocked removes the oldest process. Requires mu and n > 0.
func (q *globalQueue) popLocked() *proc {
	p := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n.Add(-1)
	return p
}

// pop removes the oldest process, or returns nil.
func (q *globalQueue) pop() *proc {
	if q.n.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	var p *proc
	if q.n.Load() > 0 {
		p = q.popLocked()
	}
	q.mu.Unlock()
	return p
}

// popBatch removes the oldest process and moves up to globalBatch more into
// w's deque (owner only: w must be the calling worker). It returns nil if
// empty. The batch is copied out under the lock and pushed after it, so
// producers (Spawn) wait for a few pointer copies, not for 16 deque pushes.
func (q *globalQueue) popBatch(w *worker) *proc {
	if q.n.Load() == 0 {
		return nil
	}
	var buf [globalBatch]*proc
	k := 0
	q.mu.Lock()
	var p *proc
	if q.n.Load() > 0 {
		p = q.popLocked()
		for k < globalBatch && q.n.Load() > 0 {
			buf[k] = q.popLocked()
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

// drain empties the queue and returns what it held.
func (q *globalQueue) drain() []*proc {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*proc
	for q.n.Load() > 0 {
		out = append(out, q.popLocked())
	}
	return out
}

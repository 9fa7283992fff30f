package sched

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestGlobalQueueFIFOPerProducerUnderConcurrentPushes: four producers push
// at once while one consumer pops; every process comes out exactly once,
// and each producer's processes in the order it pushed them.
func TestGlobalQueueFIFOPerProducerUnderConcurrentPushes(t *testing.T) {
	const producers, each = 4, 20000
	var q globalQueue
	q.init()
	var wg sync.WaitGroup
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				q.push(&proc{pid: PID(g)<<32 | PID(i)})
			}
		}()
	}
	next := make([]int, producers)
	for got := 0; got < producers*each; {
		p := q.pop()
		if p == nil {
			runtime.Gosched()
			continue
		}
		g, i := int(p.pid>>32), int(uint32(p.pid))
		if i != next[g] {
			t.Fatalf("producer %d: got %d, want %d", g, i, next[g])
		}
		next[g]++
		got++
	}
	wg.Wait()
	if p := q.pop(); p != nil || q.len() != 0 {
		t.Fatalf("after draining: pop %v, len %d", p, q.len())
	}
}

// TestGlobalQueueRecirculatingRecords: like the scheduler's records, a few
// processes go round and round (popped, then pushed again by whoever popped
// them) with two poppers, one of them taking batches into a worker's deque;
// a process must never come out unless it was pushed since it last came
// out, and whatever is queued at the end must still be there.
func TestGlobalQueueRecirculatingRecords(t *testing.T) {
	for _, procs := range []int{1, 3, 64} {
		s := idle(t, 2)
		q := &s.global
		const rounds = 20000
		ps := readyProcs(s, procs)
		queued := make([]atomic.Bool, procs) // pushed and not popped since
		for i, p := range ps {
			queued[i].Store(true)
			q.push(p)
		}
		var pops atomic.Int64
		take := func(p *proc) {
			i := int(p.pid) - 1
			if !queued[i].CompareAndSwap(true, false) {
				t.Errorf("process %d popped while not queued", i)
			}
			pops.Add(1)
			queued[i].Store(true)
			q.push(p)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // a plain popper
			defer wg.Done()
			for pops.Load() < rounds {
				if p := q.pop(); p != nil {
					take(p)
				} else {
					runtime.Gosched()
				}
			}
		}()
		go func() { // a worker taking batches
			defer wg.Done()
			w := s.workers[0]
			for pops.Load() < rounds {
				p := q.popBatch(w)
				if p == nil {
					runtime.Gosched()
					continue
				}
				take(p)
				for x := w.dq.Pop(); x != nil; x = w.dq.Pop() {
					take(x)
				}
			}
		}()
		wg.Wait()
		n := 0
		for q.pop() != nil {
			n++
		}
		if n != procs || q.len() != 0 {
			t.Fatalf("%d procs: %d left in the queue (len %d), want all of them", procs, n, q.len())
		}
	}
}

package sched

import (
	"sync"
	"sync/atomic"
)

// A process's inbox lives in its state word (see proc.state): the word holds
// the State in bits 0–2, the index of the newest queued event node in bits
// 3–31 and the record's generation (see pidMap) in bits 32–63, so one CAS both queues an event and, for an Idle or Blocked
// process, makes it Ready; one CAS takes every queued event and marks the
// process Running; one CAS moves it to a wait only if nothing is queued.
// The nodes form a stack (newest first, linked by index); the worker that
// takes them reverses the stack into push order.
//
// Nodes live in a nodeArena, addressed by index rather than pointer so the
// index fits in the word beside the state. A node belongs to exactly one
// party at a time: a free list, the producer filling it, the inbox (from the
// producer's CAS to the taker's CAS), or the taker copying it out. Workers
// keep a private cache of free nodes (no atomics); others go through the
// arena's mutex. Node memory is never returned: the arena holds as many
// nodes as were ever queued at once.
//
// ABA on the word is harmless: producers only push (a node's next is set to
// the top they read, and a CAS that succeeds against an equal word links to
// the same live top), and takers take the whole stack, never one node.

const (
	stateBits = 3
	stateMask = 1<<stateBits - 1
	topBits   = 29
	topMask   = (1<<topBits - 1) << stateBits
)

func wordGen(w uint64) uint32            { return uint32(w >> 32) }
func wordState(w uint64) State           { return State(w & stateMask) }
func wordTop(w uint64) uint32            { return uint32((w & topMask) >> stateBits) }
func withState(w uint64, s State) uint64 { return w&^stateMask | uint64(s) }
func withTop(w uint64, top uint32) uint64 {
	return w&^topMask | uint64(top)<<stateBits
}

// evNode is one queued event. ev is a one-element array so that a step
// with exactly one event can be handed ev[:] itself, without a copy (see
// worker.begin).
type evNode struct {
	ev   [1]Event
	next uint32 // the next older node, 0 = none
}

const (
	nodeSegBits = 12
	nodeSegSize = 1 << nodeSegBits
	// nodeCacheMax bounds a worker's private free list; above it half
	// goes back to the arena.
	nodeCacheMax = 512
	// nodeRefill is how many nodes a worker takes from the arena at once.
	nodeRefill = 64
)

type nodeSeg [nodeSegSize]evNode

// nodeArena owns every event node. Index 0 is never used (it means "none").
type nodeArena struct {
	// dir is the directory of segments, replaced copy-on-write under mu
	// when it grows; loaded by anyone. Segments never move.
	dir atomic.Pointer[[]*nodeSeg]

	mu sync.Mutex
	// mu guards free (indices of free nodes) and fresh (the next
	// never-used index).
	free  []uint32
	fresh uint32
}

func (a *nodeArena) node(i uint32) *evNode {
	return &(*a.dir.Load())[i>>nodeSegBits][i&(nodeSegSize-1)]
}

// take appends up to n free node indices to dst (at least one). Any
// goroutine.
func (a *nodeArena) take(dst []uint32, n int) []uint32 {
	a.mu.Lock()
	k := min(n, len(a.free))
	dst = append(dst, a.free[len(a.free)-k:]...)
	a.free = a.free[:len(a.free)-k]
	for ; k < n; k++ {
		dst = append(dst, a.freshLocked())
	}
	a.mu.Unlock()
	return dst
}

// one returns a single free node index. Any goroutine.
func (a *nodeArena) one() uint32 {
	a.mu.Lock()
	var i uint32
	if n := len(a.free); n > 0 {
		i = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		i = a.freshLocked()
	}
	a.mu.Unlock()
	return i
}

// freshLocked returns a never-used index, growing the directory if needed.
// Requires mu.
func (a *nodeArena) freshLocked() uint32 {
	if a.fresh == 0 {
		a.fresh = 1
	}
	if a.fresh >= 1<<topBits {
		panic("sched: more than 2^29 events queued at once")
	}
	i := a.fresh
	a.fresh++
	var d []*nodeSeg
	if p := a.dir.Load(); p != nil {
		d = *p
	}
	if int(i>>nodeSegBits) >= len(d) {
		nd := make([]*nodeSeg, len(d)+1, max(len(d)+1, 2*len(d)))
		copy(nd, d)
		nd[len(d)] = new(nodeSeg)
		a.dir.Store(&nd)
	}
	return i
}

// give returns free nodes to the arena. Any goroutine.
func (a *nodeArena) give(idx ...uint32) {
	a.mu.Lock()
	a.free = append(a.free, idx...)
	a.mu.Unlock()
}

// allocNode returns a free node index for a producer: from worker w's cache
// when w is the calling worker, else from the arena.
func (s *Scheduler) allocNode(w *worker) uint32 {
	if w == nil {
		return s.nodes.one()
	}
	if len(w.nodes) == 0 {
		w.nodes = s.nodes.take(w.nodes, nodeRefill)
	}
	i := w.nodes[len(w.nodes)-1]
	w.nodes = w.nodes[:len(w.nodes)-1]
	return i
}

// freeNode clears node i and returns it to w's cache (w the calling
// worker) or to the arena.
func (s *Scheduler) freeNode(i uint32, w *worker) {
	n := s.nodes.node(i)
	n.ev[0].Data, n.ev[0].Error = nil, nil // a free node must not keep garbage alive
	if w == nil {
		s.nodes.give(i)
		return
	}
	w.nodes = append(w.nodes, i)
	if len(w.nodes) > nodeCacheMax {
		half := len(w.nodes) / 2
		s.nodes.give(w.nodes[half:]...)
		w.nodes = w.nodes[:half]
	}
}

// takeEvents copies the stack starting at top into dst in push order (oldest
// first) and frees its nodes. The caller owns the stack (it CASed it out of
// the word).
func (s *Scheduler) takeEvents(top uint32, dst []Event, w *worker) []Event {
	start := len(dst)
	for i := top; i != 0; {
		n := s.nodes.node(i)
		dst = append(dst, n.ev[0])
		next := n.next
		s.freeNode(i, w)
		i = next
	}
	for l, r := start, len(dst)-1; l < r; l, r = l+1, r-1 {
		dst[l], dst[r] = dst[r], dst[l]
	}
	return dst
}

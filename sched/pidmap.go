package sched

import (
	"sync"
	"sync/atomic"
)

// pidMap routes PIDs to processes without hashing: a PID is a slot index in
// its low 32 bits and that slot's generation in the high 32 bits. Lookups
// are lock-free (two atomic loads and a compare); freed slots are reused with
// the next generation, so a stale PID finds either nil or a process whose
// PID differs, and misses. A PID can recur only after its slot has been
// reused 2^32 times.
//
// A hash map was the first version; under spawn/complete churn its probe
// sequences through deleted entries took a fifth of the spawn benchmark.
type pidMap struct {
	// dir is the directory of segments, replaced (copy-on-write, under
	// growMu) when it fills; loaded by anyone. Segments never move.
	dir atomic.Pointer[[]*segment]

	growMu sync.Mutex
	// growMu serializes directory growth; fresh is the next never-used
	// slot index and is guarded by growMu.
	fresh uint32

	// free lists, sharded so that the spawning goroutine and the workers
	// completing processes rarely meet on one lock.
	free [freeShards]freeList
	// next picks the shard a put allocates from (Add by any Spawn).
	next atomic.Uint32
}

const (
	segBits    = 12
	segSize    = 1 << segBits
	freeShards = 16
	freshChunk = 64 // slots a shard takes from fresh at a time
)

type segment [segSize]slot

type slot struct {
	// p is the live process in this slot or nil. Stored by put/del
	// (whoever spawns or completes), loaded by anyone.
	p atomic.Pointer[proc]
	// gen is the generation of the slot's current or last PID. Written
	// only by the holder of the slot (between alloc and free).
	gen uint32
}

type freeList struct {
	mu sync.Mutex
	// idx is a stack of free slot indices, guarded by mu.
	idx []uint32
	_   [40]byte // one lock per cache line
}

func (pm *pidMap) slotOf(idx uint32) *slot {
	d := pm.dir.Load()
	if d == nil || int(idx>>segBits) >= len(*d) {
		return nil
	}
	return &(*d)[idx>>segBits][idx&(segSize-1)]
}

// alloc reserves a slot and returns the PID for it.
func (pm *pidMap) alloc() (PID, *slot) {
	fl := &pm.free[pm.next.Add(1)%freeShards]
	fl.mu.Lock()
	if len(fl.idx) == 0 {
		fl.idx = pm.freshChunk(fl.idx)
	}
	idx := fl.idx[len(fl.idx)-1]
	fl.idx = fl.idx[:len(fl.idx)-1]
	fl.mu.Unlock()
	sl := pm.slotOf(idx)
	sl.gen++
	if sl.gen == 0 { // PID 0 is never assigned
		sl.gen = 1
	}
	return PID(uint64(sl.gen)<<32 | uint64(idx)), sl
}

// freshChunk appends never-used slot indices to dst, growing the directory
// when needed.
func (pm *pidMap) freshChunk(dst []uint32) []uint32 {
	pm.growMu.Lock()
	defer pm.growMu.Unlock()
	first := pm.fresh
	pm.fresh += freshChunk
	need := int((pm.fresh-1)>>segBits) + 1
	var d []*segment
	if p := pm.dir.Load(); p != nil {
		d = *p
	}
	if need > len(d) {
		nd := make([]*segment, need, max(need, 2*len(d)))
		copy(nd, d)
		for i := len(d); i < need; i++ {
			nd[i] = new(segment)
		}
		pm.dir.Store(&nd)
	}
	for i := pm.fresh; i > first; i-- {
		dst = append(dst, i-1)
	}
	return dst
}

// put publishes p (whose pid came from alloc) in its slot.
func (pm *pidMap) put(p *proc, sl *slot) { sl.p.Store(p) }

// get returns the live process with that PID, or nil.
func (pm *pidMap) get(pid PID) *proc {
	sl := pm.slotOf(uint32(pid))
	if sl == nil {
		return nil
	}
	if p := sl.p.Load(); p != nil && p.pid == pid {
		return p
	}
	return nil
}

// del removes p and frees its slot for the next generation.
func (pm *pidMap) del(p *proc) {
	idx := uint32(p.pid)
	sl := pm.slotOf(idx)
	if sl == nil || !sl.p.CompareAndSwap(p, nil) {
		return // already removed
	}
	fl := &pm.free[idx%freeShards]
	fl.mu.Lock()
	fl.idx = append(fl.idx, idx)
	fl.mu.Unlock()
}

// release frees the slot of a PID that alloc returned and put never
// published (its process failed Init).
func (pm *pidMap) release(pid PID) {
	idx := uint32(pid)
	fl := &pm.free[idx%freeShards]
	fl.mu.Lock()
	fl.idx = append(fl.idx, idx)
	fl.mu.Unlock()
}

// all returns a snapshot of every live process.
func (pm *pidMap) all() []*proc {
	d := pm.dir.Load()
	if d == nil {
		return nil
	}
	var out []*proc
	for _, seg := range *d {
		for i := range seg {
			if p := seg[i].p.Load(); p != nil {
				out = append(out, p)
			}
		}
	}
	return out
}

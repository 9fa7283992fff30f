package sched

import (
	"sync"
	"sync/atomic"
)

// pidMap owns every process record and routes PIDs to them without hashing:
// a PID is a record's index in its low 32 bits and the record's generation
// in the high 32 bits. Records live in fixed segments and are reused: a
// completed record goes back to a free list and its next spawn takes the
// next generation. Nothing is allocated per spawn but the process's context.
//
// Reuse is safe because the generation is part of the record's state word
// (proc.state, bits 32–63): every operation a stale reference can make on a
// record (deliver, a yield completion, a context cancel) either CASes the
// word expecting its own generation or checks the PID kept in its own
// per-incarnation procCtx, so a reference to an earlier incarnation misses
// (ErrNoProcess, a dropped completion) and never reaches the new one. A PID
// can recur only after its record has been reused 2^32 times.
//
// Records are never freed; the map holds as many as were ever live at once.
// A hash map was the first version; under spawn/complete churn its probe
// sequences took a fifth of the spawn benchmark, and allocating a record per
// spawn another quarter (measured when the scheduler was made
// work-conserving).
type pidMap struct {
	s *Scheduler // set in every record when its segment is made

	// dir is the directory of segments, replaced (copy-on-write, under
	// mu) when it fills; loaded by anyone. Segments never move.
	dir atomic.Pointer[[]*segment]

	mu sync.Mutex
	// mu guards free (indices of free records) and fresh (the next
	// never-used index). Workers keep private caches of free indices
	// (worker.free) and come here in batches, and so does ext.
	free  []uint32
	fresh uint32
	_     [64]byte

	// ext is the cache of free indices for spawns from goroutines that
	// are not workers: its own lock, so an outside spawner takes pm.mu
	// (which completing workers need) once per freeRefill spawns.
	ext struct {
		mu  sync.Mutex
		idx []uint32 // guarded by mu
	}
}

const (
	segBits = 12
	segSize = 1 << segBits
	// freeRefill is how many free records a worker takes at once;
	// freeCacheMax bounds its cache (above it, half goes back).
	freeRefill   = 64
	freeCacheMax = 512
)

type segment [segSize]proc

// rec returns the record with index idx, or nil if there is none yet.
func (pm *pidMap) rec(idx uint32) *proc {
	d := pm.dir.Load()
	if d == nil || int(idx>>segBits) >= len(*d) {
		return nil
	}
	return &(*d)[idx>>segBits][idx&(segSize-1)]
}

// take appends n free record indices to dst. Any goroutine.
func (pm *pidMap) take(dst []uint32, n int) []uint32 {
	pm.mu.Lock()
	k := min(n, len(pm.free))
	dst = append(dst, pm.free[len(pm.free)-k:]...)
	pm.free = pm.free[:len(pm.free)-k]
	for ; k < n; k++ {
		dst = append(dst, pm.freshLocked())
	}
	pm.mu.Unlock()
	return dst
}

// give returns free record indices. Any goroutine.
func (pm *pidMap) give(idx ...uint32) {
	pm.mu.Lock()
	pm.free = append(pm.free, idx...)
	pm.mu.Unlock()
}

// freshLocked returns a never-used index, adding a segment when needed; a
// new segment's records get their index and scheduler before the directory
// publishes them, so those two fields never change afterwards. Requires mu.
func (pm *pidMap) freshLocked() uint32 {
	if pm.fresh == ^uint32(0) {
		panic("sched: more than 2^32-1 processes live at once")
	}
	i := pm.fresh
	pm.fresh++
	var d []*segment
	if p := pm.dir.Load(); p != nil {
		d = *p
	}
	if int(i>>segBits) >= len(d) {
		seg := new(segment)
		base := uint32(len(d)) << segBits
		for j := range seg {
			seg[j].idx = base + uint32(j)
			seg[j].s = pm.s
			seg[j].out.p = &seg[j]
		}
		nd := make([]*segment, len(d)+1, max(len(d)+1, 2*len(d)))
		copy(nd, d)
		nd[len(d)] = seg
		pm.dir.Store(&nd)
	}
	return i
}

// alloc reserves a free record for a spawn by worker w (the calling worker,
// or nil) and returns it with its next PID. The record is not live until
// its state word is stored with that generation (publish).
func (pm *pidMap) alloc(w *worker) (*proc, PID) {
	var idx uint32
	if w == nil {
		pm.ext.mu.Lock()
		if len(pm.ext.idx) == 0 {
			pm.ext.idx = pm.take(pm.ext.idx, freeRefill)
		}
		idx = pm.ext.idx[len(pm.ext.idx)-1]
		pm.ext.idx = pm.ext.idx[:len(pm.ext.idx)-1]
		pm.ext.mu.Unlock()
	} else {
		if len(w.free) == 0 {
			w.free = pm.take(w.free, freeRefill)
		}
		idx = w.free[len(w.free)-1]
		w.free = w.free[:len(w.free)-1]
	}
	p := pm.rec(idx)
	gen := wordGen(p.state.Load()) + 1
	if gen == 0 { // PID 0 is never assigned
		gen = 1
	}
	return p, PID(uint64(gen)<<32 | uint64(idx))
}

// release returns p's record to a free cache (w's when w is the calling
// worker, else ext), so the next spawn there reuses it while it is warm. The caller has finished with p: it is Complete (or was never
// published) and nothing of this incarnation is read after this.
func (pm *pidMap) release(p *proc, w *worker) {
	if w == nil {
		pm.ext.mu.Lock()
		pm.ext.idx = pm.spill(append(pm.ext.idx, p.idx))
		pm.ext.mu.Unlock()
		return
	}
	w.free = pm.spill(append(w.free, p.idx))
}

// spill gives half of a cache back to the shared list once it holds more
// than freeCacheMax, and returns what is left.
func (pm *pidMap) spill(cache []uint32) []uint32 {
	if len(cache) <= freeCacheMax {
		return cache
	}
	half := len(cache) / 2
	pm.give(cache[half:]...)
	return cache[:half]
}

// get returns the record of the live process with that PID, or nil. The
// process may complete at any moment after; operations on the record check
// the generation again (deliver's CAS), so a stale result only misses.
func (pm *pidMap) get(pid PID) *proc {
	p := pm.rec(uint32(pid))
	if p == nil {
		return nil
	}
	if w := p.state.Load(); wordGen(w) != uint32(pid>>32) || !live(wordState(w)) {
		return nil
	}
	return p
}

// live reports whether st is the state of a published, unfinished process.
func live(st State) bool { return st >= StateReady && st < StateComplete }

// all returns a snapshot of every live process's record.
func (pm *pidMap) all() []*proc {
	d := pm.dir.Load()
	if d == nil {
		return nil
	}
	var out []*proc
	for _, seg := range *d {
		for i := range seg {
			if live(seg[i].loadState()) {
				out = append(out, &seg[i])
			}
		}
	}
	return out
}

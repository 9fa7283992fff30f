// Package deque is a Chase-Lev work-stealing deque of pointers: one owner
// pushes and pops at the bottom (LIFO), any number of thieves take from the
// top (FIFO) with a CAS.
//
// Tour:
//
//	d := deque.New[T](64)
//	d.Push(x)          // owner only
//	x := d.Pop()       // owner only; nil when empty
//	x := d.Steal()     // any thief; nil when empty or lost a race
//	n := d.StealHalfInto(dst, max) // any thief; dst owned by the caller
//
// The one property that matters: every pushed item comes out exactly once,
// through Pop, Steal or StealHalfInto. StealHalfInto keeps it even when the
// owner pops concurrently, because it takes items one at a time, re-reading
// bottom before every CAS on top (the original runtime copied a range and
// CASed top once without re-reading bottom, which hands an item to both the
// thief and the owner). The argument is written in ../../README.md.
//
// Memory ordering: every sync/atomic operation in Go is sequentially
// consistent, so the fences of Chase-Lev and of Lê et al. (PPoPP 2013) are
// implied by the atomic loads, stores and CASes below.
package deque

import "sync/atomic"

// cacheLine is 128 bytes rather than 64: AMD and Intel cores prefetch cache
// lines in adjacent pairs, so 64 bytes of padding still lets top and bottom
// share a prefetch unit.
const cacheLine = 128

// ring is one fixed-capacity buffer. Slots are atomics because a thief may
// read a slot while the owner writes a different generation of the deque into
// it after growing; mixing atomic and plain access would be a data race.
type ring[T any] struct {
	mask  int64
	slots []atomic.Pointer[T]
}

func newRing[T any](capacity int64) *ring[T] {
	return &ring[T]{mask: capacity - 1, slots: make([]atomic.Pointer[T], capacity)}
}

func (r *ring[T]) load(i int64) *T     { return r.slots[i&r.mask].Load() }
func (r *ring[T]) store(i int64, x *T) { r.slots[i&r.mask].Store(x) }

// Deque is a Chase-Lev deque. The zero value is not usable; call New.
//
// Invariant: items live at indices [top, bottom) of buf; top only grows
// (thieves and the owner's last-item Pop CAS it up by one); bottom is written
// only by the owner. top and bottom sit on separate cache lines so that
// thieves hammering top do not invalidate the owner's bottom.
type Deque[T any] struct {
	_ [cacheLine]byte
	// top is the index of the oldest item. Loaded by anyone; advanced only
	// by CAS (any thief, or the owner taking the last item). Seq-cst.
	top atomic.Int64
	_   [cacheLine - 8]byte
	// bottom is one past the newest item. Stored by the owner only; loaded
	// by anyone. Seq-cst.
	bottom atomic.Int64
	_      [cacheLine - 8]byte
	// buf is replaced by the owner only, when growing; loaded by anyone.
	// Old rings are left to the garbage collector, so a thief holding one
	// reads stale but never freed memory.
	buf atomic.Pointer[ring[T]]

	// beforeStealCAS, when set (tests only, before any concurrent use), runs
	// in Steal and StealHalfInto after an item has been read and before the
	// CAS that claims it: the window in which the original runtime's bug
	// lived.
	beforeStealCAS func()
}

// New returns an empty deque whose first buffer holds capacity items
// (rounded up to a power of two, at least 2). It grows without limit.
func New[T any](capacity int) *Deque[T] {
	c := int64(2)
	for c < int64(capacity) {
		c <<= 1
	}
	d := &Deque[T]{}
	d.buf.Store(newRing[T](c))
	return d
}

// Push adds x at the bottom. Owner only. x must not be nil.
func (d *Deque[T]) Push(x *T) {
	b := d.bottom.Load()
	t := d.top.Load()
	r := d.buf.Load()
	if b-t > r.mask { // full: size == capacity
		r = d.grow(r, t, b)
	}
	r.store(b, x)
	// Publishing bottom after the slot store makes the item visible to a
	// thief that loads bottom and then the slot.
	d.bottom.Store(b + 1)
}

// grow doubles the buffer, copying [t, b). Owner only. Thieves may still
// read the old ring; its [t, b) slots are never written again, so whatever
// they read there is the same item as in the new ring.
func (d *Deque[T]) grow(old *ring[T], t, b int64) *ring[T] {
	r := newRing[T]((old.mask + 1) * 2)
	for i := t; i < b; i++ {
		r.store(i, old.load(i))
	}
	d.buf.Store(r)
	return r
}

// Pop removes and returns the newest item, or nil if the deque is empty.
// Owner only.
func (d *Deque[T]) Pop() *T {
	b := d.bottom.Load() - 1
	// Publish the claim on b before reading top (store then load, both
	// seq-cst): a thief that reads bottom after this store does not see
	// item b; a thief that read bottom before it will CAS top, and the
	// owner below CASes top too when only one item is left, so exactly one
	// of them gets it.
	d.bottom.Store(b)
	t := d.top.Load()
	if t > b { // was empty
		d.bottom.Store(b + 1)
		return nil
	}
	x := d.buf.Load().load(b)
	if t < b {
		// More than one item: no thief can reach b, because a thief only
		// claims index t' by CAS from t' to t'+1 after seeing t' < bottom,
		// and bottom is now b > t >= any t' still claimable.
		return x
	}
	// Exactly one item: race the thieves for it.
	if !d.top.CompareAndSwap(t, t+1) {
		x = nil
	}
	d.bottom.Store(b + 1)
	return x
}

// Steal removes and returns the oldest item, or nil if the deque looked
// empty or another thief (or the owner) won the race. Any thief.
func (d *Deque[T]) Steal() *T {
	t := d.top.Load()
	b := d.bottom.Load()
	if t >= b {
		return nil
	}
	x := d.buf.Load().load(t)
	if d.beforeStealCAS != nil {
		d.beforeStealCAS()
	}
	if !d.top.CompareAndSwap(t, t+1) {
		return nil
	}
	return x
}

// StealHalfInto moves about half of d's items (at most max, at least one if
// d is not empty) to the bottom of dst and returns how many it moved. Any
// thief; dst must be owned by the caller and must not be d.
//
// It takes the items one at a time: each iteration re-reads top and bottom
// and claims exactly one index with a CAS, which is exactly the single-item
// Steal whose correctness against Pop is argued above. Claiming a whole range
// with one CAS is not safe against this owner: Pop takes an item without any
// CAS whenever it sees more than one item, so an owner popping through the
// range between the thief's read of bottom and its CAS would hand the same
// items out twice.
func (d *Deque[T]) StealHalfInto(dst *Deque[T], max int) int {
	t := d.top.Load()
	b := d.bottom.Load()
	n := (b - t + 1) / 2 // half, rounded up: one item is worth stealing
	if n > int64(max) {
		n = int64(max)
	}
	moved := 0
	for ; n > 0; n-- {
		t = d.top.Load()
		b = d.bottom.Load() // re-read per item: the owner may have popped
		if t >= b {
			break
		}
		x := d.buf.Load().load(t)
		if d.beforeStealCAS != nil {
			d.beforeStealCAS()
		}
		if !d.top.CompareAndSwap(t, t+1) {
			// Another thief or the owner's last-item Pop took index t.
			// Give up rather than fight: the victim is being drained.
			break
		}
		dst.Push(x)
		moved++
	}
	return moved
}

// Len returns a snapshot of the number of items. Any goroutine; exact only
// when no one else is touching the deque.
func (d *Deque[T]) Len() int {
	b := d.bottom.Load()
	t := d.top.Load()
	if b <= t {
		return 0
	}
	return int(b - t)
}

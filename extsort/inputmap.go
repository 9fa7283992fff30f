package extsort

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
)

// inputMap is a sort's whole input laid out in one address range: on
// Linux and other unix systems the input files themselves, mapped read-only
// (mapInputs in inputmap_unix.go), elsewhere or when mapping fails a
// buffer the files were read into (readInputs).
//
// Mapping costs no memory of its own: the records are the page cache's
// pages, already resident when the input was just written or read, where
// reading them into a buffer first-touches as much fresh memory as the
// input holds. On a virtual machine whose host reclaims the guest's free
// memory, each first touch is a fault on the host too: reading 500 MB
// into fresh memory then takes seconds instead of a tenth of one.
//
// starts[i] is the offset in mem of input i's first record; starts are
// multiples of 4 and increase with i, so a record's offset divided by 4
// both fits an entry's index and orders records by input position.
type inputMap struct {
	mem    []byte
	starts []int64
	mapped bool   // mem maps files: a file shrunk under it faults
	free   func() // releases mem
}

// posUnit is the unit of an in-memory sort entry's index: a record's
// offset in inputMap.mem is 4·index.
const posUnit = 4

// readInputs reads inputs (total bytes) into one buffer.
func readInputs(ctx context.Context, inputs []Input, total int64, workers int) (*inputMap, error) {
	buf, free := bigAlloc(int(total))
	rd := &chunkReader{inputs: inputs}
	n, err := rd.fill(ctx, buf, workers)
	if err == nil && int64(n) != total {
		err = fmt.Errorf("%w: read %d bytes of input, expected %d", ErrBadInput, n, total)
	}
	if err != nil {
		free()
		return nil, err
	}
	starts := make([]int64, len(inputs))
	var off int64
	for i, in := range inputs {
		starts[i] = off
		off += in.Size
	}
	return &inputMap{mem: buf, starts: starts, free: free}, nil
}

// sortEntries fills es (one per record) with the records' keys and
// positions (offset/posUnit) and sorts it, using up to workers goroutines
// and no second array: a histogram pass over the keys of the top 16 bits
// places each entry straight into its bucket (records taken in input
// order, so each bucket is in input order), then each bucket is sorted in
// place (sortBucket; scratch only for buckets too long for a comparison
// sort, i.e. heavily repeated keys). It fails only when a mapped file
// shrank.
func (m *inputMap) sortEntries(inputs []Input, es []entry, workers int) error {
	workers = max(workers, 1)
	n := len(es)
	recStarts := make([]int, len(inputs)+1) // record number of each input's first record
	for i, in := range inputs {
		recStarts[i+1] = recStarts[i] + int(in.Size/recSize)
	}
	counts := make([][]int, workers)
	if err := m.parallel(n, workers, func(w, from, to int) {
		c := make([]int, numBuckets)
		m.eachRange(recStarts, from, to, func(_ int64, mem []byte) {
			for off := 0; off < len(mem); off += recSize {
				c[int(mem[off])<<8|int(mem[off+1])]++
			}
		})
		counts[w] = c
	}); err != nil {
		return err
	}
	starts := bucketOffsets(counts, n)
	if err := m.parallel(n, workers, func(w, from, to int) {
		next := counts[w]
		m.eachRange(recStarts, from, to, func(at int64, mem []byte) {
			pos := uint64(at) / posUnit
			for off := 0; off < len(mem); off += recSize {
				r := mem[off : off+keySize : off+keySize]
				e := entry{hi: binary.BigEndian.Uint64(r), lo: uint64(r[8])<<56 | uint64(r[9])<<48 | (pos + uint64(off/posUnit))}
				b := e.hi >> 48
				es[next[b]] = e
				next[b]++
			}
		})
	}); err != nil {
		return err
	}
	sortBuckets(es, starts, workers)
	return nil
}

// eachRange calls fn with the bytes of the records numbered [from, to)
// (recStarts: each input's first record number), one slice per input, and
// the slice's offset in m.mem.
func (m *inputMap) eachRange(recStarts []int, from, to int, fn func(at int64, mem []byte)) {
	for i, base := range m.starts {
		lo, hi := max(from, recStarts[i]), min(to, recStarts[i+1])
		if lo < hi {
			at := base + int64(lo-recStarts[i])*recSize
			fn(at, m.mem[at:base+int64(hi-recStarts[i])*recSize])
		}
	}
}

// bucketOffsets turns counts[w][b] (worker w's entries in bucket b) into
// where worker w writes its first entry of bucket b, workers in order
// within a bucket, and returns where each bucket starts (and n at the end).
func bucketOffsets(counts [][]int, n int) []int {
	starts := make([]int, numBuckets+1)
	pos := 0
	for b := range numBuckets {
		starts[b] = pos
		for w := range counts {
			c := counts[w][b]
			counts[w][b] = pos
			pos += c
		}
	}
	starts[numBuckets] = n
	return starts
}

// sortBuckets sorts each bucket es[starts[b]:starts[b+1]] in place, whose
// entries share digit 0 and are in index order, largest first so that a
// big skewed bucket does not finish last on one core. Each worker keeps one
// scratch buffer for the buckets of up to smallBucket entries (nearly all
// of them); a longer one gets scratch of its own while it is sorted.
func sortBuckets(es []entry, starts []int, workers int) {
	type span struct{ from, to int }
	var spans []span
	for b := range numBuckets {
		if starts[b+1]-starts[b] > 1 {
			spans = append(spans, span{starts[b], starts[b+1]})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return (b.to - b.from) - (a.to - a.from) })
	var next atomic.Int64
	parallelChunks(workers, workers, func(int, int, int) {
		scratch := make([]entry, smallBucket)
		for {
			i := int(next.Add(1) - 1)
			if i >= len(spans) {
				return
			}
			a := es[spans[i].from:spans[i].to]
			if len(a) <= smallBucket {
				sortSmallBucket(a, scratch[:len(a)])
				continue
			}
			big, free := bigEntries(len(a))
			sortBucket(a, big, 1)
			free()
		}
	})
}

// sortSmallBucket sorts a, whose entries share their top 16 key bits and
// are in index order, using scratch (same length): a stable counting sort
// on the next 8 bits, then each of those 256 runs by insertion (or
// quickSort when long), which beats a comparison sort of the whole bucket.
func sortSmallBucket(a, scratch []entry) {
	if len(a) <= 32 {
		insertionSort(a)
		return
	}
	var at [257]int
	for _, e := range a {
		at[int(byte(e.hi>>40))+1]++
	}
	for b := 1; b <= 256; b++ {
		at[b] += at[b-1]
	}
	pos := at
	for _, e := range a {
		b := byte(e.hi >> 40)
		scratch[pos[b]] = e
		pos[b]++
	}
	for b := range 256 {
		if run := scratch[at[b]:at[b+1]]; len(run) > 32 {
			quickSort(run)
		} else if len(run) > 1 {
			insertionSort(run)
		}
	}
	copy(a, scratch)
}

// parallel runs fn on one contiguous chunk of [0, n) per worker (see
// parallelChunks), under guard.
func (m *inputMap) parallel(n, workers int, fn func(w, from, to int)) error {
	errs := make([]error, workers)
	parallelChunks(n, workers, func(w, from, to int) {
		errs[w] = m.guard(func() { fn(w, from, to) })
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// guard runs fn, which reads m.mem; when m maps files, a fault in fn (a
// file truncated while mapped) is returned as an error instead of
// crashing the process.
func (m *inputMap) guard(fn func()) (err error) {
	if !m.mapped {
		fn()
		return nil
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: an input file changed while being sorted (%v)", ErrBadInput, r)
		}
	}()
	fn()
	return nil
}

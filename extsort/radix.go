package extsort

import (
	"context"
	"encoding/binary"
	"math/bits"
	"slices"
	"sync"

	"github.com/gantryhq/gantry/internal/par"
)

// entry is what the in-memory sort moves instead of 100-byte records.
//
//	hi = key[0:8] as a big-endian uint64
//	lo = key[8]<<56 | key[9]<<48 | index   (index < 2^48: the record's position in the chunk)
//
// Comparing (hi, lo) as unsigned integers orders entries by key and, for
// equal keys, by input position: the sort is stable by construction.
type entry struct{ hi, lo uint64 }

const indexMask = 1<<48 - 1

func (e entry) index() int { return int(e.lo & indexMask) }

func entryCmp(a, b entry) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// makeEntries fills es[i] from record i of buf, using up to workers goroutines.
func makeEntries(buf []byte, es []entry, workers int) {
	parallelRange(len(es), workers, func(from, to int) {
		for i := from; i < to; i++ {
			r := buf[i*recSize : i*recSize+keySize]
			es[i] = entry{
				hi: binary.BigEndian.Uint64(r),
				lo: uint64(r[8])<<56 | uint64(r[9])<<48 | uint64(i),
			}
		}
	})
}

// The radix sort looks at the 80-bit key 16 bits at a time: digits 0..3 come
// from hi, digit 4 from the top of lo. Once all five digits are equal the
// entries are already in index order, because every scatter pass is stable.
const (
	digitBits  = 16
	numBuckets = 1 << digitBits
	numDigits  = 5
	// Buckets at most this long are finished with a comparison sort, which
	// beats another 64K-bucket histogram pass on short slices.
	smallBucket = 4096
)

func digit(e entry, d int) int {
	if d < 4 {
		return int(e.hi >> (48 - 16*d) & 0xffff)
	}
	return int(e.lo >> 48)
}

// sortEntries sorts es by (hi, lo) using tmp (same length) as scratch and up
// to workers goroutines. The first pass is a parallel scatter on the top 16
// key bits; the resulting buckets are then sorted independently, spread over
// the workers. It returns whichever of es and tmp holds the sorted result.
func sortEntries(es, tmp []entry, workers int) []entry {
	n := len(es)
	if n < 2*smallBucket || workers < 2 {
		sortBucket(es, tmp, 0)
		return es
	}
	// Parallel histogram of digit 0: worker w counts its contiguous slice.
	counts := make([][]int, workers)
	parallelChunks(n, workers, func(w, from, to int) {
		c := make([]int, numBuckets)
		for _, e := range es[from:to] {
			c[e.hi>>48]++
		}
		counts[w] = c
	})
	// counts[w][b] becomes where worker w writes its first entry of bucket
	// b. Worker order within a bucket keeps the scatter stable.
	starts := bucketOffsets(counts, n)
	parallelChunks(n, workers, func(w, from, to int) {
		off := counts[w]
		for _, e := range es[from:to] {
			b := e.hi >> 48
			tmp[off[b]] = e
			off[b]++
		}
	})
	// Sort the buckets (now in tmp) independently, largest first so a big
	// skewed bucket does not finish last on one core.
	type span struct{ from, to int }
	var spans []span
	for b := 0; b < numBuckets; b++ {
		if starts[b+1]-starts[b] > 1 {
			spans = append(spans, span{starts[b], starts[b+1]})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return (b.to - b.from) - (a.to - a.from) })
	par.Do(context.Background(), len(spans), workers, func(_ context.Context, i int) error {
		sortBucket(tmp[spans[i].from:spans[i].to], es[spans[i].from:spans[i].to], 1)
		return nil
	})
	return tmp
}

// sortBucket sorts a in place by (hi, lo), given that all entries share
// digits 0..d-1. scratch has the same length and is clobbered.
func sortBucket(a, scratch []entry, d int) {
	for {
		n := len(a)
		switch {
		case n < 2 || d >= numDigits:
			return // equal keys: already in index order (stable scatters)
		case n <= 32:
			insertionSort(a)
			return
		case n <= smallBucket:
			quickSort(a)
			return
		}
		var count [numBuckets]int
		for _, e := range a {
			count[digit(e, d)]++
		}
		if count[digit(a[0], d)] == n {
			d++ // every entry has the same digit: nothing to move
			continue
		}
		pos := 0
		for b := range count {
			c := count[b]
			count[b] = pos
			pos += c
		}
		for _, e := range a {
			b := digit(e, d)
			scratch[count[b]] = e
			count[b]++
		}
		copy(a, scratch)
		// count[b] is now the end of bucket b.
		from := 0
		for b := range count {
			to := count[b]
			if to-from > 1 {
				sortBucket(a[from:to], scratch[from:to], d+1)
			}
			from = to
		}
		return
	}
}

// less orders entries by (hi, lo); no two entries are equal (lo holds the
// record's position), so any correct sort gives the one stable order.
func less(a, b entry) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

// quickSort sorts a by (hi, lo): quicksort on the median of three, short
// slices by insertion, recursing into the smaller side only. Past a depth
// that only adversarial input reaches, it hands over to slices.SortFunc.
func quickSort(a []entry) {
	for depth := 2 * bits.Len(uint(len(a))); len(a) > 24; depth-- {
		if depth == 0 {
			slices.SortFunc(a, entryCmp)
			return
		}
		m := len(a) / 2
		l, h := len(a)-1, 0
		if less(a[m], a[h]) {
			a[m], a[h] = a[h], a[m]
		}
		if less(a[l], a[m]) {
			a[l], a[m] = a[m], a[l]
			if less(a[m], a[h]) {
				a[m], a[h] = a[h], a[m]
			}
		}
		pivot := a[m]
		i, j := 0, len(a)-1
		for i <= j {
			for less(a[i], pivot) {
				i++
			}
			for less(pivot, a[j]) {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		if j+1 < len(a)-i {
			quickSort(a[:j+1])
			a = a[i:]
		} else {
			quickSort(a[i:])
			a = a[:j+1]
		}
	}
	insertionSort(a)
}

func insertionSort(a []entry) {
	for i := 1; i < len(a); i++ {
		e := a[i]
		j := i
		for j > 0 && less(e, a[j-1]) {
			a[j] = a[j-1]
			j--
		}
		a[j] = e
	}
}

// parallelChunks splits [0,n) into one contiguous chunk per worker and runs
// fn on each concurrently, passing the worker number.
func parallelChunks(n, workers int, fn func(w, from, to int)) {
	if workers < 1 {
		workers = 1
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		from, to := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, from, to)
		}()
	}
	wg.Wait()
}

// parallelRange is parallelChunks without the worker number.
func parallelRange(n, workers int, fn func(from, to int)) {
	parallelChunks(n, workers, func(_, from, to int) { fn(from, to) })
}

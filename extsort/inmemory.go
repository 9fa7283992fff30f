package extsort

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The in-memory sort, used when the whole input fits the budget:
//
//	read every record into one buffer
//	→ one 16-byte entry per record, whose index is global, so that (hi, lo)
//	  is a total order that is also stable
//	→ sort the entries in cache-sized chunks, in parallel
//	→ cut the chunks into ranges at entry splitters (binary search per chunk)
//	→ merge each range's entries with a loser tree, in parallel, gathering
//	  the 100-byte records once, straight into their place in the output.
//
// Records move exactly twice (read, gather); nothing is spilled.

// memSortChunk is how many entries are sorted as one chunk: 16 MiB of
// entries, so the radix sort's scatter stays within the caches.
var memSortChunk = 1 << 20

// inMemoryCost is the memory sortInMemory needs for n records.
func inMemoryCost(cfg Config, n int64) int64 {
	chunk := min(int64(memSortChunk), n)
	return n*(recSize+16) + int64(cfg.Workers)*(chunk*16+gatherBufSize) + fixedSlack
}

func sortInMemory(ctx context.Context, cfg Config, inputs []Input, out *partOutput, st *Stats) error {
	st.InMemory = true
	t0 := time.Now()
	buf, freeBuf := bigAlloc(int(st.Bytes))
	defer freeBuf()
	rd := &chunkReader{inputs: inputs}
	if _, err := rd.fill(ctx, buf, cfg.Workers); err != nil {
		return err
	}
	cfg.Progress(PhaseRead, st.Bytes)
	es, freeEntries := bigEntries(int(st.Records))
	defer freeEntries()
	makeEntries(buf, es, cfg.Workers)

	// Sort the chunks, spread over the workers; each has its own scratch.
	var chunks [][]entry
	for from := 0; from < len(es); from += memSortChunk {
		chunks = append(chunks, es[from:min(from+memSortChunk, len(es))])
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scratch := make([]entry, min(memSortChunk, len(es)))
			for {
				i := int(next.Add(1) - 1)
				if i >= len(chunks) {
					return
				}
				sortBucket(chunks[i], scratch[:len(chunks[i])], 0)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	t1 := time.Now()
	st.ReadSort = t1.Sub(t0)
	st.Runs = len(chunks)

	ranges := splitEntryChunks(chunks, 4*cfg.Workers)
	next.Store(0)
	errs := make([]error, cfg.Workers)
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := make([]byte, gatherBufSize-gatherBufSize%recSize)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ranges) {
					return
				}
				if err := mergeEntries(ctx, cfg, buf, ranges[i], out, g); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	st.Merge = time.Since(t1)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// entryRange is one independently mergeable part of the sorted chunks:
// parts[j] is chunk j's share, and off is where its output starts.
type entryRange struct {
	parts [][]entry
	off   int64
}

// splitEntryChunks cuts sorted chunks into about n ranges of equal size. A
// splitter is an entry value; since entries are unique, each chunk's part
// of a range is found by binary search, even within runs of equal keys.
func splitEntryChunks(chunks [][]entry, n int) []entryRange {
	var samples []entry
	total := 0
	for _, c := range chunks {
		total += len(c)
		step := max(1, len(c)/256)
		for i := 0; i < len(c); i += step {
			samples = append(samples, c[i])
		}
	}
	slices.SortFunc(samples, entryCmp)
	var splitters []entry
	for q := 1; q < n; q++ {
		s := samples[q*len(samples)/n]
		if len(splitters) == 0 || entryCmp(splitters[len(splitters)-1], s) < 0 {
			splitters = append(splitters, s)
		}
	}
	splitters = append(splitters, entry{math.MaxUint64, math.MaxUint64})
	prev := make([]int, len(chunks))
	var ranges []entryRange
	var off int64
	for _, s := range splitters {
		r := entryRange{off: off}
		for j, c := range chunks {
			end := len(c)
			if s.hi != math.MaxUint64 || s.lo != math.MaxUint64 {
				end, _ = slices.BinarySearchFunc(c, s, entryCmp)
			}
			r.parts = append(r.parts, c[prev[j]:end])
			off += int64(end-prev[j]) * recSize
			prev[j] = end
		}
		ranges = append(ranges, r)
	}
	return ranges
}

// mergeEntries merges one range's sorted entry slices with a loser tree and
// writes the records they index, from buf, to out at r.off, through g.
func mergeEntries(ctx context.Context, cfg Config, buf []byte, r entryRange, out *partOutput, g []byte) error {
	k := len(r.parts)
	// Exhausted leaves hold the sentinel, which no real entry equals (an
	// index is below 2^48-1).
	sentinel := entry{math.MaxUint64, math.MaxUint64}
	head := make([]entry, k)
	pos := make([]int, k)
	for j, p := range r.parts {
		head[j] = sentinel
		if len(p) > 0 {
			head[j] = p[0]
		}
	}
	// Loser tree as in merge.go: leaves k..2k-1, losers in nodes[1..k-1].
	less := func(a, b int) bool { return entryCmp(head[a], head[b]) < 0 }
	nodes := make([]int, k)
	winners := make([]int, 2*k)
	for i := 0; i < k; i++ {
		winners[k+i] = i
	}
	for n := k - 1; n >= 1; n-- {
		a, b := winners[2*n], winners[2*n+1]
		if less(a, b) {
			winners[n], nodes[n] = a, b
		} else {
			winners[n], nodes[n] = b, a
		}
	}
	w := winners[1]
	off := r.off
	n := 0
	for head[w] != sentinel {
		j := head[w].index() * recSize
		copy(g[n:n+recSize], buf[j:j+recSize])
		n += recSize
		if n == len(g) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, err := out.WriteAt(g, off); err != nil {
				return err
			}
			cfg.Progress(PhaseMerge, int64(n))
			off += int64(n)
			n = 0
		}
		pos[w]++
		if p := r.parts[w]; pos[w] < len(p) {
			head[w] = p[pos[w]]
		} else {
			head[w] = sentinel
		}
		for m := (w + k) / 2; m >= 1; m /= 2 {
			if less(nodes[m], w) {
				nodes[m], w = w, nodes[m]
			}
		}
	}
	if n > 0 {
		if _, err := out.WriteAt(g[:n], off); err != nil {
			return err
		}
		cfg.Progress(PhaseMerge, int64(n))
	}
	return nil
}

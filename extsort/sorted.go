package extsort

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Sorted is a whole input sorted in memory and left where it lies: the
// records stay in input order where the input was mapped or read
// (inputMap), and the sorted entries say in which order to read them.
// ReadAt gathers the records in sorted order on demand, so a caller that
// reads the sorted data once (a merge, a network send) pays for one gather
// and nothing else: no run is written, read back or copied into a second
// buffer.
//
// It is what dsort keeps instead of a spilled run when a worker's input
// fits its budget. The input files must not change while it is held (a
// file truncated under the mapping makes ReadAt fail with ErrBadInput).
// ReadAt is safe for concurrent use; Free releases the memory, after
// which nothing may read it.
type Sorted struct {
	in    *inputMap // the records, in input order (nil when there are none)
	order []entry   // sorted; order[i].index()*posUnit is the i-th record's offset in in.mem
	n     int64     // records

	mu   sync.Mutex
	free func()
}

// SortedCost is the memory Sorted holds for records records: the records
// and one entry each. Mapped input is the page cache's, counted anyway:
// its pages are resident in the process while it reads them.
func SortedCost(records int64) int64 { return records * (recSize + entrySize) }

const entrySize = entryOverhead / 2

// readNotMap makes SortInMemory read its inputs into a buffer instead of
// mapping them; tests set it to run that path where mapping works.
var readNotMap bool

// SortInMemory sorts inputs (whole records) stably in memory, as
// GenerateRuns does for one chunk; the budget must hold the whole input
// (FitsOneChunk). The inputs are mapped where the system allows, else read
// into one buffer. It sorts one entry per record in place: no scratch
// array beside it, except while it sorts a bucket of many equal keys
// (inputMap.sortEntries). progress, if set, receives bytes read.
func SortInMemory(ctx context.Context, cfg Config, inputs []Input, progress func(int64)) (*Sorted, error) {
	cfg, total, err := prepareSort(cfg, inputs)
	if err != nil {
		return nil, err
	}
	recs := total / recSize
	if recs > cfg.chunkRecords() {
		return nil, fmt.Errorf("%w: %d records do not fit one in-memory chunk of %d", ErrConfig, recs, cfg.chunkRecords())
	}
	if recs == 0 {
		return &Sorted{free: func() {}}, nil
	}
	var in *inputMap
	if !readNotMap {
		in, err = mapInputs(ctx, inputs, cfg.Workers)
	}
	if err == nil && in == nil {
		in, err = readInputs(ctx, inputs, total, cfg.Workers)
	}
	if err != nil {
		return nil, err
	}
	if progress != nil {
		progress(total)
	}
	order, freeOrder := bigEntries(int(recs))
	if err := in.sortEntries(inputs, order, cfg.Workers); err != nil {
		in.free()
		freeOrder()
		return nil, err
	}
	return &Sorted{in: in, order: order, n: recs, free: func() { in.free(); freeOrder() }}, nil
}

// FitsOneChunk reports whether SortInMemory can sort records records
// within cfg's budget.
func FitsOneChunk(cfg Config, records int64) bool {
	cfg, err := cfg.withDefaults()
	return err == nil && cfg.checkSortMemory() == nil && records <= cfg.chunkRecords()
}

// Records is the number of records held.
func (s *Sorted) Records() int64 { return s.n }

// ReadAt reads len(p) bytes of the sorted data starting at byte off. Any
// offset and length are allowed; reads of whole records at record
// boundaries take the fast path.
func (s *Sorted) ReadAt(p []byte, off int64) (n int, err error) {
	size := s.n * recSize
	if off < 0 {
		return 0, fmt.Errorf("extsort: negative offset %d", off)
	}
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > size-off {
		p = p[:size-off]
	}
	var sink byte
	if err := s.in.guard(func() { n, sink = s.gather(p, off) }); err != nil {
		return 0, err
	}
	_ = sink
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// gatherBatch is how many records gather touches before it copies them.
const gatherBatch = 16

// gather fills p (within the data) with the sorted data from byte off and
// returns the bytes read and what keeps its touching loads from being
// optimized away.
func (s *Sorted) gather(p []byte, off int64) (int, byte) {
	mem := s.in.mem
	n := 0
	i := off / recSize
	if skip := int(off % recSize); skip != 0 {
		j := s.order[i].index() * posUnit
		n = copy(p, mem[j+skip:j+recSize])
		i++
	}
	// Whole records, a batch at a time: first one load from each record
	// of the batch, independent of each other, so the processor overlaps
	// their cache and TLB misses (mapped input sits on small pages: nearly
	// every record is a TLB miss), then the copies, which find the
	// records' lines arriving.
	var sink byte
	for ; n+gatherBatch*recSize <= len(p); i += gatherBatch {
		o := s.order[i : i+gatherBatch : i+gatherBatch]
		var at [gatherBatch]int
		for k := range at {
			at[k] = o[k].index() * posUnit
			sink ^= mem[at[k]] ^ mem[at[k]+recSize-1]
		}
		for k := range at {
			copy(p[n:n+recSize], mem[at[k]:at[k]+recSize])
			n += recSize
		}
	}
	for ; n < len(p); i++ {
		j := s.order[i].index() * posUnit
		n += copy(p[n:], mem[j:j+recSize])
	}
	return n, sink
}

// Free releases the memory; later calls do nothing.
func (s *Sorted) Free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != nil {
		s.free()
		s.free = nil
	}
	s.in, s.order = nil, nil
}

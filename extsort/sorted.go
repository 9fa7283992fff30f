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
// into one buffer. While sorting it also holds a scratch array of one
// entry per record, which it frees before returning. progress, if set,
// receives bytes read.
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
	es, freeEs := bigEntries(int(recs))
	tmp, freeTmp := bigEntries(int(recs))
	if err := in.entries(inputs, es, cfg.Workers); err != nil {
		in.free()
		freeEs()
		freeTmp()
		return nil, err
	}
	order := sortEntries(es, tmp, cfg.Workers)
	keep := freeEs
	if &order[0] == &es[0] {
		freeTmp()
	} else {
		freeEs()
		keep = freeTmp
	}
	return &Sorted{in: in, order: order, n: recs, free: func() { in.free(); keep() }}, nil
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
	if err := s.in.guard(func() { n = s.gather(p, off) }); err != nil {
		return 0, err
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// gather fills p (within the data) with the sorted data from byte off.
func (s *Sorted) gather(p []byte, off int64) int {
	mem := s.in.mem
	n := 0
	i := off / recSize
	if skip := int(off % recSize); skip != 0 {
		j := s.order[i].index() * posUnit
		n = copy(p, mem[j+skip:j+recSize])
		i++
	}
	// Whole records, four at a time where possible: the loads of the
	// next records' positions do not wait on the copies.
	for ; n+4*recSize <= len(p); i += 4 {
		o := s.order[i : i+4 : i+4]
		j0, j1, j2, j3 := o[0].index()*posUnit, o[1].index()*posUnit, o[2].index()*posUnit, o[3].index()*posUnit
		copy(p[n:n+recSize], mem[j0:j0+recSize])
		copy(p[n+recSize:n+2*recSize], mem[j1:j1+recSize])
		copy(p[n+2*recSize:n+3*recSize], mem[j2:j2+recSize])
		copy(p[n+3*recSize:n+4*recSize], mem[j3:j3+recSize])
		n += 4 * recSize
	}
	for ; n < len(p); i++ {
		j := s.order[i].index() * posUnit
		n += copy(p[n:], mem[j:j+recSize])
	}
	return n
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
